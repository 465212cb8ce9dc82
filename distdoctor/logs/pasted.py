"""Tool output pasted into a log or an issue: recognised and judged like a live node."""

from __future__ import annotations

from distdoctor.model import CheckRun


def runs(texts: list[tuple[str, str]]) -> list[CheckRun]:
    return []
