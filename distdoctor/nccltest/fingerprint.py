"""What one rank publishes about itself before anything collective is tried.

A fingerprint is a flat, JSON-safe dict. Every rank builds its own; rank 0 compares them
(`compare.py`) and shows them in the report. Nothing here blocks: no subprocess, no GPU probe
beyond what torch already knows.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from distdoctor import __version__, inventory
from distdoctor.facts import Facts
from distdoctor.nccltest.interface import Choice
from distdoctor.nccltest.rendezvous import Identity

_DRIVER = re.compile(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)")


def driver_version(proc_text: str | None) -> str:
    """The NVIDIA kernel driver's version from /proc/driver/nvidia/version, '' without one."""
    match = _DRIVER.search(proc_text or "")
    return match.group(1) if match else ""


def _torch_facts(torch: Any, local_rank: int) -> dict[str, Any]:
    facts: dict[str, Any] = {"torch.version": torch.__version__, "torch.cuda": torch.version.cuda or "",
                             "cuda_available": False, "gpu.count": 0, "gpu.model": "", "gpu_uuid": "",
                             "nccl.version": ""}
    try:
        import torch.distributed as dist

        if dist.is_nccl_available():
            version = torch.cuda.nccl.version()
            facts["nccl.version"] = ".".join(str(v) for v in version) if isinstance(version, tuple) else str(version)
    except Exception:  # a CPU build has no NCCL: leave it empty
        pass
    try:
        if torch.cuda.is_available():
            facts["cuda_available"] = True
            facts["gpu.count"] = torch.cuda.device_count()
            if local_rank < facts["gpu.count"]:
                props = torch.cuda.get_device_properties(local_rank)
                facts["gpu.model"] = props.name
                facts["gpu_uuid"] = str(getattr(props, "uuid", ""))
    except Exception as exc:  # a broken driver must be reported, not crash the fingerprint
        facts["cuda_error"] = str(exc)[:300]
    return facts


def nccl_prediction(facts, route_interface: str) -> dict[str, Any]:
    """What NCCL itself would advertise on this rank (the net area's model of NCCL's interface
    choice, checked against the real libnccl in its tests), and whether that can reach the
    others: a virtual or link-local-only interface that is not the one routing to rank 0 is
    the classic veth/docker0 hang."""
    from distdoctor.nccl_socket import predict_nccl_interfaces

    try:
        table = facts.interfaces
        choice = predict_nccl_interfaces(table.interfaces, facts.nccl_settings)
    except Exception as exc:  # a prediction we cannot make must not stop the smoke test
        return {"nccl_interface": "", "nccl_error": f"could not predict NCCL's interface: {exc}"}
    pick = choice.bootstrap
    if pick is None:
        return {"nccl_interface": "", "nccl_rule": choice.rule,
                "nccl_error": choice.error or "no socket interface found"}
    iface = table.get(pick.interface)
    route = table.get(route_interface) if route_interface else None
    suspect = ""
    # A route through the loopback (rank 0 whose MASTER_ADDR is its own name on 127.0.1.1) says
    # nothing about the way to the other nodes: no reason to doubt NCCL's pick by it.
    if iface is not None and pick.interface != route_interface and (iface.virtual or iface.link_local_only) \
            and not (route is not None and route.kind == "loopback"):
        suspect = iface.describe() + (" with only a link-local address" if iface.link_local_only else "")
    return {"nccl_interface": pick.interface, "nccl_address": pick.address, "nccl_rule": choice.rule,
            "nccl_suspect": suspect, "nccl_error": ""}


def collect(host, ident: Identity, choice: Choice, torch: Any) -> dict[str, Any]:
    env = host.env
    try:
        boot_id = (host.read_text("/proc/sys/kernel/random/boot_id") or "").strip()
    except OSError:
        boot_id = ""
    try:
        driver = driver_version(host.read_text("/proc/driver/nvidia/version"))
    except OSError:
        driver = ""
    # The same facts `distdoctor check` reads, so both commands describe a node alike.
    facts = Facts(host)
    memlock = facts.memlock.soft
    shm = facts.shm.total
    # Facts about the node under the inventory's names (docs/inventory.md), so that they are
    # compared by the same rules as `check`'s node reports (crosscheck/rules.py); the rest
    # (rank, interface, prediction) is this test's own.
    fp: dict[str, Any] = {
        "rank": ident.rank, "local_rank": ident.local_rank, "world_size": ident.world_size,
        "host": host.hostname(), "host.boot_id": boot_id, "pid": host.pid(),
        "interface": choice.name, "address": choice.address,
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "gpu.driver": driver, "python.version": host.python_version(), "pip.distdoctor": __version__,
        "limits.memlock": "unlimited" if memlock < 0 else memlock,
        "shm.size": shm,
        "slurm": {k: env.get(v, "") for k, v in (("job", "SLURM_JOB_ID"), ("step", "SLURM_STEP_ID"),
                                                  ("node", "SLURMD_NODENAME"), ("node_id", "SLURM_NODEID"))},
        "executable": sys.executable,
    }
    fp.update(inventory.compared_env(env))
    fp.update(_torch_facts(torch, ident.local_rank))
    fp.update(nccl_prediction(facts, choice.name))
    try:  # a shaper on the interface toward rank 0 explains a transfer that crawls (net.link-speed-mtu)
        toward = facts.interfaces.get(choice.name) if choice.name else None
        fp["qdisc"] = toward.qdisc if toward is not None else ""
    except Exception:  # what cannot be read is no finding of this test's
        fp["qdisc"] = ""
    return fp
