"""Every compiled regex distdoctor holds: module attributes (alone or in tuples, lists, dicts),
class attributes, each failure signature's patterns and each exit marker's (exits.toml). Found by discovery, so a regex added
tomorrow is covered by the property tests the day it lands."""

from __future__ import annotations

import importlib
import pkgutil
import re

PACKAGES = ("distdoctor", "distdoctor.checks")
SKIP_MODULES = ("__main__",)


def _modules():
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            if info.name.rsplit(".", 1)[-1] in SKIP_MODULES:
                continue
            yield importlib.import_module(info.name)


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
    return sorted(found.values(), key=lambda wp: wp[0])
