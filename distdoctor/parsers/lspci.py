"""`lspci` lines (plain, `-nn`, `-D`, grep'd): slot, class, device and revision. `(rev ff)` is
what lspci prints when the device answers config-space reads with all ones: it no longer
responds (a GPU fallen off the bus)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from distdoctor.parsers import line_matches

_LINE = re.compile(r"^(?P<slot>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) (?P<cls>[0-9A-Za-z][^:\[]*?)"
                   r"(?: \[[0-9a-fA-F]{4}\])?: (?P<device>.+?)(?: \(rev (?P<rev>[0-9a-fA-F]{2})\))?"
                   r"(?: \(prog-if [^)]*\))?\s*$")


@dataclass(frozen=True)
class PciDevice:
    slot: str
    cls: str  # "3D controller", "VGA compatible controller", ...
    device: str  # "NVIDIA Corporation GP108M [GeForce MX250]" (with [10de:1d13] under -nn)
    rev: str | None

    @property
    def nvidia(self) -> bool:
        return "NVIDIA" in self.device or "[10de:" in self.device


def is_lspci_line(line: str) -> bool:
    return bool(_LINE.match(line))


def parse_lspci(text: str) -> list[PciDevice]:
    return [PciDevice(m["slot"], m["cls"].strip(), m["device"].strip(), m["rev"])
            for m in line_matches(text, _LINE, "lspci", "an lspci device line")]
