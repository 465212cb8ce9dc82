"""How many NVLink links an SXM product uses (nvlink.toml, next to this module)."""

from __future__ import annotations

import functools
import os
import re

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PATH = os.path.join(os.path.dirname(__file__), "nvlink.toml")


@functools.lru_cache(maxsize=1)
def _products() -> tuple[tuple[re.Pattern[str], int], ...]:
    with open(PATH, "rb") as fh:
        data = tomllib.load(fh)
    return tuple((re.compile(p["name"]), int(p["links"])) for p in data.get("product", ()))


def expected_links(name: str) -> int | None:
    """The links a GPU of this product name uses, or None where it depends on the board (PCIe)."""
    name = " ".join(name.split())
    for pattern, links in _products():
        if pattern.fullmatch(name):
            return links
    return None
