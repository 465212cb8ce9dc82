"""The one bound of a rank's run, and where its time went.

Every phase starts through `enter`, which records when the previous one ended, so that a run
cut off at the bound can say which phase used the time ("import torch took 9.1 s of the 10 s")
instead of blaming the transport. The watchdog enforces the same deadline from its own thread,
for the calls that hang past their own timeouts.
"""

from __future__ import annotations

import threading
import time


class Clock:
    def __init__(self, started: float, timeout: float, reserve: float | None = None):
        """started: time.monotonic() at the start of the process; reserve: time kept back before
        the deadline for naming stuck ranks and printing the report."""
        self.started = started
        self.timeout = timeout
        self.deadline = started + timeout
        self.reserve = min(2.5, 0.25 * timeout) if reserve is None else reserve
        self._lock = threading.Lock()
        self._marks: list[tuple[str, float]] = []

    def phase_deadline(self) -> float:
        """When the current phase must give up, so that the report still makes the bound."""
        return self.deadline - self.reserve

    def left(self) -> float:
        return max(0.05, self.phase_deadline() - time.monotonic())

    def enter(self, phase: str, at: float | None = None) -> None:
        with self._lock:
            self._marks.append((phase, time.monotonic() if at is None else at))

    @property
    def current(self) -> str:
        with self._lock:
            return self._marks[-1][0] if self._marks else ""

    def spent(self, now: float | None = None) -> list[tuple[str, float]]:
        """(phase, seconds) in order; the current phase counts up to now. A phase entered twice
        is summed."""
        now = time.monotonic() if now is None else now
        with self._lock:
            marks = list(self._marks)
        out: dict[str, float] = {}
        for i, (phase, at) in enumerate(marks):
            end = marks[i + 1][1] if i + 1 < len(marks) else now
            out[phase] = out.get(phase, 0.0) + max(0.0, end - at)
        return list(out.items())

    def blame(self, now: float | None = None) -> str:
        """Where the time went, biggest first: 'import torch 9.1 s, init 0.6 s, ...'."""
        parts = sorted(self.spent(now), key=lambda p: -p[1])
        return ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in parts if seconds >= 0.05) or "nothing yet"

    def hog(self, share: float = 0.4, now: float | None = None) -> tuple[str, float] | None:
        """The phase that used more than `share` of the bound, if one did."""
        spent = self.spent(now)
        if not spent:
            return None
        phase, seconds = max(spent, key=lambda p: p[1])
        return (phase, seconds) if seconds > share * self.timeout else None
