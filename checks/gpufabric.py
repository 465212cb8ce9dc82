"""What the GPUs need around them on a node: device files (nvidia-uvm included), nvidia_peermem
where GPUDirect RDMA is expected, the NVSwitch fabric and its fabric manager, and one MIG mode for
all GPUs (see docs/hardware.md)."""

from __future__ import annotations

from distdoctor.api import Context, check, fail, ok, skip, warn
from distdoctor.facts.gpu import CHECK_TIMEOUT
from distdoctor.hardware import xid as xid_catalogue
from distdoctor.hardware.actions import needs_drain, strongest
from distdoctor.hardware.imex import judge_imex
from distdoctor.host.results import CommandResult
from distdoctor.model import Status
from distdoctor.parsers import ParseError
from distdoctor.parsers.nvidia_imex import parse_imex_nodes
from distdoctor.text import plural

SYSTEMCTL_TIMEOUT = 4.0
IMEX_CTL_TIMEOUT = 6.0


def _gpus(ctx: Context):
    health = ctx.facts.gpu_health
    if health.problem is not None or not health.gpus:
        reason = health.problem.summary.split(" — ")[0] if health.problem else "no GPU answered"
        return None, skip(reason if health.problem and health.problem.state == "absent"
                          else f"not judged: {reason} (see gpu.inventory)")
    return health, None


@check("gpu.device-nodes", title="/dev/nvidia* device files exist for every GPU, nvidia-uvm included",
       tags=("gpu", "health", "container"), timeout=CHECK_TIMEOUT)
def device_nodes(ctx: Context):
    """CUDA opens /dev/nvidiactl, /dev/nvidia<minor> for each GPU and /dev/nvidia-uvm. nvidia-smi
    works without nvidia-uvm (it is loaded on first CUDA use by nvidia-modprobe, which a container
    or a hardened node may lack), so a node can look healthy and still fail every CUDA job with
    "CUDA driver initialization failed" / error 999."""
    health, none = _gpus(ctx)
    if none:
        yield none
        return
    host = ctx.host
    want = ["/dev/nvidiactl", "/dev/nvidia-uvm"] + [f"/dev/nvidia{g.index}" for g in health.gpus]
    missing = [p for p in want if not host.exists(p)]
    if not missing:
        yield ok(f"{plural(len(want), 'device file')} present (nvidiactl, nvidia-uvm, one per GPU)")
        return
    uvm = "/dev/nvidia-uvm" in missing
    yield fail(f"missing {', '.join(missing)}", subject="/dev/nvidia*", action="fix-config",
               evidence={"missing": missing, "expected": want},
               explanation=("The nvidia-uvm module or its device file is missing: every CUDA program fails to "
                            "initialise although nvidia-smi works." if uvm else
                            "Device files of some GPUs are missing: CUDA cannot open them (a container started "
                            "without them, or udev did not create them)."),
               fix=("sudo nvidia-modprobe -u -c=0   # loads nvidia-uvm and creates /dev/nvidia-uvm" if uvm
                    else "sudo nvidia-modprobe -c=0   # in a container: run it with --gpus all"))


@check("gpu.peermem", title="nvidia_peermem is loaded where GPUDirect RDMA is expected",
       tags=("gpu", "ib", "nccl", "health"), timeout=CHECK_TIMEOUT, params={"expect_gpudirect_rdma": "auto"})
def peermem(ctx: Context):
    """NCCL moves GPU memory straight to the NIC (GPUDirect RDMA) through the nvidia_peermem
    kernel module (nv_peer_mem before R470), or through DMA-BUF with the open kernel module on
    Linux >= 5.12. Without either, NCCL silently stages every transfer through host memory.
    expect_gpudirect_rdma: "auto" (expected when the node has both GPUs and InfiniBand/RoCE HCAs),
    true or false."""
    health, none = _gpus(ctx)
    if none:
        yield none
        return
    expected = ctx.params.get("expect_gpudirect_rdma", "auto")
    hcas = ctx.facts.infiniband.hcas
    if expected is False or (expected == "auto" and not hcas):
        yield skip("GPUDirect RDMA not expected (no RDMA NIC)" if not hcas else "GPUDirect RDMA not expected (config)")
        return
    host = ctx.host
    loaded = [m for m in ("nvidia_peermem", "nv_peer_mem") if host.exists(f"/sys/module/{m}")]
    if loaded:
        yield ok(f"{loaded[0]} is loaded ({plural(len(hcas), 'RDMA device')})")
        return
    open_module = "Open" in ((host.read_text("/proc/driver/nvidia/version") or "").split("\n")[0])
    yield warn("nvidia_peermem is not loaded: NCCL cannot use GPUDirect RDMA through it", subject="nvidia_peermem",
               action="fix-config", evidence={"hcas": list(hcas), "open_kernel_module": open_module},
               explanation="NCCL falls back to copying through host memory (slower inter-node collectives)"
                           + (", unless it uses DMA-BUF, which the open kernel module on Linux >= 5.12 allows "
                              "(NCCL_DMABUF_ENABLE=1, the default since NCCL 2.19)." if open_module else "."),
               fix="sudo modprobe nvidia-peermem && echo nvidia-peermem | sudo tee /etc/modules-load.d/nvidia-peermem.conf")


def _has_nvswitch(ctx: Context, health) -> bool:
    host = ctx.host
    if host.list_dir("/proc/driver/nvidia-nvswitch/devices"):
        return True
    if any(g.fabric_state for g in health.gpus):  # Hopper and newer report the fabric only behind NVSwitches
        return True
    return any(name.startswith("nvidia-nvswitch") for name in (host.list_dir("/dev") or []))


@check("gpu.fabric", title="On NVSwitch systems the fabric manager runs and every GPU joined the fabric",
       tags=("gpu", "health", "nvlink"), timeout=CHECK_TIMEOUT, params={"window_hours": 24.0})
def fabric(ctx: Context):
    """HGX/DGX systems route NVLink through NVSwitches that nvidia-fabricmanager programs; until
    it has, CUDA reports "system not yet initialized" (error 802) and NCCL falls back or hangs.
    Hopper and newer GPUs say whether they joined the fabric (nvidia-smi -q: Fabric State
    Completed, Status Success). Systems without NVSwitch need no fabric manager and are not
    judged (the service fails there with NV_WARN_NOTHING_TO_DO, which is harmless). The NVSwitch
    errors the fabric manager logged within the window are judged by NVIDIA's SXid catalogue. A
    node in a multi-node NVLink domain (a non-zero ClusterUUID) needs the nvidia-imex daemon, and
    where it runs, `nvidia-imex-ctl -N` (bounded) must show every node READY and every pair of nodes
    connected. A GPU whose fabric Health Summary is Unhealthy joined with degraded links or routes."""
    health, none = _gpus(ctx)
    if none:
        yield none
        return
    if not _has_nvswitch(ctx, health):
        yield skip("no NVSwitch on this node: no fabric manager needed")
        return
    found = False
    for g in health.gpus:
        if g.fabric_state and (g.fabric_state != "Completed" or (g.fabric_status and g.fabric_status != "Success")):
            found = True
            status = f", status {g.fabric_status}" if g.fabric_status else ""
            yield fail(f"GPU{g.index}: fabric state {g.fabric_state}{status}",
                       subject=f"GPU{g.index}", action="reset-gpu",
                       evidence={"gpu": g.index, "state": g.fabric_state, "status": g.fabric_status},
                       explanation="The GPU has not joined the NVLink fabric: CUDA returns 'system not yet "
                                   "initialized' and NVLink peers are unreachable.",
                       fix="sudo systemctl restart nvidia-fabricmanager   # if it persists: reset the GPUs or reboot")
        elif g.fabric_health.lower() == "unhealthy":
            found = True
            yield fail(f"GPU{g.index}: in the NVLink fabric, but its fabric health is Unhealthy", subject=f"GPU{g.index}",
                       action="reset-gpu", evidence={"gpu": g.index, "state": g.fabric_state, "health": g.fabric_health,
                                                     "clique": g.fabric_clique, "cluster_uuid": g.fabric_cluster_uuid},
                       explanation="The GPU joined the fabric but its links or routes are degraded (nvidia-smi -q: "
                                   "Fabric / Health / Summary). Multi-node NVLink jobs across it lose bandwidth or "
                                   "start without their clique (kubernetes-sigs/dra-driver-nvidia-gpu#626).",
                       fix="nvidia-smi -q -d FABRIC   # Bandwidth and route state name the fault; drain, then reset the "
                           "GPU or reboot")
    fm = ctx.facts.fabric_manager_log
    if fm.log is not None:
        horizon = ctx.host.time() - float(ctx.params.get("window_hours", 24.0)) * 3600
        recent = [e for e in fm.log.errors if e.time is None or e.time >= horizon]
        codes = sorted({e.code for e in recent})
        if codes:
            found = True
            entries = {c: xid_catalogue.sxid_lookup(c, "fatal" if any(e.fatal for e in recent if e.code == c) else "")
                       for c in codes}
            action = strongest(e.action for e in entries.values())
            switches = sorted({e.switch for e in recent})
            named = ", ".join(f"SXid {c} {entries[c].name}".strip() for c in codes)
            summary = (f"the fabric manager logged {plural(len(recent), 'NVSwitch error')} ({named}) "
                       f"on {plural(len(switches), 'NVSwitch')}")
            evidence = {"source": fm.source, "codes": {str(c): entries[c].action for c in codes}, "switches": switches,
                        "ports": sorted({e.port for e in recent if e.port is not None}),
                        "first_line": recent[0].line}
            emit = fail if needs_drain(action) else warn
            yield emit(summary, subject="nvidia-fabricmanager", action=action, evidence=evidence,
                       explanation="NVIDIA's SXid guide for these codes: NVLink traffic through the NVSwitch stalls "
                                   "until the GPUs and NVSwitches are reset." if needs_drain(action) else
                                   "Non-fatal NVSwitch errors the fabric carried on through.",
                       fix="# drain the node and reboot it; if the errors return: nvidia-bug-report.sh"
                       if needs_drain(action) else f"grep -c 'detected NVSwitch' {fm.source}")
    # A GPU in a multi-node NVLink domain (GB200 NVL72) has a non-zero ClusterUUID; its memory is
    # shared across nodes only through the IMEX daemon. Agreement of ClusterUUID/CliqueId across
    # the job's nodes is the inventory's (gpu.fabric.*), judged by `distdoctor compare`/`fleet`.
    domain = sorted({g.fabric_cluster_uuid for g in health.gpus if g.fabric_cluster_uuid.strip("0-")})
    # In such a domain the NVSwitches sit in the rack's switch trays and their fabric manager runs
    # there, not on this node (gpud judges GB200 by the GPUs' fabric state alone, leptonai/gpud#1106).
    result = ctx.host.run(["systemctl", "is-active", "nvidia-fabricmanager"], timeout=SYSTEMCTL_TIMEOUT) \
        if not domain else CommandResult(("systemctl",), 127, error="not asked: the fabric manager is the rack's")
    state = result.stdout.strip()
    if result.missing:
        pass  # no systemd here (a container), or a rack's node: the per-GPU fabric state above is what can be judged
    elif state != "active":
        found = True
        yield fail(f"nvidia-fabricmanager is {state or 'not running'} on an NVSwitch system", subject="nvidia-fabricmanager",
                   action="fix-config", evidence={"systemctl": state, "exit": result.returncode},
                   explanation="Without the fabric manager the NVSwitches are not programmed: multi-GPU jobs fail "
                               "with CUDA error 802 or run without NVLink.",
                   fix="sudo systemctl enable --now nvidia-fabricmanager && journalctl -u nvidia-fabricmanager -n 50")
    imex = ctx.host.run(["systemctl", "is-active", "nvidia-imex"], timeout=SYSTEMCTL_TIMEOUT) if domain else None
    if imex is not None and not imex.missing and imex.stdout.strip() != "active":
        found = True
        yield fail(f"nvidia-imex is {imex.stdout.strip() or 'not running'} on a node of NVLink domain {domain[0]}",
                   subject="nvidia-imex", action="fix-config",
                   evidence={"cluster_uuid": domain, "systemctl": imex.stdout.strip(), "exit": imex.returncode},
                   explanation="Multi-node NVLink memory sharing (CUDA fabric handles, NCCL's MNNVL) goes through the "
                               "IMEX daemon; without it jobs across the domain's nodes fail to import each other's "
                               "memory.",
                   fix="sudo systemctl enable --now nvidia-imex && journalctl -u nvidia-imex -n 50")
    if imex is not None and not imex.missing and imex.stdout.strip() == "active":
        for finding in _imex_domain(ctx):
            found = True
            yield finding
    if not found:
        yield ok(f"NVSwitch system: {plural(len(health.gpus), 'GPU')} in the fabric"
                 + ("" if result.missing else ", nvidia-fabricmanager active")
                 + (", nvidia-imex active" if imex is not None and not imex.missing else ""))


def _imex_domain(ctx: Context):
    """What this node's IMEX daemon sees of the domain (`nvidia-imex-ctl -N`, bounded): the nodes
    not READY, the pairs not connected (hardware/imex.py). Nothing when the tool is absent."""
    result = ctx.host.run(["nvidia-imex-ctl", "-N"], timeout=IMEX_CTL_TIMEOUT)
    if result.missing:
        return
    if result.timed_out:
        yield warn(f"`nvidia-imex-ctl -N` did not answer within {IMEX_CTL_TIMEOUT:g} s", subject="nvidia-imex",
                   action="none", evidence={"detail": result.describe()},
                   explanation="The IMEX daemon did not answer its control query; jobs that share GPU memory "
                               "across the NVLink domain may hang on it.",
                   fix="systemctl status nvidia-imex --no-pager")
        return
    try:
        domain = parse_imex_nodes(result.stdout)
    except ParseError:
        return  # an older daemon without -N, or a message instead of the table: systemctl said it runs
    yield from (f for f in judge_imex(domain) if f.status is not Status.OK)


@check("gpu.mig-consistency", title="All GPUs of the node are in the same MIG mode, with nothing pending",
       tags=("gpu", "health"), timeout=CHECK_TIMEOUT)
def mig_consistency(ctx: Context):
    """Slurm's gres and the job's CUDA_VISIBLE_DEVICES assume one kind of device per node; a node
    with some GPUs in MIG mode and some not (often a MIG change that waits for a GPU reset) gives
    jobs devices they did not ask for. Across nodes, `distdoctor compare` reads gpu.mig from the
    inventory."""
    health, none = _gpus(ctx)
    if none:
        yield none
        return
    modes = {g.index: g.mig_mode for g in health.gpus if g.mig_mode is not None}
    if not modes:
        yield skip("MIG is not supported on these GPUs")
        return
    on = sorted(i for i, m in modes.items() if m)
    off = sorted(i for i, m in modes.items() if not m)
    if on and off:
        yield warn(f"MIG enabled on GPU {','.join(map(str, on))} but not on GPU {','.join(map(str, off))}",
                   subject="MIG mode", action="fix-config", evidence={"enabled": on, "disabled": off},
                   explanation="A mixed node hands jobs MIG slices where they expect whole GPUs (or the reverse).",
                   fix=f"sudo nvidia-smi -i {','.join(map(str, on))} -mig 0   # or enable it on the others; "
                       "then reset those GPUs")
    else:
        yield ok(f"MIG {'enabled' if on else 'disabled'} on all {plural(len(modes), 'GPU')}")


CHECKS = [device_nodes, peermem, fabric, mig_consistency]
