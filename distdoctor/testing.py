"""Test support, public so that third-party check packs test the way distdoctor does.

`FakeHost` answers the same calls as `distdoctor.host.Host` from data: an environment, the
output of commands (for example a captured `nvidia-smi topo -m`), file contents and
directory listings. Facts built on it run the real parsers over the captured text.

    host = FakeHost(env={"SLURM_JOB_ID": "42"},
                    commands={("nvidia-smi", "topo", "-m"): fixture_text("topo_dgx1.txt")},
                    files={"/proc/sys/kernel/random/boot_id": "abc\\n"})
    runs = run_check(my_check, host)
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from distdoctor.api import Context
from distdoctor.facts import Facts
from distdoctor.host import CommandResult, ConnectResult, Distribution, HostAPI, ResolveResult
from distdoctor.host.pyenv import normalize_name
from distdoctor.model import CheckInfo, CheckRun, Finding

CommandAnswer = "str | CommandResult | Callable[[tuple[str, ...]], CommandResult]"


class FakeHost:
    """Implements distdoctor.host.HostAPI from data; nothing it answers comes from the real machine."""

    def __init__(self, env: Mapping[str, str] | None = None, *,
                 commands: Mapping[Any, Any] | None = None,
                 files: Mapping[str, str | bytes | BaseException] | None = None,
                 mtimes: Mapping[str, float] | None = None,
                 dirs: Mapping[str, Sequence[str]] | None = None,
                 links: Mapping[str, str] | None = None,
                 hostname: str = "node1",
                 rlimits: Mapping[str, tuple[int, int]] | None = None,
                 disk: Mapping[str, tuple[int, int, int]] | None = None,
                 if_addrs: Mapping[str, list[dict]] | None = None,
                 if_stats: Mapping[str, dict] | None = None,
                 gateways: Mapping[str, list[tuple[str, str]]] | None = None,
                 resolve: Mapping[str, Sequence[str] | str] | None = None,
                 connect: Mapping[tuple[str, int], str] | None = None,
                 conversations: Mapping[tuple[str, int], Any] | None = None,
                 distributions: Mapping[str, Distribution] | None = None,
                 cpu_affinity: Sequence[int] | None = None,
                 cpu_count: int = 8,
                 nvml: Mapping[str, Any] | None = None,
                 platform_info: Mapping[str, str] | None = None,
                 python_executable: str = "/usr/bin/python3",
                 python_version: str = "3.11.7", pid: int = 4242, uid: int = 0):
        self.env: Mapping[str, str] = dict(env or {})
        self.cache = None
        self._python_version = python_version
        self._pid = pid
        self._uid = uid
        self.commands = dict(commands or {})
        self.files = dict(files or {})
        self.mtimes = dict(mtimes or {})
        self.slept = 0.0
        self.dirs = {k: list(v) for k, v in (dirs or {}).items()}
        self.links = dict(links or {})
        self._hostname = hostname
        self.rlimits = dict(rlimits or {})
        self.disk = dict(disk or {})
        self.if_addrs = dict(if_addrs or {})
        self.if_stats = dict(if_stats or {})
        self._gateways = dict(gateways or {})
        self._resolve = dict(resolve or {})
        self._connect = dict(connect or {})
        # (host, port) -> replies (list), an error text, or a callable of the lines sent
        self.conversations = dict(conversations or {})
        self._distributions = dict(distributions or {})
        self._affinity = list(cpu_affinity if cpu_affinity is not None else range(cpu_count))
        self._cpu_count = cpu_count
        self.calls: list[tuple[str, ...]] = []
        self._nvml = dict(nvml) if nvml is not None else None
        self._platform = dict(platform_info or {})
        self._python_executable = python_executable

    def _answer(self, argv: tuple[str, ...]):
        # Most specific first: the whole argv, then the command name alone.
        for key in (argv, argv[0], os.path.basename(argv[0])):
            if key in self.commands:
                return self.commands[key]
        return None

    def which(self, name: str) -> str | None:
        for key in self.commands:
            first = key[0] if isinstance(key, tuple) else key
            if os.path.basename(first) == name:
                return f"/usr/bin/{name}"
        return None

    def run_cached(self, argv, timeout, depends_on=()) -> CommandResult:
        return self.run(argv, timeout)

    def start_cached(self, argv, timeout, depends_on=()) -> bool:
        return False  # nothing runs early: run_cached answers when asked

    def line_filter(self, argv, timeout):
        return None  # no external filter: the caller reads every line itself

    def fan_out(self, hosts, argv, fanout, timeout, ssh_options=()) -> dict[str, CommandResult]:
        """Each host answers as the command table answers ("ssh", host, *argv), else as argv."""
        out = {}
        for name in hosts:
            key = ("ssh", name, *map(str, argv))
            out[name] = self.run(key if self._answer(key) is not None else argv, timeout)
        return out

    def run(self, argv, timeout, env=None, input=None) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        self.calls.append(argv)
        answer = self._answer(argv)
        if answer is None:
            return CommandResult(argv, 127, error="not found")
        if callable(answer):
            return answer(argv)
        if isinstance(answer, CommandResult):
            return CommandResult(argv, answer.returncode, answer.stdout, answer.stderr,
                                 answer.duration, answer.timed_out, answer.error)
        return CommandResult(argv, 0, str(answer))

    def read_text(self, path: str, max_bytes: int = 4 * 1024 * 1024) -> str | None:
        value = self.files.get(path)
        if isinstance(value, BaseException):
            raise value
        if isinstance(value, bytes):
            return value[:max_bytes].decode("utf-8", "replace")
        return value

    def read_bytes(self, path: str, max_bytes: int = 4 * 1024 * 1024) -> bytes | None:
        value = self.files.get(path)
        if isinstance(value, BaseException):
            raise value
        if value is None:
            return None
        return (value.encode() if isinstance(value, str) else value)[:max_bytes]

    def file_info(self, path: str) -> tuple[int, float] | None:
        value = self.files.get(path)
        if value is None or isinstance(value, BaseException):
            return None
        size = len(value.encode() if isinstance(value, str) else value)
        return size, self.mtimes.get(path, self.time())

    def sleep(self, seconds: float) -> None:
        self.slept += max(0.0, seconds)

    def read_kmsg(self, max_bytes: int = 16 * 1024 * 1024, timeout: float = 2.0) -> str | None:
        """files["/dev/kmsg"]: its records; an exception there is raised (EPERM)."""
        return self.read_text("/dev/kmsg", max_bytes)

    def list_dir(self, path: str) -> list[str] | None:
        if path in self.dirs:
            return sorted(self.dirs[path])
        prefix = path.rstrip("/") + "/"
        children = {p[len(prefix):].split("/", 1)[0] for p in list(self.files) + list(self.links) if p.startswith(prefix)}
        return sorted(children) if children else None

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs or path in self.links or bool(self.list_dir(path))

    def readlink(self, path: str) -> str | None:
        return self.links.get(path)

    def realpath(self, path: str) -> str:
        return self.links.get(path, path)

    def disk_usage(self, path: str):
        return self.disk.get(path)

    def home(self) -> str:
        return self.env.get("HOME", "/home/user")

    def rlimit(self, name: str) -> tuple[int, int]:
        return self.rlimits.get(name.lower(), (-1, -1))

    def cpu_affinity(self) -> list[int]:
        return list(self._affinity)

    def cpu_count(self) -> int:
        return self._cpu_count

    def hostname(self) -> str:
        return self._hostname

    def resolve(self, name: str, timeout: float = 3.0) -> ResolveResult:
        answer = self._resolve.get(name)
        if answer is None:
            return ResolveResult(name, error="Name or service not known")
        if isinstance(answer, str):
            return ResolveResult(name, error=answer)
        return ResolveResult(name, tuple(answer))

    def connect(self, host: str, port: int, timeout: float = 3.0) -> ConnectResult:
        answer = self._connect.get((host, port), "refused")
        return ConnectResult(host, port, answer == "ok", "" if answer == "ok" else answer)

    def can_bind(self, address: str, port: int) -> str:
        return ""

    def converse(self, host: str, port: int, lines, timeout: float = 5.0, max_bytes: int = 16 * 1024 * 1024):
        self.calls.append(("converse", host, str(port), *lines))
        answer = self.conversations.get((host, port), "refused")
        if callable(answer):
            answer = answer(list(lines))
        if isinstance(answer, str):
            return [], answer
        return list(answer), ""

    def net_if_addrs(self):
        return {k: list(v) for k, v in self.if_addrs.items()}

    def net_if_stats(self):
        return {k: dict(v) for k, v in self.if_stats.items()}

    def gateways(self):
        return {k: list(v) for k, v in self._gateways.items()}

    def distribution(self, name: str) -> Distribution | None:
        # importlib.metadata matches names normalized (PEP 503): nvidia_nccl_cu13 is nvidia-nccl-cu13
        wanted = normalize_name(name)
        return next((d for key, d in self._distributions.items() if normalize_name(key) == wanted), None)

    def distribution_names(self) -> list[str]:
        return sorted(normalize_name(d.name) for d in self._distributions.values())

    def distribution_versions(self) -> dict[str, str]:
        return {normalize_name(d.name): d.version for d in self._distributions.values()}

    def python_executable(self) -> str:
        return self._python_executable

    def platform_info(self) -> dict[str, str]:
        return dict(self._platform)

    def python(self, code: str, timeout: float, env=None) -> CommandResult:
        return self.run(["python", "-c", code], timeout=timeout, env=env)

    def time(self) -> float:
        return 1_700_000_000.0

    def pid(self) -> int:
        return self._pid

    def uid(self) -> int:
        return self._uid

    def python_version(self) -> str:
        return self._python_version

    def distribution_metadata(self, name: str) -> tuple[str, str, str] | None:
        dist = self.distribution(name)
        if dist is None:
            return None
        metadata = next((f for f in dist.files if f.endswith(".dist-info/METADATA")), None)
        text = self.files.get(os.path.join(dist.location, metadata)) if metadata else None
        return dist.version, dist.location, text if isinstance(text, str) else ""

    def nvml_snapshot(self, timeout: float = 4.0) -> dict[str, Any]:
        if self._nvml is None:
            return {"status": "unavailable", "error": "libnvidia-ml.so.1 not found"}
        return dict(self._nvml)


def fixture_text(path: str) -> str:
    """A captured output, read as bytes and decoded the way Host.run decodes."""
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8", "replace")


def run_check(info: CheckInfo, host: HostAPI, params: Mapping[str, Any] | None = None) -> list[Finding]:
    """Run one check against a host (usually a FakeHost) and return its findings, through the
    engine so that exceptions and timeouts are treated as in a real run."""
    from distdoctor.engine import run_checks

    facts = Facts(host)
    merged = {**info.params, **(params or {})}
    runs: list[CheckRun] = run_checks([info], lambda _i: Context(facts, merged),
                                      jobs=1, total_timeout=info.timeout + 5)
    return list(runs[0].findings)
