"""From matched lines to causes: the earliest root failure, what followed from it, and when the
log shows no error at all, which ranks went quiet first.

Order is time where the log gives it (or the nearest stamped line of the same input does:
Event.near), then input and line order. The root cause is the
earliest event whose signature is a "root" (a generic root the catalogue says another present
root explains yields to it); consequences (watchdog timeouts, resets by a peer) that came after
it, or that the catalogue ties to it, are folded into its finding ("511 ranks then timed out in
ALLREDUCE") instead of being reported one per rank. Without any signature, the earliest
exception or signal is still named. Pure: a Scan in, findings out.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections import Counter
from dataclasses import dataclass, field

from distdoctor import remote
from distdoctor.crosscheck.engine import fold
from distdoctor.logs import outcome, roster, signatures, timeouts
from distdoctor.logs.scan import Event, Scan, speaker
from distdoctor.model import Finding, Status
from distdoctor.redact import redact_text
from distdoctor.remote import Fix
from distdoctor.text import plural

HANG_GAP_S = 60.0  # a rank silent this long before the others' last line looks stopped
_OP = re.compile(r"OpType=(\w+)")


@dataclass
class Group:
    signature: object
    events: list[Event] = field(default_factory=list)
    dropped: int = 0

    @property
    def first(self) -> Event:
        return min(self.events, key=lambda e: e.order)

    @property
    def ranks(self) -> set[int]:
        return {e.rank for e in self.events if e.rank is not None}

    @property
    def hosts(self) -> set[str]:
        return {e.host for e in self.events if e.host}

    @property
    def count(self) -> int:
        return len(self.events) + self.dropped


def groups(scan: Scan) -> list[Group]:
    by_id: dict[str, Group] = {}
    for e in scan.events:
        by_id.setdefault(e.signature.id, Group(e.signature)).events.append(e)
    for sid, n in scan.dropped.items():
        if sid in by_id:
            by_id[sid].dropped += n
    return sorted(by_id.values(), key=lambda g: g.first.order)


def who(e: Event) -> str:
    parts = []
    if e.rank is not None:
        parts.append(f"rank {e.rank}")
    if e.host:
        parts.append(f"on {e.host}" if parts else e.host)
        if e.rank is None and e.pid is not None:
            parts.append(f"(pid {e.pid})")
    if not parts:
        parts.append(f"{e.source}" + (f" line {e.line}" if e.line else ""))
    return " ".join(parts)


def where(e: Event) -> str:
    return f"{e.source}:{e.line}" if e.line else e.source


def fix_lines(sig, e: Event, context: frozenset[str] = frozenset()) -> str:
    """The signature's fix for the rank and host the line came from. A line whose placeholder
    the log cannot fill becomes a comment, so nothing printed is a command that cannot work."""
    lines = sig.fix_for(e.host, e.rank if e.rank is not None else "", e.body, context)
    out = []
    for line in lines:
        names = [m.group(1) for m in signatures.PLACEHOLDER.finditer(line)]
        if names and line.startswith("# "):
            # a comment reads as well with the words for what the log does not name
            out.append(signatures.PLACEHOLDER.sub(lambda m: signatures.PLACEHOLDERS[m.group(1)][1], line))
        elif names:
            whom = f"rank {e.rank}" if e.rank is not None else "the failing rank"
            gaps = " or ".join(dict.fromkeys(signatures.PLACEHOLDERS[n][1] for n in names))
            out.append(f"# on the node of {whom} (the log does not name {gaps}): "
                       + signatures.PLACEHOLDER.sub(lambda m: signatures.PLACEHOLDERS[m.group(1)][2], line))
        else:
            out.append(line)
    whom = f"rank {e.rank}" if e.rank is not None else "the failing rank"
    remedy = signatures.remedy_lines(sig, e.host if signatures.addressable(e.host) else f"the node of {whom}")
    return "\n".join(filter(None, [*out, remedy]))


def _evidence(g: Group, first: Event) -> dict:
    sig = g.signature
    return {"signature": sig.id, "rank": first.rank, "host": first.host, "time": first.time_text,
            "pid": first.pid, "where": where(first), "line": redact_text(first.raw[:500]),
            "ranks": fold(str(r) for r in g.ranks), "hosts": fold(g.hosts), "count": g.count,
            "confirm": sig.confirm, "sources": list(sig.sources)}


def _explains(root: Group, other: Group) -> bool:
    """A consequence (a watchdog timeout, a reset by a peer) follows from the root when it came
    after it, or when the catalogue ties it to this root wherever it appears in the log."""
    return other.first.order >= root.first.order or root.signature.id in tuple(other.signature.consequence_of)


def _peer_note(e: Event, book: dict[str, str]) -> str:
    addr = signatures.peer_address(e.body)
    who = book.get(addr) if addr and book else None
    return f" (the peer {addr} is {who})" if who else ""


def diagnose(scan: Scan, hang_gap: float = HANG_GAP_S, book: dict[str, str] | None = None) -> list[Finding]:
    """book: {address: who} of the ranks' advertised addresses (nccl_setup.address_book)."""
    book = book or {}
    ctx = frozenset(scan.context)
    gs = groups(scan)
    roots = [g for g in gs if g.signature.severity == "root"]
    consequences = [g for g in gs if g.signature.severity == "consequence"]
    # A generic root ("unhandled system error") that the catalogue says another root present in
    # the log explains is that root's consequence, whichever rank printed it first.
    present = {g.signature.id for g in roots}
    explained = [g for g in roots if present & (set(g.signature.consequence_of) - {g.signature.id})]
    if explained and len(explained) < len(roots):
        roots = [g for g in roots if g not in explained]
        consequences = sorted(consequences + explained, key=lambda g: g.first.order)
    # Likewise among consequences: ncclRemoteError's "Last error:" names the socket or IB failure
    # under it, printed after it; the one that explains the other leads.
    said = {g.signature.id for g in consequences}
    deeper = [g for g in consequences if said & (set(g.signature.consequence_of) - {g.signature.id})]
    if deeper and len(deeper) < len(consequences):
        consequences = [g for g in consequences if g not in deeper] + deeper
    infos = [g for g in gs if g.signature.severity not in ("root", "consequence")]
    findings: list[Finding] = []
    if roots:
        primary = roots[0]
        first = primary.first
        if first.rank is None and (report := outcome.launcher_report(scan, first)) is not None:
            first = dataclasses.replace(first, rank=report[0], host=first.host or report[1])
        if first.rank is None and (only := _only_rank(scan, first)) is not None:
            first = dataclasses.replace(first, rank=only, host=first.host or scan.rank_host.get(only, ""))
        folded = [c for c in consequences if _explains(primary, c)]
        findings.append(_root_finding(primary, first, folded, _peer_note(first, book), ctx))
        for other in roots[1:]:
            e = other.first
            findings.append(Finding(
                Status.WARN, f"also: {other.signature.title} ({who(e)}"
                             f"{' at ' + e.time_text if e.time_text else ''}), after the first failure",
                subject=other.signature.id,
                explanation=other.signature.meaning + " It came after the first failure and may follow from it.",
                fix=fix_lines(other.signature, e, ctx), evidence=_evidence(other, e)))
        for c in consequences:
            if c not in folded:
                e = c.first
                findings.append(Finding(Status.WARN, f"{_ranks_phrase(c)}: {c.signature.title}", subject=c.signature.id,
                                        explanation=c.signature.meaning, fix=fix_lines(c.signature, e, ctx),
                                        evidence=_evidence(c, e)))
    elif (reading := _step_reading(consequences)) is not None:
        # a step outlasted the timeout: that, not torchrun's report of the exit it caused, leads
        timed_out = next(c for c in consequences if _is_timeout(c))
        findings.extend(_consequence_lead(scan, [timed_out] + [c for c in consequences if c is not timed_out],
                                          hang_gap, ctx, reading))
    elif reports := [r for r in scan.elastic if "rank" in r]:
        # one report per node's agent: the earliest failure leads, whichever node's log came first
        # ("2023-06-03_22:45:01" sorts as text; a report without a time comes after those with one)
        findings.append(_torchrun_finding(scan, min(reports, key=lambda r: r.get("time") or "~"), consequences))
    elif consequences:
        failed = outcome.failed_finding(scan)
        if failed is not None and _failure_leads(scan, consequences):
            findings.append(failed)
            findings.extend(_consequence_warning(c, ctx) for c in consequences)
        else:
            findings.extend(_consequence_lead(scan, consequences, hang_gap, ctx, None))
    elif (failed := outcome.failed_finding(scan)) is not None:
        findings.append(failed)
    elif unknown := _whole(scan):
        findings.append(_unknown_finding(unknown))
    else:
        quiet = _quiet(scan, hang_gap)
        if quiet:
            findings.append(Finding(Status.WARN, quiet[0], subject="hang", explanation=(
                "No error in the log, but some ranks stopped logging well before the others: a hang "
                "inside a collective or a rank stuck outside one looks like this. Look at those ranks first."),
                fix=quiet[1], evidence=quiet[2]))
        else:
            findings.append(Finding(Status.OK, "no failure signature in the log"))
    ranks = roster.judge(scan)
    if ranks and findings and findings[0].status == Status.OK:
        findings = ranks  # no error, but not every rank started (or one started twice): never clean
    elif ranks and ranks[0].subject == "duplicate-hostnames":
        findings = ranks[:1] + findings + ranks[1:]  # the setup fault the NCCL error follows from
    else:
        findings.extend(ranks)
    for g in infos:
        e = g.first
        findings.append(Finding(Status.OK, f"{g.signature.title} ({who(e)}; {plural(g.count, 'line')})", subject=g.signature.id,
                                explanation=g.signature.meaning, evidence=_evidence(g, e)))
    return findings


def _is_timeout(c: Group) -> bool:
    return "timeout" in c.signature.id


def _step_reading(consequences: list[Group]):
    for c in consequences:
        if _is_timeout(c) and (reading := timeouts.step_before(c.events)) is not None:
            return reading
    return None


def _consequence_lead(scan: Scan, consequences: list[Group], hang_gap: float, ctx: frozenset[str],
                      reading) -> list[Finding]:
    """Only consequences in the log: the first one leads (FAIL), read with what came just before it
    when it is a timeout after a long step; the others follow as warnings."""
    c = consequences[0]
    e = c.first
    quiet = _quiet(scan, hang_gap)
    if reading is not None:
        summary = (f"{_ranks_phrase(c)}: {c.signature.title}, after a step outside collectives ran "
                   f"{_duration(reading.gap_s)} ({reading.step[:80]})")
        explanation, fix = timeouts.explanation(reading), timeouts.fix(reading)
    else:
        summary = (f"{_ranks_phrase(c)}: {c.signature.title}, and the log does not show what failed first"
                   f" (first: {who(e)}{' at ' + e.time_text if e.time_text else ''})")
        explanation, fix = c.signature.meaning, fix_lines(c.signature, e, ctx)
    if quiet and reading is None:
        explanation += " " + quiet[0]
    evidence = _evidence(c, e)
    if reading is not None:
        evidence["step_before"] = {"line": redact_text(reading.step), "rank": reading.rank,
                                   "seconds": round(reading.gap_s, 1)}
    return ([Finding(Status.FAIL, summary, subject=c.signature.id, explanation=explanation, fix=fix,
                     evidence=evidence)] + [_consequence_warning(other, ctx) for other in consequences[1:]])


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _consequence_warning(c: Group, ctx: frozenset[str] = frozenset()) -> Finding:
    e = c.first
    return Finding(Status.WARN, f"{_ranks_phrase(c)}: {c.signature.title}", subject=c.signature.id,
                   explanation=c.signature.meaning, fix=fix_lines(c.signature, e, ctx), evidence=_evidence(c, e))


# the catalogue's word for a task that died on a signal: a consequence that names it among its
# causes is one a crashed peer explains
_SIGNAL_DEATH = "slurm.task-signal"


def _failure_leads(scan: Scan, consequences: list[Group]) -> bool:
    """Whether "failed, cause not in the catalogue" says more than the consequences do: they are
    only a launcher's echo of a worker's exit, or a rank's own error came before all of them
    (an exception, then the shutdown it caused)."""
    if all(c.signature.id in outcome.LAUNCHER_ECHOES for c in consequences):
        return True
    first = min(c.first.order for c in consequences)
    if any(outcome.serious(e) and e.order < first for e in scan.unknown):
        return True
    # a reset or closed socket names no cause, only that a peer went away; a rank that printed
    # none of them and died on a signal is that peer, wherever its launcher's report of the death
    # landed in the log (horovodrun prints "[1]<stderr>:Segmentation fault" after the resets)
    if all(_SIGNAL_DEATH in c.signature.consequence_of for c in consequences):
        said = set().union(*(c.ranks for c in consequences))
        return any(outcome.died_on_signal(e) and e.rank is not None and e.rank not in said for e in scan.exits)
    return False


def _torchrun_finding(scan: Scan, record: dict, consequences: list[Group]) -> Finding:
    """No signature names a cause, but torchrun's report says which worker failed first."""
    rank, host = record["rank"], record.get("host", "")
    code, sig = record.get("exitcode"), record.get("signal", "")
    how = f"exit code {code}" + (f" ({sig})" if sig else "") if code is not None else "failed"
    own = [e for e in scan.unknown if e.rank == rank and "WARN" not in e.body[:80]]
    first_error = min(own, key=lambda e: e.order).body.strip()[:200] if own else ""
    summary = f"rank {rank}{' on ' + host if host else ''} failed first ({how}, as torchrun reports)"
    if first_error:
        summary += f": {redact_text(first_error)}"
    then = [f"{_ranks_phrase(c)}: {c.signature.title}" for c in consequences
            if c.ranks - {rank} or not c.ranks]
    if then:
        summary += "; then " + "; ".join(then)
    where_ = f"{record['source']}:{record['line']}" if record.get("line") else record["source"]
    target = f"ssh {host} " if signatures.addressable(host) else ""
    if sig in ("SIGKILL", "SIGTERM") or code in (-9, 137):
        if target:
            fix = ("# killed from outside: the kernel's OOM killer, Slurm's memory limit or a scheduler\n"
                   f"{target}dmesg -T | grep -i -E 'killed process|out of memory'")
        else:
            fix = ("# killed from outside: on the node that ran it, look for the OOM killer:\n"
                   "# dmesg -T | grep -i -E 'killed process|out of memory'")
    else:
        fix = remote.comment(f"read rank {rank}'s own output (its traceback is its first error); torchrun's report "
                             f"is at {where_}")
    return Finding(Status.FAIL, summary, subject="torch.elastic-root-cause",
                   explanation="torchrun's agent saw this worker die first; no line in the log matched a known "
                               "failure signature, so the exit status is the best evidence.",
                   fix=fix, evidence={"rank": rank, "host": host, "exitcode": code, "signal": sig,
                                      "pid": record.get("pid"), "time": record.get("time", ""), "where": where_,
                                      "traceback": redact_text(record.get("traceback", ""))[:500]})


def _only_rank(scan: Scan, e: Event) -> int | None:
    """The rank of a line that names no speaker at all (no rank, host or pid: a traceback line,
    or the tail of a line the paste wrapped, `CUDA erro` / `r: unspecified launch failure`) in
    an input where every line that names its rank names the same one: one rank's own log."""
    if e.host or e.pid is not None or e.local_rank is not None:
        return None
    ranks = {key[1] for key in scan.seen if key[0] == e.index and key[1] is not None}
    return ranks.pop() if len(ranks) == 1 else None


def _whole(scan: Scan) -> list[Event]:
    """The unknown lines less those a paste cut off mid-line whose whole text the log holds on
    another line (another rank's `NCCL WARN Failed to open libibverbs.so[.1]`, pasted last as
    `NCCL WARN Fa`): the cut copy is that line, not an error of its own. Sorted, a line's
    longer copies come right after it."""
    bodies = sorted({e.body.rstrip() for e in scan.events + scan.unknown})
    whole = []
    for e in scan.unknown:
        body = e.body.rstrip()
        at = bisect.bisect_right(bodies, body)
        if not (at < len(bodies) and bodies[at].startswith(body)):
            whole.append(e)
    return whole


def _unknown_finding(unknown: list[Event]) -> Finding:
    """No signature matched, but the log shows errors: name the earliest, so a crashed job is
    never reported as clean. An exception or a signal is a failure; a lone NCCL WARN is not."""
    first = min(unknown, key=lambda e: e.order)
    serious = [e for e in unknown if "WARN" not in e.body.split(":", 1)[0] and " WARN " not in e.body[:80]]
    top = min(serious, key=lambda e: e.order) if serious else first
    ranks = {e.rank for e in unknown if e.rank is not None}
    when = f" at {top.time_text}" if top.time_text else ""
    text = top.body.strip()[:200]
    summary = f"{who(top)} failed first with an error the catalogue does not know{when}: {redact_text(text)}"
    if len(ranks) > 1:
        summary += f" ({len(ranks)} ranks logged errors: {fold(str(r) for r in ranks)})"
    fix = (f"# read the lines around {where(top)}: the first error of {who(top)} is usually the cause; "
           f"distdoctor check on {top.host or 'that node'} covers the node's own setup")
    return Finding(Status.FAIL if serious else Status.WARN, summary, subject="unknown-error",
                   explanation="No line matched a known failure signature. If this is a distributed-training "
                               "failure, the catalogue (distdoctor/logs/signatures.toml) could learn it.",
                   fix=fix, evidence={"rank": top.rank, "host": top.host, "time": top.time_text, "where": where(top),
                                      "line": redact_text(top.raw[:500]), "ranks": fold(str(r) for r in ranks),
                                      "count": len(unknown)})


def _ranks_phrase(g: Group) -> str:
    ranks = g.ranks
    if len(ranks) > 1:
        return f"{len(ranks)} ranks ({fold(str(r) for r in ranks)})"
    if ranks:
        return f"rank {next(iter(ranks))}"
    hosts = g.hosts
    return f"{len(hosts)} hosts ({fold(hosts)})" if len(hosts) > 1 else (next(iter(hosts)) if hosts else "the log")


def _root_finding(primary: Group, first: Event, folded: list[Group], peer: str = "",
                  ctx: frozenset[str] = frozenset()) -> Finding:
    sig = primary.signature
    when = f" at {first.time_text}" if first.time_text else ""
    summary = f"{who(first)} failed first: {sig.title}{peer}{when}"
    then = []
    for c in folded:
        others = c.ranks - ({first.rank} if first.rank is not None else set())
        ops = Counter(m.group(1) for e in c.events for m in [_OP.search(e.body)] if m)
        op = f" in {ops.most_common(1)[0][0]}" if ops else ""
        if others:
            then.append(f"{len(others)} {'rank' if len(others) == 1 else 'ranks'} then hit "
                        f"{c.signature.title}{op} ({fold(str(r) for r in others)})")
        else:
            then.append(f"then {c.signature.title}{op} ({plural(c.count, 'line')})")
    if then:
        summary += "; " + "; ".join(then)
    explanation = sig.meaning
    if sig.confirm:
        explanation += f" Confirm on the machine: {sig.confirm}."
    evidence = _evidence(primary, first)
    evidence["consequences"] = {c.signature.id: {"ranks": fold(str(r) for r in c.ranks), "count": c.count}
                                for c in folded}
    return Finding(Status.FAIL, summary, subject=sig.id, explanation=explanation,
                   fix=fix_lines(sig, first, ctx), evidence=evidence)


def last_heard(scan: Scan) -> dict[str, tuple[tuple | None, str, str, int | None]]:
    """Per rank (or host:pid, or file where the log names no rank): the time of its last line,
    that line, its host and pid."""
    out: dict[str, tuple] = {}
    for key, seen in scan.seen.items():
        _index, _rank, host, pid, _local_rank = key
        rank = speaker(scan, key)
        if rank is None:
            continue
        host = host or scan.rank_host.get(rank, "")
        name = str(rank)
        prev = out.get(name)
        if prev is None or (seen.last is not None and (prev[0] is None or seen.last > prev[0])):
            out[name] = (seen.last, seen.last_text, host, pid)
    return out


def _seconds(t: tuple) -> float:
    year, month, day, secs = t
    return ((year * 12 + month) * 31 + day) * 86400.0 + secs


def _quiet(scan: Scan, gap: float):
    """(summary, fix, evidence) when some ranks' last line is more than `gap` seconds before
    the latest last line of any rank, else None."""
    heard = {r: v for r, v in last_heard(scan).items() if v[0] is not None}
    if len(heard) < 2:
        return None
    latest = max(_seconds(v[0]) for v in heard.values())
    quiet = sorted((r for r, v in heard.items() if latest - _seconds(v[0]) > gap), key=lambda r: _seconds(heard[r][0]))
    if not quiet:
        return None
    first = heard[quiet[0]]
    lag = latest - _seconds(first[0])
    ranks = fold(quiet)
    summary = (f"{'rank' if len(quiet) == 1 else 'ranks'} {ranks} stopped logging first "
               f"(rank {quiet[0]}{' on ' + first[2] if first[2] else ''} at {_clock(first[0])}, "
               f"{lag:.0f} s before the last line of the other {len(heard) - len(quiet)})")
    pid = f" (pid {first[3]})" if first[3] else ""
    fix = (f"# while it hangs, dump the stacks of rank {quiet[0]}{pid}"
           f"{' on ' + first[2] if first[2] else ''}: py-spy dump --pid <its pid>")
    if first[3] and signatures.addressable(first[2]):
        fix = remote.render(Fix((f"py-spy dump --pid {first[3]}",), [first[2]]))
    evidence = {"quiet_ranks": ranks, "last_line": redact_text(first[1]), "gap_s": round(lag, 3),
                "ranks_heard": len(heard)}
    return summary, fix, evidence


def _clock(t: tuple) -> str:
    secs = int(t[3])
    return f"{secs // 3600:02d}:{secs % 3600 // 60:02d}:{secs % 60:02d}"
