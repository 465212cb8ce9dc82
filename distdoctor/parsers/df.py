"""`df`, `df -h`, `df -k`, `df -hT`: one row per mounted filesystem. A filesystem name too long
for its column wraps the numbers onto the next line (older coreutils); `-h` sizes carry a unit
(`64M`, `7.9G`, `1.0T`, `4.0K`, `0`), `-k`/plain ones are 1K blocks."""

from __future__ import annotations

import re
from dataclasses import dataclass

from distdoctor.parsers import ParseError

_HEADER = re.compile(r"^Filesystem\s+(?:Type\s+)?(?:Size|1K-blocks|1024-blocks|\d+[KMG]?-blocks)\s+Used\s+Avail(?:able)?"
                     r"\s+(?:Use|Capacity)%\s+Mounted on\s*$")
_SIZE = r"\d+(?:[.,]\d+)?[KMGTPE]?i?"
_NUMBERS = re.compile(rf"^(?:(?P<type>[a-z][\w.]*)\s+)?(?P<size>{_SIZE})\s+(?P<used>{_SIZE})\s+(?P<avail>{_SIZE})\s+"
                      r"(?P<pct>\d+%|-)\s+(?P<mount>/\S*(?: \S+)*)\s*$")
_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4, "P": 1024 ** 5, "E": 1024 ** 6}


@dataclass(frozen=True)
class Mount:
    filesystem: str
    mount: str
    size: str  # as printed
    size_bytes: int | None


def _bytes(size: str, human: bool) -> int | None:
    m = re.match(r"^(\d+(?:[.,]\d+)?)([KMGTPE]?)i?$", size)
    if m is None:
        return None
    number = float(m[1].replace(",", "."))
    return int(number * (_UNITS[m[2]] if human else 1024))


def parse_df(text: str) -> list[Mount]:
    """The rows under the first header line; a row cut off at the end of the text is dropped."""
    lines = text.splitlines()
    start = next((k for k, line in enumerate(lines) if _HEADER.match(line.strip())), None)
    if start is None:
        raise ParseError("df", "no 'Filesystem ... Mounted on' header line")
    human = "Size" in lines[start]
    mounts: list[Mount] = []
    pending = ""
    for raw in lines[start + 1:]:
        line = raw.strip()
        if not line:
            break
        parts = line.split(None, 1)
        whole = _NUMBERS.match(parts[1]) if len(parts) == 2 else None
        if whole is None and pending and (cont := _NUMBERS.match(line)):
            whole, parts = cont, [pending, line]
        if whole is None:
            if len(parts) == 1:
                pending = parts[0]  # a long filesystem name: its numbers are on the next line
                continue
            break  # not a df row: the paste went on with something else
        pending = ""
        mounts.append(Mount(parts[0], whole["mount"], whole["size"], _bytes(whole["size"], human)))
    return mounts
