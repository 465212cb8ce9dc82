"""Synthetic node reports shaped like `distdoctor check --format json` output: the logic tests
of the cluster view (real reports from real nodes are in the Slurm and ssh tests)."""

from __future__ import annotations

import copy
from typing import Any

BASE_INVENTORY: dict[str, Any] = {
    "kernel": "6.8.0-45-generic", "python.version": "3.12.3", "gpu.count": 8, "gpu.model": "NVIDIA H100 80GB HBM3",
    "gpu.driver": "550.127.05", "nccl.version": "2.21.5", "torch.version": "2.4.1", "torch.cuda": "12.4",
    "net.if.eth0.mtu": 9000, "net.if.lo.mtu": 65536, "limits.memlock": "unlimited", "shm.size": 68719476736,
    "ib.mlx5_0.1.state": "Active", "ib.mlx5_0.1.rate": 400,
}


def node_report(host: str, checks: dict[str, str] | None = None,
                inventory: dict[str, Any] | None = None) -> dict[str, Any]:
    inv = copy.deepcopy(BASE_INVENTORY)
    inv.update({"host.name": host, "host.boot_id": f"boot-{host}", "host.machine_id": f"mid-{host}",
                "nccl.host_hash": f"hash-{host}"})
    inv.update(inventory or {})
    checks = {"gpu.inventory": "ok", "net.link-speed-mtu": "ok", "slurm.job-env": "skip", **(checks or {})}
    return {
        "schema_version": "1.0", "tool": {"name": "distdoctor", "version": "0.1.0"}, "command": "check",
        "host": host, "context": {"kind": "none", "description": "no scheduler or launcher"},
        "started_at": "2026-11-24T08:00:00.000Z", "duration_s": 1.5,
        "status": "fail" if "fail" in checks.values() else "ok",
        "summary": {s: list(checks.values()).count(s) for s in ("ok", "warn", "fail", "skip", "error", "timeout")},
        "checks": [{"id": cid, "area": cid.split(".")[0], "title": cid, "tags": [], "status": st, "duration_s": 0.1,
                    "findings": [{"status": st, "summary": f"{cid} {st}", "subject": "", "explanation": "",
                                  "fix": "", "evidence": {}}]} for cid, st in checks.items()],
        "inventory": inv,
    }


def fleet(n: int, prefix: str = "gpu", **odd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """n healthy node reports named gpu001.., with per-node overrides: gpu007={"gpu.count": 7}."""
    out = {}
    for i in range(1, n + 1):
        name = f"{prefix}{i:03d}"
        extra = dict(odd.get(name, {}))
        checks = extra.pop("checks", None)
        out[name] = node_report(name, checks, extra)
    return out
