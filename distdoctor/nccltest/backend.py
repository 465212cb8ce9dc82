"""Which backend the collectives use, and what would make it hang before it is tried: pure
functions of the ranks' fingerprints."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

from distdoctor import fixes, loopback_name, remote
from distdoctor.api import Fix, fail, warn
from distdoctor.model import Finding
from distdoctor.nccltest import compare
from distdoctor.parsers.etc_hosts import HostsLine
from distdoctor.text import one_line


def _has_gpu(f: Mapping[str, Any]) -> bool:
    """CUDA, NCCL, and a GPU of its own: cuda:<local rank> exists. Two ranks on a node with one GPU
    have CUDA, but the second's init fails (invalid device ordinal) and NCCL's init on the others then
    waits for it until the bound (seen on an H100: 50 s for nothing)."""
    try:  # a fingerprint is a peer's JSON: a number that is not one is not judged here
        beyond = f.get("gpu.count") is not None and int(f.get("local_rank") or 0) >= int(f["gpu.count"])
    except (TypeError, ValueError):
        beyond = False
    return bool(f.get("cuda_available") and f.get("nccl.version")) and not beyond


def choose(fps: Sequence[Mapping[str, Any]], forced: str | None) -> tuple[str, list[Finding]]:
    """nccl when every rank has CUDA, NCCL and a GPU of its own, else gloo (with a note when only some have)."""
    notes: list[Finding] = []
    usable = [_has_gpu(f) for f in fps]
    if forced:
        return forced, notes
    if all(usable):
        return "nccl", notes
    if any(usable):
        notes.append(warn(f"only ranks {compare.rank_ranges(f['rank'] for f in fps if _has_gpu(f))}"
                          " have CUDA, NCCL and a GPU of their own: testing with gloo",
                          explanation="a NCCL job would fail on the other ranks (no GPU, or a local rank beyond "
                                      "the node's GPUs), and the rest would wait for them in init",
                          fix="nvidia-smi -L; echo $CUDA_VISIBLE_DEVICES   # on the other ranks' nodes"))
    return "gloo", notes


def nccl_missing(fps: Sequence[Mapping[str, Any]]) -> Finding | None:
    without = [f for f in fps if not _has_gpu(f)]
    if not without:
        return None
    beyond = [f for f in without if f.get("cuda_available") and f.get("nccl.version")]
    if len(beyond) == len(without):
        return fail(f"--backend nccl, but rank{'s' if len(beyond) > 1 else ''} "
                    f"{compare.rank_ranges(f['rank'] for f in beyond)} would use a GPU their node does not have "
                    f"(local rank {', '.join(sorted({str(f.get('local_rank')) for f in beyond}))} of "
                    f"{', '.join(sorted({str(f.get('gpu.count')) for f in beyond}))} GPU(s)): not run, NCCL's init "
                    "would fail there and the other ranks would wait for them until the bound",
                    explanation="NCCL needs one GPU per rank on each node",
                    fix="# start at most as many ranks per node as it has GPUs (nvidia-smi -L), or run with "
                        "--backend gloo")
    builds = sorted({f"torch {f.get('torch.version')}" + (f" ({f['cuda_error']})" if f.get("cuda_error") else "")
                     for f in without})
    return fail(f"--backend nccl, but rank{'s' if len(without) > 1 else ''} "
                f"{compare.rank_ranges(f['rank'] for f in without)} have no usable CUDA GPU with NCCL: "
                + "; ".join(builds),
                explanation="NCCL needs a CUDA build of torch and a visible GPU on every rank",
                fix="nvidia-smi; python -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())'"
                    "   # on those ranks; or run with --backend gloo")


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def _reachable(fp: Mapping[str, Any], fps: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(interface, address) of fp's host that the other hosts can reach: the one it routes rank 0
    through, unless that is the loopback (rank 0 itself, when its own name resolves there), then
    of the host's own addresses the one nearest the other hosts' (the cluster network's)."""
    address = str(fp.get("address") or "")
    if address and not _loopback(address):
        return str(fp.get("interface") or ""), address
    others = []
    for g in fps:
        try:
            if g.get("host") != fp.get("host") and not _loopback(str(g.get("address") or "")):
                others.append(ipaddress.ip_address(str(g.get("address"))))
        except ValueError:
            continue
    own = []
    for a in fp.get("addresses") or []:
        try:
            ip = ipaddress.ip_address(str(a).split("%")[0])
        except ValueError:
            continue
        if not (ip.is_loopback or ip.is_link_local):
            own.append(ip)

    def nearness(ip) -> int:  # bits in common with the nearest other host of its family
        return max((ip.max_prefixlen - (int(ip) ^ int(o)).bit_length() for o in others if o.version == ip.version),
                   default=-1)

    if not own or not others and len(own) > 1:
        return "", ""
    best = str(max(own, key=nearness))
    return (str(fp.get("nccl_interface") or "") if fp.get("nccl_address") == best else ""), best


def gloo_address_problem(fps: Sequence[Mapping[str, Any]]) -> Finding | None:
    """gloo binds to the address the hostname resolves to unless GLOO_SOCKET_IFNAME is set; on a
    host whose name resolves to 127.0.0.1 the peers are told to connect to themselves."""
    bad = [f for f in fps if not f.get("env.GLOO_SOCKET_IFNAME")
           and f.get("hostname_addrs") and all(a.startswith("127.") or a == "::1" for a in f["hostname_addrs"])]
    if not bad or len({f["host"] for f in fps}) == 1 and len({f.get("address") for f in fps}) == 1:
        return None
    reach = {id(f): _reachable(f, fps) for f in fps}
    per_host = {f"{f['host']} ({reach[id(f)][1]})": reach[id(f)][0] for f in fps if reach[id(f)][0]}
    names = sorted(set(per_host.values()))
    # GLOO_SOCKET_IFNAME lists devices gloo uses together, all of which must exist: one name
    # per node, not the union NCCL_SOCKET_IFNAME would take.
    fix: Fix | Sequence[Fix | str] | str
    if len(names) == 1:
        fix = fixes.gloo_ifname(names[0], comment="on every node (or map the hostname to the node's real "
                                                  "address in /etc/hosts)")
    elif names:  # each node exports its own interface's name
        fix = [Fix(comment="export GLOO_SOCKET_IFNAME per node, before launching:")] + [
            Fix(nodes=(h,), comment=remote.render(fixes.gloo_ifname(i))) for h, i in sorted(per_host.items())]
    else:
        fix = "ip -br addr   # then export GLOO_SOCKET_IFNAME= the interface on the cluster network"
    # For good, on each node whose name is the loopback: the /etc/hosts line that makes it so.
    lines: dict[str, tuple[Mapping[str, Any], str]] = {}
    # A name two nodes share (cloned images) names neither: no command can reach the right one.
    shared = {h for h in {f.get("host") for f in fps}
              if len({g.get("address") for g in fps if g.get("host") == h}) > 1}
    for f in (f for f in bad if f.get("host") not in shared):
        for entry in f.get("hosts_lines") or []:
            if isinstance(entry, Mapping) and f.get("host") and reach[id(f)][1]:
                lines.setdefault(str(f["host"]), (entry, reach[id(f)][1]))
    where = "; ".join(f"{host}: /etc/hosts line {entry.get('line')}: {one_line(' '.join(str(entry.get('text', '')).split()))}"
                      for host, (entry, _addr) in lines.items())
    if lines:
        fix = list(fix) if isinstance(fix, list) else [fix]
        for host, (entry, address) in lines.items():
            line = HostsLine(int(entry.get("line") or 0), str(entry.get("text", "")), str(entry.get("address", "")),
                             tuple(str(n) for n in entry.get("names") or ()))
            fix.append(loopback_name.hosts_fix(host, line, host, address))
    hosts = sorted({str(f.get("host")) for f in bad})
    return fail(f"gloo would advertise 127.0.0.1 on rank{'s' if len(bad) > 1 else ''} "
                f"{compare.rank_ranges(f['rank'] for f in bad)}: the hostname resolves to the loopback on "
                f"{', '.join(hosts)}" + (f" ({where})" if where else ""),
                explanation="without GLOO_SOCKET_IFNAME gloo binds to the address of `hostname`; the peers "
                "are then told to connect to 127.0.0.1 and time out (about 40 s) instead of failing. "
                "GLOO_SOCKET_IFNAME works at once; mapping the name to the node's cluster address in "
                "/etc/hosts mends it for every job (Debian writes `127.0.1.1 <hostname>` at install)",
                fix=fix)
