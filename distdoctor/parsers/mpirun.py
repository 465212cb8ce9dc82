"""`mpirun --version` / `mpiexec --version`: which MPI implementation a launcher belongs to.

Formats seen in the wild:
  Open MPI 1.x-4.x  `mpirun (Open MPI) 4.1.4`, or `mpiexec (OpenRTE) 4.1.4` when called as
                    mpiexec/orterun; 5.x the same with an https bug URL.
  MPICH (Hydra)     `HYDRA build details:` then `    Version:   4.0.2` and padded key/value lines.
  MVAPICH2          the Hydra block, with mvapich in the prefix or the ch3:mrail/ch3:psm device.
  Intel MPI         `Intel(R) MPI Library for Linux* OS, Version 2021.8 Build 20221129 (id: ...)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from distdoctor.parsers import ParseError

OPEN_MPI = "Open MPI"
MPICH = "MPICH"
MVAPICH = "MVAPICH"
INTEL_MPI = "Intel MPI"

_OMPI = re.compile(r"^(?P<prog>\S+) \((?:Open MPI|OpenRTE|Open RTE)\) (?P<version>\S+)\s*$")
_INTEL = re.compile(r"^Intel\(R\) MPI Library .*?Version (?P<version>[\w.]+)(?: Build (?P<build>\w+))?")
# The key starts on a non-blank and the value ends on one, so no blank is shared by two parts.
_HYDRA_KEY = re.compile(r"^\s+(?P<key>[^:\s][^:]*?):\s*(?P<value>(?:.*\S)?)\s*$")


@dataclass(frozen=True)
class MpiVersion:
    implementation: str  # one of OPEN_MPI, MPICH, MVAPICH, INTEL_MPI
    version: str
    program: str = ""  # the name the launcher printed for itself (Open MPI only)
    details: dict[str, str] = field(default_factory=dict)  # Hydra's key/value block; Intel's build

    @property
    def label(self) -> str:
        return f"{self.implementation} {self.version}"


def parse_mpirun_version(text: str) -> MpiVersion:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError("mpirun", "empty output")
    for number, line in enumerate(lines, 1):
        if m := _OMPI.match(line.strip()):
            return MpiVersion(OPEN_MPI, m["version"], m["prog"])
        if m := _INTEL.match(line.strip()):
            return MpiVersion(INTEL_MPI, m["version"], details={"build": m["build"] or ""})
        if line.strip() == "HYDRA build details:":
            return _hydra(lines[number:])
    raise ParseError("mpirun", "not an Open MPI, MPICH/Hydra or Intel MPI version banner", 1, lines[0])


def _hydra(lines: list[str]) -> MpiVersion:
    details: dict[str, str] = {}
    for line in lines:
        if m := _HYDRA_KEY.match(line):
            details[m["key"].strip()] = m["value"]
    version = details.get("Version")
    if not version:
        raise ParseError("mpirun", "Hydra banner without a Version line")
    options = details.get("Configure options", "").lower()
    implementation = MVAPICH if ("mvapich" in options or "ch3:mrail" in options or "ch3:psm" in options) else MPICH
    return MpiVersion(implementation, version, details=details)
