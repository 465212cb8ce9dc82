"""Processes found by a marker in their environment: what the harnesses kill when a process
they started has left its process group or session (torchrun's ranks, Slurm's job tasks)."""

from __future__ import annotations

import os


def pids_with_environ(entry: str) -> set[int]:
    """Every process whose environment holds `entry` ("NAME=value") exactly."""
    wanted = entry.encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if wanted in fh.read().split(b"\0"):
                    found.add(int(name))
        except OSError:
            continue
    return found
