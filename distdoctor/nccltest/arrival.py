"""Whether the ranks can meet and who did: the launch and rendezvous findings, as pure
functions of what rank 0 saw (its addresses, what MASTER_ADDR resolves to, the roll)."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping, Sequence
from typing import Any

from distdoctor import fixes, remote
from distdoctor.api import Fix, fail, ok
from distdoctor.model import Finding
from distdoctor.nccltest import compare
from distdoctor.nccltest import store as store_mod
from distdoctor.nccltest.rendezvous import (
    Endpoint,
    Identity,
    expected_rank_hosts,
    step_hosts,
)


def is_local(resolved: Sequence[str], mine: set[str]) -> bool:
    return any(a in mine or a.startswith("127.") or a == "::1" for a in resolved)


def reachable_name(hostname: str, hostname_addrs: Sequence[str], mine: set[str], route_address: str) -> str:
    """What to suggest as MASTER_ADDR: rank 0's hostname when it resolves to a real address
    of this host, else the address this host routes from, else any non-loopback address."""
    if any(a in mine and not a.startswith("127.") for a in hostname_addrs):
        return hostname
    if route_address and not route_address.startswith("127."):
        return route_address
    real = sorted(a for a in mine if not a.startswith(("127.", "fe80", "::1")))
    return real[0] if real else hostname


def own_name_elsewhere(addr: str, hostname: str, resolved: Sequence[str], hostname_addrs: Sequence[str]) -> bool:
    """MASTER_ADDR names this host (its hostname, short or long, or the address that name
    resolves to here), and that is not loopback."""
    if not resolved or any(a.startswith("127.") or a == "::1" for a in resolved):
        return False
    same_name = addr.split(".", 1)[0].lower() == hostname.split(".", 1)[0].lower() if not _is_address(addr) else False
    return same_name or bool(set(resolved) & set(hostname_addrs))


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return False
    return True


def launch_findings(e: Endpoint, ident: Identity, hostname: str, resolved: Sequence[str], resolve_error: str,
                    mine: set[str], suggestion: str, hostname_addrs: Sequence[str] = ()) -> list[Finding]:
    findings = [ok(f"rank 0 of {ident.world_size} via {ident.description}; rendezvous at {e.addr}:{e.port}",
                   explanation=f"address: {e.addr_why}; port: {e.port_why}",
                   evidence={"master_addr": e.addr, "master_port": e.port, "addr_why": e.addr_why,
                             "port_why": e.port_why, "launcher": ident.launcher})]
    if resolve_error:
        findings.append(fail(f"MASTER_ADDR {e.addr} does not resolve on rank 0's host: {resolve_error}",
                             subject=e.addr, fix=f"export MASTER_ADDR={suggestion}"))
    elif not is_local(resolved, mine) and own_name_elsewhere(e.addr, hostname, resolved, hostname_addrs):
        # MASTER_ADDR is this host's own name (or what that name resolves to), yet the address is
        # not here: rank 0 runs in a network namespace of its own on that host (a container on a
        # bridge network), behind NAT. Another MASTER_ADDR (the inside address) reaches nobody.
        findings.append(fail(
            f"MASTER_ADDR {e.addr} ({', '.join(resolved)}) is the name of rank 0's host {hostname}, but not an "
            f"address rank 0 has: rank 0 runs in a network of its own there (a container on a bridge network, "
            "behind NAT), where the other ranks cannot reach its rendezvous",
            subject=hostname,
            explanation="the other ranks connect to the host's address; the rendezvous listens inside the "
            "container, whose address is private and NATed. Publishing the port (-p) would let the rendezvous "
            "through, but NCCL and gloo then connect to ports and addresses of their own",
            fix=fixes.host_networking((hostname,) if remote.host_name(hostname) and remote.plain(hostname) else ())))
    elif not is_local(resolved, mine):
        findings.append(fail(
            f"MASTER_ADDR {e.addr} ({', '.join(resolved)}) is not an address of rank 0's host {hostname}",
            subject=e.addr,
            explanation="rank 0 serves the rendezvous; the other ranks look for it at MASTER_ADDR and "
            "will not find it unless this host is reachable there (NAT, a VIP)",
            fix=f"export MASTER_ADDR={suggestion}"))
    return findings


def network_of(address: str, if_addrs: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The network (10.0.0.0/24) of the interface that holds address, '' when none does."""
    for rows in if_addrs.values():
        for row in rows:
            if str(row.get("address", "")).split("%")[0] == address and row.get("netmask"):
                try:
                    return str(ipaddress.ip_interface(f"{address}/{row['netmask']}").network)
                except ValueError:
                    return ""
    return ""


# Rank 0's own start took at least this share of its whole wait: the missing ranks may have been
# slower to start, not absent.
SLOW_START_SHARE = 0.4


def missing_finding(missing: list[int], waited: float, master_local: bool, ident: Identity, e: Endpoint,
                    fps: Sequence[Mapping[str, Any]], env: Mapping[str, str], network: str = "",
                    cut_short: bool = False, own_start: float = 0.0, bound: float = 0.0) -> Finding:
    """cut_short: rank 0 stopped waiting before the bound because the roll showed the job cannot
    run (a rank claimed twice, a rank of another world size). own_start: the seconds rank 0 took
    to reach the rendezvous (python, import torch), which every rank pays; bound: --timeout."""
    world = ident.world_size
    placement = expected_rank_hosts(env)
    arrived_hosts = {f["host"] for f in fps} | {(f.get("slurm") or {}).get("node") for f in fps}
    never = [h for h in step_hosts(env) if h not in arrived_hosts]
    where = ""
    if placement:
        where = " (expected on " + ", ".join(sorted({placement.get(r, "?") for r in missing})) + ")"
    summary = (f"rank{'s' if len(missing) > 1 else ''} {compare.rank_ranges(missing)} of {world} never "
               f"arrived{where} within {waited:.1f} s of rank 0's start")
    if never:
        summary += f"; no rank arrived from host{'s' if len(never) > 1 else ''} {', '.join(never)}"
    if cut_short:
        summary += " (rank 0 stopped waiting there: the finding below already means this job cannot run as launched)"
    causes = [f"the world size is {world} (from {ident.description}) but fewer processes were "
              "started, or they started elsewhere",
              "those ranks crashed before reaching the rendezvous (look at their stderr)",
              f"they cannot reach {e.addr}:{e.port} (firewall, wrong MASTER_ADDR, "
              "a different MASTER_PORT on their side)"]
    slow_start = own_start >= SLOW_START_SHARE * waited and bound > 0 and not cut_short
    if slow_start:
        # A slow shared filesystem makes every rank's import of torch slow, some nodes' slower:
        # what rank 0 paid to start says whether the others may simply still have been starting.
        causes.insert(0, f"they were still starting: rank 0 itself took {own_start:.1f} s of the {bound:g} s bound "
                         "to start (python, import torch), and a node with a colder cache or a slower filesystem "
                         "takes longer")
    if not master_local:
        # The launch step named MASTER_ADDR with its fix; the missing ranks are its consequence,
        # not a second problem with a second fix.
        return fail(summary + f": they look for the rendezvous at MASTER_ADDR={e.addr}, which is not rank 0's host "
                    "(see nccl-test.launch)", subject=compare.rank_ranges(missing),
                    evidence={"missing_ranks": missing, "hosts_without_ranks": never,
                              "arrived_hosts": sorted(h for h in arrived_hosts if h)})
    fix = [Fix((f"timeout 5 bash -c '</dev/tcp/{e.addr}/{e.port}' && echo reachable",),
               comment="on a host of a missing rank, while the test runs:")]
    if slow_start:
        fix.insert(0, Fix(comment=f"if they were still starting, run the test again with a longer bound: "
                                  f"--timeout {math.ceil(max(2 * bound, bound + 2 * own_start))}"))
    # Rank 0 arrived, so its own node is where a firewall that drops inbound traffic sits when
    # the others time out (they say so on their stderr: 'connection timed out'): let the
    # cluster network in there, ahead of the drop rule (`nft add rule` would append after it).
    rank0 = next((f for f in fps if f.get("rank") == 0), None)
    node = str((rank0.get("slurm") or {}).get("node") or rank0.get("host") or "") if rank0 else ""
    if node and network and remote.plain(network) and not ipaddress.ip_network(network, strict=False).is_loopback:
        fix += [Fix(comment=f"it times out: rank 0's node {node} drops inbound connections; let the cluster "
                            "network in there:"),
                fixes.firewall_allow_from(node, [network])]
    return fail(summary, subject=compare.rank_ranges(missing), explanation="Likely causes: " + "; ".join(causes),
                fix=fix, evidence={"missing_ranks": missing, "hosts_without_ranks": never,
                                   "arrived_hosts": sorted(h for h in arrived_hosts if h)})


def tampered_finding(seen: Sequence[str]) -> Finding:
    """Values rank 0 had to ignore after the roll (a rank's results overwritten, garbage)."""
    n = len(seen)
    were = "were" if n > 1 else "was"
    return fail(f"{n} value{'s' if n > 1 else ''} on the rendezvous {were} not this job's and {were} ignored: "
                + "; ".join(seen[:4]), subject="rendezvous",
                explanation="something other than this job's ranks wrote to the store (another job on the "
                "same port, or a stranger); the rank is reported as silent",
                fix="export MASTER_PORT=$((20000 + RANDOM % 10000))   # before launching: a port no other job uses",
                evidence={"rejected": list(seen[:16])})


def rendezvous_trouble(roll: store_mod.Roll, world: int, source: str) -> list[Finding]:
    """What the roll shows besides missing ranks: two processes on one rank, ranks of another
    world size, lines that are not this job's."""
    out = []

    def who(fp: dict[str, Any]) -> str:
        return f"{fp.get('host')} pid {fp.get('pid')}"

    for rank, claimants in sorted(roll.duplicates.items()):
        out.append(fail(f"rank {rank} is claimed by {len(claimants)} processes: "
                        + ", ".join(who(f) for f in claimants), subject=str(rank),
                        explanation="two processes started with the same rank (a launcher run twice, or RANK set "
                        "by hand): the collectives would mix their data or hang",
                        fix="pgrep -af 'distdoctor nccl-test'   # on those hosts: stop the extra process",
                        evidence={"rank": rank, "claimants": [{"host": f.get("host"), "pid": f.get("pid")}
                                                              for f in claimants]}))
    if roll.other_world:
        sizes = sorted({f["world_size"] for f in roll.other_world})
        out.append(fail(f"{len(roll.other_world)} process{'es' if len(roll.other_world) > 1 else ''} of this job "
                        f"think{'' if len(roll.other_world) > 1 else 's'} the world size is "
                        f"{', '.join(map(str, sizes))}, not {world}: "
                        + ", ".join(f"rank {f['rank']} ({who(f)}, world {f['world_size']})"
                                    for f in roll.other_world[:8]),
                        subject="world_size",
                        explanation=f"rank 0 has world size {world} from {source}; every rank must be started "
                        "with the same one, or the rendezvous waits for ranks that never come",
                        fix="echo $WORLD_SIZE $SLURM_NTASKS $OMPI_COMM_WORLD_SIZE   # on those ranks: the launch "
                            "must give every rank the same world size",
                        evidence={"ranks": [{"rank": f["rank"], "world_size": f["world_size"], "host": f.get("host"),
                                             "pid": f.get("pid")} for f in roll.other_world]}))
    if roll.foreign:
        hints = "; ".join(", ".join(f"{k} {v}" for k, v in h.items()) for h in roll.foreign_hints[:4])
        out.append(fail(f"{len(roll.foreign)} value{'s' if len(roll.foreign) > 1 else ''} on the rendezvous did "
                        f"not come from this job: {roll.foreign[0]}" + (f" (unverified: {hints})" if hints else ""),
                        subject="rendezvous",
                        explanation="another job uses the same MASTER_ADDR:MASTER_PORT, or something else wrote to "
                        "the store; its data was ignored",
                        fix="export MASTER_PORT=$((20000 + RANDOM % 10000))   # before launching: a port no other job uses",
                        evidence={"rejected": roll.foreign[:16], "claims": roll.foreign_hints[:16]}))
    return out
