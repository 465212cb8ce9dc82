"""The one table of what must hold across the nodes (or ranks) of a job or fleet.

Keys are inventory fact names (distdoctor/inventory.py, docs/inventory.md); `check.<id>` is a
node's result of that check. Every comparison reads its rules from here: the node reports of
`fleet`, `compare` and `check` under a launcher (crosscheck/nodes.py), nccl-test's ranks
(nccltest/compare.py) and the ranks an NCCL INFO log shows (logs/nccl_setup.py). Each picks the
facts it has (`select`); what a rule says, how bad it is and its fix are written once.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Sequence

from distdoctor import fixes, remote
from distdoctor.crosscheck import engine, identity
from distdoctor.crosscheck.engine import AGREE, DIFFER, Rule
from distdoctor.model import Status
from distdoctor.nccl_socket import shell_word
from distdoctor.redact import REDACTED
from distdoctor.remote import Fix

_STATUS_BY_NAME = {s.value: s for s in Status}
_IFACE = re.compile(r"^net\.if\.(.+)\.mtu$")


def _unlimited(value: Any) -> bool:
    return value is not None and engine.matches_expectation(value, "unlimited")


def _memlock_fix(diff: engine.Difference, slurm: bool = False) -> Fix:
    # RDMA wants the limit unlimited, not the majority value: the nodes to change are the limited ones.
    return fixes.memlock([m for g in diff.groups if not _unlimited(g.value) for m in g.members], slurm=slurm)


def _env_fix(diff: engine.Difference) -> str:
    name = diff.key[len("env."):]
    values = [g.value for g in diff.groups if g.value not in (None, "", engine.ABSENT, REDACTED)]
    if len(values) == 1 and remote.plain(name):
        return (f"export {name}={shell_word(str(values[0]))}   # for every rank, before srun/mpirun (mpirun -x {name}); "
                f"or unset it where it is set")
    return f"# set {remote.shown([name])} to one value for every rank, before srun/mpirun (mpirun -x {remote.shown([name])})"


def _mtu_fix(diff: engine.Difference) -> Fix | list[Fix]:
    iface = _IFACE.match(diff.key)
    name = iface.group(1) if iface else ""
    if diff.reference is not None:
        return fixes.mtu(name, diff.reference, diff.outliers)
    # No majority (two nodes, or a tie): which side is wrong is the path's to say, and only a
    # measurement knows it. Lowering the larger MTUs to the smallest is the change that cannot
    # make it worse (every hop carries what the smallest end sends); raising is the alternative.
    values = [g.value for g in diff.groups]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return Fix()
    low = min(values)
    above = [m for g in diff.groups if g.value != low for m in g.members]
    below = [m for g in diff.groups if g.value == low for m in g.members]
    lower = fixes.mtu(name, low, above)
    if not lower:
        return Fix()
    return [lower, Fix(comment=f"or raise {remote.shown(below)} to {max(values)} instead, if every hop between the "
                               "nodes carries it (distdoctor nccl-test measures the path when a transfer stalls)")]


def _install_fix(what: str):
    def fix(diff: engine.Difference) -> str:
        if diff.reference is None:
            return f"# install one {what} on {remote.shown(diff.outliers)} and the rest (run every node from one image)"
        return (f"# install {what} {engine.show(diff.reference)} on {remote.shown(diff.outliers)} "
                "(or run every node from one image)")
    return fix


def _rename_clones(diff: engine.Difference) -> list[Fix]:
    """Per node: a node whose name in the job (its Slurm name, the host ssh reached) is not the
    hostname it reports is the clone, and takes that name; the node that has its own name keeps
    it. Report files (compare) name no machine: said in words."""
    out = []
    for group in diff.groups:
        for member in group.members:
            if member != group.value and remote.host_name(member) and remote.plain(member):
                out.append(Fix((f"hostnamectl set-hostname {member}",), (member,),
                               f"it reports the hostname {engine.show(group.value)}, which another node has"))
    if not out:
        out.append(Fix(comment=f"give {remote.shown(diff.outliers)} distinct hostnames (hostnamectl set-hostname "
                               "NAME on each), or export a distinct NCCL_HOSTID on each"))
    return out


def _check_command(diff: engine.Difference) -> str:
    check_id = diff.key[len("check."):]
    return f"python3 -m distdoctor check --only {check_id} -v" if remote.plain(check_id) else ""


def _best_status(values: Sequence[Any]) -> Any:
    """The least severe status present: the nodes worse than it are the odd ones."""
    known = [_STATUS_BY_NAME[v] for v in values if v in _STATUS_BY_NAME]
    return min(known, key=lambda s: s.severity).value if known else values[0]


_VERSION_WHY = "{} must be the same on every node of a job; mixed versions hang at init or fail in collectives"

# What must hold across the nodes of a job or fleet. Keys are inventory fact names
# (docs/inventory.md); `check.<id>` is each node's result of that check.
NODE_RULES: tuple[Rule, ...] = (
    # Host identity: NCCL keys "same host" on hostname + boot id (its host hash); two nodes that
    # share one are taken for one host, and NCCL tries shared memory between them.
    Rule("host.name", "hostname", DIFFER, Status.FAIL,
         "nodes with the same hostname look like one host to NCCL, MPI and Slurm",
         lambda diff: _rename_clones(diff)),
    Rule("host.boot_id", "boot id", DIFFER, Status.FAIL,
         "NCCL's host hash includes the boot id: nodes sharing one (cloned images, containers on one "
         "kernel) with one hostname are taken for one host",
         identity.boot_id_fix),
    Rule("host.machine_id", "machine id", DIFFER, Status.WARN,
         "a machine id shared by several nodes means cloned images; tools that key on it (systemd, "
         "DHCP client ids) confuse the nodes",
         identity.machine_id_fix),
    Rule("nccl.host_hash", "NCCL host hash", DIFFER, Status.FAIL,
         "NCCL treats ranks with the same host hash as one host and tries shared memory and P2P between them",
         "# give {nodes} distinct hostnames, or export a distinct NCCL_HOSTID on each"),
    # Versions and builds.
    Rule("nccl.version", "NCCL version", AGREE, Status.FAIL, _VERSION_WHY.format("NCCL"), _install_fix("NCCL")),
    Rule("torch.version", "torch version", AGREE, Status.FAIL, _VERSION_WHY.format("torch"),
         lambda diff: fixes.pip_install("torch", diff.reference, diff.outliers)
         or Fix(comment=f"install one torch on {remote.shown(diff.outliers)} and the rest")),
    Rule("torch.cuda", "CUDA version of the torch build", AGREE, Status.WARN,
         "different CUDA builds of torch usually mean different environments on the nodes", _install_fix("torch")),
    Rule("cuda.runtime", "CUDA runtime", AGREE, Status.WARN,
         "different CUDA runtimes mean different environments on the nodes", _install_fix("the CUDA runtime")),
    Rule("cuda.toolkit", "CUDA toolkit (nvcc)", AGREE, Status.WARN,
         "extensions built on one node may not load on another", _install_fix("the CUDA toolkit")),
    Rule("gpu.driver", "NVIDIA driver version", AGREE, Status.WARN,
         "a driver older than the CUDA runtime fails with 'CUDA driver version is insufficient'",
         _install_fix("NVIDIA driver")),
    Rule("cuda.driver", "CUDA version the driver supports", AGREE, Status.WARN,
         "nodes on different drivers behave differently under the same job; a driver older than the "
         "CUDA runtime fails with 'CUDA driver version is insufficient'",
         "# upgrade the NVIDIA driver on {nodes} to one that supports CUDA {reference} (or run every node from one image)"),
    Rule("mpi.impl", "MPI implementation", AGREE, Status.FAIL, _VERSION_WHY.format("The MPI library"),
         _install_fix("MPI implementation")),
    Rule("mpi.version", "MPI version", AGREE, Status.FAIL, _VERSION_WHY.format("MPI"), _install_fix("MPI")),
    Rule("pip.distdoctor", "distdoctor version", AGREE, Status.WARN,
         "the nodes run different distdoctor installs: their reports may not compare like for like",
         run="python3 -m pip install distdoctor=={reference}"),
    Rule("horovod.version", "Horovod version", AGREE, Status.WARN, _VERSION_WHY.format("Horovod"),
         run="python3 -m pip install horovod=={reference}"),
    Rule("python.version", "Python version", AGREE, Status.WARN,
         "different Python versions usually mean different environments on the nodes", _install_fix("Python")),
    Rule("kernel", "kernel", AGREE, Status.WARN,
         "different kernels bring different drivers, RDMA stacks and limits", _install_fix("kernel")),
    # Hardware.
    Rule("gpu.count", "GPU count", AGREE, Status.FAIL,
         "a node with fewer GPUs than the rest gets the same number of ranks and fails with 'invalid device ordinal'",
         "# then drain {nodes}: a missing GPU is a hardware fault", run="nvidia-smi -L"),
    Rule("gpu.model", "GPU model", AGREE, Status.WARN,
         "mixed GPU models run at the speed of the slowest and may need different builds", ""),
    # One multi-node NVLink domain (GB200/GB300 NVL72): GPUs reach each other over NVLink only
    # within one ClusterUUID and CliqueId. A node whose GPUs did not join the domain reports a
    # zero ClusterUUID and clique 0 (Azure/azhpc-images#506: Status "Insufficient Resources").
    Rule("gpu.fabric.cluster_uuid", "NVLink domain (ClusterUUID)", AGREE, Status.WARN,
         "nodes in different NVLink domains (or outside any) reach each other only over the network: "
         "a job laid out for one NVL72 domain loses its NVLink bandwidth, and IMEX-shared memory "
         "fails across the domains", run="nvidia-smi -q -d FABRIC"),
    Rule("gpu.fabric.clique", "NVLink clique (CliqueId)", AGREE, Status.WARN,
         "GPUs in different cliques of one NVLink domain cannot reach each other over NVLink",
         run="nvidia-smi -q -d FABRIC"),
    # Network and limits.
    Rule("net.if.*.mtu", "MTU of *", AGREE, Status.FAIL,
         "an MTU smaller on some nodes drops or fragments the large packets the others send: "
         "transfers hang or crawl", _mtu_fix),
    Rule("ib.*.state", "state of IB port *", AGREE, Status.FAIL,
         "a rank bound to a port that is down hangs at init", run="ibstat"),
    Rule("ib.*.rate", "rate of IB port *", AGREE, Status.WARN,
         "one slow port sets the pace of every collective", run="ibstat"),
    Rule("ib.*.link_layer", "link layer of IB port *", AGREE, Status.WARN,
         "InfiniBand and RoCE ports need different NCCL settings", ""),
    Rule("limits.memlock", "locked-memory limit (ulimit -l)", AGREE, Status.WARN,
         "RDMA registers memory: a low limit fails with 'ibv_reg_mr ... Cannot allocate memory'",
         _memlock_fix),
    Rule("shm.size", "/dev/shm size", AGREE, Status.WARN,
         "NCCL's shared-memory transport fails with 'No space left on device' on a small /dev/shm",
         lambda diff: fixes.shm_size(diff.reference, diff.outliers)),
    # What NCCL chose, as its INFO log says (distdoctor log).
    Rule("nccl.network", "NCCL network transport", AGREE, Status.WARN,
         "some ranks chose InfiniBand/RoCE and others sockets: the slow ranks set the pace, or the two "
         "sides cannot connect",
         "# on the ranks using {value}: check the HCA (ibstat) or NCCL_IB_DISABLE/NCCL_NET settings"),
    Rule("nccl.gdr", "GPUDirect RDMA", AGREE, Status.WARN,
         "GPUDirect RDMA on for some ranks and off for others: the nvidia-peermem module or the GPU-NIC "
         "topology differs between nodes", "# on the nodes without it: lsmod | grep nvidia_peermem; nvidia-smi topo -m"),
    # Settings: a variable (inventory.COMPARED_ENV) or nccl.conf line on some nodes only usually
    # comes from a per-node profile or a job script that exports it on one host.
    Rule("env.*", "*", AGREE, Status.WARN,
         "NCCL, gloo and torch.distributed settings should be the same on every rank; one set on some "
         "nodes only comes from a per-node profile, /etc/environment or a job script that exports it on "
         "one host", _env_fix, absent="value"),
    Rule("nccl.conf.*", "nccl.conf setting *", AGREE, Status.WARN,
         "/etc/nccl.conf differs between nodes", "", absent="value"),
    # Check results: SKIP is not a result (a check with nothing to look at), so it takes no part.
    Rule("check.*", "result of check *", AGREE, Status.WARN,
         "the same check ends differently on some nodes: those nodes differ from the rest",
         best=_best_status, run=_check_command),
)


def under_slurm(chosen: Sequence[Rule]) -> tuple[Rule, ...]:
    """The same rules with the remedies for nodes whose tasks slurmd starts: they inherit the
    daemon's locked-memory limit, so its unit is what to change."""
    slurmd = functools.partial(_memlock_fix, slurm=True)
    return tuple(dataclasses.replace(r, fix=slurmd) if r.key == "limits.memlock" else r for r in chosen)


def select(*keys: str) -> tuple[Rule, ...]:
    """The table's rules for these keys (exact keys or the table's own globs), in table order;
    a key the table does not have is a KeyError at import, not a comparison silently skipped."""
    known = {rule.key for rule in NODE_RULES}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise KeyError(f"no rule for {', '.join(unknown)} in crosscheck/rules.py")
    return tuple(rule for rule in NODE_RULES if rule.key in set(keys))
