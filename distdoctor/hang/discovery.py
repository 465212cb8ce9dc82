"""The rank processes of the distributed jobs on this node, from /proc/<pid>/environ.

A rank is a process whose environment names its rank: RANK (torchrun, torch's env://), the MPI
launchers' variables, or SLURM_PROCID (srun). Launchers and wrappers carry some of these too
(torchrun under srun has SLURM_PROCID, `bash train.sh` under srun has everything its Python
child has), and a rank's helpers inherit its environment (DataLoader workers, compile workers),
so two rules pick the ranks out of the candidates:

- a candidate below a Python candidate with the same rank is that rank's helper;
- a candidate with a candidate below it (after the first rule) is a launcher or a wrapper.

This process and its ancestors are never ranks (distdoctor run by srun inside the job has
SLURM_PROCID too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from distdoctor.hang import procstate

# Strongest first: torch's own variable, then the MPI launchers', then Slurm's.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
LOCAL_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")
# What later stages need of a rank's environment; nothing else of it is kept (it may hold secrets).
KEPT_VARS = (
    "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "HOME", "XDG_CACHE_HOME",
    "NCCL_RAS_ENABLE", "NCCL_RAS_ADDR", "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_STEP_ID",
    "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT",
)
ENVIRON_MAX = 1024 * 1024


@dataclass(frozen=True)
class RankProcess:
    pid: int
    host: str
    rank: int | None
    local_rank: int | None
    world_size: int | None
    job: str  # what ties the ranks of one job together on this node ("slurm 42.0", "torchrun <id>")
    gpu: str  # the GPU the rank most likely drives ("" when it cannot be told)
    python: bool
    cmdline: tuple[str, ...]
    start_ticks: int
    env: dict[str, str] = field(default_factory=dict)  # KEPT_VARS only

    @property
    def label(self) -> str:
        """`rank 5`, or `pid 4411` for a process that names no rank."""
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    def where(self) -> str:
        """`rank 5 on gpu012 (pid 4411, GPU 5)`"""
        who = f"rank {self.rank}" if self.rank is not None else "process"
        gpu = f", GPU {self.gpu}" if self.gpu else ""
        return f"{who} on {self.host} (pid {self.pid}{gpu})"

    def to_dict(self) -> dict:
        return {"pid": self.pid, "host": self.host, "rank": self.rank, "local_rank": self.local_rank,
                "world_size": self.world_size, "job": self.job, "gpu": self.gpu, "python": self.python,
                "cmdline": list(self.cmdline), "start_ticks": self.start_ticks, "env": dict(self.env)}

    @classmethod
    def from_dict(cls, doc: dict) -> "RankProcess":
        return cls(int(doc["pid"]), str(doc.get("host", "")), _int(doc.get("rank")), _int(doc.get("local_rank")),
                   _int(doc.get("world_size")), str(doc.get("job", "")), str(doc.get("gpu", "")),
                   bool(doc.get("python")), tuple(str(c) for c in doc.get("cmdline") or ()),
                   int(doc.get("start_ticks") or 0),
                   {str(k): str(v) for k, v in (doc.get("env") or {}).items()})


@dataclass
class Discovery:
    ranks: list[RankProcess]
    problems: list[str] = field(default_factory=list)  # one line each: a pid given that is gone, unreadable...
    unreadable: int = 0  # processes whose environment this user may not read


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def parse_environ(raw: bytes) -> dict[str, str]:
    env = {}
    for item in raw.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key:
            env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def first(env: dict[str, str], names: tuple[str, ...]) -> tuple[str, int | None]:
    """The first of names set to an integer in env: (its name, its value), else ("", None)."""
    for name in names:
        value = _int(env.get(name))
        if value is not None:
            return name, value
    return "", None


def job_key(env: dict[str, str]) -> str:
    if env.get("SLURM_JOB_ID"):
        step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
        return f"slurm {env['SLURM_JOB_ID']}" + (f".{step}" if step else "")
    if env.get("TORCHELASTIC_RUN_ID"):
        # torchrun's run id is "none" unless --rdzv-id or --standalone sets it: two jobs on one
        # node would be one. Their rendezvous endpoint tells them apart.
        where = f" {env['MASTER_ADDR']}:{env['MASTER_PORT']}" if env.get("MASTER_ADDR") and env.get("MASTER_PORT") else ""
        return f"torchrun {env['TORCHELASTIC_RUN_ID']}{where}"
    for name in ("PMIX_NAMESPACE", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess_base_jobid"):
        if env.get(name):
            return f"mpi {env[name]}"
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        return f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    return "unknown job"


def gpu_of(env: dict[str, str], local_rank: int | None, node_has_gpus: bool = True) -> str:
    """CUDA_VISIBLE_DEVICES[local_rank] (the usual torch.cuda.set_device(local_rank)), the one
    device when a rank sees one, else the local rank itself on a node with GPUs."""
    if not node_has_gpus and "CUDA_VISIBLE_DEVICES" not in env:
        return ""
    visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if env.get("CUDA_VISIBLE_DEVICES") is not None and not visible:
        return ""
    if len(visible) == 1:
        return visible[0]
    if visible and local_rank is not None and 0 <= local_rank < len(visible):
        return visible[local_rank]
    return str(local_rank) if local_rank is not None and not visible else ""


def is_python(cmdline: list[str]) -> bool:
    return bool(cmdline) and os.path.basename(cmdline[0]).startswith(("python", "pypy"))


@dataclass
class _Candidate:
    pid: int
    env: dict[str, str]
    stat: procstate.Stat
    cmdline: list[str]
    rank_var: str
    rank: int | None


def _read_candidate(host, pid: int, require_rank: bool) -> tuple[_Candidate | None, str]:
    """(the candidate, "") or (None, why not: "gone", "denied", "not a rank"). A process named
    by pid whose environment this user may not read is still read (its stat and command line
    are world-readable), so that the stack dump says why it cannot be read."""
    try:
        raw = host.read_bytes(f"/proc/{pid}/environ", ENVIRON_MAX)
    except PermissionError:
        if require_rank:
            return None, "denied"
        raw = b""
    except OSError:
        return None, "gone"
    if raw is None:
        return None, "gone"
    env = parse_environ(raw)
    rank_var, rank = first(env, RANK_VARS)
    if require_rank and not rank_var:
        return None, "not a rank"
    stat = procstate.read_stat(host, pid)
    if stat is None:
        return None, "gone"
    try:
        cmdline = procstate.parse_cmdline(host.read_bytes(f"/proc/{pid}/cmdline", 64 * 1024) or b"")
    except OSError:
        cmdline = []
    return _Candidate(pid, env, stat, cmdline, rank_var, rank), ""


def _ancestors(host, pid: int, stats: dict[int, procstate.Stat | None], limit: int = 64) -> list[int]:
    chain: list[int] = []
    while pid > 1 and len(chain) < limit:
        if pid not in stats:
            stats[pid] = procstate.read_stat(host, pid)
        stat = stats[pid]
        if stat is None:
            break
        pid = stat.ppid
        chain.append(pid)
    return chain


def _to_rank(host, c: _Candidate, node_has_gpus: bool) -> RankProcess:
    _, local = first(c.env, LOCAL_VARS)
    _, world = first(c.env, WORLD_VARS)
    kept = {k: c.env[k] for k in KEPT_VARS if k in c.env}
    return RankProcess(c.pid, host.hostname(), c.rank, local, world, job_key(c.env), gpu_of(c.env, local, node_has_gpus),
                       is_python(c.cmdline), tuple(c.cmdline[:8]), c.stat.start_ticks, kept)


def discover(host, pids: list[int] | None = None, job: str | None = None, node_name: str | None = None) -> Discovery:
    """The ranks on this node: of every process (pids None), or of the pids given (each read
    even when its environment names no rank). job: keep only the ranks of this Slurm job;
    node_name: only those whose slurmd is this node's (SLURMD_NODENAME), where one process
    table holds several Slurm nodes (containers, namespaces)."""
    found = Discovery([])
    me = host.pid()
    stats: dict[int, procstate.Stat | None] = {}
    mine = {me, *_ancestors(host, me, stats)}
    gpus = host.exists("/dev/nvidiactl")
    if pids is not None:
        for pid in pids:
            cand, why = _read_candidate(host, pid, require_rank=False)
            if cand is None:
                found.problems.append(f"pid {pid}: " + ("no such process" if why == "gone" else
                                                        "its environment is not readable by this user"))
                continue
            found.ranks.append(_to_rank(host, cand, gpus))
        return found
    candidates: dict[int, _Candidate] = {}
    for name in host.list_dir("/proc") or []:
        if not name.isdigit() or int(name) in mine:
            continue
        cand, why = _read_candidate(host, int(name), require_rank=True)
        if cand is None:
            found.unreadable += why == "denied"
            continue
        if job is not None and cand.env.get("SLURM_JOB_ID") != job:
            continue
        if node_name and cand.env.get("SLURMD_NODENAME", node_name) != node_name:
            continue
        candidates[cand.pid] = cand
        stats[cand.pid] = cand.stat
    lineage = {pid: _ancestors(host, pid, stats) for pid in candidates}
    helpers = set()
    for pid, chain in lineage.items():
        c = candidates[pid]
        for up in chain:
            parent = candidates.get(up)
            if parent is not None and is_python(parent.cmdline) and parent.env.get(c.rank_var) == c.env.get(c.rank_var):
                helpers.add(pid)
                break
    ranks = [pid for pid in candidates if pid not in helpers]
    launchers = {up for pid in ranks for up in lineage[pid] if up in candidates}
    found.ranks = sorted((_to_rank(host, candidates[pid], gpus) for pid in ranks if pid not in launchers),
                         key=lambda r: (r.job, r.rank if r.rank is not None else -1, r.pid))
    return found
