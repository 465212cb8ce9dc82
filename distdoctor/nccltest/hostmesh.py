"""The mesh between hosts: which ranks share a host, who probes whom, and what the probes say.

One prober per host (the host's lowest rank, its leader) connects to the other hosts' leaders
and times a mid-size transfer to each: ranks on one host share its network, so probing rank
by rank would only multiply the connections (512 hosts x 8 GPUs would be 16.7 million).
Pure functions: the sockets are in mesh.py, the store traffic in lead.py and follow.py.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from distdoctor import fixes, remote
from distdoctor.netif import SHAPING_QDISCS
from distdoctor.api import Fix, fail, ok, warn
from distdoctor.model import Finding
from distdoctor.text import rank_ranges

FULL_MESH_UP_TO = 32
# The timed transfer of each probe: big enough to need full-size packets and to show a rate
# limit, small enough to cost milliseconds per pair on a healthy network.
TRANSFER_BYTES = 1 << 20
BENCH_TRANSFER_BYTES = 8 << 20
# A host or link is slow below this share of the median rate (the example: 0.005 GB/s
# against a 0.48 GB/s median is 1 %).
SLOW_FACTOR = 0.5
# Transfers that took less than this are latency, not bandwidth: on an idle LAN a 1 MiB copy
# takes well under a millisecond and the scheduler's jitter alone can halve the rate.
NOISE_FLOOR_S = 0.02
_STALL_CAUSES = (("an MTU mismatch along the path (jumbo frames on one side or switch, 1500 on another: "
                  "small packets pass, full-size ones are dropped)"),
                 "a NIC offload bug (TSO/GSO/checksum offload; try `ethtool -K <interface> tso off gso off`)",
                 "a firewall or middlebox that drops large segments")


@dataclass(frozen=True)
class HostMap:
    """hosts[i] is a label; ranks[i] its ranks, ascending; the leader is ranks[i][0]."""

    hosts: list[str]
    ranks: list[list[int]]
    addresses: list[str]
    # Each host's interface toward rank 0 and its MTU ("" and 0 when unknown), for the MTU fix.
    interfaces: list[str] = field(default_factory=list)
    mtus: list[int] = field(default_factory=list)
    qdiscs: list[str] = field(default_factory=list)  # each interface's root qdisc ("" when unknown)

    def leader(self, index: int) -> int:
        return self.ranks[index][0]

    def index_of_rank(self) -> dict[int, int]:
        return {r: i for i, rs in enumerate(self.ranks) for r in rs}

    def label(self, index: int) -> str:
        ranks = self.ranks[index]
        span = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_ranges(ranks)}"
        return f"{self.hosts[index]} ({span})"


def per_rank(fps: Sequence[Mapping[str, Any]]) -> HostMap:
    """Every rank on its own, for `--mesh` on one host: ranks probe each other."""
    ordered = sorted(fps, key=lambda f: f["rank"])
    return HostMap([str(f.get("host") or "?") for f in ordered], [[int(f["rank"])] for f in ordered],
                   [str(f.get("address") or "") for f in ordered])


def group(fps: Sequence[Mapping[str, Any]]) -> HostMap:
    """Ranks grouped by host. A host is its hostname and the address its ranks talk from: two
    machines that claim one hostname (cloned images, UTS namespaces) are still two hosts."""
    keys: dict[tuple[str, str], list[int]] = {}
    for fp in sorted(fps, key=lambda f: f["rank"]):
        keys.setdefault((str(fp.get("host") or "?"), str(fp.get("address") or "")), []).append(int(fp["rank"]))
    names: dict[str, int] = {}
    for name, _addr in keys:
        names[name] = names.get(name, 0) + 1
    by_rank = {int(fp["rank"]): fp for fp in fps}
    hosts, ranks, addresses, interfaces, mtus, qdiscs = [], [], [], [], [], []
    for (name, addr), rs in keys.items():
        hosts.append(name if names[name] == 1 else f"{name}[{addr or '?'}]")
        ranks.append(rs)
        addresses.append(addr)
        first = by_rank[rs[0]]
        interfaces.append(str(first.get("interface") or ""))
        mtus.append(int(first.get("mtu") or 0) if str(first.get("mtu") or "").isdigit() else 0)
        qdiscs.append(str(first.get("qdisc") or ""))
    return HostMap(hosts, ranks, addresses, interfaces, mtus, qdiscs)


def mesh_pairs(n_hosts: int, mode: str = "auto", threshold: int = FULL_MESH_UP_TO,
               seed: int = 0) -> list[tuple[int, int]]:
    """Directed (sender, receiver) host pairs: every ordered pair up to the threshold or with
    mode 'full'; above it the planner's pairs (plan.mesh_pairs when present)."""
    try:
        from distdoctor.nccltest import plan  # type: ignore[attr-defined]
    except ImportError:
        plan = None
    if plan is not None:
        return plan.mesh_pairs(n_hosts, mode, threshold, seed)
    if mode == "full" or n_hosts <= threshold:
        return [(s, d) for s in range(n_hosts) for d in range(n_hosts) if s != d]
    # Every host sends to and receives from its ring neighbours, plus one random partner.
    rng = random.Random(seed)
    pairs = set()
    for s in range(n_hosts):
        pairs.add((s, (s + 1) % n_hosts))
        pairs.add(((s + 1) % n_hosts, s))
        d = rng.randrange(n_hosts - 1)
        pairs.add((s, d if d < s else d + 1))
    return sorted(pairs)


def targets(pairs: Sequence[tuple[int, int]], n_hosts: int) -> dict[int, list[int]]:
    """Each sender's receivers, in the order that keeps receivers apart: sender s first sends to
    s+1, then s+2, ... so that, with every sender starting together, no receiver gets two
    transfers at once in a full mesh (the same shift in a sparse plan)."""
    out: dict[int, list[int]] = {}
    for s, d in pairs:
        out.setdefault(s, []).append(d)
    for s, ds in out.items():
        ds.sort(key=lambda d: (d - s) % n_hosts)
    return out


@dataclass
class Verdict:
    blocked: list[tuple[int, int, str]] = field(default_factory=list)  # no connection
    stalled: list[tuple[int, int, int]] = field(default_factory=list)  # handshake ok, transfer stuck: moved
    paths: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)  # stalled pair: mesh.path_mtu()
    carried: set[int] = field(default_factory=set)  # hosts with a timed transfer that went through
    # host, {"sending"|"receiving": median rate of its pairs that way}, median of all pairs
    slow_hosts: list[tuple[int, dict[str, float], float]] = field(default_factory=list)
    slow_links: list[tuple[int, int, float, float]] = field(default_factory=list)  # s, d, rate, median
    median_gbs: float = 0.0
    measured: int = 0
    silent: list[int] = field(default_factory=list)  # hosts whose leader never reported


def judge(n_hosts: int, results: Mapping[tuple[int, int], Mapping[str, Any]], silent: Sequence[int] = (),
          factor: float = SLOW_FACTOR) -> Verdict:
    """What the probes say. A host is slow when the median rate of what it sends (or receives) is
    below factor x the median of all pairs; a link is slow when its rate is that low and neither
    end is a slow host (that host explains it already)."""
    verdict = Verdict(silent=sorted(silent))
    rates: dict[tuple[int, int], float] = {}  # as judged: floored at the noise floor
    real: dict[tuple[int, int], float] = {}  # as measured, for the report
    for (s, d), probe in sorted(results.items()):
        status = probe.get("status")
        if status == "ok":
            if probe.get("moved"):
                verdict.carried.update((s, d))
                rates[(s, d)] = judged_rate(probe)
                real[(s, d)] = float(probe.get("rate_gbs") or 0.0)
        elif status == "stalled":
            verdict.stalled.append((s, d, int(probe.get("moved") or 0)))
            if isinstance(probe.get("path"), Mapping):
                verdict.paths[(s, d)] = dict(probe["path"])
        else:
            verdict.blocked.append((s, d, str(status)))
    verdict.measured = len(rates)
    if len(rates) < 3:
        return verdict
    median = statistics.median(rates.values())
    shown = statistics.median(real.values())
    verdict.median_gbs = shown
    if median <= 0:
        return verdict
    slow = set()
    for h in range(n_hosts):
        directions = {}
        for direction, end in (("sending", 0), ("receiving", 1)):
            mine = [pair for pair in rates if pair[end] == h]
            if mine and statistics.median(rates[p] for p in mine) < factor * median:
                directions[direction] = statistics.median(real[p] for p in mine)
        if directions:
            verdict.slow_hosts.append((h, directions, shown))
            slow.add(h)
    for pair, rate in sorted(rates.items()):
        if rate < factor * median and pair[0] not in slow and pair[1] not in slow:
            verdict.slow_links.append((pair[0], pair[1], real[pair], shown))
    return verdict


def judged_rate(probe: Mapping[str, Any]) -> float:
    """The rate as judged: a transfer faster than the noise floor counts as the floor's rate, so
    a link is not slow because one copy finished in 1 ms and another in 5."""
    rate = float(probe.get("rate_gbs") or 0.0)
    seconds = float(probe.get("seconds") or 0.0)
    moved = int(probe.get("moved") or 0)
    if 0 < seconds < NOISE_FLOOR_S and moved:
        return min(rate, moved / NOISE_FLOOR_S / 1e9)
    return rate


def stall_causes() -> tuple[str, ...]:
    return _STALL_CAUSES


def human_bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}" if n % size else f"{n // size} {unit}"
    return f"{n} B"


def firewall_fix(pairs: Sequence[tuple[int, int, str]], hosts: Mapping[int, str],
                 addresses: Mapping[int, str]) -> str:
    """firewall_fixes, printed."""
    return remote.render_all(firewall_fixes(pairs, hosts, addresses))


def firewall_fixes(pairs: Sequence[tuple[int, int, str]], hosts: Mapping[int, str],
                   addresses: Mapping[int, str]) -> list[Fix]:
    """One nft rule per listening host whose connections fail: the rule goes on that node, and
    is inserted at the top of its input chain (`nft add rule` would append it after the drop
    rule that causes the failure, and change nothing)."""
    sources: dict[str, list[str]] = {}
    for src, dst, _status in pairs:
        address = addresses.get(src) or ""
        if remote.plain(address) and hosts.get(dst):
            found = sources.setdefault(hosts[dst], [])
            if address not in found:
                found.append(address)
    return [fixes.firewall_allow_from(host, addrs) for host, addrs in sorted(sources.items())]


def findings(hmap: HostMap, verdict: Verdict, n_pairs: int, nbytes: int, unit: str = "host") -> list[Finding]:
    """The mesh check's findings. Blocked pairs keep the rank-to-rank form "0(a)->1(b): timeout"
    with each host's leader rank, so one rank per host reads as before."""
    out: list[Finding] = []

    def end(i: int) -> str:
        return f"{hmap.leader(i)}({hmap.hosts[i]})"

    # A host that advertises a loopback address (its name resolves to 127.x) is unreachable for
    # that reason: a firewall rule for it would be a wrong remedy. Said once, with the hosts.
    looped = sorted({d for _s, d, _st in verdict.blocked if _loopback(hmap.addresses[d])})
    if looped:
        names = ", ".join(f"{hmap.label(d)} at {hmap.addresses[d]}" for d in looped)
        out.append(fail(
            f"the other hosts cannot connect to {names}: a loopback address, where each connects to itself",
            subject=", ".join(hmap.hosts[d] for d in looped),
            explanation="the host's name resolves to the loopback there (Debian's `127.0.1.1 <hostname>` line in "
            "/etc/hosts), so it advertises 127.x; nccl-test.init names the line and gives the fix for that node",
            fix=Fix(comment=f"map {', '.join(hmap.hosts[d] for d in looped)} to the cluster address in /etc/hosts "
                            "on that node (the fix under nccl-test.init)"),
            evidence={"loopback": {hmap.hosts[d]: hmap.addresses[d] for d in looped}}))
    blocked = [(s, d, st) for s, d, st in verdict.blocked if d not in looped]
    if blocked:
        verdict = dataclasses.replace(verdict, blocked=blocked)
        shown = "; ".join(f"{end(s)}->{end(d)}: {st}" for s, d, st in verdict.blocked[:8])
        more = f" and {len(verdict.blocked) - 8} more" if len(verdict.blocked) > 8 else ""
        out.append(fail(
            f"{len(verdict.blocked)} of {n_pairs} {unit}-to-{unit} connections fail: {shown}{more}", subject="mesh",
            explanation="NCCL and gloo open connections between every pair of ranks on random ports "
            "(the rendezvous port alone is not enough); a pair that cannot connect hangs the first collective. "
            "'timeout' means packets are dropped (a firewall DROP rule), 'refused' that something rejects them, "
            "'no route' that nobody answers for the address (ARP gets no reply)",
            fix=[Fix(comment="on each listening node, let its peers in ahead of the drop rule (or open the cloud "
                             "security group):"),
                 *(firewall_fixes(verdict.blocked, dict(enumerate(hmap.hosts)), dict(enumerate(hmap.addresses)))
                   or ["nft list ruleset   # on the nodes that drop the connections"]),
                 Fix(comment="or choose an interface every pair can reach: export NCCL_SOCKET_IFNAME=IFACE")],
            evidence={"blocked": [[hmap.leader(s), hmap.leader(d), st] for s, d, st in verdict.blocked]}))
    measured_pairs: set[frozenset[int]] = set()
    for s, d, moved in verdict.stalled:
        if frozenset((s, d)) in measured_pairs:
            continue  # the other direction of a pair already measured: one finding, one fix
        shaped = shaper_finding(hmap, s, d, moved, nbytes)
        if shaped is not None:
            measured_pairs.add(frozenset((s, d)))
            out.append(shaped)
            continue
        measured = mtu_finding(hmap, s, d, moved, nbytes, verdict.paths.get((s, d)) or {}, verdict.carried)
        if measured is not None:
            measured_pairs.add(frozenset((s, d)))
            out.append(measured)
            continue
        out.append(fail(
            f"{hmap.label(s)} -> {hmap.label(d)}: small messages pass, a {human_bytes(nbytes)} transfer stalled "
            f"after {human_bytes(moved)} left the sender", subject=f"{hmap.hosts[s]}->{hmap.hosts[d]}",
            explanation="the connection and its handshake worked, so the path is open; full-size packets are lost. "
            "Likely causes: " + "; ".join(_STALL_CAUSES),
            fix=[Fix(comment="compare the MTU of the interfaces at both ends:"),
                 Fix(("ip link show",), [hmap.hosts[s], hmap.hosts[d]]),
                 Fix(comment=f"from {hmap.hosts[s]}, 1500-byte frames to {hmap.hosts[d]} without fragmenting:"),
                 _from(hmap, s, d, "ping -c 3 -M do -s 1472 {}")],
            evidence={"from": hmap.hosts[s], "to": hmap.hosts[d], "bytes": nbytes, "moved": moved}))
    for h, directions, median in verdict.slow_hosts:
        rate = min(directions.values())
        severe = rate < 0.1 * median
        out.append((fail if severe else warn)(
            f"{hmap.hosts[h]} is slow: {rate:.3g} GB/s vs median {median:.3g} GB/s on pairs with "
            f"{hmap.hosts[h]} ({' and '.join(directions)}; ranks {rank_ranges(hmap.ranks[h])})",
            subject=hmap.hosts[h],
            explanation="every rank on this host waits on its network: a collective runs at the pace of its "
            "slowest link. Likely causes: a link negotiated at a lower speed, a rate limit or traffic shaping "
            "on the interface, a congested or faulty port",
            fix=[Fix(comment=f"the speed and duplex each interface of {hmap.hosts[h]} negotiated, and any rate "
                             "limit on it:"),
                 Fix(("grep -H . /sys/class/net/*/speed /sys/class/net/*/duplex",), [hmap.hosts[h]]),
                 Fix(("tc qdisc show",), [hmap.hosts[h]])],
            evidence={"host": hmap.hosts[h], "rates_gbs": directions, "median_gbs": median,
                      "ranks": hmap.ranks[h]}))
    for s, d, rate, median in verdict.slow_links:
        severe = rate < 0.1 * median
        out.append((fail if severe else warn)(
            f"the link {hmap.hosts[s]} -> {hmap.hosts[d]} is slow: {rate:.3g} GB/s vs median {median:.3g} GB/s",
            subject=f"{hmap.hosts[s]}->{hmap.hosts[d]}",
            explanation="both hosts are fast with their other partners: the path between them is the problem "
            "(a switch port, a cable, a route through a slower network)",
            fix=[Fix(comment=f"the path from {hmap.hosts[s]} to {hmap.hosts[d]} and its MTU:"),
                 _from(hmap, s, d, "tracepath {}")],
            evidence={"from": hmap.hosts[s], "to": hmap.hosts[d], "rate_gbs": rate, "median_gbs": median}))
    if verdict.silent:
        names = ", ".join(hmap.label(h) for h in verdict.silent)
        out.append(fail(f"no connection results from {names}", subject=", ".join(hmap.hosts[h] for h in
                                                                                 verdict.silent),
                        explanation="the host's prober (its lowest rank) did not publish its results in time: "
                        "it stopped, or its probes hung"))
    if not out:
        rate = f"; median {verdict.median_gbs:.3g} GB/s over {verdict.measured} timed transfers" \
            if verdict.measured else ""
        out.append(ok(f"all {n_pairs} {unit}-to-{unit} connections work{rate}"))
    return out


def nat_findings(hmap: HostMap, seen: Mapping[int, str], owned: Mapping[int, Sequence[str]] | None = None
                 ) -> list[Finding]:
    """Hosts whose probes reached this rank from another address than the one they advertise:
    they are behind NAT (a container on a bridge network, a NAT gateway), and what they advertise
    is not reachable from the other hosts. seen: leader rank -> the source address observed;
    owned: rank -> every address of its host."""
    out = []
    for i in range(len(hmap.hosts)):
        advertised, observed = hmap.addresses[i], seen.get(hmap.leader(i), "")
        try:
            a, o = ipaddress.ip_address(advertised.split("%")[0]), ipaddress.ip_address(observed.split("%")[0])
        except ValueError:
            continue
        if a == o or a.is_loopback or o.is_loopback or observed in (owned or {}).get(hmap.leader(i), ()):
            continue  # its own other address (several on one host) is not NAT
        host = hmap.hosts[i]
        out.append(fail(
            f"{hmap.label(i)} advertises {advertised} but its connections arrive from {observed}: it is behind NAT, "
            "and the other hosts cannot connect to the address it advertises", subject=host,
            explanation="a container on a bridge network (Docker's default) or a NAT gateway rewrites the source "
            "address of what the host sends; NCCL and gloo tell their peers the inside address, which nobody "
            "outside can reach. No NCCL_SOCKET_IFNAME can make it reachable: the host needs the host's network",
            fix=fixes.host_networking((host,)),
            evidence={"host": host, "advertised": advertised, "observed": observed}))
    return out


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def shaper_finding(hmap: HostMap, s: int, d: int, moved: int, nbytes: int) -> Finding | None:
    """A stalled pair one of whose ends sends through a shaper (a tbf rate limit, netem's delay
    and loss): that is the likely cause, not the MTU. None when neither end has one."""
    shaped = [i for i in (s, d) if i < len(hmap.qdiscs) and hmap.qdiscs[i] in SHAPING_QDISCS]
    if not shaped:
        return None
    said = "; ".join(f"{hmap.hosts[i]}'s {hmap.interfaces[i] or 'interface'} has a {hmap.qdiscs[i]} queueing "
                     f"discipline ({SHAPING_QDISCS[hmap.qdiscs[i]]})" for i in shaped)
    return fail(
        f"{hmap.label(s)} -> {hmap.label(d)}: a {human_bytes(nbytes)} transfer did not finish in time "
        f"({human_bytes(moved)} left the sender): {said}", subject=f"{hmap.hosts[s]}->{hmap.hosts[d]}",
        explanation="the connection works and bytes move, at the pace the shaper allows: every transfer of the "
        "job through that interface crawls or times out. A shaper on a training node's interface is almost "
        "always left over from a test or a misapplied policy",
        fix=[fixes.remove_shaper(hmap.interfaces[i] or "", [hmap.hosts[i]]) for i in shaped],
        evidence={"from": hmap.hosts[s], "to": hmap.hosts[d], "bytes": nbytes, "moved": moved,
                  "qdiscs": {hmap.hosts[i]: hmap.qdiscs[i] for i in shaped}})


def mtu_finding(hmap: HostMap, s: int, d: int, moved: int, nbytes: int, path: Mapping[str, Any],
                carried: set[int] | None = None) -> Finding | None:
    """A stalled pair whose path was measured: the largest packet the path carries, and which
    end must change. The path decides, not a majority or a name: an end whose interface MTU is
    above what the path carries sends frames the path drops, so that end comes down to it (or
    the hop is raised, which no command on the nodes can do). None when nothing was measured."""
    passes = int(path.get("passes") or 0)
    if not passes:
        return None
    fails = [int(x) for x in path.get("fails") or []]
    ends = [(i, hmap.interfaces[i] if i < len(hmap.interfaces) else "", hmap.mtus[i] if i < len(hmap.mtus) else 0)
            for i in (s, d)]
    known = ", ".join(f"{iface or '?'} mtu {mtu or '?'} on {hmap.hosts[i]}" for i, iface, mtu in ends)
    # An end whose full-size transfers with other hosts went through (carried) sends what its own
    # link carries: the other end is the one to change. With no such evidence (two hosts), both
    # ends above the path come down to it.
    above = [(i, iface, mtu) for i, iface, mtu in ends if mtu > passes]
    wrong = [e for e in above if e[0] not in (carried or set())] if len(above) > 1 else above
    records: list[Fix] = []
    for i, iface, mtu in wrong:
        if remote.plain(iface) and iface:
            records.append(fixes.mtu(iface, passes, [hmap.hosts[i]]))
        else:
            records.append(Fix((), (hmap.hosts[i],), f"set the MTU of its cluster interface to {passes}"))
    if not records:
        records += [_from(hmap, s, d, "tracepath -n {}"),
                    Fix(comment=f"both ends send at most {passes}: a hop between them drops what they send")]
    highest = max((m for _i, _f, m in ends), default=0)
    bigger = highest if highest > passes else min(fails) if fails else 0
    records.append(Fix(comment=f"or raise every switch port and hop between {hmap.hosts[s]} and {hmap.hosts[d]} "
                               f"to {bigger}, if they are meant to carry jumbo frames"))
    return fail(
        f"{hmap.label(s)} -> {hmap.label(d)}: the path carries packets of {passes} bytes"
        + (f", not {bigger}" if bigger else "") + f" ({known}): a {human_bytes(nbytes)} transfer stalled after "
        f"{human_bytes(moved)}", subject=f"{hmap.hosts[s]}->{hmap.hosts[d]}",
        explanation="small messages pass and full-size packets are dropped on the way without an error (a switch "
        "or bridge with a smaller MTU sends no 'fragmentation needed'), so TCP stalls after its handshake: "
        "the rendezvous works and the first large collective hangs. Measured with don't-fragment datagrams "
        "between the two hosts' probes; the ends whose MTU is above what the path carries must come down to it",
        fix=records,
        evidence={"from": hmap.hosts[s], "to": hmap.hosts[d], "bytes": nbytes, "moved": moved,
                  "path_mtu": passes, "fails": fails, "ends": {hmap.hosts[i]: {"interface": f, "mtu": m}
                                                               for i, f, m in ends}})


def _from(hmap: HostMap, s: int, d: int, command: str) -> Fix:
    """command run on host s, aimed at host d's address (or its name)."""
    return remote.toward_fix(hmap.hosts[s], command, hmap.addresses[d] or hmap.hosts[d])


def host_table(hmap: HostMap, results: Mapping[tuple[int, int], Mapping[str, Any]], nbytes: int = 0) -> dict[str, Any]:
    """H x H table, rows = sending host, columns = receiving host, cells the status (the rates
    are in the report's nccl_test.mesh.rates). With transfers planned (nbytes), a pair whose
    handshake passed but whose transfer the sender's time budget left out is 'ok, untimed':
    after a stall or two that used the budget, 'ok' would claim what nobody measured."""
    columns = ["from \\ to"] + [str(hmap.leader(i)) for i in range(len(hmap.hosts))]
    rows = []
    for s in range(len(hmap.hosts)):
        cells = []
        for d in range(len(hmap.hosts)):
            probe = results.get((s, d))
            if s == d:
                cells.append("-")
            elif probe is None:
                cells.append("?")
            elif nbytes > 0 and probe.get("status") == "ok" and not probe.get("moved"):
                cells.append("ok, untimed")
            else:
                cells.append(str(probe.get("status")))
        rows.append([f"{hmap.leader(s)} {hmap.hosts[s]}"] + cells)
    return {"columns": columns, "rows": rows}


def parse_row(data: Any) -> dict[int, dict[str, Any]] | None:
    """A leader's published row, or None when it is not one (a stranger's or a broken write)."""
    try:
        return {int(d): {"status": str(p["status"]), "rate_gbs": float(p.get("rate_gbs") or 0.0),
                         "seconds": float(p.get("seconds") or 0.0), "moved": int(p.get("moved") or 0)}
                for d, p in data.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
