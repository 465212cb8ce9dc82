"""GPU inventory, health, topology and the CUDA/driver pairing: the node-local causes of slow or
hanging collectives (see docs/gpu.md).

The driver's troubles (no driver, a hung nvidia-smi, a documented exit code) are reported once,
by gpu.inventory; the other checks skip with a pointer to it.
"""

from __future__ import annotations

import re
import shlex
from itertools import combinations

from distdoctor.api import Context, ProbeTimeout, check, fail, ok, skip, warn
from distdoctor.facts.gpu import CHECK_TIMEOUT, GpuProblem
from distdoctor.parsers.nvidia_smi import LINK_ORDER, TopoDevice, TopoMatrix, link_rank
from distdoctor.text import plural

_q = shlex.quote  # a value from the machine (or a pasted log), as one shell word in a fix

_FAR = LINK_ORDER.index("NODE")  # NODE and SYS: the pair's traffic crosses CPU interconnects
_GDR = LINK_ORDER.index("PXB")  # NCCL uses GPUDirect RDMA up to PXB by default (NCCL_NET_GDR_LEVEL)
_SYS = LINK_ORDER.index("SYS")


def _problem_finding(problem: GpuProblem):
    if problem.state == "hung":  # the engine reports it TIMEOUT, with this explanation
        raise ProbeTimeout(problem.summary, subject="nvidia-smi", explanation=problem.explanation, fix=problem.fix,
                           evidence=problem.evidence)
    kind = {"absent": skip, "unreadable": warn}.get(problem.state, fail)
    return kind(problem.summary, subject="nvidia-smi", explanation=problem.explanation, fix=problem.fix,
                evidence=problem.evidence)


def _skipped(problem: GpuProblem, reported_by: str = "gpu.inventory"):
    if problem.state == "absent":
        return skip(problem.summary)
    return skip(f"not judged: {problem.summary.split(' — ')[0]} (see {reported_by})",
                evidence={"state": problem.state})


def _topology(ctx: Context, reporter: bool):
    """(the matrix, None), or (None, the one finding that says why there is none). Only the
    reporter (gpu.p2p-topology) states a topology problem; others point to it."""
    driver = ctx.facts.gpu_driver
    if driver.problem is not None:
        return None, _skipped(driver.problem)
    topo = ctx.facts.gpu_topology
    if topo.problem is not None:
        return None, _problem_finding(topo.problem) if reporter else _skipped(topo.problem, "gpu.p2p-topology")
    return topo.matrix, None


def _pairs_text(pairs: list[tuple[str, str, str]], limit: int = 8) -> str:
    shown = ", ".join(f"{a}–{b} ({w})" for a, b, w in pairs[:limit])
    return shown + (f" and {len(pairs) - limit} more" if len(pairs) > limit else "")


# --- CUDA_VISIBLE_DEVICES -------------------------------------------------------------------

def visible_entries(value: str) -> list[str]:
    return [part.strip() for part in value.split(",")] if value.strip() else []


def _resolve_visible(entries: list[str], inventory) -> tuple[list[int], list[str], str]:
    """(GPU indices in order, MIG uuids seen, the first entry CUDA would stop at or '').
    CUDA reads the list left to right and ignores everything from the first invalid entry on."""
    indices: list[int] = []
    migs: list[str] = []
    for entry in entries:
        gpu = None
        if re.fullmatch(r"\d+", entry):
            gpu = inventory.by_index(int(entry))
        elif entry.startswith("GPU-"):
            matches = [g for g in inventory.gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
            gpu = matches[0] if len(matches) == 1 else None
        elif entry.startswith("MIG-"):
            for g in inventory.gpus:
                if any(m.uuid == entry for m in g.mig_devices) or (g.uuid and entry[4:].startswith(g.uuid)):
                    gpu = g
                    migs.append(entry)
                    break
        if gpu is None:
            return indices, migs, entry
        indices.append(gpu.index)
    return indices, migs, ""


def _job_gpus(ctx: Context, matrix: TopoMatrix) -> tuple[list[TopoDevice], str]:
    """The GPUs this job will use: CUDA_VISIBLE_DEVICES when it resolves, else all of them."""
    gpus = list(matrix.gpus)
    value = ctx.env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return gpus, "all GPUs (CUDA_VISIBLE_DEVICES is not set)"
    inventory = ctx.facts.gpus
    indices, _migs, bad = _resolve_visible(visible_entries(value), inventory)
    chosen = [g for i in dict.fromkeys(indices) for g in gpus if g.index == i]
    if bad or not chosen:
        return gpus, f"all GPUs (CUDA_VISIBLE_DEVICES={value!r} could not be mapped; see gpu.visible-devices)"
    return chosen, f"CUDA_VISIBLE_DEVICES={value}"


def _local_ranks(ctx: Context) -> int | None:
    rc = ctx.run_context
    if rc.local_world_size:
        return rc.local_world_size
    for name in ("SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        match = re.match(r"\s*(\d+)", ctx.env.get(name, ""))
        if match and rc.kind.startswith("slurm"):
            return int(match.group(1))
    return None


# --- checks ---------------------------------------------------------------------------------

@check("gpu.inventory", title="GPUs are present, answer, and match what the node should have",
       tags=("gpu",), timeout=CHECK_TIMEOUT, params={"expected_count": 0, "expected_model": ""})
def inventory(ctx: Context):
    """Counts and names the GPUs (through NVML, else nvidia-smi) and compares them with
    `expected_count` and `expected_model` from the config. Inside a Slurm job the expectation is
    what Slurm allocated on this node (SLURM_GPUS_ON_NODE). A missing driver skips; a hung
    nvidia-smi, a documented nvidia-smi exit code or unreadable output is explained here."""
    inv = ctx.facts.gpus
    expected = int(ctx.params.get("expected_count") or 0)
    on_node = ctx.env.get("SLURM_GPUS_ON_NODE", "").strip()
    why_expected = "config expected_count"
    if on_node.isdigit():
        expected, why_expected = int(on_node), "SLURM_GPUS_ON_NODE"
    if inv.problem is not None:
        if inv.problem.state == "no-devices" and not expected:
            yield warn(inv.problem.summary, subject="nvidia-smi", explanation=inv.problem.explanation,
                       fix=inv.problem.fix, evidence=inv.problem.evidence)
        else:
            yield _problem_finding(inv.problem)
        return
    gpus = inv.gpus
    models = sorted({g.name for g in gpus})
    driver = ctx.facts.gpu_driver
    # why NVML did not answer, where nvidia-smi did: the fallback is visible in the report
    evidence = {"source": inv.source, "nvml": driver.nvml_status or None, "driver_version": driver.driver_version,
                "count": len(gpus),
                "expected_count": expected or None, "unreported_fields": list(inv.unreported),
                "table": {"columns": ["GPU", "name", "bus id", "memory MiB", "uuid"],
                          "rows": [[g.index, g.name, g.bus_id or "?", g.memory_total_mib or "?", g.uuid or "?"]
                                   for g in gpus]}}
    for note in inv.notes:
        yield warn(f"nvidia-smi: {note}", subject="nvidia-smi",
                   explanation="A line where a GPU should be usually names a GPU the driver cannot reach.",
                   fix="nvidia-smi -q | less; dmesg -T | grep -iE 'NVRM|Xid'")
    if not gpus:
        yield (fail if expected else warn)("the driver answered but lists no GPU", evidence=evidence,
                                           fix="lspci | grep -i nvidia; dmesg -T | grep -iE 'NVRM|Xid'")
        return
    described = ", ".join(f"{sum(g.name == m for g in gpus)} × {m}" for m in models)
    if expected and len(gpus) < expected:
        yield fail(f"{plural(len(gpus), 'GPU')} visible, expected {expected} ({why_expected})", evidence=evidence,
                   explanation="A GPU that is missing from the driver's list fell off the bus, was disabled, or "
                               "is hidden from this process (cgroup, CUDA_VISIBLE_DEVICES does not affect NVML).",
                   fix="nvidia-smi -L; dmesg -T | grep -iE 'NVRM|Xid'   # lspci | grep -i nvidia shows "
                       "what the bus has")
    elif expected and len(gpus) > expected:
        yield warn(f"{plural(len(gpus), 'GPU')} visible, expected {expected} ({why_expected})", evidence=evidence,
                   explanation="More GPUs than expected: the config is out of date, or the job's GPUs are not "
                               "confined (Slurm without ConstrainDevices=yes in cgroup.conf lets tasks use "
                               "GPUs they were not given).",
                   fix=f"# in distdoctor's config, [checks.\"gpu.inventory\"]: expected_count = {len(gpus)}\n"
                       "# or confine jobs to their GPUs: ConstrainDevices=yes in Slurm's cgroup.conf")
    else:
        yield ok(f"{described}" + (" (as expected)" if expected else ""), evidence=evidence)
    if len(models) > 1:
        yield warn(f"mixed GPU models on one node: {described}", evidence={"models": models},
                   explanation="Collectives run at the pace of the slowest GPU, and mixed architectures need a "
                               "torch/NCCL build that covers every compute capability.",
                   fix="nvidia-smi --query-gpu=index,name --format=csv   # then export CUDA_VISIBLE_DEVICES "
                       "with the indices of one model, or ask Slurm for one: --gres=gpu:MODEL:COUNT")
    wanted = str(ctx.params.get("expected_model") or "").strip()
    if wanted and not all(wanted.lower() in g.name.lower() for g in gpus):
        yield warn(f"GPU model is not {wanted!r}: {described}", evidence={"expected_model": wanted, "models": models},
                   fix="scontrol show job \"$SLURM_JOB_ID\" | grep -E 'Partition|Features|TRES'   # where the job ran")


@check("gpu.p2p-topology", title="GPUs the job uses are connected by NVLink or PCIe, not across CPUs",
       tags=("gpu", "nccl", "topology"), timeout=CHECK_TIMEOUT)
def p2p_topology(ctx: Context):
    """Reads `nvidia-smi topo -m` for the GPUs the job will use (CUDA_VISIBLE_DEVICES, else all).
    Pairs that meet only over SYS (across the CPU sockets) or NODE (across host bridges) carry
    NCCL traffic through the CPU at a fraction of NVLink/PCIe-switch bandwidth. Pairs that are
    far apart but joined through other GPUs by NVLink (DGX-1's hybrid cube-mesh) are fine: NCCL
    routes its rings over NVLink."""
    matrix, why_not = _topology(ctx, reporter=True)
    if matrix is None:
        yield why_not
        return
    for note in matrix.notes:
        yield ok(f"topology: {note}", subject="nvidia-smi topo -m")
    used, why = _job_gpus(ctx, matrix)
    if len(used) < 2:
        yield skip(f"only {len(used)} GPU in use ({why}): no GPU pairs to judge")
        return
    labels = [g.label for g in used]
    pairs = [(a, b, matrix.link(a, b) or "?") for a, b in combinations(labels, 2)]
    table = {"columns": ["", *labels],
             "rows": [[a, *("X" if a == b else matrix.link(a, b) or "?" for b in labels)] for a in labels]}
    evidence = {"gpus": labels, "selection": why, "table": table}
    unknown = sorted({w for _a, _b, w in pairs if link_rank(w) >= len(LINK_ORDER)})
    if unknown:
        meaning = {w: matrix.legend.get(w, "not in the legend") for w in unknown}
        yield warn(f"unknown link word(s) in the topology matrix: {', '.join(unknown)}", subject="nvidia-smi topo -m",
                   evidence={"words": meaning},
                   explanation="A driver newer than distdoctor, or garbled output: these pairs are not judged.",
                   fix="nvidia-smi topo -m   # compare with its Legend")
    # GPUs joined by NVLink, directly or through other GPUs, form one group for NCCL's rings.
    group = {label: label for label in labels}

    def root(x: str) -> str:
        while group[x] != x:
            x = group[x]
        return x

    for a, b, word in pairs:
        if link_rank(word) == 0:
            group[root(a)] = root(b)
    far = [(a, b, w) for a, b, w in pairs if _FAR <= link_rank(w) < len(LINK_ORDER) and root(a) != root(b)]
    nvlink = [w for _a, _b, w in pairs if link_rank(w) == 0]
    if far:
        numa_groups: dict[str, list[str]] = {}
        for g in used:
            key = g.numa_affinity or g.cpu_affinity or "?"
            numa_groups.setdefault(key, []).append(g.label)
        placement = "; ".join(f"{', '.join(members)} (NUMA {key})" if key.isdigit() else
                              f"{', '.join(members)} (CPUs {key})" for key, members in numa_groups.items())
        fitting = max(numa_groups.values(), key=len)
        far.sort(key=lambda pair: -link_rank(pair[2]))
        counts = ", ".join(f"{sum(w == word for _a, _b, w in far)} over {word}"
                           for word in dict.fromkeys(w for _a, _b, w in far))
        yield warn(f"{len(far)} of {len(pairs)} GPU pairs meet only over SYS/NODE ({counts}): {_pairs_text(far)}",
                   subject="GPU pairs", evidence=evidence,
                   explanation="SYS crosses the inter-socket link (QPI/UPI/xGMI), NODE the interconnect between "
                               "PCIe host bridges; GPU peer-to-peer is slow or disabled there, so NCCL stages "
                               "traffic through host memory. GPUs that share a socket: " + placement + ".",
                   fix=f"CUDA_VISIBLE_DEVICES={_q(','.join(l[3:] for l in fitting))}   # a job that fits on one "
                       "socket; otherwise bind each rank to its GPU's NUMA node: "
                       "numactl --cpunodebind=<node> --membind=<node> ..., or srun --gpu-bind=closest "
                       "--cpu-bind=cores")
    elif nvlink and len(nvlink) == len(pairs) and len(set(nvlink)) == 1:
        fabric = " (every pair the same width: NVSwitch or an all-to-all NVLink mesh)" if len(used) > 2 else ""
        yield ok(f"all {len(used)} GPUs are directly connected by NVLink, {nvlink[0]}{fabric}", evidence=evidence)
    elif nvlink:
        yield ok(f"{len(used)} GPUs joined by NVLink ({', '.join(sorted(set(nvlink)))} on {len(nvlink)} of "
                 f"{len(pairs)} pairs); the rest reach each other through NVLink neighbours", evidence=evidence)
    else:
        words = sorted({w for _a, _b, w in pairs}, key=link_rank)
        yield ok(f"{len(used)} GPUs connected over PCIe ({', '.join(words)}); no NVLink", evidence=evidence,
                 explanation="PIX/PXB pairs use PCIe peer-to-peer through a switch; PHB pairs go through the "
                             "CPU's host bridge, where P2P is slower or disabled on some platforms.")


def _hca_matcher(spec: str):
    """NCCL_IB_HCA: a comma list of name[:port]; '^' excludes, '=' asks exact names, otherwise
    each entry is a prefix (NCCL's own matching)."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    names = [e.split(":")[0].strip() for e in spec.lstrip("=").split(",") if e.strip()]

    def matches(name: str) -> bool:
        hit = any(name == n if exact else name.startswith(n) for n in names)
        return hit != exclude

    return matches, names


def _nccl_nics(ctx: Context, matrix: TopoMatrix) -> tuple[list[TopoDevice], str, list[str]]:
    """The NICs NCCL will use: NCCL_IB_HCA when set, else all RDMA NICs in the matrix.
    HCAs with no ACTIVE port are dropped by the caller (NCCL skips them)."""
    nics = list(matrix.nics)
    spec = ctx.facts.nccl_settings.get("NCCL_IB_HCA")
    if not spec:
        return nics, "all RDMA NICs (NCCL_IB_HCA is not set; NCCL picks the closest per GPU)", []
    if any(re.fullmatch(r"NIC\d+", d.name) for d in nics):
        return nics, f"all RDMA NICs (NCCL_IB_HCA={spec} cannot be applied: nvidia-smi printed no NIC Legend)", []
    matches, names = _hca_matcher(spec)
    unknown = [n for n in names if not any(d.name.startswith(n) for d in nics)] if not spec.startswith("^") else []
    chosen = [d for d in nics if matches(d.name)]
    return chosen, f"NCCL_IB_HCA={spec}", unknown


def _inactive_hcas(ctx: Context) -> set[str]:
    """HCAs whose every port is down on this node (from the net area's sysfs reading)."""
    try:
        ports = ctx.facts.infiniband.ports
    except Exception:  # unreadable sysfs is net.infiniband's to report
        return set()
    return {p.hca for p in ports} - {p.hca for p in ports if p.state.upper() == "ACTIVE"}


@check("gpu.nic-affinity", title="Each GPU has an RDMA NIC close to it", tags=("gpu", "nccl", "ib", "topology"),
       timeout=CHECK_TIMEOUT)
def nic_affinity(ctx: Context):
    """For each GPU the job uses, the closest NIC NCCL will use and the PCIe path to it. A NIC
    that is SYS-far (on the other socket) rules out GPUDirect RDMA: NCCL then stages every
    inter-node transfer through host memory. NCCL enables GPUDirect RDMA up to PXB by default."""
    matrix, why_not = _topology(ctx, reporter=False)
    if matrix is None:
        yield why_not
        return
    if ctx.facts.nccl_settings.get("NCCL_IB_DISABLE", "0").strip() not in ("", "0"):
        yield skip("NCCL_IB_DISABLE is set: NCCL will not use RDMA NICs (see host.nccl-env)")
        return
    if not matrix.nics:
        yield skip("no RDMA NIC in the topology matrix: between nodes NCCL will use TCP sockets, or a network "
                   "plugin such as AWS EFA (which nvidia-smi does not list)")
        return
    used, why = _job_gpus(ctx, matrix)
    allowed, nic_why, unknown = _nccl_nics(ctx, matrix)
    inactive = _inactive_hcas(ctx) & {d.name for d in matrix.nics}
    if inactive:
        allowed = [d for d in allowed if d.name not in inactive]
        nic_why += f"; without {', '.join(sorted(inactive))} (no ACTIVE port, which NCCL skips; see net.infiniband)"
    usable = [d for d in matrix.nics if d.name not in inactive]
    if unknown:
        yield warn(f"NCCL_IB_HCA names {', '.join(unknown)}, which this node does not have "
                   f"(it has {', '.join(d.name for d in matrix.nics)})", subject="NCCL_IB_HCA",
                   explanation="NCCL silently ignores names that match nothing; if none match it falls back to "
                               "sockets.", fix=f"export NCCL_IB_HCA={_q(','.join(d.name for d in matrix.nics))}")
    if not allowed:
        yield warn(f"{nic_why} matches none of this node's NICs ({', '.join(d.name for d in matrix.nics)})",
                   subject="NCCL_IB_HCA", fix=f"export NCCL_IB_HCA={_q(','.join(d.name for d in matrix.nics))}")
        return

    load: dict[str, int] = {}

    def closest(gpu: TopoDevice, candidates: list[TopoDevice]) -> tuple[TopoDevice | None, str]:
        # Among equally close NICs take the one given to the fewest GPUs so far, so that the
        # suggested per-rank mapping spreads GPU0/GPU1 over mlx5_0/mlx5_1 instead of doubling up.
        ranked = sorted(candidates, key=lambda n: (link_rank(matrix.link(gpu.label, n.label) or "?"),
                                                   load.get(n.label, 0)))
        if not ranked:
            return None, "?"
        return ranked[0], matrix.link(gpu.label, ranked[0].label) or "?"

    rows, far, excluded_closer, mapping = [], [], [], []
    for gpu in used:
        nic, path = closest(gpu, allowed)
        best, best_path = closest(gpu, usable)
        if best is not None:
            load[best.label] = load.get(best.label, 0) + 1
        rows.append([gpu.label, nic.name if nic else "-", path, best.name if best else "-", best_path])
        mapping.append(f"{gpu.label}→{best.name if best else '?'} ({best_path})")
        if link_rank(path) >= _SYS:
            far.append((gpu.label, nic.name if nic else "?", path))
            if best is not None and link_rank(best_path) < link_rank(path):
                excluded_closer.append((gpu.label, best.name, best_path))
    evidence = {"gpus": [g.label for g in used], "selection": why, "nics": nic_why,
                "table": {"columns": ["GPU", "NCCL's NIC", "path", "closest NIC", "path"], "rows": rows}}
    names_unknown = any(re.fullmatch(r"NIC\d+", d.name) for d in matrix.nics)
    if excluded_closer:
        closer = sorted({n for _g, n, _p in excluded_closer})
        yield warn(f"{nic_why} leaves {', '.join(g for g, _n, _p in excluded_closer)} SYS-far from its NIC, "
                   f"while closer NICs exist: {', '.join(f'{n} ({p} to {g})' for g, n, p in excluded_closer)}",
                   subject="NCCL_IB_HCA", evidence=evidence,
                   explanation="Across the CPU sockets there is no GPUDirect RDMA: NCCL copies every inter-node "
                               "transfer through host memory.",
                   fix=f"export NCCL_IB_HCA={_q(','.join(sorted({d.name for d in allowed} | set(closer))))}   "
                       f"# per-rank mapping: {'; '.join(mapping)}")
    elif far:
        yield warn(f"{', '.join(g for g, _n, _p in far)} {'is' if len(far) == 1 else 'are'} SYS-far from every "
                   f"NIC NCCL will use: no GPUDirect RDMA for {'it' if len(far) == 1 else 'them'}",
                   subject="GPU-NIC affinity", evidence=evidence,
                   explanation="The NICs hang off the other CPU socket. Inter-node traffic of these GPUs crosses "
                               "the inter-socket link and host memory; all ranks wait for the slowest."
                               + (" NIC names are unknown (no NIC Legend): the table shows NICk labels."
                                  if names_unknown else ""),
                   fix="# place the ranks that talk across nodes on GPUs near a NIC (" + "; ".join(mapping) + "),\n"
                       "# or add a NIC on that socket; the table: nvidia-smi topo -m")
    else:
        worst_path = max((r[2] for r in rows), key=link_rank)
        gdr = link_rank(worst_path) <= _GDR
        yield ok(f"every GPU in use has an RDMA NIC within {worst_path}"
                 + ("" if gdr else " (GPUDirect RDMA off by default beyond PXB)"), evidence=evidence,
                 explanation="" if gdr else "NCCL uses GPUDirect RDMA only up to NCCL_NET_GDR_LEVEL (default "
                                            "PXB); NODE/PHB paths stage through host memory.")


_MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


def _version_tuple(text: str) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


@check("gpu.cuda-compat", title="The driver supports the CUDA version torch was built with",
       tags=("gpu", "torch", "cuda"), timeout=CHECK_TIMEOUT)
def cuda_compat(ctx: Context):
    """Compares the driver's highest CUDA version (nvidia-smi's header, NVML) with
    `torch.version.cuda`, read from the installed torch's version.py without importing torch.
    A driver older than the runtime fails at the first CUDA call with "CUDA driver version is
    insufficient for CUDA runtime version" (nccl-tests#12)."""
    torch = ctx.facts.torch_install
    if not torch.installed:
        yield skip("torch is not installed in this Python environment")
        return
    if torch.error:
        yield warn(f"torch {torch.version or ''} is installed but its version file is unreadable: {torch.error}",
                   subject="torch", fix="pip install --force-reinstall torch   # same version and index URL")
        return
    driver = ctx.facts.gpu_driver
    if driver.problem is not None:
        yield _skipped(driver.problem)
        return
    evidence = {"torch": torch.version, "torch_cuda": torch.cuda, "torch_hip": torch.hip,
                "driver": driver.driver_version, "driver_cuda": driver.cuda_version,
                "driver_cuda_field": driver.cuda_field}
    if torch.hip:
        yield skip(f"torch {torch.version} is a ROCm build (HIP {torch.hip}); the NVIDIA driver is not used by it",
                   evidence=evidence)
        return
    if not torch.cuda:
        yield warn(f"torch {torch.version} is a CPU-only build on a node with an NVIDIA driver", subject="torch",
                   evidence=evidence, explanation="torch.cuda.is_available() is False: the job runs on CPU, or "
                                                  "fails at init_process_group(backend='nccl').",
                   fix="pip install torch --index-url https://download.pytorch.org/whl/cu"
                       + (driver.cuda_version or "126").replace(".", "") + "   # choose cuXY ≤ the driver's CUDA "
                       f"{driver.cuda_version or '?'}")
        return
    if driver.cuda_version is None:
        yield warn(f"the driver ({driver.driver_version}) reports no CUDA version "
                   f"({driver.cuda_field}); cannot compare with torch's CUDA {torch.cuda}", subject="driver",
                   evidence=evidence,
                   explanation="'CUDA Version: N/A' is what a vGPU/ESXi host driver or a broken user-space "
                               "install prints.", fix="nvidia-smi; ls -l /usr/lib/x86_64-linux-gnu/libcuda.so*")
        return
    have, need = _version_tuple(driver.cuda_version), _version_tuple(torch.cuda)
    derived = " (derived from the driver version; drivers before R410 do not print it)" \
        if driver.cuda_field == "derived" else ""
    summary = f"torch {torch.version} needs CUDA {torch.cuda}; the driver {driver.driver_version} supports up to " \
              f"CUDA {driver.cuda_version}{derived}"
    upgrade = (f"# upgrade the NVIDIA driver (CUDA {torch.cuda} needs ≥ {_MIN_DRIVER[need[0]]} with minor-version "
               "compatibility, or the driver of that release), or install a torch built for this driver:"
               if need and need[0] in _MIN_DRIVER
               else f"# upgrade the NVIDIA driver to one that supports CUDA {torch.cuda}, or install a torch built "
                    "for this driver:")
    downgrade = ("pip install torch --index-url "
                 + _q(f"https://download.pytorch.org/whl/cu{driver.cuda_version.replace('.', '')}"))
    if have is None or need is None:
        yield warn(f"cannot compare CUDA versions {driver.cuda_version!r} and {torch.cuda!r}", evidence=evidence)
    elif need[0] > have[0] or (need[0] < 11 and need > have):
        yield fail(summary + ": \"CUDA driver version is insufficient for CUDA runtime version\"", subject="torch",
                   evidence=evidence,
                   explanation="The CUDA runtime inside torch refuses a driver older than itself; the first CUDA "
                               "call (and NCCL init) fails with that message.",
                   fix=f"{upgrade}\n{downgrade}   # a torch built for CUDA ≤ {driver.cuda_version}")
    elif need > have:
        yield warn(summary + ": runs through CUDA minor-version compatibility", subject="torch", evidence=evidence,
                   explanation="Within CUDA 11.x/12.x a newer runtime runs on an older driver of the same major "
                               "version, but PTX JIT and newer features fail (\"the provided PTX was compiled "
                               "with an unsupported toolchain\").",
                   fix=f"{upgrade}\n{downgrade}")
    else:
        yield ok(f"torch {torch.version} (CUDA {torch.cuda}) runs on driver {driver.driver_version} "
                 f"(CUDA ≤ {driver.cuda_version}{derived})", evidence=evidence)


@check("gpu.visible-devices", title="CUDA_VISIBLE_DEVICES names GPUs that exist, and ranks can see each other",
       tags=("gpu", "env", "slurm", "nccl"), timeout=CHECK_TIMEOUT)
def visible_devices(ctx: Context):
    """CUDA_VISIBLE_DEVICES entries must be indices, GPU UUIDs (or unique prefixes) or MIG ids of
    this node; CUDA ignores everything from the first invalid entry on. One GPU visible per rank
    in a multi-GPU job stops NCCL from using CUDA IPC between ranks (nccl#129); Slurm's
    `--gpu-bind=per_task:1` does this and makes `set_device(local_rank)` fail with
    "invalid device ordinal" (nccl-tests#300)."""
    inv = ctx.facts.gpus
    if inv.problem is not None:
        yield _skipped(inv.problem)
        return
    value = ctx.env.get("CUDA_VISIBLE_DEVICES")
    local_ranks = _local_ranks(ctx)
    local_rank = ctx.run_context.local_rank
    evidence = {"CUDA_VISIBLE_DEVICES": value, "gpus_on_node": len(inv.gpus), "local_ranks": local_ranks,
                "local_rank": local_rank, "launcher": ctx.run_context.kind}
    all_gpus = ",".join(str(g.index) for g in inv.gpus)
    visible = len(inv.gpus)
    if value is not None:
        entries = visible_entries(value)
        if not entries:
            yield fail("CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU", subject="CUDA_VISIBLE_DEVICES",
                       evidence=evidence, fix=f"unset CUDA_VISIBLE_DEVICES   # or export CUDA_VISIBLE_DEVICES={all_gpus}")
            return
        indices, migs, bad = _resolve_visible(entries, inv)
        if bad:
            kept = entries[:entries.index(bad)]
            yield fail(f"CUDA_VISIBLE_DEVICES={value}: {bad!r} is not a GPU of this node (it has "
                       f"{len(inv.gpus)}: {all_gpus})", subject="CUDA_VISIBLE_DEVICES", evidence=evidence,
                       explanation="CUDA stops reading at the first invalid entry: "
                                   + (f"only {','.join(kept)} will be visible." if kept else "no GPU will be visible.")
                                   + " Indices count the GPUs this process can see (after cgroups), UUIDs come from "
                                     "`nvidia-smi -L`.",
                       fix=f"export CUDA_VISIBLE_DEVICES={all_gpus}   # see nvidia-smi -L")
            return
        if len(set(indices)) != len(indices) and not migs:
            yield warn(f"CUDA_VISIBLE_DEVICES={value} lists a GPU twice", subject="CUDA_VISIBLE_DEVICES",
                       evidence=evidence, fix=f"export CUDA_VISIBLE_DEVICES={','.join(dict.fromkeys(map(str, indices)))}")
        if len(migs) > 1:
            yield warn(f"CUDA_VISIBLE_DEVICES lists {len(migs)} MIG devices: a CUDA process uses only the first",
                       subject="CUDA_VISIBLE_DEVICES", evidence=evidence,
                       explanation="CUDA enumerates a single MIG device per process, and NCCL cannot communicate "
                                   "between MIG instances.", fix="nvidia-smi -L   # then give each rank one MIG UUID: "
                                          "export CUDA_VISIBLE_DEVICES=MIG-... per rank")
        models = {g.name for g in inv.gpus}
        if len(models) > 1 and any(e.isdigit() for e in entries) and \
                ctx.env.get("CUDA_DEVICE_ORDER", "").strip() != "PCI_BUS_ID":
            yield warn(f"CUDA_VISIBLE_DEVICES={value} uses indices on a node with mixed GPU models, and "
                       "CUDA_DEVICE_ORDER is not PCI_BUS_ID", subject="CUDA_DEVICE_ORDER", evidence=evidence,
                       explanation="CUDA numbers GPUs fastest first by default, nvidia-smi and Slurm by PCI bus: "
                                   "with mixed models the same index names different GPUs.",
                       fix="export CUDA_DEVICE_ORDER=PCI_BUS_ID   # or list UUIDs from nvidia-smi -L")
        visible = len(entries)
    if local_rank is not None and local_rank >= visible and visible > 0:
        yield fail(f"local rank {local_rank} but only {visible} GPU(s) visible: torch.cuda.set_device({local_rank}) "
                   "fails with \"invalid device ordinal\"", subject="CUDA_VISIBLE_DEVICES", evidence=evidence,
                   explanation="Each rank sees a subset of GPUs renumbered from 0 (Slurm --gpu-bind=per_task:1 or "
                               "--gpus-per-task=1 with ConstrainDevices), so LOCAL_RANK is no longer its GPU index.",
                   fix="# in the job script, show every rank all the node's GPUs:\n"
                       "# srun --gpus-per-node=$SLURM_GPUS_ON_NODE --gpu-bind=none YOUR_PROGRAM\n"
                       "# or, when each rank is given one GPU, call torch.cuda.set_device(0)")
    if local_ranks and local_ranks > 1 and visible == 1:
        yield warn(f"one GPU visible per rank with {local_ranks} ranks on this node: NCCL cannot use CUDA IPC "
                   "(NVLink/PCIe P2P) between them", subject="CUDA_VISIBLE_DEVICES", evidence=evidence,
                   explanation="Ranks that cannot see each other's GPUs fall back to host-memory transports, or "
                               "fail with \"unhandled system error\" (nccl#129). Slurm's --gpu-bind=per_task:1 (and "
                               "setting CUDA_VISIBLE_DEVICES=$LOCAL_RANK in a wrapper) causes it.",
                   fix="# in the job script, show every rank all the node's GPUs:\n"
                       "# srun --gpus-per-node=$SLURM_GPUS_ON_NODE --gpu-bind=none YOUR_PROGRAM\n"
                       "# and in the program: torch.cuda.set_device(int(os.environ['LOCAL_RANK']))")
    elif value is None:
        yield ok(f"CUDA_VISIBLE_DEVICES is not set: {'the' if len(inv.gpus) == 1 else 'all'} "
                 f"{plural(len(inv.gpus), 'GPU')} {'is' if len(inv.gpus) == 1 else 'are'} visible", evidence=evidence)
    else:
        yield ok(f"CUDA_VISIBLE_DEVICES={value} names {visible} GPU(s) of this node", evidence=evidence)


@check("gpu.health", title="GPUs are set up for jobs: persistence on, MIG only where expected",
       tags=("gpu", "health"), timeout=CHECK_TIMEOUT, params={"require_persistence": True, "expect_mig": False})
def health(ctx: Context):
    """Persistence mode off on a compute node makes every job pay the driver's initialisation
    (seconds) and can time out NCCL's bootstrap. MIG mode enabled where full GPUs are expected
    hides NVLink from NCCL. Memory errors, throttling and the rest of the hardware are judged by
    the checks of docs/hardware.md (gpu.memory-errors, gpu.throttle, ...), one finding per cause."""
    inv = ctx.facts.gpus
    if inv.problem is not None:
        yield _skipped(inv.problem)
        return
    rows = []
    found = False
    off = [g for g in inv.gpus if g.persistence_mode is False]
    for g in inv.gpus:
        rows.append([g.index, {True: "on", False: "off"}.get(g.persistence_mode, "?"),
                     {True: "enabled", False: "disabled"}.get(g.mig_mode, "-")])
        if g.mig_mode and not ctx.params.get("expect_mig"):
            found = True
            yield warn(f"GPU{g.index} has MIG enabled ({len(g.mig_devices)} MIG device(s))", subject=f"GPU{g.index}",
                       evidence={"gpu": g.index, "mig_devices": [m.uuid for m in g.mig_devices]}, action="fix-config",
                       explanation="MIG instances have no NVLink or P2P: NCCL cannot use them for multi-GPU "
                                   "training.",
                       fix=f"sudo nvidia-smi -i {g.index} -mig 0   # then reset the GPU; or set "
                           "[checks.\"gpu.health\"] expect_mig = true")
    if off and ctx.params.get("require_persistence", True):
        found = True
        yield warn(f"persistence mode is off on {len(off)} of {plural(len(inv.gpus), 'GPU')} "
                   f"({', '.join(f'GPU{g.index}' for g in off)})", subject="persistence mode", action="fix-config",
                   explanation="Without persistence the driver tears the GPUs down when the last process exits, "
                               "and each job pays seconds of re-initialisation.",
                   fix="sudo systemctl enable --now nvidia-persistenced   # or: sudo nvidia-smi -pm 1")
    evidence = {"table": {"columns": ["GPU", "persistence", "MIG"], "rows": rows}}
    if not found:
        yield ok(f"{len(inv.gpus)} GPU(s)" + (": persistence on" if not off else ""), evidence=evidence)
    else:
        yield ok(f"per-GPU settings of {len(inv.gpus)} GPU(s)", evidence=evidence)


CHECKS = [inventory, p2p_topology, nic_affinity, cuda_compat, visible_devices, health]
