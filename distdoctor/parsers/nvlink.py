"""`nvidia-smi nvlink -s` (link state and speed per GPU) and `nvidia-smi nvlink -e` (error counters).

    GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5269b708-...)
             Link 0: 25 GB/s
             Link 1: <inactive>

    GPU 2: Tesla V100-SXM2-32GB-LS (UUID: GPU-d9ee...)
             Link 0: Replay Errors: 148
             Link 0: CRC Errors: 65535

A GPU without NVLink prints nothing under its header (an A10) or says so; both read as no links.
Newer drivers print "NVML: Unable to retrieve NVLink information as all links are inActive" under a
GPU whose links all went down (gpud#1085, a B200): no link listed, `all_inactive` set. A paste's
elision line (`...`, `....`, `[...]`) marks the GPU above it as cut (`elided`): its links are not all
there to count; one before any GPU is dropped.
Counters saturate at 65535 on older drivers: the value is a floor, not a count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from distdoctor.parsers import ParseError

TOOL = "nvidia-smi nvlink"

_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$")
_STATE = re.compile(r"^Link (\d+): (?:<(inactive|Inactive)>|([\d.]+) GB/s)\s*$")
_ERROR = re.compile(r"^Link (\d+): ([A-Za-z][A-Za-z /-]*?) Errors?: (\d+)\s*$")
_ELISION = re.compile(r"^(?:\.{3,}|\[\.\.\.\]|\u2026)$")
_ALL_INACTIVE = re.compile(r"^NVML: Unable to retrieve NVLink information as all links are inactive\b", re.I)
COUNTER_MAX = 65535


@dataclass(frozen=True)
class NvlinkGpu:
    index: int
    name: str
    uuid: str = ""
    links: dict[int, float | None] = field(default_factory=dict)  # link -> GB/s, None when inactive
    errors: dict[int, dict[str, int]] = field(default_factory=dict)  # link -> {"crc": n, "replay": n, ...}
    all_inactive: bool = False  # the driver said every link is inactive (no link listed)
    elided: bool = False  # the paste cut this GPU's listing: its links are not all here

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
        if _ELISION.match(line):
            if gpus:
                gpus[-1] = replace(gpus[-1], elided=True)
            continue
        if gpus and _ALL_INACTIVE.match(line):
            gpus[-1] = replace(gpus[-1], all_inactive=True)
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
