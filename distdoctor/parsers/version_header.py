"""C headers that spell their version as `#define <PREFIX>_MAJOR 9` lines: cudnn_version.h
(CUDNN_MAJOR, _MINOR, _PATCHLEVEL) and MIOpen's version.h (MIOPEN_VERSION_MAJOR, _MINOR, _PATCH)."""

from __future__ import annotations

import re

_CUDNN = re.compile(r"#define\s+CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)")
_MIOPEN = re.compile(r"#define\s+MIOPEN_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)")


def _dotted(parts: dict[str, str], patch: str) -> str | None:
    if "MAJOR" not in parts:
        return None
    return f"{parts['MAJOR']}.{parts.get('MINOR', '0')}.{parts.get(patch, '0')}"


def parse_cudnn_version_h(text: str) -> str | None:
    """'9.1.0'; None when the header defines no CUDNN_MAJOR (cudnn.h of cuDNN 8+ includes it instead)."""
    return _dotted(dict(_CUDNN.findall(text)), "PATCHLEVEL")


def parse_miopen_version_h(text: str) -> str | None:
    return _dotted(dict(_MIOPEN.findall(text)), "PATCH")
