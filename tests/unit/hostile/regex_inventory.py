"""Every compiled regex distdoctor holds: module attributes (alone or in tuples, lists, dicts),
class attributes, each failure signature's patterns, each exit marker's (exits.toml) and each
unread tool's (logs/unread_tools.toml). Found by
discovery, so a regex added tomorrow is covered by the property tests the day it lands.

The modules that import torch at the top (test_no_torch_import.TORCH_MODULES) are read, not
imported: every worker of a parallel run collects these tests, and torch would cost each one a
second and a half. Reading them finds no regex to skip (test_regex_linear.py shows it)."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re

from tests.unit.core.test_no_torch_import import TORCH_MODULES

PACKAGES = ("distdoctor", "distdoctor.checks")
SKIP_MODULES = ("__main__",)


def _names():
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            if info.name.rsplit(".", 1)[-1] not in SKIP_MODULES:
                yield info.name


def _modules():
    for name in _names():
        if name not in TORCH_MODULES:
            yield importlib.import_module(name)


def not_imported() -> list[str]:
    """The modules the walk reads instead of importing (torch at their top)."""
    return [name for name in _names() if name in TORCH_MODULES]


@functools.lru_cache(maxsize=None)
def all_patterns() -> list[tuple[str, re.Pattern]]:
    found: dict[tuple[str, int], tuple[str, re.Pattern]] = {}

    def add(obj, where: str, depth: int = 0) -> None:
        if isinstance(obj, re.Pattern):
            found.setdefault((obj.pattern, obj.flags), (where, obj))
        elif depth < 3 and isinstance(obj, (list, tuple, set, frozenset)):
            for item in obj:
                add(item, where, depth + 1)
        elif depth < 3 and isinstance(obj, dict):
            for item in obj.values():
                add(item, where, depth + 1)

    for module in _modules():
        for key, value in vars(module).items():
            add(value, f"{module.__name__}.{key}")
            if isinstance(value, type) and value.__module__ == module.__name__:
                for attr, item in vars(value).items():
                    add(item, f"{module.__name__}.{key}.{attr}")
    from distdoctor.logs import signatures

    for signature in signatures.load():
        for pattern in signature.patterns:
            add(pattern, f"signature {signature.id}")
    add(vars(signatures.matcher()), "signatures.matcher()")
    from distdoctor.logs import outcome

    for marker in outcome.markers():
        add(marker.pattern, f"exit marker {marker.id}")
    from distdoctor.logs import pasted_unread

    for tool in pasted_unread.catalogue():
        add(tool.start, f"unread tool {tool.tool}")
        add(tool.within, f"unread tool {tool.tool} (within)")
    return sorted(found.values(), key=lambda wp: wp[0])
