"""Facts for the 'reach' area: which hosts the job spans, and probing them all at once.

The host list comes from the command line (`--hosts`, `--hostfile`, `-H`), else from the Slurm
job this runs in, else from the config (the check's `hosts`/`hostfile` parameters). Probing is
not a fact: its timeout and ssh options are the check's parameters, so `probe_hosts` is a
plain function the check calls.

Every probe of every host runs at once on its own daemon thread and has its own deadline, so
a run costs about one timeout however many hosts are dead, and a probe stuck in the resolver
is abandoned (reported as a timeout) without holding the process at exit.
"""

from __future__ import annotations

import ipaddress
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from distdoctor import bounded, hostlist, limits
from distdoctor.facts import fact
from distdoctor.parsers import ParseError
from distdoctor.parsers import ssh as ssh_parser
from distdoctor.parsers.hostfile import (HostList, check_name, parse_horovod_hosts, parse_hostfile,
                                         split_user)

LOCALHOST_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


@dataclass(frozen=True)
class Target:
    name: str
    user: str = ""
    slots: int | None = None
    source: str = ""  # where the name was given: "--hosts", "hosts.txt:3", "-H", "Slurm job 42"


@dataclass(frozen=True)
class Targets:
    hosts: tuple[Target, ...] = ()
    origin: str = ""  # "command line", "Slurm job 42", "config"; "" when nothing named hosts
    problems: tuple[str, ...] = ()  # bad input, each naming where (file:line, -H entry, --hosts)
    ports: tuple[int, ...] = ()
    port_problems: tuple[str, ...] = ()

    @property
    def given(self) -> bool:
        return bool(self.origin)


def parse_ports(values: Sequence[Any]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Ports and ranges (`29500`, `29500-29503`) as the user typed them."""
    ports: list[int] = []
    problems: list[str] = []
    for value in values:
        text = str(value).strip()
        low, dash, high = text.partition("-")
        if low.isdigit() and (not dash or high.isdigit()):
            first, last = int(low), int(high) if dash else int(low)
            if 1 <= first <= last <= 65535 and last - first < 64:
                ports.extend(p for p in range(first, last + 1) if p not in ports)
                continue
        problems.append(f"{text!r} is not a TCP port (1-65535) or a range of at most 64 ports such as 29500-29503")
    return tuple(ports), tuple(problems)


def _from_hostlist(parsed: HostList, source: Callable[[int | None], str], where: str) -> tuple[list[Target], list[str]]:
    hosts = [Target(e.name, e.user, e.slots, source(e.line)) for e in parsed.entries]
    problems = [f"{where}{'' if p.line is None else ':' + str(p.line)}: {p.message}"
                + (f"   [{p.text.strip()[:60]}]" if p.text.strip() else "") for p in parsed.problems]
    return hosts, problems


def _named(names: Sequence[str], source: str, where: str) -> tuple[list[Target], list[str]]:
    """Targets for the names that can be used (`user@host` allowed), a problem for each other."""
    hosts, problems = [], []
    for name in names:
        user, bare, why = split_user(name)
        why = why or check_name(bare)
        if why:
            problems.append(f"{where}: {why}")
        else:
            hosts.append(Target(bare, user, None, source))
    return hosts, problems


def collect_targets(host, *, hosts: Sequence[str] = (), hostfile: str | None = None,
                    horovod_hosts: str | None = None, origin: str = "command line") -> Targets:
    """The union of every host input, in order, each name once (the first source wins)."""
    found: list[Target] = []
    problems: list[str] = []
    if hosts:
        # The CLI splits --hosts at every comma, which also cuts `gpu[01,03]`; joined again,
        # hostlist.expand splits at top-level commas only.
        expr = ",".join(str(h) for h in hosts)
        try:
            names = hostlist.expand(expr)
        except hostlist.HostlistError as exc:
            problems.append(f"--hosts: {exc}")
            names = []
        more, bad = _named(names, "--hosts", "--hosts")
        found += more
        problems += bad
    if hostfile:
        try:
            text = host.read_text(hostfile)
        except OSError as exc:
            text = None
            problems.append(f"{hostfile}: cannot read the hostfile: {exc.strerror or exc}")
        else:
            if text is None:
                problems.append(f"{hostfile}: the hostfile does not exist")
        if text is not None:
            more, bad = _from_hostlist(parse_hostfile(text), lambda line: f"{hostfile}:{line}", hostfile)
            if not more and not bad:
                problems.append(f"{hostfile}: the hostfile lists no hosts (only comments or blank lines)")
            found += more
            problems += bad
    if horovod_hosts is not None:
        more, bad = _from_hostlist(parse_horovod_hosts(horovod_hosts), lambda _line: "-H", "-H entry")  # "-H entry:2: ..."
        found += more
        problems += bad
    seen: set[tuple[str, str]] = set()
    unique = []
    for target in found:
        if (target.user, target.name) not in seen:
            seen.add((target.user, target.name))
            unique.append(target)
    if len(unique) > limits.MAX_HOSTS:
        # A hostfile of a million lines (4 MB is read) is no cluster; probing it would only
        # run into the check's deadline. The same cap as a hostlist's.
        problems.append(f"{len(unique)} hosts given; only the first {limits.MAX_HOSTS} are probed")
        unique = unique[:limits.MAX_HOSTS]
    return Targets(tuple(unique), origin, tuple(problems))


def slurm_targets(slurm) -> Targets:
    """The job's nodes, as the slurm area expanded them (scontrol where it runs, else the
    library), from the slurm_env fact."""
    name = next((n for n in ("SLURM_JOB_NODELIST", "SLURM_NODELIST") if slurm.raw.get(n, "").strip()), None)
    if name is None:
        return Targets()
    origin = f"Slurm job {slurm.job_id or '?'}"
    problems = [f"{p.name}={p.value!r}: {p.message}" for p in slurm.problems if p.name == name]
    hosts, bad = _named(list(slurm.nodelists.get(name, ())), origin, name)
    return Targets(tuple(hosts), origin, tuple(problems + bad))


@fact
def reach_targets(facts) -> Targets:
    """Hosts named on the command line, else the current Slurm job's nodes."""
    options = facts.options
    ports, port_problems = parse_ports(options.get("ports") or [])
    if options.get("hosts") or options.get("hostfile") or options.get("horovod_hosts") is not None:
        found = collect_targets(facts.host, hosts=options.get("hosts") or [], hostfile=options.get("hostfile"),
                                horovod_hosts=options.get("horovod_hosts"))
    else:
        found = slurm_targets(facts.slurm_env)
    return Targets(found.hosts, found.origin, found.problems, ports, port_problems)


# --- probing -------------------------------------------------------------------------------

# Classifications of one probe. ssh's own kinds come from distdoctor.parsers.ssh.
OK = "ok"
LOOPBACK = "loopback"
NOT_RESOLVED = "not_resolved"
TIMEOUT = "timeout"
REFUSED = "refused"
NO_ROUTE = "no_route"
OTHER = "other"
VIA_PROXY = "via_proxy"

LABELS = {
    OK: "ok", LOOPBACK: "loopback", NOT_RESOLVED: "unresolved", TIMEOUT: "timeout", REFUSED: "refused",
    NO_ROUTE: "no route", OTHER: "error", VIA_PROXY: "via proxy",
    ssh_parser.KEY_DENIED: "key denied", ssh_parser.HOSTKEY_UNKNOWN: "hostkey unknown",
    ssh_parser.HOSTKEY_CHANGED: "hostkey changed",
}
GOOD = (OK, VIA_PROXY)

NAME = "name"
SSH_PORT = "tcp/ssh"
SSH = "ssh"


@dataclass(frozen=True)
class ProbeResult:
    probe: str  # "name", "tcp/ssh", "tcp/29500", "ssh"
    kind: str
    message: str = ""  # the error in words
    latency: float | None = None  # seconds, when it answered
    data: Mapping[str, Any] = field(default_factory=dict)  # addresses, port, argv ...

    def cell(self) -> str:
        label = LABELS.get(self.kind, self.kind)
        if self.kind in (OK, LOOPBACK) and self.latency is not None:
            return f"{label} {format_latency(self.latency)}"
        return label

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.kind, "message": self.message}
        if self.latency is not None:
            out["latency_ms"] = round(self.latency * 1000, 2)
        out.update(self.data)
        return out


@dataclass(frozen=True)
class HostReach:
    target: Target
    probes: Mapping[str, ProbeResult]


@dataclass(frozen=True)
class ProbeSettings:
    timeout: float = 3.0
    ports: tuple[int, ...] = ()
    ssh: bool = True
    ssh_port: int = 0  # 0: whatever ssh would use (`ssh -G`: ~/.ssh/config, else 22)
    ssh_options: tuple[str, ...] = ()
    user: str = ""
    max_threads: int = 1024
    ssh_port_probe: bool = True  # the tcp/ssh column; off with ssh when srun launches the job

    @property
    def ssh_limit(self) -> float:
        """ssh's ConnectTimeout bounds connect and key exchange; login and `true` get as long
        again before the process is killed."""
        return 2 * self.timeout + 1

    @property
    def connect_timeout(self) -> int:
        return max(1, math.ceil(self.timeout))


def format_latency(seconds: float) -> str:
    if seconds < 0.001:
        return "<1ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    return f"{seconds:.1f}s"


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
        return True
    except ValueError:
        return False


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _probe_name(host, target: Target, settings: ProbeSettings, several: bool) -> ProbeResult:
    result = host.resolve(target.name, timeout=settings.timeout)
    data = {"addresses": list(result.addresses)}
    if result.error:
        kind = TIMEOUT if "did not answer" in result.error else NOT_RESOLVED
        return ProbeResult(NAME, kind, result.error, None, data)
    loop = [a for a in result.addresses if _is_loopback(a)]
    literal = _is_ip(target.name) or target.name.lower() in LOCALHOST_NAMES
    if loop and (several or not literal):
        return ProbeResult(NAME, LOOPBACK, f"{target.name} resolves to loopback {', '.join(loop)}",
                           result.duration, data)
    return ProbeResult(NAME, OK, "", result.duration, data)


_CONNECT_KINDS = {"refused": REFUSED, "timeout": TIMEOUT, "no route to host": NO_ROUTE,
                  "network unreachable": NO_ROUTE}


def _probe_tcp(host, column: str, address: str, port: int, timeout: float, data: dict) -> ProbeResult:
    result = host.connect(address, port, timeout)
    data = {**data, "port": port, "address": address}
    if result.ok:
        return ProbeResult(column, OK, "", result.latency, data)
    if result.error.startswith("name not resolved"):
        return ProbeResult(column, NOT_RESOLVED, result.error, None, data)
    kind = _CONNECT_KINDS.get(result.error, OTHER)
    words = {REFUSED: "connection refused: nothing listens on the port (or a firewall rejects it)",
             TIMEOUT: f"no answer within {timeout:g} s: packets dropped by a firewall, or the host is down",
             NO_ROUTE: f"{result.error}: no route from here to the host"}.get(kind, result.error)
    return ProbeResult(column, kind, f"{address}:{port}: {words}", None, data)


def ssh_base(settings: ProbeSettings, target: Target) -> tuple[list[str], str]:
    """The options every ssh call gets, and the destination. Ours come first because ssh
    keeps the first value it sees for an option; never anything that weakens host-key checks."""
    argv = ["-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={settings.connect_timeout}"]
    if settings.ssh_port:
        argv += ["-p", str(settings.ssh_port)]
    if settings.user and not target.user:
        argv += ["-l", settings.user]
    argv += list(settings.ssh_options)
    dest = f"{target.user}@{target.name}" if target.user else target.name
    return argv, dest


def _probe_ssh_port(host, target: Target, settings: ProbeSettings, ssh_installed: bool,
                    spawn: threading.Semaphore) -> ProbeResult:
    address, port, data = target.name, settings.ssh_port or 22, {}
    # Without an explicit port, ask ssh where it would connect (~/.ssh/config's Port, HostName,
    # ProxyJump). That is one more process per host, so an explicit ssh_port skips it.
    if settings.ssh and ssh_installed and not settings.ssh_port:
        options, dest = ssh_base(settings, target)
        with spawn:
            dump = host.run(["ssh", "-G", *options, "--", dest], timeout=settings.timeout)
        if dump.ok:
            try:
                where = ssh_parser.parse_ssh_g(dump.stdout)
            except ParseError:
                where = None
            if where is not None:
                address, port = where.hostname, where.port
                if where.proxy:
                    return ProbeResult(SSH_PORT, VIA_PROXY, f"ssh goes through a proxy ({where.proxy}); "
                                                            "not probed directly", None,
                                       {"port": port, "address": address, "proxy": where.proxy})
    return _probe_tcp(host, SSH_PORT, address, port, settings.timeout, data)


def _probe_ssh(host, target: Target, settings: ProbeSettings, spawn: threading.Semaphore) -> ProbeResult:
    options, dest = ssh_base(settings, target)
    argv = ["ssh", *options, "--", dest, "true"]
    with spawn:
        result = host.run(argv, timeout=settings.ssh_limit)
    data = {"argv": argv, "returncode": result.returncode}
    if result.missing:
        return ProbeResult(SSH, OTHER, "ssh is not installed (apt-get install openssh-client)", None, data)
    if result.error:
        return ProbeResult(SSH, OTHER, result.describe(), None, data)
    outcome = ssh_parser.parse_ssh_result(result.returncode, result.stderr, result.timed_out)
    if outcome.known_hosts_file:
        data["known_hosts_file"] = outcome.known_hosts_file
        data["known_hosts_line"] = outcome.known_hosts_line
    if outcome.kind == ssh_parser.TIMEOUT and result.timed_out:
        message = f"ssh did not finish within {settings.ssh_limit:g} s (connected, but login or `true` hung)"
    else:
        message = outcome.message
    return ProbeResult(SSH, outcome.kind, message, result.duration if outcome.kind == OK else None, data)


def _process_slots(host) -> int:
    """How many ssh processes may run at once: each holds a few descriptors here (pipes, and
    the probes' sockets need theirs), and a login node's `ulimit -n` is often 1024."""
    try:
        soft, _hard = host.rlimit("nofile")
    except (OSError, ValueError, AttributeError):
        soft = 1024
    if soft < 0:
        return 1024
    return max(8, min(1024, (soft - 64) // 8))


def probe_columns(settings: ProbeSettings) -> list[str]:
    columns = [NAME] + ([SSH_PORT] if settings.ssh_port_probe else []) + [f"tcp/{p}" for p in settings.ports]
    return columns + ([SSH] if settings.ssh else [])


def probe_hosts(host, targets: Sequence[Target], settings: ProbeSettings) -> list[HostReach]:
    """Run every probe of every target at once; return one HostReach per target with a result
    in every column. A probe that has not answered by its deadline is reported as a timeout
    and left behind on its daemon thread."""
    ssh_installed = bool(host.which("ssh")) if settings.ssh else False
    several = len(targets) > 1
    spawn = threading.Semaphore(_process_slots(host))
    # (target index, column, deadline after start, work)
    tasks: list[tuple[int, str, float, Callable[[], ProbeResult]]] = []
    grace = 0.5
    for index, target in enumerate(targets):
        tasks.append((index, NAME, settings.timeout + grace,
                      lambda t=target: _probe_name(host, t, settings, several)))
        # ssh -G then a connect, each bounded by the timeout
        if settings.ssh_port_probe:
            tasks.append((index, SSH_PORT, 2 * settings.timeout + grace,
                          lambda t=target: _probe_ssh_port(host, t, settings, ssh_installed, spawn)))
        for port in settings.ports:
            tasks.append((index, f"tcp/{port}", settings.timeout + grace,
                          lambda t=target, p=port: _probe_tcp(host, f"tcp/{p}", t.name, p, settings.timeout, {})))
        if settings.ssh:
            if ssh_installed:
                tasks.append((index, SSH, settings.ssh_limit + grace, lambda t=target: _probe_ssh(host, t, settings, spawn)))

    # every probe bounds itself; the longest of those bounds is the matrix's
    def run(task: tuple[int, str, float, Callable[[], ProbeResult]]) -> ProbeResult:
        try:
            return task[3]()
        except Exception as exc:  # a probe must not take the matrix down
            return ProbeResult(task[1], OTHER, f"probe failed: {type(exc).__name__}: {exc}")

    answers = bounded.map(run, tasks, max((t[2] for t in tasks), default=0.0),
                          workers=max(1, settings.max_threads), name="reach-probe")
    snapshot = {(index, column): answer for (index, column, _limit, _func), answer in zip(tasks, answers)
                if not isinstance(answer, bounded.TimedOut)}

    out: list[HostReach] = []
    for index, target in enumerate(targets):
        probes: dict[str, ProbeResult] = {}
        for column in probe_columns(settings):
            if (index, column) in snapshot:
                probes[column] = snapshot[(index, column)]
            elif column == SSH and not ssh_installed:
                probes[column] = ProbeResult(SSH, OTHER, "ssh is not installed (apt-get install openssh-client)")
            else:
                probes[column] = ProbeResult(column, TIMEOUT, "no answer before the deadline; the probe was "
                                                              "abandoned (a hung resolver or connect)")
        out.append(HostReach(target, probes))
    return out
