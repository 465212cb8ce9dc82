"""Plain-text layout for the console view: word wrap and simple tables, without rich.

Importing rich and drawing with it is about a fifth of a warm `distdoctor check`, and most
reports are read without escape codes (piped, written with -o, a rank's log under a launcher).
These functions lay text out the way rich does for the subset the console view uses (greedy
word wrap that folds a word longer than the line; tables without borders, two spaces between
columns), so the output is the same with or without rich; tests/unit/core/test_plain_layout.py
compares the two. What they cannot lay out alike (a character that is not one cell wide for
certain, a table wider than the line) they decline, and the caller draws that block with rich.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_WORD = re.compile(r"(?:^\s*)?\S+\s*")  # blanks lead only the first word: a line of blanks is linear
TAB_SIZE = 8


def sanitize(text: str) -> str:
    """text without control characters other than newline and tab: an escape sequence in a
    host name or a tool's output must not reach the reader's terminal."""
    return _CONTROL.sub("", text)


def expand_tabs(spans: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Spans of one logical line, sanitized, with tabs turned into spaces to the next stop of
    TAB_SIZE counted across spans (rich measures a tab as no cell when it sizes a block, and
    as up to eight when it draws it: without tabs both agree)."""
    out: list[tuple[str, str]] = []
    column = 0
    for text, style in spans:
        text = sanitize(text)
        if "\t" in text:
            pieces = []
            for char in text:
                if char == "\t":
                    pad = TAB_SIZE - column % TAB_SIZE
                    pieces.append(" " * pad)
                    column += pad
                else:
                    pieces.append(char)
                    column = 0 if char == "\n" else column + 1
            text = "".join(pieces)
        else:
            column = len(text) - text.rfind("\n") - 1 if "\n" in text else column + len(text)
        out.append((text, style))
    return out


def _single_cell(char: str) -> bool:
    code = ord(char)
    return (0x20 <= code < 0x7f or 0xa0 <= code <= 0xff or 0x2010 <= code <= 0x2027
            or char in "✓✗⏱→←↑↓×•")


def plain_ok(text: str) -> bool:
    """Every character one cell wide for certain (the layout's width arithmetic is exact)."""
    return all(_single_cell(c) for c in text if c not in "\n\t")


def breaks(line: str, width: int) -> list[int]:
    """Offsets at which to break one line (no newline in it) to fit width; a word longer
    than width is folded over as many lines as it needs."""
    breaks: list[int] = []
    used = 0
    for match in _WORD.finditer(line):
        start, word = match.start(), match.group(0)
        visible = len(word.rstrip())
        if width - used >= visible:
            used += len(word)
        elif visible > width:
            chunks = [word[i:i + width] for i in range(0, len(word), width)]
            for index, chunk in enumerate(chunks):
                if start:
                    breaks.append(start)
                if index == len(chunks) - 1:
                    used = len(chunk)
                else:
                    start += len(chunk)
        elif used and start:
            breaks.append(start)
            used = len(word)
    return breaks


def wrap(text: str, width: int) -> list[str]:
    """text laid out in lines of at most width cells (trailing spaces may remain)."""
    out: list[str] = []
    for line in text.split("\n"):
        line = line.expandtabs(TAB_SIZE)  # callers expand tabs first (expand_tabs); this is for others
        offsets = [0, *breaks(line, width), len(line)]
        for begin, end in zip(offsets, offsets[1:]):
            out.append(line[begin:end][:width])  # only trailing whitespace can be past the edge
    return out


def table(columns: list[str], rows: list[list[str]], width: int) -> list[str] | None:
    """A header row and the rows, each column as wide as its widest cell, two spaces apart;
    None when that is wider than width or a cell is not plain single-line text."""
    cells = [[str(c) for c in columns]] + [[str(c) for c in row] for row in rows]
    if any(len(row) != len(columns) for row in cells) or not columns:
        return None
    if any("\n" in c or "\t" in c or not plain_ok(c) for row in cells for c in row):  # control chars fail plain_ok
        return None
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    if sum(widths) + 2 * (len(widths) - 1) > width:
        return None
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in cells]
