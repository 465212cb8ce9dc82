"""`horovodrun --check-build`: which frameworks, controllers and tensor operations Horovod was
compiled with. Boxes are `[X]` or `[ ]`; real outputs carry trailing spaces, and the list of
operations changed over releases (DDL, MLSL, CCL, ROCm come and go), so names are kept as
printed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from distdoctor.parsers import ParseError

_BOX = re.compile(r"^\s*\[(?P<mark>[Xx ])\]\s+(?P<name>.+?)\s*$")
_VERSION = re.compile(r"^Horovod v?(?P<version>\S+?):?\s*$")
_SECTIONS = {
    "available frameworks:": "frameworks",
    "available controllers:": "controllers",
    "available tensor operations:": "operations",
}


@dataclass(frozen=True)
class HorovodBuild:
    version: str
    frameworks: dict[str, bool] = field(default_factory=dict)
    controllers: dict[str, bool] = field(default_factory=dict)
    operations: dict[str, bool] = field(default_factory=dict)
    # the output ends before its last list (a paste cut off): the lists after the cut, and the
    # last name before it, are not known
    cut: bool = False

    def built(self, section: str) -> list[str]:
        return [name for name, on in getattr(self, section).items() if on]


def parse_check_build(text: str) -> HorovodBuild:
    version = ""
    sections: dict[str, dict[str, bool]] = {"frameworks": {}, "controllers": {}, "operations": {}}
    current: str | None = None
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if not version and (m := _VERSION.match(line)):
            version = m["version"]
        elif line.lower() in _SECTIONS:
            current = _SECTIONS[line.lower()]
            seen.add(current)
        elif m := _BOX.match(raw):
            if current is None:
                raise ParseError("horovodrun", "a [X]/[ ] line before any section header", number, raw)
            sections[current][m["name"]] = m["mark"] in "Xx"
        elif version:
            raise ParseError("horovodrun", "unexpected line in --check-build output", number, raw)
    if not version or not any(sections.values()):
        raise ParseError("horovodrun", "no 'Horovod vX.Y.Z:' banner with framework/controller/operation lists")
    return HorovodBuild(version, **sections, cut="operations" not in seen)
