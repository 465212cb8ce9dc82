"""The localisation phase: rounds of disjoint host pairs, run live.

When the job-wide all_reduce fails, or `--localise` asks for it, rank 0 drives a
`localise.Localiser` over the hosts: each round is a set of disjoint host pairs, and in each
pair both host leaders send the other a timed transfer (8 MiB, the mesh's bench size) through
the mesh listeners they already run. Rank 0 writes one key per leader per round (its targets,
or none, or "done") and reads one result key per busy leader; a leader reads one key per round
and writes one, so a leader's store traffic is bounded by the rounds (at most MAX_ROUNDS), not
by the number of hosts.

The Localiser starts from what the mesh measured (each pair's two directions), so the rounds
go where the mesh left doubt. Pure helpers here; the store calls are in lead.py / follow.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from distdoctor.api import ok
from distdoctor.model import Finding
from distdoctor.nccltest import hostmesh, localise

MAX_ROUNDS = 8
# Time kept back from the collectives for the rounds when localisation may run: a hung
# all_reduce would otherwise use the whole bound.
RESERVE_SHARE = 0.3
RESERVE_MAX_S = 20.0
MIN_HOSTS = 3  # with two hosts a pair test cannot tell a host from the link between them


def reserve(timeout: float, n_hosts: int, mesh_on: bool) -> float:
    """Seconds the collectives leave for the rounds (0: localisation cannot run)."""
    if not mesh_on or n_hosts < MIN_HOSTS:
        return 0.0
    return min(RESERVE_MAX_S, RESERVE_SHARE * timeout)


def round_seconds(probe_timeout: float) -> float:
    """The most one round may take: a handshake and an 8 MiB transfer each way, with slack."""
    return 3 * probe_timeout + 1.0


def probe_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The mesh plan as a round's probes use it (mesh.probe_row): the bench-size transfer and a
    budget that ends within the round. Rank 0 and the leaders derive the same from the plan."""
    return {**plan, "nbytes": hostmesh.BENCH_TRANSFER_BYTES, "budget": round_seconds(plan["probe_timeout"]) - 0.5}


def pair_result(forward: Mapping[str, Any] | None,
                backward: Mapping[str, Any] | None) -> tuple[bool, float | None, float | None]:
    """(passed, speed as judged, speed as measured) of a pair test from its two directed probes.
    It passes when both directions moved their bytes; its speed is the slower direction's,
    judged as the mesh judges rates (floored at the noise floor, so a copy that took 1 ms is not
    'faster' than one that took 5)."""
    probes = [p for p in (forward, backward) if p is not None]
    if len(probes) < 2 or any(p.get("status") != "ok" or not p.get("moved") for p in probes):
        return False, None, None
    return (True, min(hostmesh.judged_rate(p) for p in probes),
            min(float(p.get("rate_gbs") or 0.0) for p in probes))


def seed(loc: localise.Localiser, probes: Mapping[tuple[int, int], Mapping[str, Any]]) -> None:
    """Give the Localiser the host pairs the mesh found blocked or stalled (either way): the
    rounds start around them. Speeds are measured again by the rounds, with bigger transfers."""
    for (s, d), probe in probes.items():
        back = probes.get((d, s))
        if probe.get("status") != "ok" and (s < d or back is None or back.get("status") == "ok"):
            loc.record((s, d), False)


def targets(pairs: Sequence[tuple[int, int]]) -> dict[int, int]:
    """host index -> the partner it sends to this round (both ends of every pair send)."""
    out: dict[int, int] = {}
    for a, b in pairs:
        out[a] = b
        out[b] = a
    return out


def findings(loc: localise.Localiser, hmap: hostmesh.HostMap, rounds: int, why: str) -> list[Finding]:
    ranks_of = {hmap.hosts[i]: hmap.ranks[i] for i in range(len(hmap.hosts))}
    culprits = loc.culprits(ranks_of)
    if culprits:
        return [localise.to_finding(c) for c in culprits]
    return [ok(f"{rounds} round{'s' if rounds != 1 else ''} of host-pair tests ({why}): every pair of "
               f"{len(hmap.hosts)} hosts tested passed at a similar speed; no host or link is singled out",
               explanation="the fault is not in the network between hosts as TCP sees it: look at the "
                           "collective's own transport (NCCL_DEBUG=INFO, the interfaces and transports it chose)")]
