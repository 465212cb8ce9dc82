"""The version line a compiler or build tool prints for `--version`: gcc, clang, cmake (the
first dotted number), nvcc (its `release 12.4` line, not the copyright years or V12.4.131)."""

from __future__ import annotations

import re

_DOTTED = re.compile(r"(?<!\d)(\d+\.\d+(?:\.\d+)?)")  # starts only where a run of digits starts: linear
_NVCC_RELEASE = re.compile(r"release (\d+\.\d+)")


def parse_version_banner(text: str) -> str | None:
    match = _DOTTED.search(text)
    return match.group(1) if match else None


def parse_nvcc_version(text: str) -> str | None:
    match = _NVCC_RELEASE.search(text)
    return match.group(1) if match else None
