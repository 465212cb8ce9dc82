"""Which pairs of hosts the mesh probes, and in which rounds.

Probing every ordered pair of hosts costs N(N-1) probes: fine for a few dozen hosts, hours at
thousands. Above a threshold the plan keeps the pairs a training job will actually use, plus a
few random ones so that every host is seen by several different partners:

- ring neighbours both ways (NCCL's ring over nodes);
- the parent links of NCCL's double binary tree, both ways (NVIDIA/nccl src/graph/trees.cc:
  tree 0 is the bit-trick binary tree over node indices, tree 1 its mirror for an even count of
  nodes or its shift by one for an odd count);
- `k` random rings (a seeded permutation, each host sends to the next one), which give every
  host k more partners as sender and as receiver, spread evenly.

Hosts are indices (the order of the job's hosts, which is NCCL's ring order when ranks are
placed in blocks). Pure: no I/O, deterministic for a given seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

Pair = tuple[int, int]

MODES = ("auto", "full")
RANDOM_RINGS = 2


def mesh_pairs(n_hosts: int, mode: str = "auto", threshold: int = 32, seed: int = 0) -> list[Pair]:
    """Directed (sender, receiver) host-index pairs to probe, without duplicates, sorted.

    "full": every ordered pair. "auto": every ordered pair up to `threshold` hosts; above it the
    ring, tree and random-ring pairs described in the module docstring (about 10 pairs per host,
    each host at least 4 times a sender and 4 times a receiver)."""
    if mode not in MODES:
        raise ValueError(f"mesh mode {mode!r} is not one of {', '.join(MODES)}")
    if n_hosts < 2:
        return []
    if mode == "full" or n_hosts <= threshold:
        return [(i, j) for i in range(n_hosts) for j in range(n_hosts) if i != j]
    pairs: set[Pair] = set()
    for i in range(n_hosts):
        _both(pairs, i, (i + 1) % n_hosts)
    for child, parent in tree_edges(n_hosts):
        _both(pairs, child, parent)
    rng = random.Random(seed)
    order = list(range(n_hosts))
    for _ in range(RANDOM_RINGS):
        rng.shuffle(order)
        _avoid(order, pairs, rng)
        for a, b in zip(order, order[1:] + order[:1]):
            pairs.add((a, b))
    return sorted(pairs)


def _avoid(order: list[int], pairs: set[Pair], rng: random.Random, passes: int = 20) -> None:
    """Swap hosts of a random ring until none of its steps is a pair the plan already has, so
    that each ring gives every host a new partner (bounded: a dense plan may keep a repeat)."""
    n = len(order)
    for _ in range(passes):
        clean = True
        for m in range(n):
            if (order[m], order[(m + 1) % n]) in pairs:
                clean = False
                t = rng.randrange(n)
                order[(m + 1) % n], order[t] = order[t], order[(m + 1) % n]
        if clean:
            return


def _both(pairs: set[Pair], a: int, b: int) -> None:
    if a != b:
        pairs.add((a, b))
        pairs.add((b, a))


def btree_parent(n: int, rank: int) -> int:
    """The parent of `rank` in NCCL's binary tree over n nodes rooted at 0 (-1 for the root):
    clear the lowest set bit and set the next one up, or just clear it when that is out of range."""
    if rank == 0:
        return -1
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    return up if up < n else rank ^ bit


def tree_edges(n: int) -> list[Pair]:
    """(child, parent) edges of NCCL's two trees over n nodes (the double binary tree)."""
    edges: list[Pair] = []
    for rank in range(1, n):
        edges.append((rank, btree_parent(n, rank)))
    for rank in range(n):
        if n % 2:  # odd: the second tree is the first shifted by one
            parent = btree_parent(n, (rank - 1) % n)
            if parent >= 0:
                edges.append((rank, (parent + 1) % n))
        else:      # even: the second tree is the first mirrored
            parent = btree_parent(n, n - 1 - rank)
            if parent >= 0:
                edges.append((rank, n - 1 - parent))
    return edges


def schedule(pairs: Iterable[Pair], parallel: int) -> list[list[Pair]]:
    """Rounds of pairs that can run at the same time: each host in at most one pair per round
    (as sender or receiver, so no host's NIC is shared between two probes), and at most
    `parallel` pairs per round. Every pair lands in exactly one round.

    The lower bound is the larger of the number of pairs the busiest host takes part in and
    len(pairs) / parallel. First the rounds without the `parallel` cap: a dense list (a full
    mesh) in the order of the circle method of round-robin tournaments (N-1 perfect matchings,
    each run both ways: exactly the bound for a full mesh), a sparse one greedily, the pairs of
    the busiest hosts first, re-ranked every round (the bound, or one or two over, on the plans
    `mesh_pairs` makes). Then, when `parallel` is smaller than those rounds, the rounds laid end
    to end are cut into rounds of `parallel`, each filled from the front, so that a pair that
    meets a busy host moves to the next round: O(pairs) plus a short scan per round."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, not {parallel}")
    todo = [p for p in dict.fromkeys(pairs) if p[0] != p[1]]
    hosts = sorted({h for p in todo for h in p})
    if 4 * len(todo) >= len(hosts) * (len(hosts) - 1):
        present = set(todo)
        base = [[p for p in r if p in present] for r in _tournament(hosts)]
        base = [r for r in base if r]
    else:
        degree: dict[int, int] = {}
        for a, b in todo:
            degree[a] = degree.get(a, 0) + 1
            degree[b] = degree.get(b, 0) + 1
        base = _by_busiest(todo, degree)
    if all(len(r) <= parallel for r in base):
        return base
    return _front_filled([p for r in base for p in r], parallel)


def _by_busiest(todo: list[Pair], degree: dict[int, int]) -> list[list[Pair]]:
    rounds: list[list[Pair]] = []
    while todo:
        todo.sort(key=lambda p: -(degree[p[0]] + degree[p[1]]))
        busy: set[int] = set()
        this: list[Pair] = []
        rest: list[Pair] = []
        for pair in todo:
            a, b = pair
            if a not in busy and b not in busy:
                busy.add(a)
                busy.add(b)
                this.append(pair)
                degree[a] -= 1
                degree[b] -= 1
            else:
                rest.append(pair)
        rounds.append(sorted(this))
        todo = rest
    return rounds


def _front_filled(todo: list[Pair], parallel: int) -> list[list[Pair]]:
    taken = [False] * len(todo)
    start = 0
    rounds: list[list[Pair]] = []
    while start < len(todo):
        busy: set[int] = set()
        this: list[Pair] = []
        i = start
        while i < len(todo) and len(this) < parallel:
            a, b = todo[i]
            if not taken[i] and a not in busy and b not in busy:
                taken[i] = True
                busy.add(a)
                busy.add(b)
                this.append(todo[i])
            i += 1
        rounds.append(sorted(this))
        while start < len(todo) and taken[start]:
            start += 1
    return rounds


def _tournament(hosts: list[int]) -> list[list[Pair]]:
    """Every ordered pair of `hosts` in 2(N-1) rounds of disjoint pairs (N even; 2N for N odd,
    one host resting each round): the circle method, then the same rounds the other way."""
    ring: list[int | None] = list(hosts) + ([None] if len(hosts) % 2 else [])
    m = len(ring)
    matchings: list[list[Pair]] = []
    for _ in range(m - 1):
        matchings.append([(a, b) for a, b in ((ring[k], ring[m - 1 - k]) for k in range(m // 2))
                          if a is not None and b is not None])
        ring = [ring[0], ring[-1]] + ring[1:-1]
    return [sorted(m_) for m_ in matchings] + [sorted((b, a) for a, b in m_) for m_ in matchings]


def coverage(pairs: Sequence[Pair]) -> tuple[dict[int, int], dict[int, int]]:
    """How often each host is a sender and a receiver in `pairs`."""
    sends: dict[int, int] = {}
    receives: dict[int, int] = {}
    for a, b in pairs:
        sends[a] = sends.get(a, 0) + 1
        receives[b] = receives.get(b, 0) + 1
    return sends, receives
