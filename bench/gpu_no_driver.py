"""What the gpu area costs on a node without an NVIDIA driver (a login node), where it must be
close to free: NVML's failed dlopen in a fresh interpreter against a bare import, and
`distdoctor check --only host` against `--only host,gpu.*`, alternated, medians and their ratio.

    python bench/gpu_no_driver.py [pairs]
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import compare  # noqa: E402


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    env = dict(os.environ)
    env.pop("DISTDOCTOR_NVML", None)
    py = sys.executable
    probe = "from distdoctor.host import Host; Host().nvml_snapshot()"
    compare("import distdoctor.host", [py, "-c", "import distdoctor.host"], "+ NVML probe", [py, "-c", probe],
            pairs, env)
    cli = [py, "-m", "distdoctor", "check", "--format", "json", "--only"]
    # "gpu.*" and not "gpu": the gpu tag also selects checks of other areas (build.mpi-cuda-aware).
    compare("check --only host", [*cli, "host"], "check --only host,gpu.*", [*cli, "host,gpu.*"], pairs, env)


if __name__ == "__main__":
    main()
