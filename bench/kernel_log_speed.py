"""Benchmark: the kernel-log reader (distdoctor/parsers/kernel_log.py) over a million lines.

Two logs of 1,000,000 lines, built by repeating real captures from tests/data/kernel_log:
"boot" is a whole healthy boot (mlx5 links, ACPI, a few events in 2,382 lines) — what a node's
`journalctl -k` mostly holds; "flood" adds a node whose kernel log is 27 % Xid lines (Xid 13
floods from a faulting program, as in gpud's dmesg.decode.iso.log.0), the worst case. Each is
read `--rounds` times, alternating with `grep -c Xid` over the same file as a reference for
what reading the bytes costs; medians and their ratio are printed. The time is the parse of
text already in memory (reading and decoding the file is the caller's and costs about as much
as the grep).

Goal: <= 1 s for a million lines of the ordinary log.

    python bench/kernel_log_speed.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from distdoctor.parsers.kernel_log import parse_kernel_log  # noqa: E402

DATA = os.path.join(os.path.dirname(HERE), "tests", "data", "kernel_log")


def build(names: list[str], lines: int) -> str:
    text = "".join(open(os.path.join(DATA, n), encoding="utf-8", errors="replace").read() for n in names)
    count = text.count("\n")
    text = text * (lines // count + 1)
    cut = 0
    for _ in range(lines):
        cut = text.index("\n", cut) + 1
    return text[:cut]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logs = {
        "boot": build(["dmesg_decode_iso_boot_mlx5_links_healthy.log"], 1_000_000),
        "flood": build(["dmesg_decode_iso_boot_mlx5_links_healthy.log", "dmesg_decode_iso_xid13_xid43_app_fault.log",
                        "dmesg_iso_xid48_xid63_xid94_dbe.log"] + ["dmesg_decode_iso_xid13_xid43_app_fault.log"] * 30,
                       1_000_000),
    }
    for name, text in logs.items():
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as fh:
            fh.write(text)
            path = fh.name
        try:
            ours, grep = [], []
            events = 0
            for _ in range(args.rounds):
                with open(path, encoding="utf-8", errors="replace") as f:
                    data = f.read()
                t0 = time.perf_counter()
                events = len(parse_kernel_log(data).events)
                ours.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                subprocess.run(["grep", "-c", "Xid", path], capture_output=True, timeout=60)
                grep.append(time.perf_counter() - t0)
            a, b = statistics.median(ours), statistics.median(grep)
            print(f"{name}: {text.count(chr(10))} lines, {events} events: parsed {a:.3f} s (median of {args.rounds}), "
                  f"grep -c {b:.3f} s, ratio {a / b:.1f}")
        finally:
            os.unlink(path)


if __name__ == "__main__":
    main()
