"""`nvidia-smi nvlink -s` (link state and speed per GPU) and `nvidia-smi nvlink -e` (error counters).

    GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5269b708-...)
             Link 0: 25 GB/s
             Link 1: <inactive>

    GPU 2: Tesla V100-SXM2-32GB-LS (UUID: GPU-d9ee...)
             Link 0: Replay Errors: 148
             Link 0: CRC Errors: 65535

A GPU without NVLink prints nothing under its header (an A10) or says so; both read as no links.
Counters saturate at 65535 on older drivers: the value is a floor, not a count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from distdoctor.parsers import ParseError

TOOL = "nvidia-smi nvlink"

_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$")
_STATE = re.compile(r"^Link (\d+): (?:<(inactive|Inactive)>|([\d.]+) GB/s)\s*$")
_ERROR = re.compile(r"^Link (\d+): ([A-Za-z][A-Za-z /-]*?) Errors?: (\d+)\s*$")
COUNTER_MAX = 65535


@dataclass(frozen=True)
class NvlinkGpu:
    index: int
    name: str
    uuid: str = ""
    links: dict[int, float | None] = field(default_factory=dict)  # link -> GB/s, None when inactive
    errors: dict[int, dict[str, int]] = field(default_factory=dict)  # link -> {"crc": n, "replay": n, ...}

    @property
    def active(self) -> list[int]:
        return sorted(n for n, speed in self.links.items() if speed)

    @property
    def inactive(self) -> list[int]:
        return sorted(n for n, speed in self.links.items() if not speed)


def _gpus(text: str, line_kind) -> tuple[NvlinkGpu, ...]:
    gpus: list[NvlinkGpu] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        head = _GPU.match(line)
        if head:
            gpus.append(NvlinkGpu(int(head.group(1)), head.group(2).strip(), head.group(3) or ""))
            continue
        if not gpus:
            raise ParseError(TOOL, "a line before any 'GPU n:' header", number, raw)
        line_kind(gpus[-1], line)
    if not gpus:
        raise ParseError(TOOL, "no 'GPU n:' header (empty output?)")
    return tuple(gpus)


def parse_nvlink_status(text: str) -> tuple[NvlinkGpu, ...]:
    """`nvidia-smi nvlink -s`: each GPU's links, GB/s or None for <inactive>."""
    def line_kind(gpu: NvlinkGpu, line: str) -> None:
        m = _STATE.match(line)
        if m:
            gpu.links[int(m.group(1))] = None if m.group(2) else float(m.group(3))
    return _gpus(text, line_kind)


def parse_nvlink_errors(text: str) -> tuple[NvlinkGpu, ...]:
    """`nvidia-smi nvlink -e`: per link, the counters by name (crc, replay, recovery, ...).
    Summary lines some outputs carry ("Links 1-5: ...") are skipped: they say nothing per link."""
    def line_kind(gpu: NvlinkGpu, line: str) -> None:
        m = _ERROR.match(line)
        if m:
            name = m.group(2).strip().lower().replace(" ", "_")
            gpu.errors.setdefault(int(m.group(1)), {})[name] = int(m.group(3))
    return _gpus(text, line_kind)
