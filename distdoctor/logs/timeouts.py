"""A collective that timed out: did a peer die, or did a step outside collectives outlast the
timeout? The watchdog line alone cannot tell; what the log shows just before it can.

The catalogue's reading of a c10d watchdog timeout is "another rank failed or hung; raising the
timeout only hides it". That is wrong when the log shows a rank starting a long step that is not
a collective (saving a checkpoint, evaluating, loading data) and nothing else until the timeout
fires: the other ranks waited in the next collective for the whole step. Then the right fix is
to let the step finish inside the timeout (raise it, or do the step on every rank with a barrier
after it), and raising the timeout is exactly what is needed. Pure: events in, a reading out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# NCCL's watchdog: "Timeout(ms)=600000"; gloo: "Timed out waiting 4000ms for recv operation"
TIMEOUT_MS = re.compile(r"Timeout\(ms\)=(?P<ms>\d+)|Timed out waiting (?P<gloo>\d+)ms")
# what a rank does between collectives that can take many minutes
_STEP = re.compile(r"(?i)\b(?:sav(?:e|ing)|checkpoint|evaluat|validat|eval\b|test(?:ing)?\b|load(?:ing)?\b|"
                   r"preprocess|tokeniz|generat|export|writ(?:e|ing)|upload|download|compil|convert|merg(?:e|ing)|"
                   r"build(?:ing)? (?:the )?(?:index|dataset|cache)|map(?:ping)?\b)")
# lines that are themselves part of the failure, not work a rank was doing
_NOT_WORK = re.compile(r"Watchdog|watchdog|NCCL|ProcessGroup|Traceback|Error|Exception|WARN|timed out|timeout")
LONG = 0.5  # of the timeout: a step this long before the timeout fired is the reading


@dataclass(frozen=True)
class Reading:
    step: str          # the step's line
    rank: object       # the rank that logged it, when the log says
    gap_s: float       # from the step's line to the timeout
    timeout_s: float


def _seconds(t) -> float | None:
    return None if t is None else float(t[3])


def step_before(events) -> Reading | None:
    """The long non-collective step a watchdog timeout followed, or None."""
    for e in sorted(events, key=lambda e: e.order):
        m = TIMEOUT_MS.search(e.body)
        fired = _seconds(e.time)
        if m is None or fired is None or not e.before:
            continue
        timeout_s = int(m.group("ms") or m.group("gloo")) / 1000.0
        for body, when, rank in reversed(e.before):
            if _NOT_WORK.search(body):
                continue
            started = _seconds(when)
            if started is None:
                break
            gap = (fired - started) % 86400.0
            if _STEP.search(body) and gap >= LONG * timeout_s:
                return Reading(body.strip()[:200], rank, gap, timeout_s)
            break  # the last thing a rank did was not a long step
    return None


def fix(reading: Reading) -> str:
    minutes = max(int(reading.gap_s * 2 // 60) + 1, int(reading.timeout_s * 2 // 60))
    return ("# a step outside collectives outlasted the collective timeout; if the step is meant to be that long, "
            "give it room:\n"
            f"# dist.init_process_group(..., timeout=datetime.timedelta(minutes={minutes}))   (and new_group(..., "
            "timeout=...) for subgroups, which do not inherit it)\n"
            "# or do the step on every rank, or end it with dist.barrier() on every rank, so no rank waits in a "
            "collective meanwhile")


def explanation(reading: Reading) -> str:
    who = f"rank {reading.rank}" if reading.rank is not None else "a rank"
    return (f"Just before the timeout, {who} logged {reading.step!r}, {_span(reading.gap_s)} before the "
            f"timeout fired (timeout {_span(reading.timeout_s)}), and nothing after it: the other ranks waited "
            "in the next collective while that step ran. A step that outlasts the timeout, not a dead peer, is "
            "the likely cause; raising the timeout (or synchronising around the step) is the fix here.")


def _span(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
