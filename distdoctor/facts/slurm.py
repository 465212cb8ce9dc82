"""Facts for the 'slurm' area: the job's SLURM_* variables read the way Slurm means them,
the installation seen from a login node, and the GPUs this node really shows.

Every variable that can be malformed is typed here and its problem kept as data
(`SlurmEnv.problems`), so the checks can say which variable and which value are wrong instead
of raising.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from distdoctor import hostlist, limits
from distdoctor.facts import fact
from distdoctor.launch import step_kind
from distdoctor.parsers import ParseError
from distdoctor.parsers import slurm as parse
from distdoctor.parsers.nvidia_smi import parse_list_gpus
from distdoctor.redact import REDACTED

# Integers Slurm puts in a job's environment (old names included: SLURM_JOBID, SLURM_NPROCS,
# SLURM_NNODES, SLURM_STEPID are still set by 22.05 beside the new ones).
INT_VARS = (
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NUM_TASKS", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_GPUS_ON_NODE",
    "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS_PER_SOCKET", "SLURM_NTASKS_PER_CORE", "SLURM_NTASKS_PER_GPU",
    "SLURM_CPUS_PER_GPU", "SLURM_TASK_PID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP",
    "SLURM_HET_SIZE", "SLURM_RESTART_COUNT", "SLURM_JOB_UID", "SLURM_JOB_GID", "SLURM_PRIO_PROCESS",
    "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE", "SLURM_MEM_PER_GPU",
    "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT",
)
COUNT_VARS = ("SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE")
NODELIST_VARS = ("SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST")
ID_LIST_VARS = ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES")
STEP_VARS = ("SLURM_STEP_ID", "SLURM_STEPID")



@dataclass(frozen=True)
class VarProblem:
    name: str
    value: str
    message: str


@dataclass(frozen=True)
class SlurmEnv:
    raw: Mapping[str, str]  # every SLURM_*/SLURMD_* variable as set
    ints: Mapping[str, int] = field(default_factory=dict)
    counts: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    nodelists: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    id_lists: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    problems: tuple[VarProblem, ...] = ()
    redacted: tuple[str, ...] = ()  # names whose value was replaced by <redacted> before we saw it
    hostlist_tool: str = ""  # what expanded the nodelists: "scontrol" or "ClusterShell"
    step_kind: str = ""  # "", "normal", "batch", "extern", "interactive", "pending"

    # --- the job and the step, from whichever name this Slurm version sets ---------------

    def int(self, *names: str) -> int | None:
        for name in names:
            if name in self.ints:
                return self.ints[name]
        return None

    def first(self, table: Mapping[str, tuple], *names: str) -> tuple | None:
        for name in names:
            if name in table:
                return table[name]
        return None

    def set(self, *names: str) -> str | None:
        """The first of names that is set (the name, not the value)."""
        return next((n for n in names if n in self.raw), None)

    @property
    def in_job(self) -> bool:
        """A job id, or (in a filtered dump without one) an allocation's nodelist."""
        return bool(self.step_kind)

    @property
    def job_id(self) -> str:
        return self.raw.get("SLURM_JOB_ID") or self.raw.get("SLURM_JOBID") or ""

    @property
    def step_id(self) -> str:
        return self.raw.get("SLURM_STEP_ID") or self.raw.get("SLURM_STEPID") or ""

    @property
    def in_step(self) -> bool:
        """Inside a task that srun started (not the batch step, not a salloc shell)."""
        return self.step_kind == "normal"

    @property
    def ntasks_var(self) -> str | None:
        if self.in_step:
            return self.set("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
        return self.set("SLURM_NTASKS", "SLURM_NPROCS")

    @property
    def ntasks(self) -> int | None:
        name = self.ntasks_var
        return self.ints.get(name) if name else None

    @property
    def nnodes_var(self) -> str | None:
        if self.in_step:
            return self.set("SLURM_STEP_NUM_NODES", "SLURM_NNODES")
        return self.set("SLURM_JOB_NUM_NODES", "SLURM_NNODES")

    @property
    def nnodes(self) -> int | None:
        name = self.nnodes_var
        return self.ints.get(name) if name else None

    @property
    def tasks_per_node_var(self) -> str | None:
        if self.in_step:
            return self.set("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
        return self.set("SLURM_TASKS_PER_NODE")

    @property
    def tasks_per_node(self) -> tuple[int, ...] | None:
        name = self.tasks_per_node_var
        return self.counts.get(name) if name else None

    @property
    def nodelist_var(self) -> str | None:
        # Inside a step SLURM_NODELIST can still be the job's list (an srun inside sbatch), so
        # only SLURM_STEP_NODELIST names the step's nodes.
        if self.in_step:
            return self.set("SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST")
        return self.set("SLURM_JOB_NODELIST", "SLURM_NODELIST")

    @property
    def nodelist(self) -> tuple[str, ...] | None:
        name = self.nodelist_var
        return self.nodelists.get(name) if name else None

    @property
    def tasks_on_this_node(self) -> int | None:
        per_node, node = self.tasks_per_node, self.int("SLURM_NODEID")
        if per_node is None or node is None or not 0 <= node < len(per_node):
            return None
        return per_node[node]

    @property
    def gpus(self) -> tuple[str, ...] | None:
        """The GPUs Slurm gave this step (or job) on this node."""
        if self.in_step and "SLURM_STEP_GPUS" in self.id_lists:
            return self.id_lists["SLURM_STEP_GPUS"]
        return self.id_lists.get("SLURM_JOB_GPUS")

    def bad(self, *names: str) -> bool:
        """True when any of names could not be read (so rules built on it stay silent)."""
        wanted = set(names)
        return any(p.name in wanted for p in self.problems)


Expander = Callable[[str], "tuple[list[str], str]"]


def library_expander(expr: str) -> tuple[list[str], str]:
    return hostlist.expand(expr), "ClusterShell"


def read_slurm_env(env: Mapping[str, str], expand: Expander = library_expander) -> SlurmEnv:
    """Type every SLURM_* variable of env. Pure apart from `expand`, which the fact backs with
    `scontrol show hostnames`."""
    raw = {k: v for k, v in env.items() if k.startswith(("SLURM_", "SLURMD_"))}
    for name in ID_LIST_VARS:
        if name in env:
            raw.setdefault(name, env[name])
    problems: list[VarProblem] = []
    ints: dict[str, int] = {}
    counts: dict[str, tuple[int, ...]] = {}
    nodelists: dict[str, tuple[str, ...]] = {}
    id_lists: dict[str, tuple[str, ...]] = {}
    redacted = tuple(sorted(k for k, v in raw.items() if REDACTED in v))
    tools: set[str] = set()

    def usable(name: str) -> str | None:
        if name not in raw or name in redacted:
            return None
        value = raw[name]
        if not value.strip():
            problems.append(VarProblem(name, value, "is set but empty"))
            return None
        return value.strip()

    for name in INT_VARS:
        value = usable(name)
        if value is None:
            continue
        if not (value.isascii() and value.isdigit()):
            problems.append(VarProblem(name, raw[name], "is not a non-negative integer"))
        elif len(value) > 10 or int(value) > limits.MAX_TASKS:
            problems.append(VarProblem(name, raw[name], f"is larger than Slurm's limit ({limits.MAX_TASKS})"))
        else:
            ints[name] = int(value)
    for name in COUNT_VARS:
        value = usable(name)
        if value is None:
            continue
        try:
            counts[name] = tuple(parse.parse_counts(value, name))
        except ParseError as exc:
            problems.append(VarProblem(name, raw[name], str(exc).split(": ", 1)[-1]))
    for name in NODELIST_VARS:
        value = usable(name)
        if value is None:
            continue
        try:
            hosts, tool = expand(value)
        except hostlist.HostlistError as exc:
            problems.append(VarProblem(name, raw[name], f"is not a valid hostlist: {exc}"))
            continue
        if not hosts:
            problems.append(VarProblem(name, raw[name], "expands to no host"))
            continue
        nodelists[name] = tuple(hosts)
        tools.add(tool)
    for name in ID_LIST_VARS:
        if name not in raw or name in redacted:
            continue
        if name == "CUDA_VISIBLE_DEVICES" and not raw[name].strip():
            id_lists[name] = ()  # set but empty hides every GPU, which the GPU rule reports
            continue
        value = usable(name)
        if value is None:
            continue
        try:
            id_lists[name] = tuple(parse.parse_id_list(value, name))
        except ParseError as exc:
            problems.append(VarProblem(name, raw[name], str(exc).split(": ", 1)[-1]))

    kind_of_step = ""
    for name in STEP_VARS:
        value = usable(name)
        if value is None:
            continue
        kind = step_kind(value)
        if not kind:
            problems.append(VarProblem(name, raw[name], "is not a step id (a number, 'batch', 'extern' or "
                                                         "'interactive')"))
            continue
        kind_of_step = kind_of_step or kind
    if not kind_of_step and any(n in raw for n in ("SLURM_STEP_NODELIST", "SLURM_STEP_NUM_TASKS",
                                                    "SLURM_STEP_TASKS_PER_NODE")):
        kind_of_step = "normal"  # an old or filtered dump: step variables without the step id
    if not kind_of_step and any(n in raw for n in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST",
                                                    "SLURM_NODELIST")):
        kind_of_step = "batch" if env.get("ENVIRONMENT") == "BATCH" else "allocation"
    return SlurmEnv(raw, ints, counts, nodelists, id_lists, tuple(problems), redacted,
                    "+".join(sorted(tools)), kind_of_step)


def scontrol_expander(host) -> Expander:
    """Expand with `scontrol show hostnames` where it runs, after the library has accepted the
    expression: scontrol exits 0 and prints nonsense for some invalid ones (`n[1-2` gives `n]`)."""
    cache: dict[str, tuple[list[str], str]] = {}
    usable = {"scontrol": bool(host.which("scontrol"))}

    def expand(expr: str) -> tuple[list[str], str]:
        if expr in cache:
            return cache[expr]
        hosts = hostlist.expand(expr)
        result = (hosts, "ClusterShell")
        if usable["scontrol"]:
            run = host.run(["scontrol", "show", "hostnames", expr], timeout=3)
            if run.timed_out:
                usable["scontrol"] = False  # a hung scontrol hangs for every list: ask it once
                cache[expr] = result
                return result
            said = (run.stdout + "\n" + run.stderr).strip()
            if "Invalid hostlist" in said:
                raise hostlist.HostlistError(f"scontrol show hostnames rejects it: {said.splitlines()[-1]}")
            if run.ok and run.stdout.strip():
                try:
                    result = (parse.parse_hostnames(run.stdout), "scontrol")
                except ParseError:
                    pass  # keep the library's answer; scontrol printed something else
        cache[expr] = result
        return result

    return expand


@fact
def slurm_env(facts) -> SlurmEnv:
    return read_slurm_env(facts.host.env, scontrol_expander(facts.host))


@dataclass(frozen=True)
class SlurmInstallation:
    tools: Mapping[str, str | None]  # name -> path, None when missing
    version: str = ""
    version_error: str = ""
    controllers: tuple[parse.Controller, ...] = ()
    ping_error: str = ""
    partitions: tuple[parse.Partition, ...] = ()
    partitions_error: str = ""
    config_error: str = ""  # the clients find no slurm.conf and no configless DNS SRV record

    @property
    def installed(self) -> bool:
        return any(self.tools.values())


# What every Slurm client prints (and exits 1) when it finds no slurm.conf and no DNS SRV record.
_NO_CONFIG = ("Could not establish a configuration source", "fetch_config: DNS SRV lookup failed")


def _config_error(run) -> str:
    lines = (run.stderr + run.stdout).splitlines()
    for marker in _NO_CONFIG:  # the fatal line says it best
        for line in lines:
            if marker in line:
                return line.strip()
    return ''


SLURM_TOOLS = ("sinfo", "srun", "sbatch", "scontrol", "squeue")


@fact
def slurm_installation(facts) -> SlurmInstallation:
    host = facts.host
    tools = {name: host.which(name) for name in SLURM_TOOLS}
    if not any(tools.values()):
        return SlurmInstallation(tools)
    version = version_error = ""
    probe = "sinfo" if tools["sinfo"] else next(n for n in SLURM_TOOLS if tools[n])
    run = host.run([probe, "--version"], timeout=5)
    config_error = _config_error(run)
    if config_error:  # every other client call would fail the same way
        return SlurmInstallation(tools, version_error=run.describe(), config_error=config_error)
    try:
        version = parse.parse_version(run.stdout) if run.ok else ""
        version_error = "" if run.ok else run.describe()
    except ParseError as exc:
        version_error = str(exc)
    controllers: tuple[parse.Controller, ...] = ()
    ping_error = ""
    if tools["scontrol"]:
        run = host.run(["scontrol", "ping"], timeout=10)
        try:
            controllers = tuple(parse.parse_ping(run.stdout))
        except ParseError:
            ping_error = run.describe()
    else:
        ping_error = "scontrol is not installed"
    partitions: tuple[parse.Partition, ...] = ()
    partitions_error = ""
    if tools["sinfo"]:
        run = host.run(["sinfo", "-h", "-o", parse.PARTITION_FORMAT], timeout=10)
        if run.ok:
            try:
                partitions = tuple(parse.parse_partitions(run.stdout))
            except ParseError as exc:
                partitions_error = str(exc)
        else:
            partitions_error = run.describe()
    else:
        partitions_error = "sinfo is not installed"
    return SlurmInstallation(tools, version, version_error, controllers, ping_error, partitions, partitions_error)


@dataclass(frozen=True)
class NodeGpus:
    gpus: tuple[str, ...] | None  # UUIDs from `nvidia-smi -L`; None when it could not be asked
    error: str = ""


@fact
def node_gpus(facts) -> NodeGpus:
    """The GPUs this node shows to this process (nvidia-smi honours the job's device cgroup,
    not CUDA_VISIBLE_DEVICES)."""
    # Through the gpu area's runner: on a node whose GPU fell off the bus nvidia-smi hangs,
    # and the runner makes that cost one timeout for the whole report, not one per area.
    run = facts.nvidia_smi.run("-L")
    if not run.ok:
        if run.missing:
            return NodeGpus(None, "nvidia-smi is not installed on this node")
        return NodeGpus(None, run.describe())
    if not run.stdout.strip():
        return NodeGpus(())
    try:
        listed = parse_list_gpus(run.stdout)
    except ParseError as exc:
        return NodeGpus(None, str(exc))
    if listed.errors and not listed.gpus:
        return NodeGpus(None, f"nvidia-smi -L: {listed.errors[0]}")
    # MIG slices are not counted separately: Slurm's GRES counts whole GPUs.
    return NodeGpus(tuple(g.uuid or str(g.index) for g in listed.gpus))


@fact
def ephemeral_ports(facts) -> tuple[int, int]:
    """The kernel's ephemeral (client) port range; a MASTER_PORT inside it can be taken by any
    outgoing connection before the rendezvous store binds it."""
    try:
        text = facts.host.read_text("/proc/sys/net/ipv4/ip_local_port_range")
    except OSError:
        text = None
    try:
        low, high = (int(v) for v in (text or "").split())
        return low, high
    except ValueError:
        return 32768, 60999  # Linux's default
