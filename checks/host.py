"""Host limits and settings that break or slow NCCL before any network is involved."""

from __future__ import annotations

from distdoctor import fixes
from distdoctor.api import Context, check, fail, ok, warn

GIB = 1024 ** 3


def _size(n: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 1024 ** 2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


@check("host.shm-size", title="/dev/shm is large enough for NCCL", tags=("host", "nccl", "container"),
       timeout=5, params={"min_bytes": GIB})
def shm_size(ctx: Context):
    """NCCL's shared-memory transport puts its buffers in /dev/shm. Docker's default of 64 MB
    makes it fail with `Call to posix_fallocate failed : No space left on device` or
    `failed to extend /dev/shm/nccl-... to ... bytes` (nccl#342, #290)."""
    shm = ctx.facts.shm
    minimum = int(ctx.params["min_bytes"])
    evidence = {"path": shm.path, "total_bytes": shm.total, "free_bytes": shm.free, "min_bytes": minimum}
    if shm.total is None:
        yield fail("/dev/shm does not exist", subject="/dev/shm", evidence=evidence,
                   explanation="NCCL and torch DataLoader workers need a tmpfs at /dev/shm.",
                   fix=fixes.shm_missing(here=ctx.host.hostname()))
    elif shm.total < minimum:
        yield warn(f"/dev/shm is only {_size(shm.total)} (want at least {_size(minimum)})", subject="/dev/shm",
                   evidence=evidence,
                   explanation="NCCL's shared-memory transport fails with 'No space left on device' when "
                               "/dev/shm is small; Docker's default is 64 MB.",
                   fix=fixes.shm_size(fixes.SHM_SUGGESTED, here=ctx.host.hostname()))
    else:
        yield ok(f"/dev/shm is {_size(shm.total)} ({_size(shm.free or 0)} free)", subject="/dev/shm",
                 evidence=evidence)


@check("host.memlock-limit", title="Locked-memory limit allows RDMA", tags=("host", "ib", "nccl"), timeout=5)
def memlock_limit(ctx: Context):
    """InfiniBand and RoCE register (pin) memory; with a small `ulimit -l` NCCL fails with
    `Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory` (nccl-tests#206).
    The limit inside `srun`/`mpirun` can differ from the login shell: run this check there."""
    limit = ctx.facts.memlock
    hcas = ctx.facts.infiniband_devices
    shown = "unlimited" if limit.soft < 0 else f"{limit.soft // 1024} KiB"
    evidence = {"soft_bytes": limit.soft, "hard_bytes": limit.hard, "infiniband_devices": list(hcas)}
    if limit.soft < 0:
        yield ok("locked memory is unlimited", evidence=evidence)
        return
    # Slurm tasks inherit slurmd's own limit (limits.conf does not apply to the daemon).
    fix = fixes.memlock(slurm=ctx.run_context.kind.startswith("slurm"), here=ctx.host.hostname())
    if limit.hard >= 0 and limit.hard == limit.soft:
        raise_hint = " The hard limit is the same, so this process cannot raise it."
    else:
        raise_hint = " The hard limit allows `ulimit -l unlimited` in the job script."
    if hcas:
        yield warn(f"ulimit -l is {shown} with InfiniBand devices present ({', '.join(hcas)})", evidence=evidence,
                   explanation="RDMA memory registration fails under a small locked-memory limit." + raise_hint,
                   fix=fix)
    else:
        yield ok(f"ulimit -l is {shown}; no InfiniBand device here, so it does not matter yet", evidence=evidence,
                 explanation="If this node gains RDMA NICs (or the job runs elsewhere), raise it to unlimited."
                             + raise_hint)


_KILLERS = {
    "NCCL_P2P_DISABLE": "GPU peer-to-peer (NVLink and PCIe P2P) is off: intra-node traffic goes through host memory",
    "NCCL_IB_DISABLE": "InfiniBand/RoCE is off: inter-node traffic falls back to TCP sockets",
    "NCCL_SHM_DISABLE": "the shared-memory transport is off: intra-node traffic without P2P goes over the network stack",
}

# What each switch turns off needs hardware to matter: without it the switch costs nothing here.
_NEEDS = {"NCCL_P2P_DISABLE": "gpus", "NCCL_SHM_DISABLE": "gpus", "NCCL_IB_DISABLE": "ib"}


def _absent_hardware(ctx: Context, need: str) -> str:
    """Why the switch `need` names cannot matter on this node, or "" when it can (or when that
    cannot be told: a hung nvidia-smi is not proof of no GPU)."""
    if need == "ib":
        return "" if ctx.facts.infiniband_devices else "no InfiniBand/RoCE device under /sys/class/infiniband"
    inventory = ctx.facts.gpus
    if inventory.problem is not None:
        return "no NVIDIA GPU" if inventory.problem.state in ("absent", "no-devices") else ""
    count = len(inventory.gpus)
    return "" if count >= 2 else f"{count} GPU{'' if count == 1 else 's'}, so no traffic between GPUs of this node"


def _nccl_integer(value: str) -> int | None:
    """An integer setting as NCCL reads it (strtoll with base 0 over the whole value; anything
    else, `nan` or `1x` or a 200 KB string, is invalid and NCCL falls back to the default)."""
    text = value.strip()
    if not text or len(text) > 24:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


@check("host.nccl-env", title="NCCL environment is not slowed down by debugging switches",
       tags=("host", "nccl", "env"), timeout=5)
def nccl_env(ctx: Context):
    """Variables copied from a forum answer while debugging often stay in job scripts and cost a
    large factor in bandwidth. Settings can also come from /etc/nccl.conf, ~/.nccl.conf or
    $NCCL_CONF_FILE, where nobody looks."""
    settings = ctx.facts.nccl_settings
    for problem in settings.problems:
        yield warn(f"NCCL configuration file unreadable: {problem}", subject="nccl.conf",
                   fix="ls -l \"${NCCL_CONF_FILE:-/etc/nccl.conf}\" ~/.nccl.conf   # make it readable, or unset NCCL_CONF_FILE")
    found = False
    for name, effect in _KILLERS.items():
        setting = settings.values.get(name)
        if setting is None or not setting.value.strip():
            continue
        where = "the environment" if setting.source == "environment" else setting.source
        fix = fixes.drop_setting(name, setting.source)
        number = _nccl_integer(setting.value)
        if number is None:
            yield warn(f"{name}={setting.value[:40]!r} (from {where}) is not an integer: NCCL ignores it and "
                       f"uses its default (0)", subject=name, fix=fix,
                       evidence={"name": name, "value": setting.value[:200], "source": setting.source})
            continue
        if number == 0:
            continue
        absent = _absent_hardware(ctx, _NEEDS[name])
        if absent:
            yield ok(f"{name}={setting.value} (from {where}) has no effect here: {absent}", subject=name,
                     evidence={"name": name, "value": setting.value, "source": setting.source, "why": absent},
                     explanation="It costs bandwidth on nodes that have the hardware; if the same job "
                                 "script runs there, remove it.")
            continue
        found = True
        yield warn(f"{name}={setting.value} (from {where}): {effect}", subject=name,
                   evidence={"name": name, "value": setting.value, "source": setting.source},
                   explanation="Useful to bisect a hang, ruinous to leave on. Remove it unless you know this "
                               "node needs it.", fix=fix)
    debug = settings.get("NCCL_DEBUG")
    if not found:
        yield ok("no NCCL switches that disable transports", evidence={"NCCL_DEBUG": debug})
    if not debug:
        yield ok("NCCL_DEBUG is not set", subject="NCCL_DEBUG",
                 explanation="When a job hangs or fails at init, rerun it with NCCL's own log: it names the "
                             "interface, transport and peer that failed.",
                 fix="export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET")

CHECKS = [shm_size, memlock_limit, nccl_env]
