"""Cross-rank comparison of fingerprints: what should be identical across a job and is not.

Pure: a list of fingerprints (see fingerprint.py) in, findings out. The fingerprints name node
facts as the inventory does, and the rules for them are the one table (crosscheck/rules.py) on
the shared comparison engine: ranks are the members for per-rank facts, hosts for per-node ones.
What is not a plain "must agree" (GPU visibility per rank, NCCL's own interface choice) stays here.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import Any, Iterable, Sequence

from distdoctor import fixes
from distdoctor.api import fail, ok, warn
from distdoctor.crosscheck import engine
from distdoctor.crosscheck import rules as table
from distdoctor.crosscheck.engine import DIFFER, Rule
from distdoctor.text import rank_ranges
from distdoctor.model import Finding, Status
from distdoctor.remote import Fix

__all__ = ["compare", "fingerprint_table", "ifname_covering", "rank_ranges", "node_key"]

# The node facts a fingerprint carries under the inventory's names, compared across ranks (each
# rank's own process sees them) and across hosts (a node's GPUs). What each rule says, how bad it
# is and its fix come from the one table, crosscheck/rules.py.
_RANK_RULES = table.select("torch.version", "nccl.version", "torch.cuda", "gpu.driver", "python.version",
                           "pip.distdoctor", "limits.memlock", "env.*")
_HOST_RULES = table.select("gpu.model", "gpu.count")
# Not a node fact: which GPU each rank drives, by host and UUID.
_GPU_SLOT = Rule("gpu_slot", "GPU", DIFFER, Status.FAIL, "NCCL refuses two ranks on one GPU ('Duplicate GPU detected')",
                 fix="# in the training script: torch.cuda.set_device(int(os.environ['LOCAL_RANK'])), and give "
                     "every rank of a node the same CUDA_VISIBLE_DEVICES")


def node_key(fp: dict[str, Any]) -> str:
    return str(fp.get("host", "?"))


class _Job:
    """The ranks of one comparison: which host each rank is on, and how the job was launched,
    for summaries and fixes that must name hosts rather than ranks."""

    def __init__(self, fps: Sequence[dict[str, Any]]):
        self.fps = sorted(fps, key=lambda f: f.get("rank", 0))
        self.host_of = {str(fp.get("rank", 0)): node_key(fp) for fp in self.fps}
        self.slurm = any((fp.get("slurm") or {}).get("job") for fp in self.fps)

    def hosts(self, members: Iterable[str]) -> list[str]:
        return sorted({self.host_of.get(m, m) for m in members})

    def ranks_on_hosts(self, members: Iterable[str]) -> str:
        ranks = [int(m) for m in members]
        hosts = sorted({self.host_of.get(str(r), "?") for r in ranks})
        return (f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)} "
                f"({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''})")

    def rules(self) -> tuple[Rule, ...]:
        return (table.under_slurm(_RANK_RULES) if self.slurm else _RANK_RULES) + (_GPU_SLOT,)

    def remedy(self, diff: engine.Difference) -> tuple[Fix, ...]:
        """The table's fix for a difference between ranks, addressed to their hosts."""
        on_hosts = dataclasses.replace(
            diff, outliers=tuple(self.hosts(diff.outliers)),
            groups=tuple(engine.Group(g.value, tuple(self.hosts(g.members))) for g in diff.groups))
        return engine.fix_for(on_hosts)

    def members(self, env_keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        keys = [r.key for r in _RANK_RULES if not r.key.endswith("*")]
        members = {}
        for fp in self.fps:
            facts = {k: fp.get(k) for k in keys}
            if fp.get("gpu_uuid"):
                facts["gpu_slot"] = f"{node_key(fp)} {fp['gpu_uuid']}"
            facts.update({k: fp.get(k, "") for k in env_keys})  # unset is a value: set on some ranks only
            members[str(fp.get("rank", 0))] = facts
        return members


def ifname_covering(names: Iterable[str]) -> str:
    """The NCCL_SOCKET_IFNAME value that selects exactly these names on every node. Loopback is
    never offered: ranks on rank 0's own host reach it over lo, which no other node can use."""
    chosen = sorted({n for n in names if n and not n.startswith("lo")})
    return "=" + ",".join(chosen) if chosen else ""


def _ifname_fix(names: Iterable[str]) -> Fix:
    return fixes.socket_ifname(sorted(set(names)))


def _per_node_ifname(name: str, fps: Sequence[dict[str, Any]]) -> bool:
    """*_SOCKET_IFNAME set on every rank to a value that selects that rank's own interface:
    differing values are then the right thing on nodes whose interfaces are named differently."""
    if name not in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        return False
    for fp in fps:
        value = fp.get(f"env.{name}")
        own = fp.get("interface") or ""
        if not value or not own or value.startswith("^"):
            return False
        exact = name == "GLOO_SOCKET_IFNAME" or value.startswith("=")
        names = [n.strip() for n in value.lstrip("=").split(",") if n.strip()]
        if not any(own == n if exact else own.startswith(n) for n in names):
            return False
    return True


def _nccl_interfaces(fps: Sequence[dict[str, Any]], route_by_node: dict) -> list[Finding]:
    """NCCL's own interface choice on each rank (fingerprint.nccl_prediction): the ranks where it
    finds none, and the ones where it would advertise a virtual interface the others cannot reach."""
    findings: list[Finding] = []
    fix = _ifname_fix(n for names in route_by_node.values() for n in names)
    none = [fp for fp in fps if fp.get("nccl_error")]
    if none:
        findings.append(fail(
            f"NCCL would find no usable socket interface on rank(s) {rank_ranges(fp['rank'] for fp in none)}: "
            f"{none[0]['nccl_error']}", subject="NCCL_SOCKET_IFNAME",
            explanation="ncclCommInitRank then fails with 'Bootstrap : no socket interface found'",
            fix=fix, evidence={"ranks": {str(fp["rank"]): fp.get("nccl_error") for fp in none}}))
    suspect = [fp for fp in fps if fp.get("nccl_suspect")]
    if suspect:
        where = "; ".join(sorted({f"{fp.get('host')}: {fp['nccl_interface']} ({fp['nccl_suspect']})"
                                  for fp in suspect}))
        findings.append(warn(
            f"NCCL would advertise an interface the other ranks likely cannot reach on rank(s) "
            f"{rank_ranges(fp['rank'] for fp in suspect)}: {where}", subject="NCCL_SOCKET_IFNAME",
            explanation="NCCL picks interfaces by name, not by route; peers connecting to a veth, bridge or "
            "link-local address hang or fail with 'Network is unreachable'. This run's gloo test used the "
            "routed interface instead, so it can pass while an NCCL job on these nodes would not.",
            fix=fix, evidence={"ranks": {str(fp["rank"]): [fp.get("nccl_interface"), fp.get("nccl_address"),
                                                          fp.get("nccl_rule")] for fp in suspect}}))
    return findings


def compare(fps: Sequence[dict[str, Any]]) -> list[Finding]:
    job = _Job(fps)
    env_keys = [k for k in sorted({k for fp in fps for k in fp if k.startswith("env.")})
                if not _per_node_ifname(k[len("env."):], fps)]
    findings: list[Finding] = []
    for diff in engine.compare(job.members(env_keys), job.rules()):
        found = engine.to_finding(diff, noun="rank", names=job.ranks_on_hosts)
        subject = diff.key[len("env."):] if diff.key.startswith("env.") else diff.key
        if diff.key == "gpu_slot":
            subject = job.host_of.get(diff.outliers[0], "?")
        findings.append(Finding(found.status, found.summary, subject, found.explanation, evidence=found.evidence,
                                remedy=job.remedy(diff)))

    by_node: "OrderedDict[str, list[dict]]" = OrderedDict()
    for fp in job.fps:
        by_node.setdefault(node_key(fp), []).append(fp)
    nodes = {node: {"gpu.model": members[0].get("gpu.model") or None, "gpu.count": members[0].get("gpu.count", 0)}
             for node, members in by_node.items()}
    for diff in engine.compare(nodes, _HOST_RULES):
        found = engine.to_finding(diff, noun="node")
        findings.append(Finding(found.status, found.summary, diff.key, found.explanation, evidence=found.evidence,
                                remedy=found.remedy))

    findings.extend(_gpu_visibility(job.fps, by_node))

    # Ranks on rank 0's host reach it over lo: that is not a differently named interface.
    iface_by_node = {node: sorted({m.get("interface") for m in members
                                   if m.get("interface") and not m["interface"].startswith("lo")})
                     for node, members in by_node.items()}
    names = {n for names in iface_by_node.values() for n in names}
    # NCCL_SOCKET_IFNAME already names each node's own interface (this warning's own fix, applied):
    # the names differ, and that is now handled.
    routed = [fp for fp in job.fps if fp.get("interface") and not fp["interface"].startswith("lo")]
    handled = bool(routed) and _per_node_ifname("NCCL_SOCKET_IFNAME", routed)
    if len(names) > 1 and len(by_node) > 1 and not handled:
        findings.append(warn(
            "nodes reach rank 0 through differently named interfaces: "
            + ", ".join(f"{node}: {'/'.join(n) or '?'}" for node, n in iface_by_node.items()),
            subject="interface", evidence={"interfaces": iface_by_node},
            explanation="one NCCL_SOCKET_IFNAME must match an interface on every node, or NCCL picks "
            "something else on the nodes it does not match",
            fix=_ifname_fix(names)))

    findings.extend(_nccl_interfaces(job.fps, iface_by_node))
    if not findings:
        findings.append(ok(f"{len(fps)} ranks on {len(by_node)} host{'s' if len(by_node) != 1 else ''} agree on "
                           "versions, GPUs, interfaces and NCCL/gloo settings"))
    return findings


def _gpu_visibility(fps: Sequence[dict[str, Any]], by_node: "OrderedDict[Any, list[dict]]") -> list[Finding]:
    """The per-rank CUDA_VISIBLE_DEVICES mistakes: a local rank beyond the GPUs it can see
    ('invalid device ordinal'), and one GPU per rank, which keeps NCCL from CUDA IPC/P2P."""
    findings: list[Finding] = []
    beyond = [fp for fp in fps if fp.get("cuda_available") and fp.get("local_rank", 0) >= fp.get("gpu.count", 0)]
    if beyond:
        findings.append(fail(
            f"rank{'s' if len(beyond) > 1 else ''} {rank_ranges(fp['rank'] for fp in beyond)} would use GPU "
            f"{', '.join(sorted({str(fp.get('local_rank')) for fp in beyond}))} (its local rank) but see only "
            f"{', '.join(sorted({str(fp.get('gpu.count')) for fp in beyond}))} GPU(s)",
            subject="local_rank", explanation="cuda:<local rank> does not exist there: 'invalid device ordinal'. "
            "Usually CUDA_VISIBLE_DEVICES is narrowed per rank (or --gpu-bind=per_task:1) while the script "
            "still selects the GPU by local rank",
            fix=("unset CUDA_VISIBLE_DEVICES   # per rank; show a node's GPUs to all its ranks and call "
                 "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))")
            if any(fp.get("cuda_visible_devices") for fp in beyond) else
                ("# more ranks than GPUs on the node: start at most as many ranks per node as it has GPUs "
                 "(srun --ntasks-per-node, torchrun --nproc-per-node, mpirun -npernode; nvidia-smi -L counts them)"),
            evidence={"ranks": {str(fp["rank"]): {"local_rank": fp.get("local_rank"), "gpu.count": fp.get("gpu.count"),
                                                  "cuda_visible_devices": fp.get("cuda_visible_devices")}
                                for fp in beyond}}))
    for node, members in by_node.items():
        single = [m for m in members if m.get("cuda_available") and m.get("gpu.count") == 1]
        visible = {m.get("cuda_visible_devices") for m in single}
        if len(single) > 1 and len(single) == len(members) and len(visible) == len(single):
            findings.append(warn(
                f"each of the {len(single)} ranks on {node} sees one GPU (CUDA_VISIBLE_DEVICES "
                f"{', '.join(str(v) for v in sorted(visible, key=str))})", subject=node,
                explanation="ranks that cannot see each other's GPUs cannot use CUDA IPC or P2P: NCCL falls back "
                "to slower paths or fails with 'unhandled system error'",
                fix="unset CUDA_VISIBLE_DEVICES   # per rank; torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"))
    return findings


def fingerprint_table(fps: Sequence[dict[str, Any]]) -> dict[str, Any]:
    columns = ["rank", "host", "iface", "address", "torch", "nccl", "cuda", "driver", "gpu"]  # iface: routed
    rows = [[fp.get("rank"), fp.get("host"), fp.get("interface") or "?",
             fp.get("address") or "?", fp.get("torch.version"), fp.get("nccl.version") or "-",
             fp.get("torch.cuda") or "-", fp.get("gpu.driver") or "-", fp.get("gpu.model") or "-"]
            for fp in sorted(fps, key=lambda f: f["rank"])]
    return {"columns": columns, "rows": rows}
