"""A SIMULATION of nccl-test at scale, in one process: the logic, not the network.

Thousands of ranks cannot be started on a test machine. This runs the real protocol and
policy code (`aggregate` for the store traffic, `compare` for the fingerprints, `plan` for the
mesh, `localise` for the verdicts)
for every rank of a simulated job, against:

- `SimStore`: a key-value store like torch's TCPStore that counts each rank's messages and bytes;
  a `Get` of a key nobody writes times out (leaders waiting for their ranks first, then rank 0
  waiting for hosts, then ranks waiting for rank 0, in the order of their deadlines);
- `Fabric`: per-host speed, dead hosts, dropped or slow directed links, from which simulated
  probes (one direction) and pair tests (both directions, like a two-host all_reduce) answer.

Used by tests/integration/nccltest/test_simulate.py and bench/nccltest_scale.py. Nothing here is a
measurement of a real network.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from distdoctor.model import Finding, Status
from distdoctor.nccltest import aggregate, localise, plan
from distdoctor.nccltest.aggregate import Add, Get, Set
from distdoctor.nccltest.compare import compare as compare_fingerprints

HEALTHY_GBS = 0.48


class SimStore:
    """The store's data plus a count of what each rank asked of it."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.messages: dict[int, int] = defaultdict(int)
        self.bytes: dict[int, int] = defaultdict(int)
        self.timeouts = 0

    def apply(self, rank: int, op: Any) -> tuple[bool, Any]:
        """(done, reply); done is False for a Get of a key not yet written."""
        if isinstance(op, Set):
            self.messages[rank] += 1
            self.bytes[rank] += len(op.key) + len(op.value)
            self.data[op.key] = op.value
            return True, None
        if isinstance(op, Add):
            self.messages[rank] += 1
            self.bytes[rank] += len(op.key) + 8
            value = int(self.data.get(op.key, "0")) + op.amount
            self.data[op.key] = str(value)
            return True, value
        if op.key in self.data:
            self.messages[rank] += 1
            self.bytes[rank] += len(op.key) + len(self.data[op.key])
            return True, self.data[op.key]
        return False, None


def run(programs: Mapping[int, aggregate.Protocol], store: SimStore) -> dict[int, Any]:
    """Run every rank's protocol to the end, each until it blocks on a key, then the next.
    When every rank is blocked, the earliest deadline passes (`_tier`). Returns each rank's result."""
    ready: deque[tuple[int, Any]] = deque((r, None) for r in programs)
    waiting: dict[str, list[int]] = defaultdict(list)
    results: dict[int, Any] = {}
    while ready or waiting:
        if not ready:
            store.timeouts += 1
            tier = min(_tier(k) for k in waiting)
            for key in [k for k in waiting if _tier(k) == tier]:
                for r in waiting.pop(key):
                    store.messages[r] += 1  # the wait itself went to the store
                    ready.append((r, None))
            continue
        rank, reply = ready.popleft()
        gen = programs[rank]
        try:
            op = gen.send(reply)
            while True:
                done, reply = store.apply(rank, op)
                if not done:
                    waiting[op.key].append(rank)
                    break
                if isinstance(op, Set) and op.key in waiting:
                    for r in waiting.pop(op.key):
                        store.apply(r, Get(op.key))
                        ready.append((r, op.value))
                op = gen.send(reply)
        except StopIteration as end:
            results[rank] = end.value
    return results


def _tier(key: str) -> int:
    """Which waits give up first: a leader waiting for its host's ranks, then rank 0 waiting
    for hosts, then everyone waiting for rank 0 (their bound is the whole phase)."""
    return 0 if key.startswith("fp/") else 1 if key.startswith("host/") else 2


@dataclass
class Fabric:
    """A simulated network of hosts 0..n-1: what a probe or pair test between them would see."""

    n_hosts: int
    speed: dict[int, float] = field(default_factory=dict)           # host -> GB/s (default healthy)
    dead: set[int] = field(default_factory=set)                     # hosts that answer nothing
    dropped: set[tuple[int, int]] = field(default_factory=set)      # directed links that drop
    slow_links: dict[tuple[int, int], float] = field(default_factory=dict)  # directed link -> GB/s
    seed: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def probe(self, s: int, d: int) -> float | None:
        """One direction, s sends to d: GB/s, or None when it fails."""
        if s in self.dead or d in self.dead or (s, d) in self.dropped:
            return None
        rate = min(self.speed.get(s, HEALTHY_GBS), self.speed.get(d, HEALTHY_GBS),
                   self.slow_links.get((s, d), math.inf))
        return rate * (1 + self._rng.uniform(-0.05, 0.05))

    def pair_test(self, i: int, j: int) -> tuple[bool, float | None]:
        """Both directions at once, as a two-host all_reduce."""
        there, back = self.probe(i, j), self.probe(j, i)
        if there is None or back is None:
            return False, None
        return True, min(there, back)


def hostname(h: int) -> str:
    return f"node{h:05d}"


def fingerprint(rank: int, host: int, nccl: str = "2.21.5") -> dict[str, Any]:
    return {"rank": rank, "host": hostname(host), "address": f"10.{host // 250}.{host % 250}.1",
            "torch.version": "2.13.0", "nccl.version": nccl, "torch.cuda": "12.4", "gpu.driver": "550.54.15"}


@dataclass
class Outcome:
    n_hosts: int
    ranks_per_host: int
    messages: dict[int, int]
    bytes: dict[int, int]
    missing: list[int]
    hosts_seen: int
    mesh_pairs: int
    mesh_rounds: int
    plan_seconds: float
    fingerprint_findings: list[Finding]
    compare_seconds: float
    mesh_culprits: list[localise.Culprit]
    localise_rounds: int
    localise_named_at: int | None     # the first round after which the search named its final culprits
    localise_culprits: list[localise.Culprit]
    verdict: dict[int, Any]
    seconds: float

    def per_rank(self, ranks: Iterable[int] | None = None) -> tuple[int, float]:
        """(max, median) messages over `ranks` (default: all)."""
        values = [self.messages.get(r, 0) for r in (ranks if ranks is not None else self.messages)]
        return max(values), statistics.median(values)


def simulate(n_hosts: int, ranks_per_host: int, fabric: Fabric | None = None, absent: Iterable[int] = (),
             mode: str = "auto", seed: int = 0, localise_budget: int = 10, odd_nccl: Iterable[int] = ()) -> Outcome:
    """The rendezvous, fingerprint aggregation and comparison, mesh plan, mesh and verdict for a
    job of n_hosts x ranks_per_host ranks (ranks in blocks per host, as Slurm places them), then
    the localisation search over the same fabric. `absent` ranks never start; hosts in
    `odd_nccl` report another NCCL version."""
    started = time.perf_counter()
    fabric = fabric or Fabric(n_hosts, seed=seed)
    world = n_hosts * ranks_per_host
    absent = set(absent)
    odd = set(odd_nccl)
    store = SimStore()
    shared: dict[str, Any] = {}

    def program(rank: int) -> aggregate.Protocol:
        h = rank // ranks_per_host
        fp = fingerprint(rank, h, "2.18.1" if h in odd else "2.21.5")
        key = aggregate.host_key(fp["host"], fp["address"])
        role = yield from aggregate.gather(rank, world, key, fp, ranks_per_host)
        per_host = None
        n_seen = 0
        if rank == 0:
            # The job's host order (NCCL's ring when ranks are in blocks): by lowest rank.
            summaries = sorted(role.summaries, key=lambda s: min(s["ranks"]))
            position = {s["host"]: p for p, s in enumerate(summaries)}
            index_of = {s["host"]: i for i, s in enumerate(role.summaries)}
            n_seen = len(summaries)
            t0 = time.perf_counter()
            shared["findings"] = compare_fingerprints([fp for s in summaries for fp in s["fps"]])
            shared["compare_seconds"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            pairs = plan.mesh_pairs(n_seen, mode, seed=seed)
            rounds = plan.schedule(pairs, max(1, n_seen // 2))
            shared["plan_seconds"] = time.perf_counter() - t0
            shared.update(pairs=len(pairs), rounds=len(rounds), summaries=summaries, missing=role.missing)
            targets: dict[int, list[list[Any]]] = defaultdict(list)
            for s, d in pairs:
                targets[s].append([d, summaries[d]["fps"][0]["address"]])
            per_host = {index_of[s["host"]]: {"me": position[s["host"]], "targets": targets.get(p, [])}
                        for p, s in enumerate(summaries)}
        mine = yield from aggregate.scatter("mplan", role, rank, per_host)
        row = None
        if role.leader and mine is not None:
            me = int(mine["me"])
            row = {"me": me, "rates": {str(d): fabric.probe(h, _host_of_address(addr)) for d, addr in mine["targets"]}}
        rows = yield from aggregate.collect("mrow", role, rank, row, len(role.summaries))
        verdict = None
        if rank == 0:
            summaries = shared["summaries"]
            names = [s["fps"][0]["host"] for s in summaries]
            samples: dict[tuple[str, str], float | None] = {}
            for value in rows.values():
                if value is None:
                    continue
                for d, rate in value["rates"].items():
                    samples[(names[int(value["me"])], names[int(d)])] = rate
            shared["mesh"] = localise.host_and_link_outliers(
                samples, ranks_of={s["fps"][0]["host"]: s["ranks"] for s in summaries})
            clash = any(f.status == Status.FAIL for f in shared["findings"])
            verdict = {"go": not shared["mesh"] and not role.missing and not clash, "missing": role.missing}
        return (yield from aggregate.announce(rank, verdict))

    programs = {r: program(r) for r in range(world) if r not in absent}
    verdicts = run(programs, store)

    loc = localise.Localiser([hostname(h) for h in range(n_hosts)], seed=seed, max_rounds=localise_budget)
    named_at = None
    final: list[tuple[str, tuple[str, ...]]] | None = None
    history: list[list[tuple[str, tuple[str, ...]]]] = []
    while (pairs := loc.next_round()) is not None:
        for i, j in pairs:
            loc.record((i, j), *fabric.pair_test(i, j))
        history.append([(c.kind, c.hosts) for c in loc.culprits() if c.kind != localise.UNKNOWN])
    culprits = loc.culprits()
    final = [(c.kind, c.hosts) for c in culprits if c.kind != localise.UNKNOWN]
    if final:
        named_at = next(k + 1 for k in range(len(history)) if all(h == final for h in history[k:]))
    return Outcome(n_hosts, ranks_per_host, dict(store.messages), dict(store.bytes), shared.get("missing", []),
                   len(shared.get("summaries", [])), shared.get("pairs", 0), shared.get("rounds", 0),
                   shared.get("plan_seconds", 0.0), shared.get("findings", []), shared.get("compare_seconds", 0.0),
                   shared.get("mesh", []), loc.rounds, named_at, culprits,
                   verdicts, time.perf_counter() - started)


def _host_of_address(address: str) -> int:
    _, a, b, _ = address.split(".")
    return int(a) * 250 + int(b)
