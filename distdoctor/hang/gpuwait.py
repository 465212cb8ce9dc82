"""Is a rank waiting for its own GPU? From its innermost Python frame and that frame's source line
(read on the rank's node by collect.py): a call that copies a result to the host or synchronizes
waits for everything queued on the GPU before it, spinning a core while it does. The idioms are
data (gpuwait.toml). Pure."""

from __future__ import annotations

import functools
import os
import re
from typing import Sequence

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from distdoctor.hang.stacks import Frame

MAX_CODE = 200  # characters of a source line kept in a snapshot


@functools.lru_cache(maxsize=1)
def _catalogue() -> tuple[tuple[tuple[re.Pattern[str], str], ...], tuple[tuple[str, str], ...]]:
    with open(os.path.join(os.path.dirname(__file__), "gpuwait.toml"), "rb") as fh:
        doc = tomllib.load(fh)
    calls = tuple((re.compile(c["pattern"]), str(c["what"])) for c in doc.get("calls", []))
    functions = tuple((str(f["name"]), str(f["file"])) for f in doc.get("functions", []))
    return calls, functions


def source_frame(frames: Sequence[Frame]) -> Frame | None:
    """The frame whose source line is worth reading: the innermost Python frame, if it is the
    job's own code (a library's line says less than the job's call into it)."""
    python = [f for f in frames if not f.native]
    return python[0] if python and not python[0].library else None


def why(frames: Sequence[Frame], code: str) -> str:
    """What the rank waits for its GPU in ("a CUDA synchronize"), or "" when it does not."""
    calls, functions = _catalogue()
    python = [f for f in frames if not f.native]
    if not python:
        return ""
    inner = python[0]
    for name, prefix in functions:
        if inner.name == name and (inner.file.startswith(prefix) or f"/{prefix}" in inner.path):
            return f"{name}() in {inner.file}"
    if code and not inner.library:
        for pattern, what in calls:
            if pattern.search(code):
                return what
    return ""


def line_of(text: str, number: int) -> str:
    """Line `number` (1-based) of a source text, stripped and cut to MAX_CODE; "" if absent."""
    if number < 1:
        return ""
    lines = text.splitlines()
    return lines[number - 1].strip()[:MAX_CODE] if number <= len(lines) else ""
