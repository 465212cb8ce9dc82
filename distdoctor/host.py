"""The one seam between distdoctor and the machine.

Only this module runs commands, opens sockets, reads the environment, /proc and /sys. Every
call is bounded by a timeout, and the ordinary ways a sick machine misbehaves (a missing tool,
a hung command, an unreadable file) come back as values, not exceptions, so that facts and
checks can turn them into findings. `distdoctor.testing.FakeHost` replays the same interface
from captured files.
"""

from __future__ import annotations

import errno as errno_mod
import os
import platform
import queue
import re
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from distdoctor import reaper

MAX_OUTPUT = 16 * 1024 * 1024  # bytes kept of a command's stdout (and of its stderr); beyond, it is killed
_DIST_INFO = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._]*?)-([0-9][^-]*?)\.(?:dist-info|egg-info)$")


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when it was killed: at its timeout, or for printing too much
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    timed_out: bool = False
    error: str = ""  # why it could not run: "not found", "permission denied", ...

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def missing(self) -> bool:
        return self.returncode == 127

    def describe(self) -> str:
        """One line saying how the command ended, for findings."""
        cmd = " ".join(self.argv)
        if self.timed_out:
            return f"`{cmd}` did not finish within {self.duration:.1f} s and was killed"
        if self.missing:
            return f"`{self.argv[0]}` was not found on PATH"
        if self.error:
            return f"`{cmd}` could not run: {self.error}"
        if self.returncode != 0:
            tail = (self.stderr or self.stdout).strip().splitlines()
            said = f": {tail[-1][:200]}" if tail else ""
            return f"`{cmd}` exited with status {self.returncode}{said}"
        return f"`{cmd}` succeeded"


@dataclass(frozen=True)
class ResolveResult:
    name: str
    addresses: tuple[str, ...] = ()
    error: str = ""
    duration: float = 0.0


@dataclass(frozen=True)
class ConnectResult:
    host: str
    port: int
    ok: bool
    error: str = ""  # "refused", "timeout", "unreachable", "no route", or the OS text
    errno: int | None = None
    latency: float = 0.0


@dataclass(frozen=True)
class Distribution:
    name: str
    version: str
    location: str  # the site-packages folder it is installed in
    files: tuple[str, ...] = field(default=())  # paths relative to location


def _classify_errno(code: int | None, fallback: str) -> str:
    names = {
        errno_mod.ECONNREFUSED: "refused",
        errno_mod.ETIMEDOUT: "timeout",
        errno_mod.EHOSTUNREACH: "no route to host",
        errno_mod.ENETUNREACH: "network unreachable",
        errno_mod.ECONNRESET: "reset",
        errno_mod.EACCES: "permission denied",
        errno_mod.EADDRNOTAVAIL: "address not available",
        errno_mod.EADDRINUSE: "address in use",
    }
    return names.get(code, fallback) if code is not None else fallback


class Host:
    """The real machine."""

    def __init__(self, env: Mapping[str, str] | None = None, cache=None):
        self.env: Mapping[str, str] = dict(os.environ if env is None else env)
        self.cache = cache  # a toolcache.ToolCache for run_cached, or None
        self._started: dict[str, tuple[threading.Thread, dict[str, CommandResult]]] = {}
        self._started_lock = threading.Lock()

    # --- commands -------------------------------------------------------------------------

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.env.get("PATH", os.defpath))

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
            input: str | bytes | None = None) -> CommandResult:
        """Run argv (never through a shell) and wait at most `timeout` seconds. The command
        runs in its own process group so that a hung child and its children are all killed.
        `input` (text, or bytes passed as they are) is written to its stdin."""
        argv = tuple(str(a) for a in argv)
        run_env = dict(self.env)
        run_env["LC_ALL"] = "C"  # parsers expect the C locale's wording
        if env:
            run_env.update(env)
        exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=run_env.get("PATH", os.defpath))
        start = time.monotonic()
        if exe is None:
            return CommandResult(argv, 127, error="not found")
        token = reaper.new_token()
        run_env[reaper.TOKEN_VAR] = token
        try:
            proc = subprocess.Popen(
                [exe, *argv[1:]], stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env,
                start_new_session=True,
            )
        except FileNotFoundError:
            return CommandResult(argv, 127, error="not found")
        except PermissionError:
            return CommandResult(argv, 126, error="permission denied")
        except OSError as exc:
            return CommandResult(argv, 126, error=exc.strerror or str(exc))
        reaper.started(proc.pid, token)
        try:
            data = input.encode() if isinstance(input, str) else input
            writer = None
            if data is not None:
                # From a thread, whole: the reader below never blocks on a tool that reads slowly.
                writer = threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True)
                writer.start()
            out, err, ended_how = _collect(proc, timeout)
            if ended_how != "exited":
                reaper.kill_tree(proc.pid, token)
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:  # stuck in the kernel (D state): abandon it
                    pass
            if writer is not None:
                writer.join(timeout=2)
        finally:
            reaper.ended(proc.pid)
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
        duration = time.monotonic() - start
        if ended_how == "flooded":
            return CommandResult(argv, None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                                 duration, False, error=f"printed more than {MAX_OUTPUT // (1024 * 1024)} MiB "
                                                        f"and was killed")
        timed_out = ended_how == "timeout"
        return CommandResult(
            argv, None if timed_out else proc.returncode,
            out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
            duration, timed_out,
        )

    def run_cached(self, argv: Sequence[str], timeout: float, depends_on: Sequence[str] = ()) -> CommandResult:
        """run() for a tool whose answer only changes with the tool itself, the files in
        depends_on, and the environment (see toolcache.py): from the cache when this exact
        answer is there, else run and store it when it succeeded."""
        argv = tuple(str(a) for a in argv)
        key = self._cache_key(argv, depends_on)
        if key is None:
            return self.run(argv, timeout)
        with self._started_lock:
            started = self._started.get(key)
        if started is not None:
            thread, box = started
            thread.join(timeout + 5)  # run() inside it is bounded by the same timeout
            if "result" in box:
                return box["result"]
            if thread.is_alive():  # past its own bound: starting it a second time would not help
                return CommandResult(argv, None, duration=timeout, timed_out=True)
        entry = self.cache.get(key)
        if entry is not None:
            return CommandResult(argv, entry["returncode"], entry["stdout"], entry["stderr"], 0.0, False)
        return self._run_and_store(argv, timeout, key)

    def _cache_key(self, argv: tuple[str, ...], depends_on: Sequence[str]) -> str | None:
        """The tool cache's key for argv, or None when there is no cache or no such tool."""
        exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=self.env.get("PATH", os.defpath))
        if self.cache is None or exe is None:
            return None
        return self.cache.key(argv, exe, self.env, depends_on)

    def _run_and_store(self, argv: tuple[str, ...], timeout: float, key: str) -> CommandResult:
        result = self.run(argv, timeout)
        if result.returncode == 0 and not result.timed_out and not result.error:
            self.cache.put(key, result.returncode, result.stdout, result.stderr)
        return result

    def start_cached(self, argv: Sequence[str], timeout: float, depends_on: Sequence[str] = ()) -> bool:
        """Start run_cached(argv) now on a daemon thread when its answer is not cached, so a
        slow tool runs while Python is still importing the checks; a later run_cached of the
        same argv waits for it instead of running it again. False when nothing was started."""
        argv = tuple(str(a) for a in argv)
        key = self._cache_key(argv, depends_on)
        # has(), not get(): a cached ompi_info answer is 0.6 MB of JSON that the fact reads anyway.
        if key is None or self.cache.has(key):
            return False
        box: dict[str, CommandResult] = {}

        def work() -> None:
            box["result"] = self._run_and_store(argv, timeout, key)

        thread = threading.Thread(target=work, daemon=True, name=f"start {os.path.basename(argv[0])}")
        with self._started_lock:
            if key in self._started:
                return False
            self._started[key] = (thread, box)
        thread.start()
        return True

    def line_filter(self, argv: Sequence[str], timeout: float) -> LineFilter | None:
        """Start argv once as a streaming filter (`grep -F -n ...` for `distdoctor log`): feed
        it bytes, collect its output lines while it runs. None when the command is missing.
        `timeout` bounds the wait for its last output after the input ends."""
        run_env = dict(self.env)
        run_env["LC_ALL"] = "C"
        exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=run_env.get("PATH", os.defpath))
        if exe is None:
            return None
        token = reaper.new_token()
        run_env[reaper.TOKEN_VAR] = token
        try:
            proc = subprocess.Popen([exe, *argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, env=run_env, start_new_session=True)
        except OSError:
            return None
        reaper.started(proc.pid, token)

        def kill(proc: subprocess.Popen) -> None:
            reaper.kill_tree(proc.pid, token)
            try:
                proc.kill()
            except ProcessLookupError:
                pass

        return LineFilter(proc, timeout, kill, ended=lambda: reaper.ended(proc.pid))

    def python(self, code: str, timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
        """Run a snippet in a fresh interpreter: how distdoctor asks about torch or loads a
        library that might crash, without putting its own process at risk."""
        return self.run([sys.executable, "-c", code], timeout=timeout, env=env)

    # --- files ----------------------------------------------------------------------------

    def read_text(self, path: str, max_bytes: int = 4 * 1024 * 1024) -> str | None:
        """The file's text, or None when it does not exist. Other errors (permission, EINVAL
        from a sysfs attribute of a down link) raise OSError for the caller to report."""
        try:
            with open(path, "rb") as fh:
                return fh.read(max_bytes).decode("utf-8", "replace")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def disk_usage(self, path: str) -> tuple[int, int, int] | None:
        """(total, used, free) bytes of the filesystem holding path, or None if absent."""
        try:
            usage = shutil.disk_usage(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return usage.total, usage.used, usage.free

    def home(self) -> str:
        return self.env.get("HOME") or os.path.expanduser("~")

    # --- process limits -------------------------------------------------------------------

    def rlimit(self, name: str) -> tuple[int, int]:
        """(soft, hard) for RLIMIT_<name>; -1 means unlimited."""
        soft, hard = resource.getrlimit(getattr(resource, f"RLIMIT_{name.upper()}"))
        inf = resource.RLIM_INFINITY
        return (-1 if soft == inf else soft, -1 if hard == inf else hard)

    def cpu_affinity(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))

    def cpu_count(self) -> int:
        return os.cpu_count() or 1

    def pid(self) -> int:
        return os.getpid()

    def uid(self) -> int:
        return os.getuid()

    # --- names and sockets ----------------------------------------------------------------

    def fan_out(self, hosts: Sequence[str], argv: Sequence[str], fanout: int, timeout: float,
                ssh_options: Sequence[str] = ()) -> dict[str, CommandResult]:
        """argv on every host over ssh through ClusterShell, at most `fanout` at once, each
        bounded by `timeout`. ssh runs in batch mode with host-key checking as configured (never
        turned off here): an unknown host key is that host's error, not a prompt."""
        import shlex

        from ClusterShell.NodeSet import NodeSet
        from ClusterShell.Task import task_self

        task = task_self()
        task.set_info("fanout", max(1, fanout))
        task.set_info("connect_timeout", max(1, min(10, int(timeout))))
        task.set_info("ssh_options", " ".join(shlex.quote(o) for o in ["-oBatchMode=yes", *ssh_options]))
        task.set_default("stderr", True)
        start = time.monotonic()
        task.shell(shlex.join(argv), nodes=NodeSet.fromlist(hosts), timeout=timeout)
        task.run(timeout=timeout + 5)
        duration = time.monotonic() - start
        out = {str(n): b"" for n in hosts}
        err = dict(out)
        for buf, nodes in task.iter_buffers():
            for n in nodes:
                out[str(n)] = bytes(buf)
        for buf, nodes in task.iter_errors():
            for n in nodes:
                err[str(n)] = bytes(buf)
        codes = {str(n): rc for rc, nodes in task.iter_retcodes() for n in nodes}
        late = {str(n) for n in task.iter_keys_timeout()}
        results = {}
        for name in hosts:
            results[name] = CommandResult(tuple(argv), None if name in late else codes.get(name),
                                          out[name][:MAX_OUTPUT].decode("utf-8", "replace"),
                                          err[name][:MAX_OUTPUT].decode("utf-8", "replace"), duration,
                                          timed_out=name in late,
                                          error="" if name in codes or name in late else "no result")
        return results

    def hostname(self) -> str:
        return socket.gethostname()

    def resolve(self, name: str, timeout: float = 3.0) -> ResolveResult:
        """Every address a name resolves to. getaddrinfo has no timeout of its own, so it runs
        on a daemon thread that is abandoned if the resolver hangs."""
        box: dict[str, Any] = {}
        start = time.monotonic()

        def work() -> None:
            try:
                infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
                seen: list[str] = []
                for info in infos:
                    addr = str(info[4][0])
                    if addr not in seen:
                        seen.append(addr)
                box["addrs"] = tuple(seen)
            except socket.gaierror as exc:
                box["error"] = exc.strerror or str(exc)
            except (OSError, UnicodeError) as exc:
                box["error"] = str(exc)

        thread = threading.Thread(target=work, daemon=True, name=f"resolve-{name}")
        thread.start()
        thread.join(timeout)
        duration = time.monotonic() - start
        if thread.is_alive():
            return ResolveResult(name, error=f"resolver did not answer within {timeout:g} s", duration=duration)
        return ResolveResult(name, box.get("addrs", ()), box.get("error", ""), duration)

    def connect(self, host: str, port: int, timeout: float = 3.0) -> ConnectResult:
        start = time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return ConnectResult(host, port, True, latency=time.monotonic() - start)
        except socket.timeout:
            return ConnectResult(host, port, False, "timeout", errno_mod.ETIMEDOUT, time.monotonic() - start)
        except socket.gaierror as exc:
            return ConnectResult(host, port, False, f"name not resolved: {exc.strerror}", None,
                                 time.monotonic() - start)
        except OSError as exc:
            return ConnectResult(host, port, False, _classify_errno(exc.errno, exc.strerror or str(exc)),
                                 exc.errno, time.monotonic() - start)

    def can_bind(self, address: str, port: int) -> str:
        """'' if a TCP listener could bind address:port now, else why not."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((address, port))
            return ""
        except OSError as exc:
            return _classify_errno(exc.errno, exc.strerror or str(exc))

    # --- network interfaces ---------------------------------------------------------------

    def net_if_addrs(self) -> dict[str, list[dict[str, Any]]]:
        """psutil's per-interface addresses as plain dicts: family ('inet', 'inet6', 'link'),
        address, netmask."""
        import psutil

        out: dict[str, list[dict[str, Any]]] = {}
        for name, addrs in psutil.net_if_addrs().items():
            rows = []
            for a in addrs:
                fam = {socket.AF_INET: "inet", socket.AF_INET6: "inet6"}.get(a.family, "link")
                rows.append({"family": fam, "address": a.address, "netmask": a.netmask})
            out[name] = rows
        return out

    def net_if_stats(self) -> dict[str, dict[str, Any]]:
        import psutil

        return {
            name: {"isup": s.isup, "speed": s.speed, "mtu": s.mtu, "duplex": int(s.duplex),
                   "flags": getattr(s, "flags", "")}
            for name, s in psutil.net_if_stats().items()
        }

    def gateways(self) -> dict[str, list[tuple[str, str]]]:
        """Default gateways by family ('inet', 'inet6'): [(gateway, interface)]."""
        try:
            import netifaces
        except ImportError:
            return {}
        result: dict[str, list[tuple[str, str]]] = {}
        gws = netifaces.gateways()
        for fam, name in ((netifaces.AF_INET, "inet"), (netifaces.AF_INET6, "inet6")):
            # Entries are (gateway, interface, is_default); routes to other subnets are not defaults.
            for entry in gws.get(fam, []):
                if len(entry) < 3 or entry[2]:
                    result.setdefault(name, []).append((entry[0], entry[1]))
        return result

    # --- installed software ---------------------------------------------------------------

    def distribution(self, name: str) -> Distribution | None:
        """An installed Python distribution, read from its metadata (no import)."""
        found = _dist_info(name)
        if found is _ASK_METADATA:
            dist = _metadata_distribution(name)
            if dist is None:
                return None
            files = tuple(str(f) for f in (dist.files or ()))
            return Distribution(dist.metadata["Name"] or name, dist.version, str(dist.locate_file("")), files)
        if found is None:
            return None
        location, folder = found
        headers = _metadata_headers(_read_text(os.path.join(folder, "METADATA")))
        return Distribution(headers.get("name") or name, headers.get("version", ""), location,
                            _record_paths(_read_text(os.path.join(folder, "RECORD"))))

    def distribution_names(self) -> list[str]:
        """Normalized names (nvidia_nccl_cu13) of every installed Python distribution, taken
        from the .dist-info folder names: reading each METADATA instead costs 0.1 s on a
        site-packages of a hundred packages, most of `distdoctor check`'s budget."""
        names = set()
        for folder, entry in metadata_folders():
            if entry is not None:
                names.add(_normalize(_dist_stem(entry)))
                continue
            from importlib import metadata  # a zip on sys.path: only importlib.metadata sees into it

            for dist in metadata.distributions(path=[folder]):
                names.add(_normalize(getattr(dist, "_normalized_name", None) or (dist.metadata["Name"] or "")))
        return sorted(n for n in names if n)

    def python_version(self) -> str:
        return ".".join(str(v) for v in sys.version_info[:3])

    def distribution_versions(self) -> dict[str, str]:
        """{normalized name: version} of every installed distribution, read from the
        `name-version.dist-info` folder names on sys.path (a listing, not a METADATA read per
        package). The first folder on the path wins, as for an import."""
        found: dict[str, str] = {}
        for _folder, entry in metadata_folders():
            m = _DIST_INFO.match(entry or "")
            if m:
                found.setdefault(_normalize(m.group(1)), m.group(2))
        return found

    def python_executable(self) -> str:
        return sys.executable

    def platform_info(self) -> dict[str, str]:
        """uname, the C library and Python's platform string (what collect_env prints)."""
        uname = platform.uname()
        libc, libc_version = platform.libc_ver()
        return {"system": uname.system, "release": uname.release, "version": uname.version,
                "machine": uname.machine, "libc": f"{libc}-{libc_version}" if libc else "",
                "platform": platform.platform(),
                "python_implementation": platform.python_implementation()}

    # --- time -----------------------------------------------------------------------------

    def time(self) -> float:
        return time.time()

    # --- NVML -----------------------------------------------------------------------------

    def nvml_snapshot(self, timeout: float = 4.0) -> dict[str, Any]:
        """The driver and every GPU as NVML (nvidia-ml-py) reports them, as plain data:
        {"status": "ok" | "unavailable" | "error" | "hung", "error": str, "driver_version": str,
        "cuda_version": int (12040 is 12.4), "gpus": [{index, name, uuid, bus_id, memory_total_mib,
        persistence_mode, mig_mode, ecc_uncorrected, throttle_reasons, mig_devices}]}.
        "unavailable" (no nvidia-ml-py, no libnvidia-ml: a login node) costs a failed dlopen;
        callers then ask nvidia-smi. NVML blocks on a GPU that fell off the bus, so the calls
        run on a daemon thread that is abandoned after `timeout`. DISTDOCTOR_NVML=0 turns NVML
        off (tests that stand in for nvidia-smi on a machine that has a driver)."""
        if self.env.get("DISTDOCTOR_NVML", "").strip() == "0":
            return {"status": "unavailable", "error": "NVML disabled by DISTDOCTOR_NVML=0"}
        if "pynvml" not in sys.modules and not os.path.exists("/proc/driver/nvidia"):
            # No NVIDIA kernel module: NVML cannot answer, and importing it costs a login node
            # tens of milliseconds of `distdoctor check` (once imported, asking costs nothing).
            return {"status": "unavailable", "error": "no NVIDIA kernel driver is loaded (no /proc/driver/nvidia)"}
        box: dict[str, Any] = {}
        def work() -> None:
            try:
                box.update(_nvml_query())
            except Exception as exc:  # an nvidia-ml-py that does not match the driver: fall back
                box.update({"status": "error", "error": f"{type(exc).__name__}: {exc}"})

        thread = threading.Thread(target=work, daemon=True, name="nvml")
        thread.start()
        thread.join(timeout)
        if thread.is_alive():
            return {"status": "hung", "error": f"NVML did not answer within {timeout:g} s"}
        return box or {"status": "error", "error": "NVML query ended without a result"}

    # --- installed software, cheaply ------------------------------------------------------

    def distribution_metadata(self, name: str) -> tuple[str, str, str] | None:
        """(version, location, METADATA text) of an installed distribution, without reading
        its file list: torch's RECORD has 15,000 lines and costs 0.1 s to parse."""
        found = _dist_info(name)
        if found is _ASK_METADATA:
            dist = _metadata_distribution(name)
            if dist is None:
                return None
            return dist.version, str(dist.locate_file("")), dist.read_text("METADATA") or ""
        if found is None:
            return None
        location, folder = found
        text = _read_text(os.path.join(folder, "METADATA"))
        return _metadata_headers(text).get("version", ""), location, text


# Installed distributions are found the way importlib.metadata's path finder finds them (the
# first *.dist-info on sys.path whose name before the first '-' normalizes to the one asked
# for), by a listing: importing importlib.metadata pulls in the email package, a fifth of a
# warm `distdoctor check`. Anything a listing cannot answer alike (an .egg-info or .egg, a zip
# on sys.path) is asked of importlib.metadata itself.
_DIST_SUFFIXES = (".dist-info", ".egg-info", ".egg")
_ASK_METADATA = object()


def _metadata_distribution(name: str):
    from importlib import metadata

    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _dist_stem(entry: str) -> str:
    return entry.rpartition(".")[0].partition("-")[0]


def metadata_folders() -> Iterator[tuple[str, str | None]]:
    """(sys.path folder, entry) for every *.dist-info, *.egg-info and *.egg in the sys.path
    folders, in path order (entries sorted within a folder); (path, None) for a sys.path entry
    that is a file, a zip that only importlib.metadata reads. Read anew on every call: a
    test, or a pip run beside a long check, may install something."""
    for folder in sys.path:
        if not isinstance(folder, str):  # a Path a sitecustomize added: importlib.metadata skips it too
            continue
        path = folder or "."
        try:
            entries = sorted(os.listdir(path))
        except NotADirectoryError:
            yield path, None
            continue
        except OSError:
            continue
        for entry in entries:
            if entry.lower().endswith(_DIST_SUFFIXES):
                yield path, entry


def _dist_info(name: str):
    """(sys.path folder, its *.dist-info folder) for name, None when not installed, or
    _ASK_METADATA."""
    want = _normalize(name)
    for path, entry in metadata_folders():
        if entry is None:
            return _ASK_METADATA
        if _normalize(_dist_stem(entry)) == want:
            if not entry.lower().endswith(".dist-info"):
                return _ASK_METADATA
            return os.path.abspath(path), os.path.join(os.path.abspath(path), entry)
    return None


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _metadata_headers(text: str) -> dict[str, str]:
    """Name and Version from a METADATA file's header block (lower-cased keys, first wins)."""
    headers: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the description follows the first blank line
        key, sep, value = line.partition(":")
        if sep and not line[:1].isspace() and key.lower() in ("name", "version"):
            headers.setdefault(key.lower(), value.strip())
    return headers


def _record_paths(text: str) -> tuple[str, ...]:
    """The paths a RECORD file lists; what follows a line csv refuses (a field over its limit) is
    left out, as an unreadable RECORD is: the distribution is still found."""
    import csv

    paths: list[str] = []
    try:
        for row in csv.reader(text.splitlines()):
            if row:
                paths.append(row[0])
    except csv.Error:
        pass
    return tuple(paths)


def _nvml_query() -> dict[str, Any]:
    try:
        import pynvml
    except ImportError:
        return {"status": "unavailable", "error": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return {"status": "unavailable", "error": "libnvidia-ml.so.1 not found"}
    except pynvml.NVMLError as exc:
        return {"status": "error", "error": str(exc)}
    except OSError as exc:  # a libnvidia-ml that is there but cannot be loaded
        return {"status": "unavailable", "error": str(exc)}

    def text(value: Any) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def ask(name: str, *args, default=None):
        # By name: older nvidia-ml-py releases lack some functions (MIG, _v2 calls).
        func = getattr(pynvml, name, None)
        if func is None:
            return default
        try:
            return func(*args)
        except pynvml.NVMLError:
            return default

    try:
        result: dict[str, Any] = {
            "status": "ok", "error": "",
            "driver_version": text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_version": ask("nvmlSystemGetCudaDriverVersion_v2"),
            "gpus": [],
        }
        reasons = "nvmlDeviceGetCurrentClocksEventReasons" if hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons") \
            else "nvmlDeviceGetCurrentClocksThrottleReasons"
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pci = ask("nvmlDeviceGetPciInfo", handle)
            memory = ask("nvmlDeviceGetMemoryInfo", handle)
            mig = ask("nvmlDeviceGetMigMode", handle)
            persistence = ask("nvmlDeviceGetPersistenceMode", handle)
            mig_devices = []
            if mig and mig[0]:
                for slot in range(ask("nvmlDeviceGetMaxMigDeviceCount", handle, default=0) or 0):
                    child = ask("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
                    if child is None:
                        continue
                    name = text(ask("nvmlDeviceGetName", child, default=""))
                    mig_devices.append({"index": slot, "uuid": text(ask("nvmlDeviceGetUUID", child, default="")),
                                        "profile": name.rsplit("MIG ", 1)[-1] if "MIG " in name else name})
            result["gpus"].append({
                "index": index,
                "name": text(ask("nvmlDeviceGetName", handle, default="")),
                "uuid": text(ask("nvmlDeviceGetUUID", handle, default="")) or None,
                "bus_id": text(pci.busId) if pci is not None else None,
                "memory_total_mib": memory.total // (1024 * 1024) if memory is not None else None,
                "persistence_mode": None if persistence is None else bool(persistence),
                "mig_mode": None if mig is None else bool(mig[0]),
                "ecc_uncorrected": ask("nvmlDeviceGetTotalEccErrors", handle,
                                       pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC),
                "throttle_reasons": ask(reasons, handle),
                "mig_devices": mig_devices,
            })
        return result
    except pynvml.NVMLError as exc:
        return {"status": "error", "error": str(exc)}
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _collect(proc: subprocess.Popen, timeout: float) -> tuple[bytes, bytes, str]:
    """stdout and stderr of proc until it exits and both pipes close, at most `timeout`
    seconds and MAX_OUTPUT bytes each. How it ended: "exited", "timeout" or "flooded". A
    grandchild that keeps a pipe open after the command exits counts against the timeout."""
    deadline = time.monotonic() + timeout
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    open_fds = set(buffers)
    with selectors.DefaultSelector() as sel:
        for fd in open_fds:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), "timeout"
            for key, _ in sel.select(min(left, 1.0)):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                    open_fds.discard(key.fd)
                    continue
                buf = buffers[key.fd]
                buf += chunk
                if len(buf) > MAX_OUTPUT:
                    del buf[MAX_OUTPUT:]
                    return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), "flooded"
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:  # closed its output but did not exit
        return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), "timeout"
    return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), "exited"


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass  # the command exited or was killed at its deadline: nothing more to say
    finally:
        try:
            pipe.close()
        except (BrokenPipeError, OSError):
            pass


class LineFilter:
    """A running filter process: `feed()` queues input that a writer thread sends to its stdin,
    a reader thread collects its stdout lines; `take()` returns the lines so far, `close()`
    ends the input and waits (bounded) for the rest. Two threads so that neither pipe can
    fill and stall the other while the caller keeps reading its own input."""

    def __init__(self, proc: subprocess.Popen, timeout: float, kill, ended=lambda: None):
        self.proc = proc
        self.timeout = timeout
        self._kill = kill
        self._ended = ended
        self._input: queue.Queue[bytes | None] = queue.Queue(maxsize=4)
        self._lines: list[bytes] = []
        self._lock = threading.Lock()
        self.error = ""
        self._writer = threading.Thread(target=self._write, daemon=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._writer.start()
        self._reader.start()

    def _write(self) -> None:
        try:
            while True:
                data = self._input.get()
                if data is None:
                    break
                self.proc.stdin.write(data)
        except (BrokenPipeError, OSError, ValueError) as exc:
            self.error = self.error or f"the filter stopped reading its input: {exc}"
            while self._input.get() is not None:  # keep feed() from blocking forever
                pass
        finally:
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                with self._lock:
                    self._lines.append(line)
        except (ValueError, OSError):
            pass  # close() gave up on a filter that would not finish and closed the pipe

    def feed(self, data: bytes) -> None:
        """Queue data for the filter; a filter that stops reading for `timeout` is killed (its
        output so far is kept, and `error` says so) rather than blocking the caller."""
        if self.error:
            return
        try:
            self._input.put(data, timeout=self.timeout)
        except queue.Full:
            self.error = f"the filter read nothing for {self.timeout:g} s and was stopped"
            self._kill(self.proc)

    def take(self) -> list[bytes]:
        with self._lock:
            lines, self._lines = self._lines, []
        return lines

    def close(self) -> tuple[list[bytes], int | None]:
        """(the remaining output lines, the exit code; None when it had to be killed here)."""
        try:
            self._input.put(None, timeout=self.timeout)
        except queue.Full:
            self._kill(self.proc)  # the writer is stuck on a full pipe: this unblocks it
        self._writer.join(self.timeout)
        self._reader.join(self.timeout)
        code = None
        if self._reader.is_alive():
            self._kill(self.proc)
            self.error = self.error or f"the filter did not finish within {self.timeout:g} s"
        else:
            try:
                code = self.proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self._kill(self.proc)
        self.proc.stdout.close()
        if self.proc.poll() is not None:
            self._ended()
        return self.take(), code
