"""Tracebacks that Python prints and carries on after: not a failure of the job.

Python reports an exception it cannot raise (in a destructor, a finalizer, a thread's cleanup at
shutdown) under a header and goes on: Python 3's "Exception ignored in: <function ...>", Python
2's "close failed in file object destructor:". The report may hold "Error in sys.excepthook:"
and "Original exception was:" sections when the hook that prints it fails too (MPICH's mpd after
a run that printed its result, mpich#902). Those lines look like a crash to a reader that only
sees a Traceback and an `Error:` line. A traceback under no such header, or one that comes after
the report ended, is still read as usual. Pure: lines in, a verdict per line out.
"""

from __future__ import annotations

import re

# what opens a report Python carries on after; the keywords let the search find them in big logs
HEADERS = ("Exception ignored in", "close failed in file object destructor")
_HEADER = re.compile(r"^(?:Exception ignored in\b|close failed in file object destructor:)")
# the sections a report may hold when the hook printing it fails as well (a reader may have
# stripped the frames' indentation, so inside a report every line up to its exception line is
# the report's, within a bound)
_SECTION = re.compile(r"^(?:Error in sys\.excepthook:|Original exception was:)\s*$")
_EXCEPTION = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Warning|Exit|Interrupt)\b")
MAX_REPORT = 200  # lines


class Ignored:
    """Per input, whether the lines read now belong to a report Python ignored."""

    def __init__(self) -> None:
        # input index -> ("in", where the report began) inside a report, or ("after", ...) past
        # its exception line; where: the line number, or lines seen since when the input has none
        self._state: dict[int, tuple[str, int]] = {}
        self._seen: dict[int, int] = {}

    def feed(self, index: int, body: str, line_no: int = 0) -> bool:
        """Whether this line belongs to a report Python ignored. `line_no` (0: unknown) bounds a
        report by the input's own lines: a big input's search shows only some of them."""
        here = line_no or self._seen.get(index, 0) + 1
        self._seen[index] = here
        state, began = self._state.get(index, ("", 0))
        if _HEADER.match(body) or (state and _SECTION.match(body)):
            self._state[index] = ("in", here)
            return True
        if state == "in" and here - began <= MAX_REPORT:
            self._state[index] = ("after", began) if _EXCEPTION.match(body) else ("in", began)
            return True
        if state == "after" and not body.strip():
            return True
        # anything else ends the report, including a new traceback right after its exception line
        self._state.pop(index, None)
        return False
