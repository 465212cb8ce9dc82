"""What NCCL's INFO lines say about each rank's setup, and where ranks disagree.

Per member (a rank where the log says which, else `host:pid`): the NCCL version, the network
it chose (IB or Socket), the interfaces of its bootstrap and socket transport, its IB devices,
GPUDirect RDMA on or off, and the CUDA driver version. The compared facts carry the inventory's
names (nccl.version, nccl.network, nccl.gdr, cuda.driver) and the one table's rules
(crosscheck/rules.py), on the shared engine (crosscheck/engine.py); interfaces that cannot carry traffic to another node
(loopback, bridges, veth, container overlays) are judged per member. A log shows names only,
so an interface's kind is read from its name here, unlike `check`, which asks the kernel.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import replace
from typing import Any

from distdoctor import fixes
from distdoctor.crosscheck import rules as table
from distdoctor.crosscheck.engine import Difference, compare, fix_for, fold, to_finding
from distdoctor.logs.scan import Scan
from distdoctor.model import Finding, Status
from distdoctor.remote import Fix
from distdoctor.parsers.nccl_net_log import parse_nccl_net_log

# NCCL's own banner ("NCCL version 2.19.3+cuda12.3"), not the end of torch's error summary
# ("NCCL error in: ...cpp:1727, invalid usage, NCCL version 2.19.3"): that one drops the
# +cuda suffix, so the ranks that failed would read as running another NCCL.
_VERSION = re.compile(r"(?<!, )\bNCCL version (?P<v>\d+\.\d+[\w.+-]*)")
_NETWORK = re.compile(r"\bUsing (?:internal )?[Nn]etwork (?P<n>\w+)")
_GDR = re.compile(r"GPU Direct RDMA (?P<s>Enabled|Disabled)|/GDRDMA\b")
_DRIVER = re.compile(r"\bcudaDriverVersion (?P<v>\d+)")
# "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", "Ring 00 : 3[b01000] -> 4[201000] [send] via NET/Socket/0",
# "... via NET/IB/0/GDRDMA": the transport, without the device index
_VIA = re.compile(r"\bvia (?P<t>P2P/\w+|SHM(?:/\w+)?|NET/\w+(?:/\d+)?(?:/GDRDMA)?|NVLS|COLLNET\w*)")
_NOT_ACROSS_NODES = (
    (re.compile(r"^lo$"), "loopback"),
    (re.compile(r"^(docker|br-|virbr)"), "bridge"),
    (re.compile(r"^veth"), "veth"),
    (re.compile(r"^(cni|flannel|cali|weave|kube|cilium|tunl|vxlan|lxc|genev|tailscale|wg|tun|tap)"), "virtual"),
)


def kind_by_name(name: str, address: str = "") -> str:
    """Why an interface cannot carry traffic to another node, or "". The address decides first,
    as the live checks do: loopback and link-local addresses never reach a peer, and a globally
    routable address does whatever the interface is called (a veth or macvlan holding the
    pod's routable IPv6). Only a private or missing address falls back to the name's kind."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        ip = None
    if ip is not None:
        if ip.is_loopback:
            return "loopback address"
        if ip.is_link_local:
            return "link-local address"
        if ip.is_global:
            return ""
    for pattern, kind in _NOT_ACROSS_NODES:
        if pattern.search(name):
            return kind
    return ""


def _host_of(member: str, hosts: dict[str, str]) -> str:
    return hosts.get(member, member.split(":", 1)[0] if ":" in member else "")


def members(scan: Scan) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """({member: {fact: value}}, {member: host})."""
    facts: dict[str, dict[str, Any]] = {}
    hosts: dict[str, str] = {}
    lines: list[str] = []

    def name(host: str, pid: int | None, rank: int | None) -> str:
        if rank is None and host and pid is not None:
            rank = scan.pid_rank.get((host, pid))
        if rank is not None:
            hosts.setdefault(str(rank), host or scan.rank_host.get(rank, ""))
            return str(rank)
        return f"{host}:{pid}" if host and pid is not None else ""

    who_of: dict[str, str] = {}
    for p in scan.info:
        member = name(p.host, p.pid, p.rank)
        if not member:
            continue
        f = facts.setdefault(member, {})
        if (m := _VERSION.search(p.body)):
            f["nccl.version"] = m.group("v")
        if (m := _NETWORK.search(p.body)):
            f["nccl.network"] = m.group("n")
        if (m := _GDR.search(p.body)):
            f["nccl.gdr"] = m.group("s") != "Disabled"
        if (m := _DRIVER.search(p.body)):
            f["cuda.driver"] = _cuda_version(int(m.group("v")))
        if (m := _VIA.search(p.body)):
            kind = re.sub(r"/\d+", "", m.group("t"))
            f["nccl.transports"] = tuple(sorted(set(f.get("nccl.transports", ())) | {kind}))
            if kind.endswith("/GDRDMA"):
                f["nccl.gdr"] = True
        if p.host and p.pid is not None:
            who_of[f"{p.host}:{p.pid}"] = member
            lines.append(f"{p.host}:{p.pid}:0 [{p.device or 0}] {p.body}")
    for sel in parse_nccl_net_log("\n".join(lines)).selections:
        member = who_of.get(sel.host)
        if not member:
            continue
        f = facts[member]
        if sel.what in ("bootstrap", "socket", "oob"):
            f[f"nccl.{sel.what}"] = tuple(i for i, _a in sel.interfaces)
            f[f"nccl.{sel.what}.addresses"] = tuple(sel.interfaces)
        elif sel.what == "ib":
            f["nccl.ib"] = tuple(f"{d}:{p}/{ll}" for d, p, ll in sel.devices)
    return {m: f for m, f in facts.items() if f}, hosts


def address_book(scan: Scan) -> dict[str, str]:
    """{address: "rank 26 on gpu004"} from the addresses ranks advertised (bootstrap, socket
    and IB out-of-band lines), so an error naming a peer's address can name the peer."""
    facts, hosts = members(scan)
    book: dict[str, str] = {}
    seen_on: dict[str, set[str]] = {}
    for member, f in facts.items():
        host = _host_of(member, hosts)
        who = (f"rank {member}" if member.isdigit() else f"pid {member.split(':', 1)[-1]}") + \
            (f" on {host}" if host else "")
        for key in ("nccl.bootstrap.addresses", "nccl.socket.addresses", "nccl.oob.addresses"):
            for _ifname, address in f.get(key) or ():
                if address:
                    book.setdefault(address, who)
                    seen_on.setdefault(address, set()).add(host or member)
    # an address several hosts hold (docker0's 172.17.0.1 on every node) names no one rank
    return {a: who for a, who in book.items() if len(seen_on.get(a, ())) <= 1}


# The facts a log shows under the inventory's names; what each rule says is the one table's.
RULES = table.select("nccl.version", "nccl.network", "nccl.gdr", "cuda.driver")


def _cuda_version(driver: int) -> str:
    """NCCL's cudaDriverVersion (12020) as the inventory writes cuda.driver ("12.2")."""
    return f"{driver // 1000}.{driver % 1000 // 10}"


def judge(scan: Scan) -> list[Finding]:
    facts, hosts = members(scan)
    if not facts:
        return [Finding(Status.SKIP, "no NCCL setup lines (version, interfaces, transports) in the log: "
                                     "run with NCCL_DEBUG=INFO to record them")]

    def names(ms) -> str:
        ms = list(ms)
        hs = {hosts.get(m) for m in ms if hosts.get(m)}
        return f"{'rank' if len(ms) == 1 else 'ranks'} {fold(ms)}" + (f" on {fold(hs)}" if hs else "")

    def addressed(d: Difference) -> Finding:
        found = to_finding(d, noun="rank", names=names)
        on_hosts = replace(d, outliers=tuple(sorted({_host_of(m, hosts) or m for m in d.outliers})))
        return replace(found, fix="", remedy=fix_for(on_hosts))

    findings = [addressed(d) for d in compare(facts, RULES)]
    findings += _interfaces(facts, hosts, names, one_host=_one_host(scan))
    summary = _summary(facts)
    ranks = "rank" if len(facts) == 1 else "ranks"
    findings.append(Finding(Status.OK, f"NCCL setup of {len(facts)} {ranks} read from the log: {summary}",
                            evidence={"ranks": {m: {k: list(v) if isinstance(v, tuple) else v for k, v in f.items()}
                                                for m, f in list(facts.items())[:64]}}))
    return findings


_INIT_RANK = re.compile(r"\brank (?P<rank>\d+) nranks (?P<world>\d+) ")


def _one_host(scan: Scan) -> str:
    """The host every rank of the job is on, when NCCL's Init lines show the whole world there
    (a single-rank job, or all nranks ranks on one host name); else "". Loopback is then the
    right interface, not a fault."""
    world = 0
    ranks: set[int] = set()
    where: set[str] = set()
    for p in scan.info:
        if "Init COMPLETE" not in p.body and "Init START" not in p.body:
            continue
        m = _INIT_RANK.search(p.body)
        if m:
            world = max(world, int(m.group("world")))
            ranks.add(int(m.group("rank")))
            where.add(p.host)
    if world and len(where) == 1 and (world == 1 or ranks == set(range(world))):
        return next(iter(where)) or "one host"
    return ""


def _interfaces(facts, hosts, names, one_host: str = "") -> list[Finding]:
    bad: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for member, f in facts.items():
        for what in ("bootstrap", "socket"):
            pairs = f.get(f"nccl.{what}.addresses") or ()
            odd = tuple(f"{i} ({k})" for i, a in pairs for k in [kind_by_name(i, a)] if k)
            if odd:
                good = tuple(i for i, a in pairs if not kind_by_name(i, a))
                bad.setdefault((what, odd, good), []).append(member)
    out = []
    for (what, odd, good), ms in bad.items():
        kinds = ", ".join(odd)
        if one_host:
            out.append(Finding(Status.OK, f"NCCL's {what} on {names(ms)} uses {kinds}: fine, every rank of the "
                                          f"job is on {one_host}", subject=f"nccl.{what}",
                               evidence={"ranks": fold(ms), "interfaces": list(odd), "one_host": one_host}))
            continue
        where = fold(h for m in ms for h in [_host_of(m, hosts)] if h)
        target = f"on {where}: " if where else ""
        if good:
            fix: Fix | str = fixes.socket_ifname(good, comment=f"{target}keep NCCL on {', '.join(good)}")
        else:
            fix = (f"# {target}no interface in NCCL's list reaches another node: run the container with "
                   f"--network=host, or set NCCL_SOCKET_IFNAME to the NIC that does (ip -br addr)")
        status = Status.FAIL if not good else Status.WARN
        out.append(Finding(status, f"NCCL's {what} on {names(ms)} uses {kinds}", subject=f"nccl.{what}",
                           explanation="These interfaces exist only inside one host (or are container overlays), "
                                       "or their address is loopback or link-local: a peer on another node cannot "
                                       "reach the address NCCL advertises on them, and NCCL stripes traffic over "
                                       "every interface it lists.",
                           fix=fix, evidence={"ranks": fold(ms), "interfaces": list(odd), "others": list(good)}))
    return out


def _summary(facts: dict[str, dict[str, Any]]) -> str:
    parts = []
    for key, label in (("nccl.version", "NCCL"), ("nccl.network", "network"), ("nccl.socket", "sockets"),
                       ("nccl.ib", "IB"), ("nccl.gdr", "GDR"), ("nccl.transports", "transports")):
        values = {v for f in facts.values() if (v := f.get(key)) is not None}
        if values:
            shown = sorted({",".join(v) if isinstance(v, tuple) else ("on" if v is True else "off" if v is False else str(v))
                            for v in values})
            parts.append(f"{label} {' / '.join(shown[:4])}{' ...' if len(shown) > 4 else ''}")
    return "; ".join(parts) or "no setup lines"
