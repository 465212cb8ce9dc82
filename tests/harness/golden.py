"""The golden runner's machinery (jc's style): every capture in tests/data/<tool>/ beside its
expected parse, <capture>.parsed.json, and one table (tests/data/parsers.toml) naming the parser
of each folder's captures.

    python -m tests.harness.golden write tests/data/ibstat/ibstat_new_capture.txt   # a new one
    python -m tests.harness.golden check                                            # all, quietly

`write` refuses to overwrite an existing expected parse unless given --force: a changed parse is
a decision to read and review, not a file to regenerate.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import gzip
import importlib
import json
import math
import os
import sys
import tomllib
from typing import Any, Callable, Iterator

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
TABLE = os.path.join(DATA, "parsers.toml")
SUFFIX = ".parsed.json"


@dataclasses.dataclass(frozen=True)
class Capture:
    path: str      # absolute
    parser: str    # "<module>:<function>", as written in the table

    @property
    def name(self) -> str:
        return os.path.relpath(self.path, DATA)

    @property
    def expected_path(self) -> str:
        path = self.path[:-3] if self.path.endswith(".gz") else self.path
        return os.path.splitext(path)[0] + SUFFIX


def table(path: str = TABLE) -> dict[str, dict[str, str]]:
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def captures(path: str = TABLE) -> list[Capture]:
    """Every file the table's patterns match, each with its parser; a file matched by two
    patterns is an error in the table, not a choice."""
    found: dict[str, Capture] = {}
    for folder, patterns in table(path).items():
        root = os.path.normpath(os.path.join(DATA, folder))
        names = sorted(n for n in os.listdir(root) if not n.endswith(SUFFIX))
        for pattern, parser in patterns.items():
            for name in fnmatch.filter(names, pattern):
                capture = Capture(os.path.join(root, name), parser)
                if capture.path in found:
                    raise ValueError(f"{capture.name} is matched by two patterns in {TABLE}")
                found[capture.path] = capture
    return sorted(found.values(), key=lambda c: c.name)


def parser(name: str) -> Callable[[str], Any]:
    module, function = name.split(":")
    return getattr(importlib.import_module(f"distdoctor.parsers.{module}"), function)


def read(path: str) -> str:
    """The capture as the fact that runs the tool would see it: UTF-8, undecodable bytes replaced."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return fh.read().decode("utf-8", "replace")


def jsonable(value: Any) -> Any:
    """A parse as JSON: dataclasses as their fields (not their properties: those are derived and
    tested where they matter), tuples as lists, enums as their values, dict keys as text (a
    tuple key reads as Python writes it), NaN and infinities as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((jsonable(v) for v in value), key=repr)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{type(value).__name__} in a parse has no JSON form: teach tests/harness/golden.py")


def parse(capture: Capture) -> Any:
    return jsonable(parser(capture.parser)(read(capture.path)))


def expected(capture: Capture) -> Any:
    with open(capture.expected_path, encoding="utf-8") as fh:
        return json.load(fh)


def dump(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False) + "\n"


def _by_path(paths: list[str]) -> Iterator[Capture]:
    known = {c.path: c for c in captures()}
    for path in paths:
        full = os.path.abspath(path)
        if full not in known:
            raise SystemExit(f"{path}: no pattern in {TABLE} matches it; add one first")
        yield known[full]


def main(argv: list[str]) -> int:
    if argv[:1] == ["write"] and len(argv) > 1:
        force = "--force" in argv
        for capture in _by_path([a for a in argv[1:] if a != "--force"]):
            if os.path.exists(capture.expected_path) and not force:
                print(f"{capture.expected_path} exists; --force to replace it", file=sys.stderr)
                return 1
            with open(capture.expected_path, "w", encoding="utf-8") as fh:
                fh.write(dump(parse(capture)))
            print(f"wrote {os.path.relpath(capture.expected_path)}: read it against the capture")
        return 0
    if argv == ["check"]:
        bad = [c.name for c in captures() if not os.path.exists(c.expected_path) or parse(c) != expected(c)]
        print("\n".join(bad) or "every capture parses as expected")
        return 1 if bad else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
