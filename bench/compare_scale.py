"""Benchmark: `distdoctor compare` over 1,000 and 10,000 node reports, one of them odd.

The reports are copies of one real `distdoctor check --format json` report of this machine
(its inventory and every check), each given its own host name, boot id and NCCL host hash;
node 7 gets another NCCL version. Two measurements, alternated size by size:

  in-process   cluster.build over the parsed reports (the comparison alone)
  command      `distdoctor compare DIR --format json`: reading and parsing every file, the
               comparison and the JSON output, as a user runs it

Goal: 1,000 reports in < 2 s for the command. Prints medians and the 10k/1k ratio (linear
would be 10).

    python bench/compare_scale.py [--repeat 3] [--sizes 1000,10000]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from alternate import distdoctor_argv, timed  # noqa: E402

from distdoctor.crosscheck import nodes as cluster  # noqa: E402


def real_report() -> dict:
    out = subprocess.run(distdoctor_argv() + ["check", "--format", "json"], capture_output=True, text=True,
                         timeout=120, check=False)
    return json.loads(out.stdout)


def fleet_of(template: dict, n: int) -> dict[str, dict]:
    reports = {}
    for i in range(1, n + 1):
        name = f"gpu{i:05d}"
        doc = copy.deepcopy(template)
        doc["host"] = name
        inv = doc.setdefault("inventory", {})
        inv.update({"host.name": name, "host.boot_id": f"boot-{i}", "host.machine_id": f"mid-{i}",
                    "nccl.host_hash": f"{i:016x}", "nccl.version": "2.18.3" if i == 7 else "2.21.5"})
        reports[name] = doc
    return reports


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="1000,10000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    template = real_report()
    print(f"template: {len(template.get('inventory', {}))} inventory facts, {len(template['checks'])} checks, "
          f"{len(json.dumps(template)) // 1024} KiB per report")
    base = tempfile.mkdtemp(prefix="dd-bench-compare-")
    try:
        fleets, dirs = {}, {}
        for n in sizes:
            fleets[n] = fleet_of(template, n)
            dirs[n] = os.path.join(base, str(n))
            os.makedirs(dirs[n])
            for name, doc in fleets[n].items():
                with open(os.path.join(dirs[n], f"{name}.json"), "w") as fh:
                    json.dump(doc, fh)
        view = cluster.build(fleets[sizes[0]])
        assert view.outliers == ["gpu00007"], view.outliers  # the benchmark measures a real finding
        inproc = {n: [] for n in sizes}
        command = {n: [] for n in sizes}
        for n in sizes:  # warm the page cache and __pycache__
            timed(distdoctor_argv() + ["compare", dirs[n], "--format", "json"])
        for _ in range(args.repeat):
            for n in sizes:
                t0 = time.perf_counter()
                cluster.build(fleets[n])
                inproc[n].append(time.perf_counter() - t0)
                command[n].append(timed(distdoctor_argv() + ["compare", dirs[n], "--format", "json"]))
        print(f"repeats: {args.repeat}")
        for n in sizes:
            print(f"{n:>6} reports  in-process median {statistics.median(inproc[n]):.3f} s   "
                  f"command median {statistics.median(command[n]):.3f} s (min {min(command[n]):.3f})")
        if len(sizes) == 2:
            a, b = sizes
            ratio = statistics.median(command[b]) / statistics.median(command[a])
            print(f"command {b}/{a} ratio {ratio:.2f} (linear: {b / a:.0f})")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
