"""/proc/self/cgroup (cgroups(7)): `hierarchy-ID:controllers:path` lines."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CgroupMembership:
    version: int  # 2: the unified hierarchy alone; 1: v1 controllers (possibly beside it, "hybrid")
    path: str     # v2's path, or v1's cpu controller path (the one schedulers and Slurm set)


def parse_proc_cgroup(text: str) -> CgroupMembership | None:
    """None for text without a membership line (an empty file, a kernel without cgroups)."""
    lines = [line.split(":", 2) for line in text.splitlines() if line.count(":") >= 2]
    if not lines:
        return None
    unified = next((path for hid, ctl, path in lines if hid == "0" and ctl == ""), None)
    if unified is not None and len(lines) == 1:
        return CgroupMembership(2, unified)
    return CgroupMembership(1, next((path for _h, ctl, path in lines if "cpu" in ctl.split(",")), lines[0][2]))
