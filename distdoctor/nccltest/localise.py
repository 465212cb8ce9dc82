"""Which host or link is bad: speed outliers, a verdict from per-pair results, and an adaptive
search by rounds of disjoint host pairs.

A pair of hosts is only as fast as the slower of the two hosts and the link between them, so a
pair's number alone names nobody. Three tools, each pure (no I/O, no clock):

- `outliers`: members far below (or above, for times) the median of all members.
- `host_and_link_outliers`: from one number per directed host pair (a mesh or bench run), decide
  whether a HOST is bad (most of its pairs slow or failing, its partners fine elsewhere) or a
  LINK is (one pair bad, both hosts fine with others), and in which direction.
- `Localiser`: when the job-wide collective fails or is slow, rounds of disjoint host pairs run in
  parallel; a passing pair proves both of its hosts, and a host is named once it has failed with
  several partners, at least one of them proven. One bad host among 512 is named in 2 rounds
  after the first, whatever the number of hosts.

A "bad" pair failed, or is below `factor` (default half) of the median pair speed.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distdoctor import remote
from distdoctor.crosscheck.engine import fold
from distdoctor.model import Finding, Status
from distdoctor.remote import Fix
from distdoctor.nccltest.plan import tree_edges

HOST = "host"
LINK = "link"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Outlier:
    name: str                  # the member; both members, folded, when two samples cannot tell
    measured: float
    median: float
    unit: str
    text: str
    ambiguous: bool = False    # two samples: they differ, but neither can be named


@dataclass(frozen=True)
class Culprit:
    kind: str                          # "host" | "link" | "unknown" (the evidence names nobody)
    hosts: tuple[str, ...]             # the host; (sender, receiver) for a link
    text: str
    ranks: tuple[int, ...] = ()        # the ranks on those hosts, when the caller says
    measured: float | None = None      # median speed of its bad pairs; None when they failed
    median: float | None = None        # the reference: the median pair elsewhere
    unit: str = "GB/s"
    direction: str = ""                # host: "send" | "receive" | "" (both); link: "->" | "<->"
    pairs: tuple[tuple[str, str], ...] = ()   # the bad pairs that name it


def num(value: float) -> str:
    """3 significant digits, no exponent for the usual range: 0.005, 0.48, 12.3, 1500."""
    if value == 0:
        return "0"
    if 1e-4 <= abs(value) < 1e6:
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return f"{value:.3g}"


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def outliers(samples: Mapping[str, float], higher_is_better: bool = True, factor: float = 0.5,
             unit: str = "GB/s") -> list[Outlier]:
    """Members whose value is below `factor` x the median (higher_is_better), or above
    median / `factor` (times). The median needs three members: with two, a difference larger
    than the factor is reported once, as ambiguous, naming neither. Non-numbers are ignored."""
    values = {str(k): float(v) for k, v in samples.items() if _finite(v)}
    if len(values) < 2 or not 0 < factor < 1:
        return []
    if len(values) == 2:
        (a, va), (b, vb) = sorted(values.items())
        low, high = sorted((va, vb))
        differs = low < factor * high if higher_is_better else high * factor > low
        if not differs:
            return []
        return [Outlier(fold([a, b]), low if higher_is_better else high, high if higher_is_better else low,
                        unit, f"{a} and {b} differ: {num(va)} vs {num(vb)} {unit}; with two samples "
                        f"neither can be named (add a third host to tell)", ambiguous=True)]
    median = statistics.median(values.values())
    out = []
    for name, value in sorted(values.items()):
        if higher_is_better and median > 0 and value < factor * median \
                or not higher_is_better and median > 0 and value * factor > median:
            out.append(Outlier(name, value, median, unit,
                               f"{name} is slow: {num(value)} {unit} vs median {num(median)} {unit}"))
    return out


# --- one number per directed host pair ---------------------------------------------------------

def host_and_link_outliers(pair_samples: Mapping[tuple[str, str], float | None], factor: float = 0.5,
                           unit: str = "GB/s", ranks_of: Mapping[str, Sequence[int]] | None = None
                           ) -> list[Culprit]:
    """Culprits from per-pair throughput (None: the pair failed), hosts first, then links.

    A host's capacity is its best pair (a pair is never faster than its slower host): hosts whose
    best pair is below `factor` x the median capacity, or that have no passing pair, are bad,
    when they have at least two partners and some other host is fine. Then, direction by
    direction, a host most of whose remaining pairs as sender (or receiver) are bad. What is left
    are links, named with their direction."""
    samples = {(str(k[0]), str(k[1])): (float(v) if _finite(v) else None)
               for k, v in pair_samples.items() if isinstance(k, tuple) and len(k) == 2 and k[0] != k[1]}
    hosts = sorted({h for p in samples for h in p})
    if len(hosts) < 2:
        return []
    ok = {p: v for p, v in samples.items() if v is not None}
    if not ok:
        return [_with_ranks(Culprit(UNKNOWN, tuple(hosts), f"every pair among {fold(hosts)} fails: the fault is "
                                    "common to all of them (network, configuration, software), not one host "
                                    "or link", unit=unit, pairs=tuple(sorted(samples))), ranks_of)]
    partners: dict[str, set[str]] = {h: set() for h in hosts}
    ends: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]] = {h: ([], []) for h in hosts}
    best: dict[str, float] = {}
    for p in sorted(samples):
        a, b = p
        partners[a].add(b)
        partners[b].add(a)
        ends[a][0].append(p)
        ends[b][1].append(p)
    for (a, b), v in ok.items():
        best[a] = max(best.get(a, v), v)
        best[b] = max(best.get(b, v), v)
    capacity = statistics.median(best.values())
    weak = [h for h in hosts if (h not in best or best[h] < factor * capacity) and len(partners[h]) >= 2]
    if len(weak) == len(hosts):
        weak = []
    weak_set = set(weak)
    fine_pairs = [v for (a, b), v in ok.items() if a not in weak_set and b not in weak_set]
    reference = statistics.median(fine_pairs) if fine_pairs else capacity

    def bad(p: tuple[str, str]) -> bool:
        v = samples[p]
        return v is None or v < factor * reference

    culprits: list[Culprit] = []
    explained: set[tuple[str, str]] = set()
    for h in weak:
        mine = sorted(ends[h][0] + ends[h][1])
        explained.update(mine)
        # pairs with another bad host say nothing about this one
        told = [p for p in mine if not (set(p) - {h}) & weak_set] or mine
        culprits.append(_host_culprit(h, "", told, samples, bad, reference, unit))

    # One direction of a host: its sends (or receives) mostly bad, the other way fine.
    after_weak = set(explained)
    named: dict[str, set[str]] = {}
    while True:
        pick = None
        touched = sorted({h for p in samples if p not in explained and bad(p) for h in p} - weak_set)
        for h in touched:
            for side, direction in ((0, "send"), (1, "receive")):
                if direction in named.get(h, set()):
                    continue
                mine = [p for p in ends[h][side] if p not in explained]
                worse = [p for p in mine if bad(p)]
                if len(worse) >= 2 and 2 * len(worse) > len(mine):
                    score = (len(worse) / len(mine), len(worse))
                    if pick is None or score > pick[0]:
                        pick = (score, h, direction, mine)
        if pick is None:
            break
        _, h, direction, mine = pick
        named.setdefault(h, set()).add(direction)
        explained.update(mine)
    for h in sorted(named):
        directions = named[h]
        direction = "" if len(directions) == 2 else next(iter(directions))
        mine = sorted(p for side, way in ((0, "send"), (1, "receive")) if direction in ("", way)
                      for p in ends[h][side] if p not in after_weak)
        back = [p for p in ends[h][1 if direction == "send" else 0] if p not in after_weak] if direction else []
        culprits.append(_host_culprit(h, direction, mine, samples, bad, reference, unit,
                                      other_way_bad=sum(1 for p in back if bad(p)), other_way=len(back)))

    seen: set[frozenset[str]] = set()
    for p in sorted(samples):
        if p in explained or not bad(p) or frozenset(p) in seen:
            continue
        seen.add(frozenset(p))
        culprits.append(_link_culprit(p, samples, explained, bad, reference, unit, len(hosts), ends))
    return [_with_ranks(c, ranks_of) for c in culprits]


def _speeds(pairs: Iterable[tuple[str, str]], samples: Mapping[tuple[str, str], float | None]) -> list[float]:
    return [v for v in (samples[p] for p in pairs) if v is not None]


def _host_culprit(h: str, direction: str, mine: list[tuple[str, str]], samples: Mapping[tuple[str, str], float | None],
                  bad, reference: float, unit: str, other_way_bad: int = 0, other_way: int = 0) -> Culprit:
    bad_pairs = [p for p in mine if bad(p)]
    failed = [p for p in mine if samples[p] is None]
    speeds = _speeds(bad_pairs, samples)
    measured = statistics.median(speeds) if speeds else None
    where = {"": f"with {h}", "send": f"from {h}", "receive": f"to {h}"}[direction]
    other = ""
    if direction and other_way:
        back = {"send": f"pairs to {h}", "receive": f"pairs from {h}"}[direction]
        other = f", {back} pass" if not other_way_bad else f" ({other_way_bad} of {other_way} {back} are bad too)"
    if failed and len(failed) == len(mine):
        verb = {"": "fails", "send": "cannot send", "receive": "cannot receive"}[direction]
        text = f"{h} {verb}: {len(failed)} of {len(mine)} pairs {where} fail{other}"
    elif measured is not None and not failed:
        verb = {"": "is slow", "send": "is slow sending", "receive": "is slow receiving"}[direction]
        text = f"{h} {verb}: {num(measured)} {unit} vs median {num(reference)} {unit} on pairs {where}{other}"
    else:
        text = f"{h} is bad: {len(failed)} of {len(mine)} pairs {where} fail, {len(bad_pairs) - len(failed)} are slow{other}"
    return Culprit(HOST, (h,), text, measured=measured, median=reference, unit=unit, direction=direction,
                   pairs=tuple(bad_pairs))


def _link_culprit(p: tuple[str, str], samples: Mapping[tuple[str, str], float | None],
                  explained: set[tuple[str, str]], bad, reference: float, unit: str, n_hosts: int,
                  ends: Mapping[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]]) -> Culprit:
    a, b = p
    back = (b, a)
    both = back in samples and back not in explained and bad(back)
    mine = [p, back] if both else [p]
    failed = [q for q in mine if samples[q] is None]
    speeds = _speeds(mine, samples)
    measured = statistics.median(speeds) if speeds else None
    if len(failed) == len(mine):
        how = "fails both ways" if both else "fails"
    elif not failed:
        how = f"is slow{' both ways' if both else ''}: {num(measured or 0)} {unit} vs median {num(reference)} {unit}"
    else:
        how = "fails one way and is slow the other"
    others = [q for h in (a, b) for q in ends[h][0] + ends[h][1] if q not in (p, back) and q not in explained]
    alone = [h for h in (a, b) if not any(h in q for q in others)]
    notes = []
    if not both:
        notes.append("the other direction was not tested" if back not in samples
                     else "the other direction fails too" if bad(back) else "the other direction passes")
    if others and not any(bad(q) for q in others):
        whose = "both hosts'" if not alone else f"{b if alone == [a] else a}'s"
        if notes and notes[0] == "the other direction passes":
            notes[0] = f"the other direction and {whose} other pairs pass"
        else:
            notes.append(f"{whose} other pairs pass")
    elif others:
        notes.append("other pairs of these hosts are bad too")
    elif n_hosts == 2:
        notes.append("with two hosts, a host and the link between them cannot be told apart")
    else:
        notes.append("these hosts have no other pairs to compare with")
    arrow = "<->" if both else "->"
    text = f"link {a} {arrow} {b} {how} ({'; '.join(notes)})"
    return Culprit(LINK, (a, b), text, measured=measured if not failed else None, median=reference, unit=unit,
                   direction=arrow, pairs=tuple(mine))


def _with_ranks(c: Culprit, ranks_of: Mapping[str, Sequence[int]] | None) -> Culprit:
    if not ranks_of:
        return c
    ranks = tuple(sorted({r for h in c.hosts for r in ranks_of.get(h, ())}))
    return Culprit(c.kind, c.hosts, c.text, ranks, c.measured, c.median, c.unit, c.direction, c.pairs)


# --- adaptive rounds of disjoint pairs --------------------------------------------------------

class Localiser:
    """Names bad hosts and links with rounds of disjoint host pairs (each pair a test both
    hosts take part in, such as a two-host all_reduce: no direction).

    The hosts come in the job's order, which is NCCL's ring. The survey is the ring's two
    perfect matchings (rounds 1 and 2 cover every ring link) and then the links of NCCL's
    double binary tree (`plan.tree_edges`), about four more rounds, or `survey` pairs given.
    A passing pair proves both hosts ("good"). From round 2 on, each round first pairs every
    host not yet proven that has failed with a proven host it has not met (or, while none is
    proven, any host it has not met), then fills the free hosts with survey pairs. A host is
    named when it has failed with min(3, N-1) different partners, one of them proven, and passed
    with none; a pair that fails between two proven hosts names the link, and one that is only
    slow between them is measured again first (its faster try counts). So one bad host is
    named in 3 rounds at any N, several in about as many while proven hosts outnumber them, and
    the whole search takes about 6 rounds.

    Drive it: `while (pairs := loc.next_round()) is not None: ...; loc.record(pair, ok, busbw)`.
    """

    def __init__(self, hosts: Sequence[str], seed: int = 0, factor: float = 0.5, max_rounds: int = 10,
                 unit: str = "GB/s", survey: Iterable[tuple[int, int]] | None = None):
        self.hosts = [str(h) for h in hosts]
        n = len(self.hosts)
        self.factor = factor
        self.max_rounds = max_rounds
        self.unit = unit
        self.rounds = 0
        self._rng = random.Random(seed)
        if survey is None:
            # the two matchings of the ring; with an odd count the link n-1 -> 0 is left over
            ring = [(k, k + 1) for k in range(0, n - 1, 2)] + [(k, (k + 1) % n) for k in range(1, n, 2)]
            ring += [(n - 1, 0)] if n % 2 and n > 2 else []
            survey = ring + list(tree_edges(n))
        self._survey: list[tuple[int, int]] = list(dict.fromkeys(
            (min(i, j), max(i, j)) for i, j in survey if i != j and 0 <= i < n and 0 <= j < n))
        self._results: dict[tuple[int, int], tuple[bool, float | None]] = {}
        # what the report shows: the measured speed, where `busbw` (what is judged) was adjusted
        self._shown: dict[tuple[int, int], float | None] = {}
        self._tries: dict[tuple[int, int], int] = {}
        self._done = n < 2

    # evidence
    def record(self, pair: tuple[int, int], ok: bool, busbw: float | None = None, shown: float | None = None) -> None:
        """busbw is what is judged; shown, when given, the speed the report states (a live pair
        test judges a transfer shorter than the noise floor at the floor's rate, and states what
        it measured)."""
        i, j = pair
        if i == j or not (0 <= i < len(self.hosts) and 0 <= j < len(self.hosts)):
            raise ValueError(f"pair {pair} is not two hosts of {len(self.hosts)}")
        key = (min(i, j), max(i, j))
        result = (bool(ok), float(busbw) if _finite(busbw) else None)
        seen = float(shown) if _finite(shown) else result[1]
        before = self._results.get(key)
        self._tries[key] = self._tries.get(key, 0) + 1
        if before is not None and before[0] and result[0] and (before[1] or 0.0) >= (result[1] or 0.0):
            return  # a pair measured twice is as fast as its faster try: a stall only slows a try down
        self._results[key] = result
        self._shown[key] = seen

    def _reference(self, shown: bool = False) -> float | None:
        """The median over hosts of each host's best pair: a pair is only as fast as its slower
        host, so with few hosts a median over pairs would be dragged down by one slow host."""
        best: dict[int, float] = {}
        for (i, j), (ok, judged) in self._results.items():
            bw = self._shown.get((i, j)) if shown else judged
            if ok and bw is not None:
                best[i] = max(best.get(i, bw), bw)
                best[j] = max(best.get(j, bw), bw)
        return statistics.median(best.values()) if best else None

    def _bad(self, result: tuple[bool, float | None], reference: float | None) -> bool:
        ok, bw = result
        return not ok or (bw is not None and reference is not None and bw < self.factor * reference)

    def _state(self) -> tuple[set[int], dict[int, set[int]], set[int], float | None]:
        reference = self._reference()
        good: set[int] = set()
        fails: dict[int, set[int]] = {}
        for (i, j), result in self._results.items():
            if self._bad(result, reference):
                fails.setdefault(i, set()).add(j)
                fails.setdefault(j, set()).add(i)
            else:
                good.update((i, j))
        need = min(3, len(self.hosts) - 1)
        bad_hosts = {h for h, partners in fails.items()
                     if h not in good and len(partners) >= need and partners & good}
        return good, fails, bad_hosts, reference

    def _met(self, h: int) -> set[int]:
        return {j if i == h else i for (i, j) in self._results if h in (i, j)}

    # rounds
    def next_round(self) -> list[tuple[int, int]] | None:
        if self._done or self.rounds >= self.max_rounds:
            self._done = True
            return None
        good, fails, bad_hosts, reference = self._state()
        if self._results and not good and all(len(fails.get(h, ())) >= min(2, len(self.hosts) - 1)
                                               for h in range(len(self.hosts))):
            self._done = True   # every host failed with two partners and nothing passed: not one host or link
            return None
        busy: set[int] = set()
        pairs: list[tuple[int, int]] = []
        # A pair of proven hosts that passed but slow would name its link; one try can be a stall
        # of a busy host (a scheduler, a page-cache flush), so it is measured once more first.
        for (i, j), result in sorted(self._results.items()):
            if (result[0] and self._bad(result, reference) and i in good and j in good
                    and self._tries.get((i, j), 0) < 2 and i not in busy and j not in busy):
                busy.update((i, j))
                pairs.append((i, j))
        open_hosts = sorted((h for h in fails if h not in good and h not in bad_hosts),
                            key=lambda h: (-len(fails[h]), h))
        proven = sorted(good)
        self._rng.shuffle(proven)
        for h in open_hosts:
            if h in busy:
                continue
            met = self._met(h)
            pool = proven if good else [g for g in range(len(self.hosts)) if g not in bad_hosts]
            choice = next((g for g in pool if g not in busy and g not in met and g != h), None)
            if choice is not None:
                busy.update((h, choice))
                pairs.append((h, choice))
        for i, j in self._survey:
            if i in busy or j in busy or (i, j) in self._results or i in bad_hosts or j in bad_hosts:
                continue
            busy.update((i, j))
            pairs.append((i, j))
        if not pairs:
            self._done = True
            return None
        self.rounds += 1
        return pairs

    def _met_all(self) -> set[int]:
        return {h for p in self._results for h in p}

    # verdict
    def culprits(self, ranks_of: Mapping[str, Sequence[int]] | None = None) -> list[Culprit]:
        good, fails, bad_hosts, reference = self._state()
        names = self.hosts
        unit = self.unit
        out: list[Culprit] = []
        if self._results and not good and len(self.hosts) >= 2:
            tested = sorted({names[h] for h in self._met_all()})
            if len(self.hosts) == 2:
                text = (f"the pair {fold(tested)} fails; with two hosts, a host and the link between them "
                        "cannot be told apart")
            else:
                text = (f"every pair test among {fold(tested)} fails: the fault is common to all of them "
                        "(network, configuration, software), not one host or link")
            return [_with_ranks(Culprit(UNKNOWN, tuple(tested), text, unit=unit), ranks_of)]
        judged_reference, reference = reference, self._reference(shown=True)
        for h in sorted(bad_hosts, key=lambda h: names[h]):
            results = [(j, (self._results[(min(h, j), max(h, j))][0], self._shown[(min(h, j), max(h, j))]))
                       for j in sorted(fails[h])]
            # pairs with another named host say nothing about this one
            results = [(j, r) for j, r in results if j not in bad_hosts] or results
            speeds = [bw for _, (ok, bw) in results if ok and bw is not None]
            partners = fold(names[j] for j, _ in results)
            proven = fold(names[j] for j, _ in results if j in good)
            if speeds and len(speeds) == len(results):
                measured = statistics.median(speeds)
                text = (f"{names[h]} is slow: {num(measured)} {unit} vs median {num(reference or 0)} {unit} "
                        f"on pairs with {names[h]} (partners {partners}; {proven} fast with other hosts)")
            else:
                measured = statistics.median(speeds) if speeds else None
                text = (f"{names[h]} fails: its pair tests with {partners} all failed or were slow, "
                        f"and {proven} pass with other hosts")
            out.append(_with_ranks(Culprit(HOST, (names[h],), text, measured=measured, median=reference,
                                           unit=unit, pairs=tuple((names[h], names[j]) for j, _ in results)),
                                   ranks_of))
        for (i, j), result in sorted(self._results.items(), key=lambda kv: (names[kv[0][0]], names[kv[0][1]])):
            if not self._bad(result, judged_reference) or i in bad_hosts or j in bad_hosts:
                continue
            result = (result[0], self._shown[(i, j)])
            a, b = sorted((names[i], names[j]))
            if i in good and j in good:
                ok, bw = result
                how = "fails" if not ok else f"is slow: {num(bw or 0)} {unit} vs median {num(reference or 0)} {unit}"
                out.append(_with_ranks(Culprit(LINK, (a, b), f"link {a} <-> {b} {how} (both hosts pass with "
                                               "other partners)", measured=bw if ok else None, median=reference,
                                               unit=unit, direction="<->", pairs=((a, b),)), ranks_of))
        undecided = sorted(names[h] for h in fails if h not in good and h not in bad_hosts)
        if undecided:
            out.append(_with_ranks(Culprit(UNKNOWN, tuple(undecided), f"{fold(undecided)} failed or were slow "
                                           f"with some partners, but {self.rounds} rounds could not tell whether "
                                           "they or their partners are at fault", unit=unit), ranks_of))
        return out


# --- as findings --------------------------------------------------------------------------------

def to_finding(culprit: Culprit) -> Finding:
    """A culprit as a report finding: FAIL when it fails, WARN when it is only slow; the fix is
    a command to run first, on the host concerned."""
    failed = culprit.measured is None
    evidence: dict[str, Any] = {"kind": culprit.kind, "hosts": list(culprit.hosts), "unit": culprit.unit,
                                "pairs": [list(p) for p in culprit.pairs]}
    for name in ("measured", "median"):
        if getattr(culprit, name) is not None:
            evidence[name] = round(float(getattr(culprit, name)), 6)
    if culprit.ranks:
        evidence["ranks"] = list(culprit.ranks)
    if culprit.direction:
        evidence["direction"] = culprit.direction
    if culprit.kind == HOST:
        host = culprit.hosts[0]
        explanation = ("every collective that includes this host runs at its pace, or hangs when it fails; "
                       "its partners are fine with other hosts")
        fix: Fix | str = Fix(("ip -s link",), [host], f"error and drop counters of {host}'s interfaces; leave it "
                                                      f"out (srun --exclude={host}) until it is fixed")
    elif culprit.kind == LINK:
        a, b = culprit.hosts
        explanation = ("both hosts are fine with other partners: the path between them (a switch port, a cable, "
                       "an MTU or a firewall rule on the way) is at fault")
        fix = remote.toward_fix(a, "tracepath -n {}", b, f"the path and its MTU from {a} to {b}")
    else:
        explanation = "the pair results do not single out one host or link"
        fix = ""
    subject = culprit.hosts[0] if culprit.kind == HOST else f"{culprit.hosts[0]} {culprit.direction or '->'} " \
        f"{culprit.hosts[1]}" if culprit.kind == LINK else fold(culprit.hosts)
    return Finding(Status.FAIL if failed or culprit.kind == UNKNOWN else Status.WARN, culprit.text, subject,
                   explanation, "", evidence, remedy=(fix,) if isinstance(fix, Fix) else ())
