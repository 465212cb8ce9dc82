"""The grep processes that search a large input's blocks, and the order their answers are read in.

Every block goes to one of a few streaming greps ("lanes"), each followed by a sentinel line
whose number in that grep's `-n` output closes the block and counts its lines. A block read into
this process is fed through its pipe; a block left in the file (`reader.Ref`) is sent from the
page cache. A big plain file's blocks are dealt to the lanes in turn, so the searches of one
file run on several cores at once; everything else goes to the first lane, as one stream.

Whatever lane answers first, the answers come back in block order: a block's matching lines
are handed on only once every block before it is closed, since line numbers, the lines before
a timeout and torchrun's records all read the input in order. The answers for blocks not yet
due wait here, at most HOLD bytes of them (a file where every line matches): past that, no
block is fed until the first lane's answers come and are handed on.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A line no log holds, fed to grep after each block: its line number in grep's output tells
# how many lines the block had, so this process never counts them (0.36 s per GiB).
SENTINEL = b"\x01distdoctor-block-end\x02"
# answers (candidate lines) held for blocks not yet due: a lane is fed at most a few blocks ahead
# (LineFilter's queue), but with many lanes on a file of matching lines those few add up
HOLD = 16 * 1024 * 1024


@dataclass
class _Due:
    """A block fed to a lane, until its answer is handed on."""
    span: Any  # the caller's record of the block
    lane: _Lane | None
    rows: list[tuple[int, bytes]] = field(default_factory=list)  # (0-based line in the block, line)
    lines: int | None = None  # its line count, once its sentinel came back
    closed: bool = False


@dataclass
class _Lane:
    filter: Any  # a host LineFilter
    due: collections.deque[_Due] = field(default_factory=collections.deque)
    next: int = 1  # grep's number of the first line of the block at the head of `due`


# What the caller is handed, in block order: ("row", span, 0-based line in its block, line) and
# ("end", span, the block's line count, or None when the search of that block was lost).
Answer = tuple


class Search:
    """Up to `width` greps, started by `start()` (a LineFilter, or None where grep cannot run)."""

    def __init__(self, start: Callable[[], Any], width: int, timeout: float):
        self._start = start
        self.width = max(1, width)
        self.timeout = timeout  # the longest wait for the first lane's answer while holding HOLD
        self._held = 0  # bytes of the lines in _Due.rows
        self._lanes: list[_Lane] = []
        self._order: collections.deque[_Due] = collections.deque()
        self.notes: list[str] = []

    def open(self) -> bool:
        """Start the first lane; False when grep cannot run (the caller searches itself)."""
        if not self._lanes:
            f = self._start()
            if f is None:
                return False
            self._lanes.append(_Lane(f))
        return True

    def _lane(self, turn: int) -> _Lane | None:
        while len(self._lanes) < min(self.width, turn + 1):
            f = self._start()
            if f is None:
                break  # no more processes: the lanes there are share the work
            self._lanes.append(_Lane(f))
        return self._lanes[turn % len(self._lanes)] if self._lanes else None

    def add(self, span, data: bytes = b"", ref=None, turn: int = 0) -> list[Answer]:
        """Feed one block (its data, or its Ref) to lane `turn` (modulo the lanes there are);
        return the answers now due."""
        lane = self._lane(turn)
        due = _Due(span, lane)
        if lane is None:
            due.closed = True  # nothing will answer for it: handed on as lost, in its turn
            note = "grep, which picks the candidate lines of large inputs, could not be started: some lines may be missing"
            if note not in self.notes:
                self.notes.append(note)
        elif lane.filter.ended:
            due.closed = True  # its grep died: lost too (close() says how)
        else:
            lane.due.append(due)
            if ref is not None:
                lane.filter.feed_range(ref.file, ref.start, ref.end)
                if ref.newline:
                    lane.filter.feed(b"\n")
            else:
                lane.filter.feed(data)
            lane.filter.feed(SENTINEL + b"\n")
        self._order.append(due)
        out = self.ready()
        if self._held > HOLD:
            out += self._catch_up()
        return out

    def _catch_up(self) -> list[Answer]:
        """Wait for the answers due first until fewer than HOLD bytes are held (grep runs
        --line-buffered: a block's answer does not wait for more input). A lane that ends or says
        nothing for `timeout` stops the wait; its blocks are lost when it is closed."""
        out: list[Answer] = []
        quiet_since = time.monotonic()
        while self._held > HOLD and self._order and self._order[0].lane is not None:
            lane = self._order[0].lane
            rows = lane.filter.take(wait=0.5)
            if rows:
                quiet_since = time.monotonic()
            elif lane.filter.ended or time.monotonic() - quiet_since > self.timeout:
                lane.filter.kill()  # stopped or stuck: its blocks are lost (close() says so)
                while lane.due:
                    lane.due.popleft().closed = True
            self._collect(lane, rows)
            out += self._hand_on()
        return out

    def ready(self) -> list[Answer]:
        """The answers due now, without waiting."""
        for lane in self._lanes:
            self._collect(lane, lane.filter.take())
        return self._hand_on()

    def close(self, abort: bool = False) -> list[Answer]:
        """End every lane (killed first when `abort`: an interrupt) and hand on the rest: every
        block fed so far is answered (or lost, with a note). The next add() starts lanes anew."""
        lanes, self._lanes = self._lanes, []
        out: list[Answer] = []
        for lane in lanes:
            if abort:
                lane.filter.kill()
            rows, code = lane.filter.close()
            if abort:
                continue
            self._collect(lane, rows)
            if code not in (0, 1) or lane.filter.error:
                self.notes.append(f"grep, which picks the candidate lines of large inputs, failed "
                                  f"({lane.filter.error or f'exit {code}'}): some lines may be missing")
            elif lane.filter.shrunk:
                self.notes.append(f"a file shrank while it was read ({lane.filter.shrunk}): some lines may be missing")
            while lane.due:
                lane.due.popleft().closed = True  # lost: its grep failed (noted above)
        if abort:
            self._order.clear()
            self._held = 0
            return out
        return self._hand_on()

    def _collect(self, lane: _Lane, rows: list[bytes]) -> None:
        """grep -n output, `N:line`, N counted over everything this lane was fed: back to its
        block and line. The sentinel after each block closes it: its number counts the lines."""
        for row in rows:
            number, sep, text = row.partition(b":")
            if not sep or not number.isdigit() or not lane.due:
                continue
            n = int(number)
            due = lane.due[0]
            body = text.rstrip(b"\n")
            if body == SENTINEL:
                due.lines = n - lane.next
                due.closed = True
                lane.next = n + 1
                lane.due.popleft()
            else:
                due.rows.append((n - lane.next, body))
                self._held += len(body)

    def _hand_on(self) -> list[Answer]:
        """Answers of the blocks at the front of the input order: the first block's rows as they
        come (the scanner streams them), each block's end once it is closed."""
        out: list[Answer] = []
        while self._order:
            due = self._order[0]
            if due.rows:
                out.extend(("row", due.span, k, body) for k, body in due.rows)
                self._held -= sum(len(body) for _k, body in due.rows)
                due.rows = []
            if not due.closed:
                break
            out.append(("end", due.span, due.lines))
            self._order.popleft()
        return out
