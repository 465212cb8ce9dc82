"""NVIDIA Fabric Manager's log (/var/log/fabricmanager.log) and its journal
(`journalctl -u nvidia-fabricmanager`): the NVSwitch errors it detected and how it started.

    [Dec 19 2024 19:17:49] [ERROR] [tid 1374] detected NVSwitch non-fatal error 12028 on fid 0 on
        NVSwitch pci bus id 00000000:83:00.0 physical id 0 port 34
    ... nv-fabricmanager[1120]: Successfully configured all the available NVSwitches ...
    ... failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]

The error codes are SXids (distdoctor/hardware/sxid.toml judges them). Lines it does not know are
skipped: the log is mostly inband messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

_ERROR = re.compile(r"detected NVSwitch (non-fatal|fatal) error (\d+) on .*?pci bus id ([0-9A-Fa-f:.]+)"
                    r"(?:.*?\bport (\d+))?")
_TIME = re.compile(r"^\[(\w{3} \d{1,2} \d{4} \d\d:\d\d:\d\d)\]")


@dataclass(frozen=True)
class FmError:
    code: int
    fatal: bool
    switch: str  # the NVSwitch's PCI bus id
    port: int | None
    time: float | None  # epoch seconds (the log's own clock, read as UTC)
    line: int


@dataclass(frozen=True)
class FabricManagerLog:
    errors: tuple[FmError, ...]
    configured: bool  # "Successfully configured all the available NVSwitches"
    nothing_to_do: bool  # NV_WARN_NOTHING_TO_DO: no NVSwitch here (harmless)
    start_failed: bool  # the service's start script reported a failure


def _time(line: str) -> float | None:
    m = _TIME.match(line)
    if not m:
        return None
    try:
        return datetime.strptime(m.group(1), "%b %d %Y %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def parse_fabric_manager_log(text: str) -> FabricManagerLog:
    errors: list[FmError] = []
    for number, line in enumerate(text.splitlines(), 1):
        if "detected NVSwitch" in line:
            m = _ERROR.search(line)
            if m:
                errors.append(FmError(int(m.group(2)), m.group(1) == "fatal", m.group(3).lower(),
                                      int(m.group(4)) if m.group(4) else None, _time(line), number))
    return FabricManagerLog(tuple(errors), "Successfully configured all the available NVSwitches" in text,
                            "NV_WARN_NOTHING_TO_DO" in text,
                            bool(re.search(r"nv-fabricmanager[^\n]*\" failed!|nvidia-fabricmanager\.service: (?:Main|Control) "
                                           r"process exited, code=exited, status=[1-9]", text)))
