"""What checks/manifest.json saves at start-up: the same distdoctor run from two copies of this
tree, one with the manifest and one without (every check module imported, as before it
existed), alternated `--pairs` times per command; prints, for wall and CPU time, medians, the
range, the median and quartiles of the per-pair differences and the median per-pair ratio.

    python bench/manifest_speed.py [--pairs 15]

Each copy is laid out as installed (distdoctor/ with checks/ inside as distdoctor/checks) under a
temporary directory put first on PYTHONPATH, so the editable install of this tree is not the one
that runs; both copies are byte-compiled first, as pip compiles a wheel.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = {  # what a user runs that starts the check pack
    "list": ["list"],
    "explain": ["explain", "slurm.environment"],
    "check --only slurm": ["check", "--only", "slurm", "--format", "json"],
    "check (all)": ["check", "--format", "json"],
}


def _copy(dest: str, manifest: bool) -> str:
    pkg = os.path.join(dest, "distdoctor")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(os.path.join(ROOT, "distdoctor"), pkg, ignore=ignore)
    shutil.copytree(os.path.join(ROOT, "checks"), os.path.join(pkg, "checks"), ignore=ignore)
    if not manifest:
        os.remove(os.path.join(pkg, "checks", "manifest.json"))
    compileall.compile_dir(pkg, quiet=1)
    return dest


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run. CPU time (user + system of the process and its children)
    is the steadier of the two on a shared machine, where wall time mostly measures the others."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # cwd: not this checkout, whose distdoctor/ `python -m` would find first
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=300, check=False,
                   cwd=env["PYTHONPATH"])
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="distdoctor-bench-manifest-")
    try:
        trees = {"with": _copy(os.path.join(scratch, "with"), True),
                 "without": _copy(os.path.join(scratch, "without"), False)}
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
        base["XDG_CACHE_HOME"] = os.path.join(scratch, "cache")  # the tool cache warm for both alike
        envs = {name: dict(base, PYTHONPATH=tree) for name, tree in trees.items()}
        probe = ("import distdoctor, distdoctor.checks as c; "
                 "print(distdoctor.__file__, type(c.CHECKS[0].func).__name__ == '_LazyCheck')")
        for name, manifest in (("with", "True"), ("without", "False")):
            where, lazy = subprocess.run([sys.executable, "-c", probe], env=envs[name], capture_output=True, text=True,
                                         timeout=60, cwd=trees[name]).stdout.split()
            assert where.startswith(trees[name]), f"the copy is not the distdoctor that runs: {where}"
            assert lazy == manifest, f"{name} the manifest, yet the checks are {'' if lazy == 'True' else 'not '}lazy"
        print(f"pairs: {args.pairs}; python {sys.version.split()[0]}; load {os.getloadavg()[0]:.1f}")
        for label, extra in COMMANDS.items():
            argv = [sys.executable, "-m", "distdoctor", *extra]
            for env in envs.values():  # warm-up: page cache, tool cache
                _timed(argv, env)
            runs: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
            for i in range(args.pairs):
                order = ("with", "without") if i % 2 == 0 else ("without", "with")
                for name in order:
                    runs[name].append(_timed(argv, envs[name]))
            for kind, k in (("wall", 0), ("cpu", 1)):
                a, b = [r[k] for r in runs["with"]], [r[k] for r in runs["without"]]
                saved = [y - x for x, y in zip(a, b)]
                q1, _, q3 = statistics.quantiles(saved, n=4)
                print(f"{label:<18} {kind:<4} with {statistics.median(a) * 1000:5.0f} ms [{min(a) * 1000:.0f}-"
                      f"{max(a) * 1000:.0f}]  without {statistics.median(b) * 1000:5.0f} ms [{min(b) * 1000:.0f}-"
                      f"{max(b) * 1000:.0f}]  saved: median {statistics.median(saved) * 1000:+.0f} ms "
                      f"(quartiles {q1 * 1000:+.0f} / {q3 * 1000:+.0f}), median ratio without/with "
                      f"{statistics.median(y / x for x, y in zip(a, b)):.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
