"""Flight Recorder traces across ranks: the first collective (sequence number) that not every
rank of a process group entered and the ranks missing from it, and collectives that ranks
entered under the same sequence number but as different operations or sizes (a desync). Pure:
the per-rank summaries of flightrec.summarise in, plain records out."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Unmatched:
    pg: str
    seq: int
    op: str  # what the ranks that entered it ran ("" when it fell out of their buffers)
    entered: list[int]
    missing: list[int]
    missing_last: dict[int, int] = field(default_factory=dict)  # rank -> its last enqueued seq


@dataclass
class Desync:
    pg: str
    seq: int
    majority: tuple[str, str]  # (op, sizes)
    majority_ranks: list[int]
    odd: dict[tuple[str, str], list[int]]


@dataclass
class Matching:
    unmatched: list[Unmatched]
    desyncs: list[Desync]
    groups: int
    last_common: dict[str, int]  # pg -> the last sequence number every member entered


def _last(trace: dict, pg: str) -> int | None:
    st = (trace.get("pg_status") or {}).get(pg)
    if isinstance(st, dict) and isinstance(st.get("enqueued"), int) and st["enqueued"] >= 0:
        return st["enqueued"]
    seqs = [e[1] for e in trace.get("entries") or [] if e[0] == pg and not e[5]]
    return max(seqs) if seqs else None


def match(traces: dict[int, dict]) -> Matching:
    """traces: rank -> summary (flightrec.summarise). A rank belongs to a process group when its
    trace knows the group; the default group (pg 0) holds every rank that has a trace."""
    pgs = sorted({pg for t in traces.values() for pg in (t.get("pg_status") or {})}
                 | {e[0] for t in traces.values() for e in t.get("entries") or []},
                 key=lambda p: (len(p), p))
    unmatched, desyncs, last_common = [], [], {}
    for pg in pgs:
        lasts = {}
        for rank, t in traces.items():
            last = _last(t, pg)
            if last is not None:
                lasts[rank] = last
            elif pg == "0":
                lasts[rank] = 0  # in the default group but entered nothing yet
        if not lasts:
            continue
        low, high = min(lasts.values()), max(lasts.values())
        last_common[pg] = low
        if low < high:
            seq = low + 1
            entered = sorted(r for r, v in lasts.items() if v >= seq)
            op = next((e[2] for r in entered for e in traces[r].get("entries") or []
                       if e[0] == pg and e[1] == seq and not e[5]), "")
            missing = sorted(r for r, v in lasts.items() if v < seq)
            unmatched.append(Unmatched(pg, seq, op, entered, missing, {r: lasts[r] for r in missing}))
        desync = _first_desync(traces, pg)
        if desync is not None:
            desyncs.append(desync)
    return Matching(unmatched, desyncs, len(pgs), last_common)


def _first_desync(traces: dict[int, dict], pg: str) -> Desync | None:
    """Ranks are first grouped by their entries in the window every rank still holds (one
    tuple each, compared whole), so that 4,096 alike ranks cost one comparison; only when the
    groups differ are their entries compared sequence by sequence."""
    per_rank = {}
    for rank, t in traces.items():
        ents = [(e[1], e[2], e[3]) for e in t.get("entries") or () if e[0] == pg and not e[5] and e[1] >= 0]
        if ents:
            per_rank[rank] = ents
    if len(per_rank) < 2:
        return None
    lo = max(ents[0][0] for ents in per_rank.values())
    hi = min(ents[-1][0] for ents in per_rank.values())
    alike: dict[tuple, list[int]] = {}
    for rank, ents in per_rank.items():
        alike.setdefault(tuple(e for e in ents if lo <= e[0] <= hi), []).append(rank)
    if len(alike) == 1:
        return None
    by_seq: dict[int, dict[tuple[str, str], list[int]]] = {}
    for window, ranks in alike.items():
        for seq, op, sizes in window:
            by_seq.setdefault(seq, {}).setdefault((op, sizes), []).extend(ranks)
    for seq in sorted(by_seq):
        kinds = by_seq[seq]
        if len(kinds) > 1:
            order = sorted(kinds.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
            (major, ranks), rest = order[0], dict(order[1:])
            return Desync(pg, seq, major, sorted(ranks), {k: sorted(v) for k, v in rest.items()})
    return None
