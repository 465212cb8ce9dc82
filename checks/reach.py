"""Reachability across the job's hosts: names, TCP ports, passwordless ssh, MASTER_ADDR.

mpirun and horovodrun start remote ranks over ssh; NCCL and the torch rendezvous need every
node to open TCP connections to every other. One unreachable host otherwise costs minutes of
waiting for a timeout that names nobody.
"""

from __future__ import annotations

import ipaddress
import shlex
from typing import Any, Iterator, Sequence

from distdoctor import fixes
from distdoctor.api import Context, Finding, Fix, check, fail, ok, skip, warn
from distdoctor.facts import reach as R
from distdoctor.facts.net import own_names
from distdoctor.model import Status
from distdoctor.parsers import ssh as S

_HOW_TO_GIVE_HOSTS = "distdoctor check --only reach --hosts 'node[01-04]'   # or --hostfile F, -H n1:4,n2:4"

# ssh options that switch host-key checking off: the product never adds them, and results
# obtained with them say nothing about host keys.
_WEAKENING = ("stricthostkeychecking=no", "stricthostkeychecking=off", "userknownhostsfile=/dev/null")


def _fold(names: list[str]) -> str:
    """node01,node02,node03 -> node[01-03]: short subjects for the same failure on many hosts."""
    try:
        from ClusterShell.NodeSet import NodeSet

        folded = str(NodeSet.fromlist(names))
    except Exception:  # IPv6 literals and other names NodeSet will not fold
        folded = ",".join(names)
    return folded if len(folded) <= 120 else folded[:117] + "..."


def _as_list(value: Any, name: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"parameter {name}: {exc}") from None
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    raise ValueError(f"parameter {name} must be a list of strings or a string, not {value!r}")


def _input_fix(problem: str) -> dict[str, str]:
    """Explanation and fix for one bad host-list or port entry."""
    where = problem.split(":", 1)[0]
    if "does not exist" in problem or "cannot read" in problem:
        return {"explanation": "The hostfile is read as given, relative to the current directory.",
                "fix": f"ls -l {shlex.quote(where)}"}
    return {"explanation": "The launcher would reject or misread this entry too.",
            "fix": "# hostfile lines: node01 slots=4  or  node01:4   (# starts a comment)\n"
                   "# -H node01:4,node02:4   --hosts 'node[01-04]'   --ports 29500,29600-29603"}


def _in_srun_step(ctx: Context) -> bool:
    """Started by srun: a task of a normal step, whatever runs inside it (torchrun under srun,
    and the ranks of mpirun under Slurm, whose daemons srun starts)."""
    try:
        return ctx.facts.slurm_env.in_step
    except Exception:  # an unreadable Slurm environment: probe, as outside Slurm
        return False


def _ssh_wanted(ctx: Context, origin: str) -> tuple[bool, bool]:
    """`ssh = "auto"` (the default) probes ssh except for the nodes of the Slurm job this task
    was started in by srun: srun (and mpirun under Slurm, through srun) launches without ssh,
    so a cluster without sshd on its compute nodes is healthy."""
    value = ctx.params.get("ssh", "auto")
    if isinstance(value, str) and value.strip().lower() == "auto":
        wanted = not (origin.startswith("Slurm") and _in_srun_step(ctx))
        return wanted, wanted  # (ssh login probe, tcp/ssh port probe)
    if not isinstance(value, bool):
        raise ValueError(f"ssh must be true, false or \"auto\", not {value!r}")
    return value, True


def _settings(ctx: Context, ports: tuple[int, ...], origin: str = "") -> R.ProbeSettings:
    params = ctx.params
    ssh, ssh_port_probe = _ssh_wanted(ctx, origin)
    return R.ProbeSettings(
        timeout=float(params.get("probe_timeout", 3.0)), ports=ports, ssh=ssh, ssh_port_probe=ssh_port_probe,
        ssh_port=int(params.get("ssh_port", 0) or 0),
        ssh_options=tuple(_as_list(params.get("ssh_options"), "ssh_options")),
        user=str(params.get("user", "") or ""), max_threads=int(params.get("max_threads", 1024)),
    )


def _targets(ctx: Context) -> tuple[R.Targets, tuple[int, ...], list[str]]:
    targets: R.Targets = ctx.facts.reach_targets
    params = ctx.params
    if not targets.given and (params.get("hosts") or params.get("hostfile")):
        from_config = R.collect_targets(ctx.host, hosts=_as_list(params.get("hosts"), "hosts"),
                                        hostfile=params.get("hostfile") or None, origin="config")
        targets = R.Targets(from_config.hosts, from_config.origin, from_config.problems, targets.ports,
                            targets.port_problems)
    config_ports, config_problems = R.parse_ports(_as_list(params.get("ports"), "ports"))
    ports = tuple(dict.fromkeys(targets.ports + config_ports))
    return targets, ports, list(targets.port_problems) + [f"config ports: {p}" for p in config_problems]


# --- words and fixes for each failure --------------------------------------------------------

_WORDS = {
    R.NOT_RESOLVED: "name does not resolve", R.TIMEOUT: "timed out", R.REFUSED: "connection refused",
    R.NO_ROUTE: "no route to host", R.OTHER: "failed", R.LOOPBACK: "name resolves to a loopback address",
    S.KEY_DENIED: "public key denied", S.HOSTKEY_UNKNOWN: "host key not known here",
    S.HOSTKEY_CHANGED: "HOST KEY CHANGED",
}


def _probe_title(column: str, port: int | None) -> str:
    if column == R.NAME:
        return "name resolution"
    if column == R.SSH:
        return "ssh"
    if column == R.SSH_PORT:
        return f"ssh port{f' {port}' if port else ''}"
    return f"TCP port {column.split('/', 1)[1]}"


def _firewall_fix(port: int, example: str, nodes: Sequence[str] = ()) -> list[Fix]:
    """Test one host from here, then open the port on every host that drops it."""
    return [Fix((f"nc -vz -w 3 {example} {port}      # from here: does it answer now?",)),
            *fixes.firewall_open_port(nodes or [example], port)]


def _fix(column: str, kind: str, example: str, result: R.ProbeResult,
         settings: R.ProbeSettings, nodes: Sequence[str] = ()) -> tuple[str, str | list[Fix]]:
    """(explanation, fix) for one kind of failure, with `example` (a host that has it) in the
    commands; nodes: every host that has it, for a fix that goes on each of them."""
    port = result.data.get("port") or (settings.ssh_port or 22)
    p_opt = f" -p {settings.ssh_port}" if settings.ssh_port else ""
    # known_hosts names a host on another port than 22 as [host]:port
    known_name = f"'[{example}]:{settings.ssh_port}'" if settings.ssh_port and settings.ssh_port != 22 else example
    # The scanned key stays in a shell variable: the key checked is the key added, and no file
    # with a predictable name (/tmp/HOST.key, which another local user could plant) is involved.
    add_key = (f"keys=$(ssh-keyscan -H{p_opt} -t ed25519 {example})\n"
               f"printf '%s\\n' \"$keys\" | ssh-keygen -lf -    # compare with the fingerprint the host's "
               f"admin reads on its console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub\n"
               f"printf '%s\\n' \"$keys\" >> ~/.ssh/known_hosts    # only if the two fingerprints match")
    if column == R.NAME:
        if kind == R.LOOPBACK and (example.lower() in R.LOCALHOST_NAMES or example.startswith("127.")
                                   or example == "::1"):
            # Never advise remapping localhost itself in /etc/hosts: that breaks the node.
            return ("`localhost` is each node itself: in a list of several hosts the launcher and the "
                    "ranks would each connect to their own node. Name every host by its cluster name or address.",
                    f"hostname -f; ip -br addr   # use this name or address instead of {example} in the host list")
        if kind == R.LOOPBACK:
            return ("A node name that maps to 127.x here makes gloo, NCCL's bootstrap and MASTER_ADDR "
                    "advertise a loopback address that other nodes cannot reach (Debian puts "
                    "`127.0.1.1 <hostname>` in /etc/hosts; containers often map their name to 127.0.0.1).",
                    list(fixes.hostname_address(example)))
        return ("The launcher, NCCL and the rendezvous all look these names up; every node must resolve "
                "every other node's name to an address on the cluster network.",
                f"getent hosts {example}\n"
                "# no answer: add the name to DNS or to /etc/hosts on every node,\n"
                "# or put addresses in the host list")
    if kind == R.REFUSED:
        if column in (R.SSH_PORT, R.SSH):
            return ("The host answers but nothing listens on the ssh port: sshd is not running, listens "
                    "on another port, or a container does not publish it. Launchers take the port from "
                    "~/.ssh/config (`Port 2222` under `Host <name>`), horovodrun -p, or "
                    "mpirun --mca plm_rsh_args \"-p 2222\".",
                    f"ss -ltnp | grep sshd     # on {example}'s console: is sshd up, on which port?\n"
                    "# in a container: run sshd and publish it, e.g. docker run -p 2222:22 ...\n"
                    "# or docker run --network=host ...")
        return (f"Nothing listens on port {port} on these hosts, or a firewall rejects it. Before launch "
                "that is expected for a rendezvous port; for a service that should be up it is not.",
                f"ss -ltnp 'sport = :{port}'     # on {example}: who listens?\n"
                f"# in a container publish it: docker run -p {port}:{port} ... (or --network=host)")
    if kind == R.TIMEOUT:
        return ("No answer at all: a firewall drops the packets, the host is down, or the address is on "
                "a network this node cannot reach. NCCL and the rendezvous hang the same way.",
                _firewall_fix(int(port), example, nodes))
    if kind == R.NO_ROUTE:
        return ("This node has no route to the host's address (wrong subnet, interface down, or an ICMP "
                "reject from a firewall).",
                f"ip route get $(getent hosts {example} | awk '{{print $1; exit}}')\n"
                "# fix the route, or use the host's address on the cluster network")
    if kind == R.NOT_RESOLVED:
        return ("The name does not resolve.", f"getent hosts {example}")
    if kind == S.KEY_DENIED:
        return ("sshd on the host accepted the connection but none of this user's keys is in its "
                "authorized_keys. mpirun and horovodrun need passwordless (key) login to every host. "
                "With a shared home directory, appending the key to ~/.ssh/authorized_keys here is enough.",
                "test -f ~/.ssh/id_ed25519 || ssh-keygen -t ed25519 -N '' -f ~/.ssh/id_ed25519\n"
                f"ssh-copy-id -i ~/.ssh/id_ed25519.pub{p_opt} {example}   # asks the password once")
    if kind == S.HOSTKEY_UNKNOWN:
        return ("This node has no known_hosts entry for the host, and with BatchMode ssh cannot ask: the "
                "launcher fails with 'Host key verification failed'. Do not switch host-key checking "
                "off; add the key after checking its fingerprint against the one the host's admin (or "
                "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on its console) shows. Cluster-wide, "
                "admins can ship /etc/ssh/ssh_known_hosts or sign host keys (@cert-authority).",
                add_key)
    if kind == S.HOSTKEY_CHANGED:
        where = result.data.get("known_hosts_file") or "~/.ssh/known_hosts"
        line = result.data.get("known_hosts_line")
        at = f" (line {line})" if line else ""
        return ("The host presents a different key from the one recorded here. After a reinstall that is "
                "expected; otherwise it may be an attack. Confirm with the admins before replacing it.",
                f"ssh-keygen -f \"{where}\" -R {known_name}   # drop the old key{at}\n" + add_key)
    if column == R.SSH and ("kex_exchange_identification" in result.message
                            or "Connection reset" in result.message):
        return ("sshd accepted the connection and hung up before the key exchange. Usually sshd's "
                "MaxStartups (default 10:30:100) dropping it because many unauthenticated logins arrive "
                "at once (every node probing every other, or a scan), or a TCP wrapper/fail2ban refusing "
                "this node. Something else than sshd may also listen on that port.",
                f"ssh -v {example} true     # run again from one node; on {example}: "
                "grep -i maxstartups /etc/ssh/sshd_config")
    if column == R.SSH and result.message.startswith("ssh is not installed"):
        return ("mpirun and horovodrun need the ssh client to start remote ranks.",
                "apt-get install openssh-client     # or: dnf install openssh-clients")
    return ("The probe failed; the message says why.",
            f"ssh{p_opt} -v {example} true" if column == R.SSH else f"nc -vz -w 3 {example} {port}")


def _severity(column: str, kind: str, origin: str) -> Status:
    if kind in R.GOOD:
        return Status.OK
    if kind == R.LOOPBACK:
        return Status.WARN
    if origin.startswith("Slurm") and column in (R.SSH, R.SSH_PORT):
        # srun starts ranks without ssh: only mpirun/horovodrun over ssh need it.
        return Status.WARN
    return Status.FAIL


# torch's env:// default (MASTER_PORT) and torchrun's c10d rendezvous default.
_RENDEZVOUS_PORTS = (29500, 29400)


def _rendezvous_ports(env) -> set[int]:
    """Ports a rendezvous store serves only once the job has started: refused before then is
    the expected answer, not a fault."""
    ports = set(_RENDEZVOUS_PORTS)
    value = env.get("MASTER_PORT", "").strip()
    if value.isdigit():
        ports.add(int(value))
    return ports


def _redundant(row: R.HostReach, column: str, result: R.ProbeResult) -> bool:
    """A failure already explained by another cell of the same host (a name that does not
    resolve fails every probe; a closed ssh port fails ssh the same way)."""
    name = row.probes.get(R.NAME)
    if column != R.NAME and result.kind == R.NOT_RESOLVED and name is not None and name.kind != R.OK:
        return True
    port = row.probes.get(R.SSH_PORT)
    return (column == R.SSH and port is not None and port.kind == result.kind
            and result.kind in (R.REFUSED, R.TIMEOUT, R.NO_ROUTE))


def _header(column: str, rows: list[R.HostReach]) -> str:
    if column == R.SSH_PORT:
        ports = {r.probes[column].data.get("port") for r in rows if column in r.probes}
        ports.discard(None)
        return f"tcp/{ports.pop()}" if len(ports) == 1 else "tcp/ssh"
    return column


def _table(rows: list[R.HostReach], columns: list[str], max_rows: int, bad: set[int]) -> dict:
    order = [i for i in range(len(rows)) if i in bad] + [i for i in range(len(rows)) if i not in bad]
    shown = sorted(order[:max_rows])
    body = []
    for i in shown:
        row = rows[i]
        label = f"{row.target.user}@{row.target.name}" if row.target.user else row.target.name
        body.append([label] + [row.probes[c].cell() for c in columns])
    if len(rows) > len(shown):
        body.append([f"(+{len(rows) - len(shown)} more, all ok)"] + [""] * len(columns))
    return {"columns": ["host"] + [_header(c, rows) for c in columns], "rows": body}


@check("reach.hosts", title="Every host answers: name, TCP ports, passwordless ssh",
       tags=("reach", "ssh", "mpi", "horovod", "network"), timeout=30,
       params={"probe_timeout": 3.0, "ssh": "auto", "ssh_port": 0, "ssh_options": [], "user": "", "ports": [],
               "hosts": [], "hostfile": "", "max_rows": 40, "max_threads": 1024})
def hosts(ctx: Context) -> Iterator[Finding]:
    """Probes every host of the job at once, each probe with its own timeout, and says in one
    table which host fails which probe: name resolution (every address; a name that maps to
    loopback is a finding), TCP to the ssh port and to `--ports`, and
    `ssh -o BatchMode=yes -o ConnectTimeout=N host true`, classified as ok, public key denied,
    host key unknown, host key changed, refused, timed out, name not resolved or other.
    Host-key checking is never switched off.

    Hosts: `--hosts` (names, hostlist expressions), `--hostfile` (MPI hostfiles, `slots=`,
    comments), `-H h1:4,h2:4`, else the Slurm job's nodes, else the `hosts`/`hostfile`
    parameters. ssh options for the probe (`-F FILE`, `-i KEY`, `-o UserKnownHostsFile=...`) go
    in `ssh_options`; `ssh_port` forces a port (0: what ssh would use). `probe_timeout` is per probe:
    the whole check takes about one timeout, or twice it when a host accepts ssh connections
    and then hangs at login."""
    try:
        targets, ports, port_problems = _targets(ctx)
        settings = _settings(ctx, ports, targets.origin)
    except (ValueError, TypeError) as exc:
        yield fail(f"reach.hosts parameters: {exc}",
                   fix="# correct [checks.\"reach.hosts\"] in distdoctor's config file, or the --hosts/--hostfile/-H you gave")
        return
    for problem in list(targets.problems)[:20] + port_problems:
        yield fail(problem, subject=problem.split(":", 1)[0], **_input_fix(problem))
    if len(targets.problems) > 20:
        yield fail(f"... and {len(targets.problems) - 20} more bad host entries", subject="host list")
    if not targets.hosts:
        if targets.given:
            yield fail(f"no hosts to probe: the host list from the {targets.origin} names none that can be used",
                       fix=_HOW_TO_GIVE_HOSTS)
        else:
            yield skip("no hosts given: use --hosts 'node[01-04]', --hostfile FILE or -H h1:4,h2:4, "
                       "or run inside a Slurm job", fix=_HOW_TO_GIVE_HOSTS)
        return
    if settings.timeout <= 0:
        yield fail(f"reach.hosts probe_timeout must be positive, not {settings.timeout:g}")
        return
    local_rank = ctx.run_context.local_rank
    if local_rank not in (None, 0):
        # Every rank of a node would probe the same hosts; many concurrent logins also trip
        # sshd's MaxStartups on the targets and read as failures.
        yield skip(f"local rank {local_rank}: local rank 0 of this node probes the hosts",
                   evidence={"local_rank": local_rank})
        return
    weakening = [o for o in settings.ssh_options if o.replace(" ", "").lower() in _WEAKENING]
    if weakening:
        yield warn(f"ssh_options switch host-key checking off ({', '.join(weakening)})", subject="ssh_options",
                   explanation="With them the ssh column cannot tell an unknown or changed host key, and "
                               "every login is open to a man in the middle.",
                   fix="# delete them from ssh_options, then add the hosts' keys as the fix for "
                       "'host key not known here' shows")

    rows = R.probe_hosts(ctx.host, targets.hosts, settings)
    columns = R.probe_columns(settings)
    groups: dict[tuple[str, str, Any], list[int]] = {}
    waiting: dict[int, list[str]] = {}
    rendezvous = _rendezvous_ports(ctx.host.env)
    bad: set[int] = set()
    worst = Status.OK
    own = own_names(ctx.facts)
    for i, row in enumerate(rows):
        for column in columns:
            result = row.probes[column]
            status = _severity(column, result.kind, targets.origin)
            if status is Status.OK:
                continue
            if result.kind == R.LOOPBACK and row.target.name in own:
                # this node's own name on loopback reaches this node; what it does to the other nodes
                # (gloo and NCCL advertise 127.x) is net.gloo-socket-interface's finding, with the
                # /etc/hosts line and its fix: said once, there
                continue
            port = result.data.get("port")
            if (result.kind == R.REFUSED and column not in (R.SSH, R.SSH_PORT, R.NAME)
                    and isinstance(port, int) and port in rendezvous):
                waiting.setdefault(port, []).append(row.target.name)
                continue
            bad.add(i)
            worst = status if status.severity > worst.severity else worst
            if not _redundant(row, column, result):
                groups.setdefault((column, result.kind, result.data.get("port")), []).append(i)

    per_host = [{"host": r.target.name, "user": r.target.user, "slots": r.target.slots,
                 "source": r.target.source, "probes": {c: r.probes[c].to_dict() for c in columns}}
                for r in rows]
    evidence = {"origin": targets.origin, "timeout_s": settings.timeout, "ports": list(ports),
                "ssh": settings.ssh, "table": _table(rows, columns, int(ctx.params.get("max_rows", 40)), bad),
                "hosts": per_host}
    n = len(rows)
    plural = "s" if n != 1 else ""
    if worst is Status.OK:
        unprobed = "" if settings.ssh_port_probe else (" (ssh not probed: srun starts the job's tasks without it; "
                                            "set ssh = true under [checks.\"reach.hosts\"] to probe it)")
        yield ok(f"all {n} host{plural} from the {targets.origin} answer every probe{unprobed}", evidence=evidence)
    else:
        summary = f"{len(bad)} of {n} host{plural} from the {targets.origin} fail a probe"
        yield (fail if worst is Status.FAIL else warn)(summary, evidence=evidence)
    for port, names in waiting.items():
        yield ok(f"TCP port {port} on {_fold(names)}: the host answers, nothing listens yet (expected "
                 "before rank 0 starts the rendezvous)", subject=_fold(names),
                 explanation="A rendezvous store listens only while the job runs; run this inside the job "
                             "(or with the job up) to see whether its ranks can reach it.",
                 evidence={"probe": f"tcp/{port}", "status": R.REFUSED, "hosts": names})

    for (column, kind, _port), members in groups.items():
        names = [rows[i].target.name for i in members]
        first = rows[members[0]].probes[column]
        status = _severity(column, kind, targets.origin)
        explanation, fix = _fix(column, kind, names[0], first, settings, names)
        if status is Status.WARN and column in (R.SSH, R.SSH_PORT):
            explanation += (" This only matters if you launch with mpirun or horovodrun over ssh; srun "
                            "does not use ssh.")
        subject = _fold(names)
        title = _probe_title(column, first.data.get("port"))
        messages = {rows[i].target.name: rows[i].probes[column].message for i in members}
        prep = {R.NAME: "of", R.SSH: "to"}.get(column, "on")
        summary = f"{title} {prep} {subject}: {_WORDS.get(kind, kind)}"
        if kind == R.OTHER and first.message:  # no word of ours says more than the error itself
            summary += f" ({first.message if len(members) == 1 else names[0] + ': ' + first.message})"
        make = fail if status is Status.FAIL else warn
        yield make(summary[:300], subject=subject, explanation=explanation, fix=fix,
                   evidence={"probe": column, "status": kind, "hosts": names, "messages": messages})


# --- MASTER_ADDR / MASTER_PORT ---------------------------------------------------------------

def _nodes_in_job(env) -> int | None:
    for name in ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", "NNODES"):
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    world, local = env.get("WORLD_SIZE", ""), env.get("LOCAL_WORLD_SIZE", "")
    if world.isdigit() and local.isdigit() and int(local) > 0:
        return -(-int(world) // int(local))
    return None


def _local_addresses(host) -> set[str]:
    try:
        table = host.net_if_addrs()
    except Exception:  # psutil missing or failing: treat as unknown
        return set()
    return {a["address"].split("%", 1)[0] for rows in table.values() for a in rows
            if a.get("family") in ("inet", "inet6")}


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


@check("reach.master-port", title="MASTER_ADDR:MASTER_PORT is reachable (and free on the master)",
       tags=("reach", "torch", "rendezvous", "network"), timeout=15, params={"probe_timeout": 3.0})
def master_port(ctx: Context) -> Iterator[Finding]:
    """torch's env:// rendezvous: every rank connects to MASTER_ADDR:MASTER_PORT, where rank 0
    (or torchrun's agent) listens. Before launch, on the master node the port must be free to
    bind (a leftover process from an earlier run makes rank 0 fail with 'address already in
    use'); from the other nodes the address must answer (a refused connection is fine before
    rank 0 starts; a timeout means a firewall or the wrong address, and the job will hang).
    Under torchrun the store is already up, so every node connects."""
    env = ctx.env
    addr = (env.get("MASTER_ADDR") or "").strip()
    timeout = float(ctx.params.get("probe_timeout", 3.0))
    if not addr:
        yield skip("MASTER_ADDR is not set: no rendezvous endpoint to probe",
                   explanation="torchrun sets it from --master-addr/--rdzv-endpoint; with srun set it from "
                               "the job's first node.",
                   fix="export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1) "
                       "MASTER_PORT=29500")
        return
    port_text = (env.get("MASTER_PORT") or "").strip()
    if not port_text:
        yield warn("MASTER_PORT is not set (env:// init fails without it); probing torchrun's default 29500",
                   subject="MASTER_PORT", fix="export MASTER_PORT=29500")
        port = 29500
    elif not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        yield fail(f"MASTER_PORT={port_text!r} is not a TCP port number", subject="MASTER_PORT",
                   fix="export MASTER_PORT=29500   # any free port above 1024, the same on every rank")
        return
    else:
        port = int(port_text)
    endpoint = f"{addr}:{port}"
    evidence: dict[str, Any] = {"master_addr": addr, "master_port": port}
    resolved = ctx.host.resolve(addr, timeout=timeout)
    evidence["addresses"] = list(resolved.addresses)
    if resolved.error:
        yield fail(f"MASTER_ADDR={addr} does not resolve: {resolved.error}", subject=endpoint, evidence=evidence,
                   explanation="Every rank looks MASTER_ADDR up; rank 0's node name must resolve on every node.",
                   fix=f"getent hosts {shlex.quote(addr)}   # use the master's address on the cluster network, or fix DNS "
                       "or /etc/hosts")
        return
    nodes = _nodes_in_job(env)
    evidence["nodes"] = nodes
    if any(_loopback(a) for a in resolved.addresses):
        if nodes is not None and nodes > 1:
            yield fail(f"MASTER_ADDR={addr} resolves to loopback ({', '.join(resolved.addresses)}) in a "
                       f"{nodes}-node job", subject=endpoint, evidence=evidence,
                       explanation="Ranks on the other nodes connect to their own loopback and wait until the "
                                   "rendezvous times out.",
                       fix=["export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)",
                            *fixes.hostname_address(addr)])
            return
        yield ok(f"MASTER_ADDR={addr} is loopback: fine for a single node only", subject=endpoint,
                 evidence=evidence)
    local = _local_addresses(ctx.host)
    is_master = any(a.split("%", 1)[0] in local or _loopback(a) for a in resolved.addresses)
    evidence["this_node_is_master"] = is_master
    store_up = ctx.run_context.kind == "torchrun"
    if is_master and not store_up:
        bind_addr = next((a for a in resolved.addresses if a.split("%", 1)[0] in local), resolved.addresses[0])
        why = ctx.host.can_bind(bind_addr, port)
        evidence["bind"] = why or "ok"
        if not why:
            yield ok(f"{endpoint}: this is the master node and port {port} is free to bind", subject=endpoint,
                     evidence=evidence)
        elif why == "address in use":
            yield fail(f"{endpoint}: port {port} is already in use on the master node", subject=endpoint,
                       evidence=evidence,
                       explanation="Rank 0 cannot start the rendezvous store: 'address already in use'. Usually a "
                                   "process left from an earlier run, or another job on this node using the same "
                                   "port.",
                       fix=f"ss -ltnp {shlex.quote(f'sport = :{port}')}   # who holds it; or choose a per-job port: "
                           "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))")
        else:
            yield fail(f"{endpoint}: cannot bind port {port} on the master node: {why}", subject=endpoint,
                       evidence=evidence, fix="export MASTER_PORT=29500   # a port above 1024 that is free")
        return
    result = ctx.host.connect(addr, port, timeout)
    evidence["connect"] = result.error or "ok"
    if result.ok:
        if store_up:
            yield ok(f"{endpoint} accepts connections (the rendezvous store is up)", subject=endpoint,
                     evidence=evidence)
        else:
            yield warn(f"something already listens on {endpoint} before launch", subject=endpoint, evidence=evidence,
                       explanation="Rank 0 will need to bind this port on the master; a process already holding "
                                   "it (a run that did not exit) makes the new job fail or join the wrong store.",
                       fix=Fix((f"ss -ltnp 'sport = :{port}'",), [addr], "find it; or pick another MASTER_PORT"))
    elif result.error == "refused":
        if store_up:
            yield fail(f"{endpoint} refuses connections although torchrun's store should be up", subject=endpoint,
                       evidence=evidence,
                       explanation="MASTER_ADDR or MASTER_PORT differs from where the agent listens, or the "
                                   "master's agent has exited.",
                       fix="echo \"$MASTER_ADDR:$MASTER_PORT\"   # on every node; it must be torchrun's --rdzv-endpoint")
        else:
            yield ok(f"{addr} answers; nothing listens on port {port} yet (expected before rank 0 starts)",
                     subject=endpoint, evidence=evidence)
    else:
        words = {"timeout": f"no answer within {timeout:g} s"}.get(result.error, result.error)
        yield fail(f"{endpoint} is unreachable from this node: {words}", subject=endpoint, evidence=evidence,
                   explanation="Ranks here will hang at init_process_group until the rendezvous timeout. A "
                               "firewall between the nodes, or a MASTER_ADDR on a network this node is not on "
                               "(a container's bridge address).",
                   fix=_firewall_fix(port, addr))


CHECKS = [hosts, master_port]
