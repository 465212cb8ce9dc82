"""What the gpu area costs on a node without an NVIDIA driver (a login node), where it must be
close to free: NVML's failed dlopen in a fresh interpreter against spawning one `true`, and
`distdoctor check --only host` against `--only host,gpu`, alternated, medians and their ratio.

    python bench/gpu_no_driver.py [rounds]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def compare(name: str, a: list[str], b: list[str], rounds: int, env: dict[str, str]) -> None:
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(timed(a, env))
        tb.append(timed(b, env))
    ma, mb = statistics.median(ta), statistics.median(tb)
    print(f"{name}: baseline {ma * 1000:.1f} ms, with gpu {mb * 1000:.1f} ms, ratio {mb / ma:.2f}")


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    env = dict(os.environ)
    env.pop("DISTDOCTOR_NVML", None)
    py = sys.executable
    probe = "from distdoctor.host import Host; Host().nvml_snapshot()"
    compare("NVML probe in a fresh interpreter vs bare interpreter", [py, "-c", "import distdoctor.host"],
            [py, "-c", probe], rounds, env)
    cli = [py, "-m", "distdoctor", "check", "--format", "json", "--only"]
    compare("distdoctor check --only host vs --only host,gpu", [*cli, "host"], [*cli, "host,gpu"], rounds, env)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
