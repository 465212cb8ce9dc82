"""What the hardware checks (docs/hardware.md) add to a warm `distdoctor check`: alternates
`check --skip <the hardware checks>` and `check`, prints the medians, the difference and the
ratio; then the import time of the modules they bring in (`python -X importtime`), which the
skip run pays too.

    python bench/hardware_overhead.py [--pairs 9] [-- extra check args]

Budget (issue 24): <= 50 ms added to a warm check.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import compare, distdoctor_argv, timed  # noqa: E402

HARDWARE = ("gpu.memory-errors,gpu.xid,gpu.nvlink,gpu.pcie-link,gpu.throttle,gpu.device-nodes,gpu.peermem,"
            "gpu.fabric,gpu.mig-consistency,ib")
MODULES = ("distdoctor.facts.hardware", "distdoctor.parsers.kernel_log", "distdoctor.parsers.nvidia_smi_query",
           "distdoctor.parsers.nvlink", "distdoctor.hardware.xid", "distdoctor.host.nvml_health")


def import_ms() -> float:
    """Self time of the hardware modules in a fresh interpreter that already has distdoctor.facts.gpu."""
    code = "import distdoctor.facts.gpu, distdoctor.checks; import " + ", ".join(MODULES)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, timeout=60)
    total = 0
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|\s+(\S.*)$", line)
        if m and (m.group(3).strip().startswith(("distdoctor.hardware", "distdoctor.parsers.kernel_log",
                                                 "distdoctor.parsers.nvidia_smi_query", "distdoctor.parsers.nvlink",
                                                 "distdoctor.facts.hardware", "distdoctor.host.nvml_health",
                                                 "xml.etree"))):
            total += int(m.group(1))
    return total / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args()
    base = [*distdoctor_argv(), "check", "--format", "json", *args.extra]
    timed(base)  # fill the tool cache: both commands run warm
    compare("check --skip hardware", [*base, "--skip", HARDWARE], "check", base, max(7, args.pairs))
    print(f"import of the hardware modules (self time, in neither command's difference): {import_ms():.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
