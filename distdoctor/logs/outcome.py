"""Whether the job failed, whatever the cause: the lines that say a rank, a process or a service
exited or died (markers, data in exits.toml), and the finding that says so when no catalogue
signature names the cause, so a failed job's log never reads as clean.

The finding quotes the decisive lines (the first error a process printed, the launcher's exit
report) and names the rank: the one an error line states, else the task or process rank the
launcher's report names, else torchrun's local rank where the log shows one node. Pure: the
scan's events in, a finding out.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

from distdoctor import remote
from distdoctor.crosscheck.engine import fold
from distdoctor.model import Finding, Status
from distdoctor.redact import redact_text

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DEFAULT_PATH = os.path.join(os.path.dirname(__file__), "exits.toml")
WEIGHTS = ("exit", "error", "echo", "done", "retract")
# signatures that are a launcher's echo of a worker's death, not a reading of it: the marker on
# the same line knows more (the rank, the exit code)
LAUNCHER_ECHOES = frozenset({"torch.elastic-child-failed"})
_SIGNALS = {"1": "SIGHUP", "2": "SIGINT", "6": "SIGABRT", "7": "SIGBUS", "9": "SIGKILL", "11": "SIGSEGV",
            "15": "SIGTERM"}
_KILLED = ("SIGKILL", "Killed")
# what stopped a launcher that a signal reached, and what to do about it
_STOPPED = {
    "SIGHUP": "the terminal or SSH session that started the job closed (SIGHUP): start it detached "
              "(nohup, tmux or screen) or through the scheduler",
    "SIGINT": "interrupted (Ctrl-C, SIGINT): if it was stuck, dump every rank's stack before stopping "
              "it next time (py-spy dump --pid <pid>)",
    "SIGTERM": "stopped from outside (SIGTERM): a scheduler's time limit or preemption, a kill, or "
               "another node's agent; look for who sent it",
}


@dataclass(frozen=True)
class Marker:
    id: str
    says: str
    keywords: tuple[str, ...]
    pattern: re.Pattern
    weight: str
    retracted_by: str = ""  # the id of a "retract" marker whose later line takes this one back


class MarkerError(ValueError):
    """exits.toml is invalid; the message names the entry."""


def parse(text: str, origin: str = "exits.toml") -> tuple[Marker, ...]:
    try:
        entries = tomllib.loads(text).get("marker")
    except tomllib.TOMLDecodeError as exc:
        raise MarkerError(f"{origin}: {exc}") from None
    if not isinstance(entries, list) or not entries:
        raise MarkerError(f"{origin}: no [[marker]] entries")
    out = []
    for n, entry in enumerate(entries, 1):
        where = f"{origin}: marker {entry.get('id', n)}"
        try:
            marker = Marker(entry["id"], entry["says"], tuple(entry["keywords"]), re.compile(entry["pattern"]),
                            entry["weight"], entry.get("retracted_by", ""))
        except (KeyError, TypeError, re.error) as exc:
            raise MarkerError(f"{where}: {type(exc).__name__}: {exc}") from None
        if marker.weight not in WEIGHTS or not marker.keywords:
            raise MarkerError(f"{where}: weight must be one of {WEIGHTS} and keywords non-empty")
        for example in entry.get("examples", ()):
            if not (any(k in example for k in marker.keywords) and marker.pattern.search(example)):
                raise MarkerError(f"{where}: does not match its example {example!r}")
        out.append(marker)
    ids = {m.id for m in out}
    for m in out:
        if m.retracted_by and m.retracted_by not in ids:
            raise MarkerError(f"{origin}: marker {m.id}: retracted_by names no marker: {m.retracted_by}")
    return tuple(out)


def retract(exits: list) -> list:
    """The exit events less those a later line of the same input took back (XLA's "Thread is
    unstuck! Warning above was a false-positive" after its "may be stuck"), one for one, and less
    the retracting lines themselves, which say nothing else."""
    waiting: dict[tuple[str, int], list] = {}  # (retracting marker, input) -> lines it may take back
    taken: set[int] = set()
    for e in sorted(exits, key=lambda e: e.order):
        if e.signature.retracted_by:
            waiting.setdefault((e.signature.retracted_by, e.index), []).append(e)
        elif e.signature.weight == "retract" and (pending := waiting.get((e.signature.id, e.index))):
            taken.add(id(pending.pop(0)))
    return [e for e in exits if id(e) not in taken and e.signature.weight != "retract"]


@functools.lru_cache(maxsize=4)
def markers(path: str = DEFAULT_PATH) -> tuple[Marker, ...]:
    with open(path, encoding="utf-8") as fh:
        return parse(fh.read(), os.path.basename(path))


def keywords(path: str = DEFAULT_PATH) -> set[str]:
    return {k for m in markers(path) for k in m.keywords}


def match(body: str, table: tuple[Marker, ...] | None = None) -> tuple[Marker, dict] | None:
    """The first marker the line shows, and what its named groups say (empty ones dropped; a
    group named with a digit after it, `rank2`, is another alternative's `rank`)."""
    for marker in table if table is not None else markers():
        if any(k in body for k in marker.keywords):
            m = marker.pattern.search(body)
            if m:
                fields: dict = {}
                for k, v in m.groupdict().items():
                    if v:
                        fields.setdefault(k.rstrip("0123456789"), v)
                return marker, fields
    return None


def _signal(fields: dict) -> str:
    sig = fields.get("signal") or ""
    code = fields.get("code", "")
    if not sig and code.startswith("-"):
        sig = _SIGNALS.get(code[1:], "")
    if not sig and code.isdigit() and int(code) > 128:
        sig = _SIGNALS.get(str(int(code) - 128), "")
    return _SIGNALS.get(sig, sig)


def died_on_signal(e) -> bool:
    """Whether an exit marker says its process died on a signal (a crash or a kill)."""
    return e.signature.weight in ("exit", "error") and bool(_signal(e.fields or {}))


def serious(e) -> bool:
    """An exception or a signal is a failure; a lone NCCL WARN is not."""
    head = e.body[:80]
    return "WARN" not in e.body.split(":", 1)[0] and " WARN " not in head


def _rank_of(e, one_host: bool):
    # the rank the message states wins over a prefix's task label ("3: Abort(1091215) on node 0
    # (rank 0 in comm 0)", a ctest index in front of Intel MPI's own report)
    fields = e.fields or {}
    if fields.get("rank", "").isdigit():
        return int(fields["rank"])
    if e.rank is not None:
        return e.rank
    local = fields.get("local_rank", "")
    if local.isdigit() and one_host:
        return int(local)
    if e.local_rank is not None and one_host:
        return e.local_rank
    return None


def launcher_report(scan, event):
    """The rank and host a launcher's exit report gives for a line that names neither (a
    slurmstepd OOM line, then `srun: error: node: task 4: Out Of Memory`): the first report with
    a rank in the same input, at or after the line. None when there is none."""
    for e in sorted(scan.exits, key=lambda e: e.order):
        if e.index == event.index and e.order >= event.order and e.signature.weight == "exit":
            fields = e.fields or {}
            rank = e.rank if e.rank is not None else (int(fields["rank"]) if fields.get("rank", "").isdigit() else None)
            if rank is not None:
                return rank, e.host or fields.get("host", "")
    return None


def failed_finding(scan) -> Finding | None:
    """"Failed, cause not in the catalogue", quoting the decisive lines, or None when the log
    shows no failure at all (nor anything worse than a lone NCCL WARN)."""
    errors = [e for e in scan.unknown if serious(e)]
    done = [e for e in scan.exits if e.signature.weight == "done"]
    exits = [e for e in scan.exits if e.signature.weight in ("exit", "error")]
    echoes = [e for e in scan.exits if e.signature.weight == "echo"]
    if not (errors or exits or echoes):
        return None
    if not (exits or echoes) and done and all(any(d.index == e.index and d.order > e.order for d in done)
                                              for e in errors):
        return _survived(errors, done)
    one_host = len({e.host for e in scan.unknown + scan.exits if e.host} | set(scan.rank_host.values())) <= 1
    first_error = min(errors, key=lambda e: e.order) if errors else None
    first_exit = min(exits, key=lambda e: e.order) if exits else None
    lead = first_error or first_exit or min(echoes, key=lambda e: e.order)
    rank = _rank_of(lead, one_host)
    host = lead.host
    # the launcher's report often names the rank the error line does not
    for e in sorted(exits, key=lambda e: e.order) + sorted(echoes, key=lambda e: e.order):
        if rank is None:
            rank = _rank_of(e, one_host)
        host = host or (e.fields or {}).get("host", "") or e.host
    decisive = [e for e in (first_error, first_exit) if e is not None] or [lead]
    if first_error is None and first_exit is None:
        decisive = sorted(echoes, key=lambda e: e.order)[:1]
    codes = [(e.fields or {}).get("code") for e in exits if (e.fields or {}).get("code")]
    signals = [s for s in (_signal(e.fields or {}) for e in exits + scan.exits) if s]
    whom = f"rank {rank}" if rank is not None else "the job"
    if host:
        whom += f" on {host}"
    how = []
    if signals:
        how.append(f"signal {signals[0]}")
    if codes:
        how.append(f"exit code {codes[0]}")
    quote = redact_text(lead.body.strip()[:200])
    when = f" at {lead.time_text}" if lead.time_text else ""
    how_ = f" ({', '.join(how)})" if how else ""
    if lead is first_error:
        summary = f"{whom} failed first{how_} with an error the catalogue does not know{when}: {quote}"
    else:
        summary = f"{whom} failed{how_}{when}; the cause is not in the catalogue: {quote}"
    ranks = sorted({r for r in (_rank_of(e, one_host) for e in errors + exits) if r is not None})
    if len(ranks) > 1:
        summary += f" ({len(ranks)} ranks failed: {fold(str(r) for r in ranks)})"
    lines = [redact_text(e.raw.strip()[:300]) for e in decisive]
    where_ = f"{lead.source}:{lead.line}" if lead.line else lead.source
    explanation = ("The log shows the job failed (" + "; ".join(dict.fromkeys(
        e.signature.says for e in sorted(exits + echoes, key=lambda e: e.order)[:3])) + ")"
                   if exits or echoes else "The log shows an error")
    explanation += (", but no line matched a known failure signature. The first error a rank printed is "
                    "usually the cause; the decisive lines are quoted in the evidence. The catalogue "
                    "(distdoctor/logs/signatures.toml) could learn it.")
    return Finding(Status.FAIL, summary, subject="job-failed", explanation=explanation,
                   fix=_fix(signals, host, rank, where_, *_own_output(exits)),
                   evidence={"rank": rank, "host": host, "where": where_, "line": quote, "lines": lines,
                             "exit_codes": codes[:10], "signals": list(dict.fromkeys(signals))[:5],
                             "markers": sorted({e.signature.id for e in exits + echoes}),
                             "ranks": fold(str(r) for r in ranks), "errors": len(errors)})


def _survived(errors: list, done: list) -> Finding:
    """Errors the run printed and then finished anyway: a WARN, never a failed job."""
    first = min(errors, key=lambda e: e.order)
    last = max(done, key=lambda e: e.order)
    quote = redact_text(first.body.strip()[:200])
    where_ = f"{first.source}:{first.line}" if first.line else first.source
    return Finding(Status.WARN, f"errors were printed ({quote}), then the run finished: {last.signature.says} "
                                f"({redact_text(last.body.strip()[:80])})", subject="errors-then-finished",
                   explanation="No launcher or process reported a failure, and the program's own summary came "
                               "after every error line: the run survived them (a probe of a device it did not "
                               "use, a retried connection). They may still cost speed or hide a fallback.",
                   fix=remote.comment(f"read the lines around {where_} if the run was slower than expected"),
                   evidence={"where": where_, "line": quote, "errors": len(errors),
                             "finished": redact_text(last.raw.strip()[:200])})


def _own_output(exits: list) -> tuple[str, tuple[str, str] | None]:
    """Where a launcher says the failed worker's own output is: a log file it names (Paddle's
    log/workerlog.N), or the Kubernetes pod (and namespace) that exited."""
    fields = [e.fields or {} for e in sorted(exits, key=lambda e: e.order)]
    log = next((f["log"] for f in fields if f.get("log")), "")
    pod = next(((f["pod"], f.get("namespace", "default")) for f in fields if f.get("pod")), None)
    return log, pod


def _fix(signals: list[str], host: str, rank, where_: str, own_log: str = "",
         pod: tuple[str, str] | None = None) -> str:
    from distdoctor.logs.signatures import addressable

    target = f"ssh {host} " if host and addressable(host) else ""
    whom = f"rank {rank}" if rank is not None else "the failing rank"
    if any(s in _KILLED for s in signals):
        look = "dmesg -T | grep -i -E 'killed process|out of memory'"
        if target:
            return "# killed from outside (the kernel's OOM killer, a memory limit, a scheduler):\n" + target + look
        return remote.comment(f"killed from outside: on the node of {whom}, look for the OOM killer:") + f"\n# {look}"
    if signals and signals[0] in _STOPPED:
        return remote.comment(_STOPPED[signals[0]])
    if "SIGBUS" in signals:
        return (remote.comment(f"SIGBUS in a container is most often a full /dev/shm; on the node of {whom}:") + "\n"
                + (f"{target}df -h /dev/shm" if target else "# df -h /dev/shm"))
    if pod:
        return (remote.comment(f"the pod {pod[0]} exited; its own log holds the cause (from a machine with "
                               "access to the cluster):") + f"\nkubectl logs {pod[0]} -n {pod[1]}")
    if own_log:
        # the launcher kept the worker's output apart (Paddle's log/workerlog.N): the cause is there
        return remote.comment(f"the launcher names {whom}'s own log: read {own_log} (in the directory "
                              f"the job was launched from); its first error is usually the cause")
    return remote.comment(f"read the lines around {where_}: the first error of {whom} is usually the cause")
