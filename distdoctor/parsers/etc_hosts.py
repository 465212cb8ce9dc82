"""/etc/hosts (hosts(5)): `ADDRESS NAME [ALIASES...]` per line, `#` to the end of a line is a
comment. Pure: text in, entries out; a line that does not parse is skipped (the resolver skips
it too)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class HostsLine:
    number: int  # 1-based line number in the file
    text: str  # the line as written, comment included
    address: str
    names: tuple[str, ...]

    @property
    def loopback(self) -> bool:
        try:
            return ipaddress.ip_address(self.address.split("%", 1)[0]).is_loopback
        except ValueError:
            return False


def parse_etc_hosts(text: str) -> list[HostsLine]:
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if len(words) < 2:
            continue
        try:
            ipaddress.ip_address(words[0].split("%", 1)[0])
        except ValueError:
            continue
        out.append(HostsLine(number, line, words[0], tuple(words[1:])))
    return out


def loopback_lines(text: str, name: str) -> list[HostsLine]:
    """The lines that map `name` (or its short form) to a loopback address, as glibc's `files`
    source would answer `getent hosts NAME` from them."""
    short = name.split(".", 1)[0].lower()
    return [line for line in parse_etc_hosts(text) if line.loopback
            and any(n.lower() in (name.lower(), short) for n in line.names)]
