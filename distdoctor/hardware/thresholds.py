"""The published thresholds (thresholds.toml, next to this module), loaded once."""

from __future__ import annotations

import functools
import os

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PATH = os.path.join(os.path.dirname(__file__), "thresholds.toml")


@functools.lru_cache(maxsize=1)
def load() -> dict:
    with open(PATH, "rb") as fh:
        return tomllib.load(fh)
