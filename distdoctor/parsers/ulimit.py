"""`ulimit -a` (bash, also `-Sa`/`-Ha`): each limit with its unit and flag, as printed. bash
writes `label   (unit, -f) value`, or `label   (-f) value` for a limit without a unit; zsh's
`ulimit -a` writes `-f: label (unit)   value`. Values are a number or `unlimited`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from distdoctor.parsers import ParseError

# The label's words are joined by single blanks so that the blanks before the unit belong to \s+
# alone: a label that could also take blanks makes a long run of them quadratic.
_LABEL = r"(?P<label>[A-Za-z][\w./-]*(?: [\w./-]+)*)"
_BASH = re.compile(rf"^{_LABEL}\s+\((?:(?P<unit>[^(),]+),\s*)?-(?P<flag>[A-Za-z])\)\s+(?P<value>unlimited|\d+)\s*$")
_ZSH = re.compile(rf"^-(?P<flag>[A-Za-z]):\s+{_LABEL}(?:\s+\((?P<unit>[^()]+)\))?\s+(?P<value>unlimited|\d+)\s*$")


@dataclass(frozen=True)
class Limit:
    flag: str  # l, n, s ...
    label: str  # max locked memory
    unit: str  # kbytes, blocks, '' for a count
    value: int | None  # None is unlimited

    @property
    def bytes(self) -> int | None:
        """The limit in bytes for the size limits bash prints in kbytes (None: unlimited)."""
        if self.value is None:
            return None
        return self.value * 1024 if self.unit.lower() == "kbytes" else self.value


def parse_ulimit(text: str) -> dict[str, Limit]:
    """The limits by flag ('l' is locked memory)."""
    limits: dict[str, Limit] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("ulimit", "$", "#")):
            continue
        m = _BASH.match(line) or _ZSH.match(line)
        if m is None:
            raise ParseError("ulimit", "not a `ulimit -a` line", number, raw)
        value = m["value"]
        limits[m["flag"]] = Limit(m["flag"], m["label"].strip(), (m["unit"] or "").strip(),
                                  None if value == "unlimited" else int(value[:30]))
    if not limits:
        raise ParseError("ulimit", "no limit lines")
    return limits


def is_limit_line(line: str) -> bool:
    """Whether line (stripped) is one line of `ulimit -a`."""
    return bool(_BASH.match(line) or _ZSH.match(line))
