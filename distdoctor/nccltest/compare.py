"""Cross-rank comparison of fingerprints: what should be identical across a job and is not.

Pure: a list of fingerprints (see fingerprint.py) in, findings out.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Sequence

from distdoctor.api import fail, ok, warn
from distdoctor.model import Finding

# (key, label, status maker, why it matters)
_SAME_EVERYWHERE = (
    ("torch", "torch versions", fail,
     "ranks with different torch builds can disagree on the collective protocol and hang or crash"),
    ("nccl", "NCCL versions", fail,
     "NCCL requires the same version on every rank; mixed versions hang at init or corrupt results"),
    ("cuda", "CUDA versions of the torch builds", warn,
     "different CUDA builds of torch usually mean different environments on the nodes"),
    ("driver", "NVIDIA driver versions", warn,
     "a driver older than the CUDA runtime fails with 'CUDA driver version is insufficient'"),
    ("python", "Python versions", warn, "different Python versions mean different environments per node"),
    ("distdoctor", "distdoctor versions", warn, "the ranks run different distdoctor installs"),
    ("memlock_kib", "locked-memory limits (ulimit -l, KiB)", warn,
     "InfiniBand registers memory under this limit; a low value on some nodes makes only those fail"),
)


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = prev = None
    for r in ordered:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = r
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def node_key(fp: dict[str, Any]) -> str:
    return str(fp.get("host", "?"))


def _groups(fps: Sequence[dict[str, Any]], value) -> "OrderedDict[Any, list[dict]]":
    groups: OrderedDict[Any, list[dict]] = OrderedDict()
    for fp in sorted(fps, key=lambda f: f.get("rank", 0)):
        groups.setdefault(value(fp), []).append(fp)
    return groups


def _describe(groups: "OrderedDict[Any, list[dict]]") -> str:
    parts = []
    for val, members in groups.items():
        hosts = sorted({node_key(m) for m in members})
        shown = "(unset)" if val in (None, "") else val
        parts.append(f"{shown} on rank{'s' if len(members) > 1 else ''} {rank_ranges(m['rank'] for m in members)} "
                     f"({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''})")
    return "; ".join(parts)


def _version_fix(key: str, groups: "OrderedDict[Any, list[dict]]") -> str:
    majority = max(groups, key=lambda v: len(groups[v]))
    if key == "torch" and majority:
        return f"pip install torch=={majority}   # on the nodes that differ, or run every node from one image"
    return f"# install the same {key} on every node ({majority} on most ranks), e.g. one container image"


def _env_fix(name: str, groups: "OrderedDict[Any, list[dict]]") -> str:
    values = [v for v in groups if v is not None]
    if len(values) == 1:
        return (f"export {name}={values[0]}   # for every rank, before srun/mpirun (mpirun -x {name}); "
                f"or unset it where it is set")
    return f"export {name}=<one value>   # for every rank, before srun/mpirun (mpirun -x {name})"


def _per_node_ifname(name: str, fps: Sequence[dict[str, Any]]) -> bool:
    """*_SOCKET_IFNAME set on every rank to a value that selects that rank's own interface:
    differing values are then the right thing on nodes whose interfaces are named differently."""
    if name not in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        return False
    for fp in fps:
        value = (fp.get("env") or {}).get(name)
        own = fp.get("interface") or ""
        if not value or not own or value.startswith("^"):
            return False
        exact = name == "GLOO_SOCKET_IFNAME" or value.startswith("=")
        names = [n.strip() for n in value.lstrip("=").split(",") if n.strip()]
        if not any(own == n if exact else own.startswith(n) for n in names):
            return False
    return True


def ifname_covering(names: Iterable[str]) -> str:
    """The NCCL_SOCKET_IFNAME value that selects exactly these names on every node."""
    return "=" + ",".join(sorted(set(names)))


def _nccl_interfaces(fps: Sequence[dict[str, Any]], route_by_node: dict) -> list[Finding]:
    """NCCL's own interface choice on each rank (fingerprint.nccl_prediction): the ranks where it
    finds none, and the ones where it would advertise a virtual interface the others cannot reach."""
    findings: list[Finding] = []
    route_names = {n for names in route_by_node.values() for n in names}
    fix = f"export NCCL_SOCKET_IFNAME={ifname_covering(route_names)}" if route_names else \
        "export NCCL_SOCKET_IFNAME=<the interface that reaches the other nodes>"
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
    findings: list[Finding] = []
    for key, label, make, why in _SAME_EVERYWHERE:
        groups = _groups(fps, lambda fp, k=key: fp.get(k))
        if len(groups) > 1:
            findings.append(make(f"{label} differ between ranks: {_describe(groups)}", subject=key,
                                 explanation=why, fix=_version_fix(key, groups),
                                 evidence={key: {str(fp["rank"]): fp.get(key) for fp in fps}}))

    by_node = _groups(fps, node_key)
    gpu_models = _groups(fps, lambda fp: fp.get("gpu_name") or None)
    if len([g for g in gpu_models if g]) > 1:
        findings.append(warn(f"different GPU models: {_describe(gpu_models)}", subject="gpu_name",
                             explanation="NCCL runs at the speed of the slowest GPU; mixed models are "
                             "usually a scheduling mistake", fix="srun --gres=gpu:<type>:<count> ...   # request one GPU type"))
    counts = {node: members[0].get("gpu_count", 0) for node, members in by_node.items()}
    if len(set(counts.values())) > 1:
        findings.append(warn("different GPU counts per node: " + ", ".join(f"{n}: {c}" for n, c in counts.items()),
                             subject="gpu_count", evidence={"gpu_count": counts},
                             explanation="ranks per node usually equal GPUs per node; a node showing fewer "
                             "GPUs has a failed GPU or a different CUDA_VISIBLE_DEVICES"))

    uuids = _groups([fp for fp in fps if fp.get("gpu_uuid")], lambda fp: (node_key(fp), fp["gpu_uuid"]))
    for (node, uuid), members in uuids.items():
        if len(members) > 1:
            findings.append(fail(f"ranks {rank_ranges(m['rank'] for m in members)} on {node} use the same GPU "
                                 f"{uuid}", subject=node,
                                 explanation="NCCL refuses two ranks on one GPU ('Duplicate GPU detected')",
                                 fix="torch.cuda.set_device(int(os.environ['LOCAL_RANK']))   # in the training "
                                 "script, and give every rank of a node the same CUDA_VISIBLE_DEVICES"))

    findings.extend(_gpu_visibility(fps, by_node))

    iface_by_node = {node: sorted({m.get("interface") for m in members if m.get("interface")})
                     for node, members in by_node.items()}
    names = {n for names in iface_by_node.values() for n in names}
    if len(names) > 1 and len(by_node) > 1:
        findings.append(warn(
            "nodes reach rank 0 through differently named interfaces: "
            + ", ".join(f"{node}: {'/'.join(n) or '?'}" for node, n in iface_by_node.items()),
            subject="interface", evidence={"interfaces": iface_by_node},
            explanation="one NCCL_SOCKET_IFNAME must match an interface on every node, or NCCL picks "
            "something else on the nodes it does not match",
            fix=f"export NCCL_SOCKET_IFNAME={ifname_covering(names)}"))

    findings.extend(_nccl_interfaces(fps, iface_by_node))

    env_keys = sorted({k for fp in fps for k in (fp.get("env") or {})})
    for name in env_keys:
        groups = _groups(fps, lambda fp, n=name: (fp.get("env") or {}).get(n))
        if len(groups) > 1 and not _per_node_ifname(name, fps):
            findings.append(warn(f"{name} differs between ranks: {_describe(groups)}", subject=name,
                                 evidence={name: {str(fp["rank"]): (fp.get("env") or {}).get(name) for fp in fps}},
                                 explanation="NCCL and gloo settings should be the same on every rank; a "
                                 "setting present on only some nodes usually comes from a per-node profile "
                                 "or a job script that exports it on one host",
                                 fix=_env_fix(name, groups)))
    if not findings:
        findings.append(ok(f"{len(fps)} ranks on {len(by_node)} host{'s' if len(by_node) != 1 else ''} agree on "
                           "versions, GPUs, interfaces and NCCL/gloo settings"))
    return findings


def _gpu_visibility(fps: Sequence[dict[str, Any]], by_node: "OrderedDict[Any, list[dict]]") -> list[Finding]:
    """The per-rank CUDA_VISIBLE_DEVICES mistakes: a local rank beyond the GPUs it can see
    ('invalid device ordinal'), and one GPU per rank, which keeps NCCL from CUDA IPC/P2P."""
    findings: list[Finding] = []
    beyond = [fp for fp in fps if fp.get("cuda_available") and fp.get("local_rank", 0) >= fp.get("gpu_count", 0)]
    if beyond:
        findings.append(fail(
            f"rank{'s' if len(beyond) > 1 else ''} {rank_ranges(fp['rank'] for fp in beyond)} would use GPU "
            f"{', '.join(sorted({str(fp.get('local_rank')) for fp in beyond}))} (its local rank) but see only "
            f"{', '.join(sorted({str(fp.get('gpu_count')) for fp in beyond}))} GPU(s)",
            subject="local_rank", explanation="cuda:<local rank> does not exist there: 'invalid device ordinal'. "
            "Usually CUDA_VISIBLE_DEVICES is narrowed per rank (or --gpu-bind=per_task:1) while the script "
            "still selects the GPU by local rank",
            fix="unset CUDA_VISIBLE_DEVICES   # per rank; show a node's GPUs to all its ranks and call "
                "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))",
            evidence={"ranks": {str(fp["rank"]): {"local_rank": fp.get("local_rank"), "gpu_count": fp.get("gpu_count"),
                                                  "cuda_visible_devices": fp.get("cuda_visible_devices")}
                                for fp in beyond}}))
    for node, members in by_node.items():
        single = [m for m in members if m.get("cuda_available") and m.get("gpu_count") == 1]
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
             fp.get("address") or "?", fp.get("torch"), fp.get("nccl") or "-", fp.get("cuda") or "-",
             fp.get("driver") or "-", fp.get("gpu_name") or "-"] for fp in sorted(fps, key=lambda f: f["rank"])]
    return {"columns": columns, "rows": rows}
