"""Slurm: is the launch consistent with itself? Tasks, nodes, GPUs, CPUs and the torch env
wiring, read the way Slurm means them, each mismatch with the line of the job script to change.

Half of all "my multi-node job hangs at init" reports are a launch that does not match itself:
WORLD_SIZE that is not SLURM_NTASKS, a MASTER_ADDR parsed wrongly from the nodelist, tasks per
node that do not match GPUs per node, a training script started by sbatch without srun.
"""

from __future__ import annotations

import shlex

from distdoctor.api import Context, Fix, check, fail, ok, skip, warn
from distdoctor.text import fold_hosts, one_line

_q = shlex.quote  # a value from the machine, as one shell word in a fix

NOT_IN_JOB = "not inside a Slurm job"
IN_JOB_HINT = "Run it where the program runs: `srun distdoctor check --only slurm` in the job script."

# The canonical torch env:// wiring for a job script, one fix per variable. RANK and LOCAL_RANK
# differ per task, so they are set inside the command srun starts: exported in the batch script
# they would be the batch step's values (0) in every task.
MASTER_ADDR_FIX = 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
STEP_MASTER_ADDR_FIX = ("# this step does not start on the job's first node: take the step's first node, per task:\n"
                        "srun bash -c 'export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_STEP_NODELIST\" | head -n 1); "
                        "exec python train.py'")
MASTER_PORT_FIX = "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))   # below the ephemeral range, one per job"
PER_TASK_FIX = ("# per task (these differ between ranks), in the command srun starts:\n"
                "srun bash -c 'export WORLD_SIZE=$SLURM_NTASKS RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID; "
                "exec python train.py'")
WIRING_FIXES = {"MASTER_ADDR": MASTER_ADDR_FIX, "MASTER_PORT": MASTER_PORT_FIX, "WORLD_SIZE": PER_TASK_FIX,
                "RANK": PER_TASK_FIX, "LOCAL_RANK": PER_TASK_FIX}
TORCH_WIRING_FIX = f"# in the job script, before srun:\n{MASTER_ADDR_FIX}\n{MASTER_PORT_FIX}\n{PER_TASK_FIX}"


def _remove_export(name: str, expected) -> str:
    return (f"# remove the line that exports {name} from the job script (or the wrapper that sets it);\n"
            f"# Slurm sets it itself, here to {expected}\nunset {name}")


@check("slurm.installation", title="Slurm is installed and its controller answers", tags=("slurm", "login"),
       timeout=30)
def installation(ctx: Context):
    """On a login node: which Slurm tools are here and which version, whether slurmctld answers
    `scontrol ping`, and which partitions have GPUs. A short summary, nothing more."""
    inst = ctx.facts.slurm_installation
    if not inst.installed:
        yield skip("Slurm is not installed here (no sinfo, srun, sbatch, scontrol or squeue on PATH)",
                   explanation="Nothing to check on a machine without Slurm. If this is a Slurm login node, "
                               "the client tools are missing from PATH.",
                   fix="apt-get install slurm-client   # or: module load slurm")
        return
    present = [n for n, path in inst.tools.items() if path]
    missing = [n for n, path in inst.tools.items() if not path]
    evidence = {"tools": dict(inst.tools), "version": inst.version}
    if inst.config_error:
        conf = ctx.env.get("SLURM_CONF", "")
        yield warn(f"Slurm's tools are installed ({', '.join(present)}) but find no configuration",
                   subject="slurm.conf", evidence={**evidence, "error": inst.config_error, "SLURM_CONF": conf},
                   explanation=f"{inst.config_error}. Without slurm.conf (or a configless DNS SRV record for "
                               "slurmctld) no Slurm command works here. Fine on a machine that is not part of a "
                               "cluster; on a login node, this is why sinfo and srun fail.",
                   fix=(f"ls -l {_q(conf)}   # SLURM_CONF is set but unusable\n" if conf else "")
                       + "# copy the cluster's slurm.conf from its controller to /etc/slurm/slurm.conf,\n"
                         "# or point SLURM_CONF at the file where it is (a path that exists on this node)")
        return
    version = f"Slurm {inst.version}" if inst.version else "Slurm (version unknown)"
    if "srun" in missing:
        yield warn(f"{version} is installed but srun is missing ({', '.join(present)} found)", subject="srun",
                   evidence=evidence, explanation="Without srun a job script cannot start its tasks.",
                   fix="apt-get install slurm-client   # or put Slurm's bin directory on PATH")
    else:
        note = f"; missing: {', '.join(missing)}" if missing else ""
        yield ok(f"{version} ({', '.join(present)}{note})", evidence=evidence)
    if inst.version_error:
        yield warn(f"could not read Slurm's version: {inst.version_error}", subject="version", evidence=evidence)

    if inst.controllers:
        down = [c for c in inst.controllers if not c.up]
        shown = ", ".join(f"{c.name} ({c.role}) {'UP' if c.up else 'DOWN'}" for c in inst.controllers)
        ping = {"controllers": [{"name": c.name, "role": c.role, "up": c.up} for c in inst.controllers]}
        if not any(c.up for c in inst.controllers):
            yield fail(f"slurmctld does not answer: {shown}", subject="slurmctld", evidence=ping,
                       explanation="No job can be submitted or started while the controller is down.",
                       fix=Fix(("systemctl status slurmctld; journalctl -u slurmctld -n 50",),
                               [inst.controllers[0].name]))
        elif down:
            yield warn(f"a backup slurmctld is down: {shown}", subject="slurmctld", evidence=ping,
                       fix=Fix(("systemctl status slurmctld",), [down[0].name]))
        else:
            yield ok(f"slurmctld answers: {shown}", subject="slurmctld", evidence=ping)
    elif inst.tools.get("scontrol"):
        yield fail(f"slurmctld does not answer: {inst.ping_error}", subject="slurmctld",
                   evidence={"error": inst.ping_error, "SLURM_CONF": ctx.env.get("SLURM_CONF", "")},
                   explanation="scontrol could not reach the controller: a wrong or missing slurm.conf "
                               "(SLURM_CONF), munge not running, or the controller is down or firewalled.",
                   fix="scontrol ping; ls -l ${SLURM_CONF:-/etc/slurm/slurm.conf}; systemctl status munge")

    if inst.partitions_error:
        yield warn(f"could not list partitions: {inst.partitions_error}", subject="sinfo")
    elif inst.partitions:
        gpu_parts: dict[str, list] = {}
        for p in inst.partitions:
            if p.gpus_per_node:
                gpu_parts.setdefault(p.name, []).append(p)
        rows = [[p.name + ("*" if p.default else ""), p.available, p.nodes, ",".join(p.gres) or "-"]
                for p in inst.partitions]
        table = {"columns": ["partition", "state", "nodes", "gres"], "rows": rows}
        if gpu_parts:
            shown = "; ".join(
                f"{name}: " + ", ".join(f"{p.nodes} node{'s' if p.nodes != 1 else ''} x {p.gpus_per_node} GPU"
                                        for p in parts)
                for name, parts in gpu_parts.items())
            yield ok(f"partitions with GPUs: {shown}", subject="partitions", evidence={"table": table})
        else:
            names = ", ".join(sorted({p.name for p in inst.partitions}))
            yield ok(f"no partition declares GPUs (partitions: {names})", subject="partitions",
                     evidence={"table": table},
                     explanation="GPUs must be declared as GRES (Gres=gpu:N in slurm.conf, gres.conf) for "
                                 "--gres=gpu:N or --gpus to work.")


@check("slurm.environment", title="Slurm's job variables can be read", tags=("slurm", "env"), timeout=15)
def environment(ctx: Context):
    """Every SLURM_* variable distdoctor relies on is typed: integers, compressed per-node
    counts such as `SLURM_TASKS_PER_NODE=2(x3),1`, hostlists such as `gpu[01-04,07]` (expanded by
    `scontrol show hostnames` where it runs, else by ClusterShell). A value that cannot be read
    almost always comes from a job script or wrapper that exports it by hand."""
    env = ctx.facts.slurm_env
    if not env.raw or not (env.in_job or env.problems):
        yield skip(NOT_IN_JOB, explanation=IN_JOB_HINT)
        return
    for problem in env.problems:
        yield fail(f"{problem.name}={problem.value!r} {problem.message}", subject=problem.name,
                   evidence={"name": problem.name, "value": problem.value},
                   explanation="Slurm sets this variable itself in a well-formed shape; a different value "
                               "means something overrode it, and everything that reads it (srun inside the "
                               "job, MPI, torch launchers) is misled.",
                   fix=_remove_export(problem.name, "the value srun computes"))
    if env.redacted:
        yield ok(f"{len(env.redacted)} variable(s) were redacted before distdoctor saw them and are not judged: "
                 f"{', '.join(env.redacted)}", subject="redacted", evidence={"redacted": list(env.redacted)})
    if not env.problems:
        where = f"job {env.job_id}" + (f", step {env.step_id}" if env.step_id else f", {env.step_kind} step")
        lists = {k: fold_hosts(list(v)) for k, v in env.nodelists.items()}
        yield ok(f"{len(env.raw)} Slurm variables read ({where}); nodelists expanded with "
                 f"{env.hostlist_tool or 'nothing (none set)'}",
                 evidence={"variables": dict(env.raw), "nodelists": {k: list(v) for k, v in env.nodelists.items()},
                           "folded": lists, "hostlist_tool": env.hostlist_tool})


def _mismatch(summary: str, subject: str, evidence: dict, explanation: str, fix: str):
    return fail(summary, subject=subject, evidence=evidence, explanation=explanation, fix=fix)


@check("slurm.task-counts", title="Slurm's task, node and rank counts agree", tags=("slurm", "env"), timeout=15)
def task_counts(ctx: Context):
    """SLURM_NTASKS is the sum of the tasks per node; the node count is the nodelist's length
    and the length of the tasks-per-node list; SLURM_PROCID, SLURM_NODEID and SLURM_LOCALID are
    inside their ranges; the STEP and JOB variables agree where they must; this node is the
    node SLURM_NODEID names."""
    env = ctx.facts.slurm_env
    if not env.in_job:
        yield skip(NOT_IN_JOB, explanation=IN_JOB_HINT)
        return
    found = []
    ntasks, nnodes, per_node, nodelist = env.ntasks, env.nnodes, env.tasks_per_node, env.nodelist
    ev = {
        "ntasks": {env.ntasks_var: ntasks} if env.ntasks_var else {},
        "nnodes": {env.nnodes_var: nnodes} if env.nnodes_var else {},
        "tasks_per_node": {env.tasks_per_node_var: list(per_node)} if per_node is not None else {},
        "nodelist": {env.nodelist_var: list(nodelist)} if nodelist is not None else {},
        "procid": env.int("SLURM_PROCID"), "localid": env.int("SLURM_LOCALID"), "nodeid": env.int("SLURM_NODEID"),
    }
    hang = ("Launchers and torch read these counts to decide how many peers to wait for; when they "
            "disagree some ranks wait forever at rendezvous.")
    if ntasks is not None and per_node is not None and sum(per_node) != ntasks:
        found.append(_mismatch(
            f"{env.ntasks_var}={ntasks} but {env.tasks_per_node_var}={env.raw[env.tasks_per_node_var]} "
            f"adds up to {sum(per_node)}", env.ntasks_var, ev, hang,
            _remove_export(env.ntasks_var, sum(per_node))))
    if nnodes is not None and nodelist is not None and len(nodelist) != nnodes:
        found.append(_mismatch(
            f"{env.nnodes_var}={nnodes} but {env.nodelist_var}={env.raw[env.nodelist_var]} has "
            f"{len(nodelist)} node(s)", env.nnodes_var, ev, hang, _remove_export(env.nnodes_var, len(nodelist))))
    if per_node is not None and nodelist is not None and len(per_node) != len(nodelist):
        found.append(_mismatch(
            f"{env.tasks_per_node_var}={env.raw[env.tasks_per_node_var]} covers {len(per_node)} node(s) but "
            f"{env.nodelist_var} has {len(nodelist)}", env.tasks_per_node_var, ev, hang,
            _remove_export(env.tasks_per_node_var, "one count per node of the nodelist")))
    job_nodes = env.nodelists.get("SLURM_JOB_NODELIST")
    job_cpus = env.counts.get("SLURM_JOB_CPUS_PER_NODE")
    job_num = env.int("SLURM_JOB_NUM_NODES")
    if job_nodes is not None and job_num is not None and len(job_nodes) != job_num:
        found.append(_mismatch(f"SLURM_JOB_NUM_NODES={job_num} but SLURM_JOB_NODELIST has {len(job_nodes)} node(s)",
                               "SLURM_JOB_NUM_NODES", ev, hang, _remove_export("SLURM_JOB_NUM_NODES", len(job_nodes))))
    if job_nodes is not None and job_cpus is not None and len(job_cpus) != len(job_nodes):
        found.append(_mismatch(
            f"SLURM_JOB_CPUS_PER_NODE={env.raw['SLURM_JOB_CPUS_PER_NODE']} covers {len(job_cpus)} node(s) but "
            f"SLURM_JOB_NODELIST has {len(job_nodes)}", "SLURM_JOB_CPUS_PER_NODE", ev, hang,
            _remove_export("SLURM_JOB_CPUS_PER_NODE", "one count per node")))

    procid, nodeid, localid = env.int("SLURM_PROCID"), env.int("SLURM_NODEID"), env.int("SLURM_LOCALID")
    if procid is not None and ntasks is not None and procid >= ntasks:
        found.append(_mismatch(
            f"SLURM_PROCID={procid} is not below {env.ntasks_var}={ntasks}", "SLURM_PROCID", ev,
            "This task's rank is outside the world: its environment was copied from another step or job "
            "(an srun inside srun, ssh forwarding the environment) or set by hand.",
            _remove_export("SLURM_PROCID", f"a number below {ntasks}")))
    if nodeid is not None and nnodes is not None and nodeid >= nnodes:
        found.append(_mismatch(f"SLURM_NODEID={nodeid} is not below {env.nnodes_var}={nnodes}", "SLURM_NODEID",
                               ev, hang, _remove_export("SLURM_NODEID", f"a number below {nnodes}")))
    here = env.tasks_on_this_node
    if localid is not None and here is not None and localid >= here:
        found.append(_mismatch(
            f"SLURM_LOCALID={localid} is not below the {here} task(s) {env.tasks_per_node_var} gives node "
            f"{nodeid}", "SLURM_LOCALID", ev, hang, _remove_export("SLURM_LOCALID", f"a number below {here}")))

    # names for the same thing must agree
    for a, b in (("SLURM_JOB_ID", "SLURM_JOBID"), ("SLURM_NTASKS", "SLURM_NPROCS"),
                 ("SLURM_STEP_ID", "SLURM_STEPID")):
        if a in env.raw and b in env.raw and env.raw[a].strip() != env.raw[b].strip() \
                and not env.bad(a, b) and a not in env.redacted and b not in env.redacted:
            found.append(_mismatch(f"{a}={env.raw[a]} but {b}={env.raw[b]}", a, ev,
                                   f"{b} is the old name of {a}; Slurm sets both to the same value, so one of them "
                                   "was set by hand or copied from another job.", _remove_export(b, env.raw[a])))
    if env.in_step:
        for step_name, plain in (("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"), ("SLURM_STEP_NUM_NODES", "SLURM_NNODES")):
            s, p = env.int(step_name), env.int(plain)
            if s is not None and p is not None and s != p:
                found.append(_mismatch(f"{plain}={p} but {step_name}={s} inside step {env.step_id}", plain, ev,
                                       f"Inside an srun step {plain} describes the step, like {step_name}.",
                                       _remove_export(plain, s)))
        step_nodes = env.nodelists.get("SLURM_STEP_NODELIST")
        if step_nodes and job_nodes and not set(step_nodes) <= set(job_nodes):
            outside = sorted(set(step_nodes) - set(job_nodes))
            found.append(_mismatch(f"SLURM_STEP_NODELIST has node(s) outside SLURM_JOB_NODELIST: {', '.join(outside)}",
                                   "SLURM_STEP_NODELIST", ev, "A step runs on a subset of its job's nodes.",
                                   _remove_export("SLURM_STEP_NODELIST", "a subset of the job's nodes")))
    plain_nodes = env.nodelists.get("SLURM_NODELIST")
    if plain_nodes is not None and job_nodes is not None and plain_nodes != job_nodes:
        found.append(_mismatch(
            f"SLURM_NODELIST={env.raw['SLURM_NODELIST']} but SLURM_JOB_NODELIST={env.raw['SLURM_JOB_NODELIST']}",
            "SLURM_NODELIST", ev, "SLURM_NODELIST is the old name of SLURM_JOB_NODELIST.",
            _remove_export("SLURM_NODELIST", env.raw["SLURM_JOB_NODELIST"])))
    nodename = env.raw.get("SLURMD_NODENAME", "").strip()
    if nodename and nodelist and nodeid is not None and nodeid < len(nodelist) and nodelist[nodeid] != nodename:
        found.append(_mismatch(
            f"SLURM_NODEID={nodeid} names {nodelist[nodeid]} in {env.nodelist_var}, but this is {nodename}",
            "SLURM_NODEID", ev, "Node ids are positions in the nodelist; this task's environment belongs to another "
            "node (copied over ssh, or set by hand).", _remove_export("SLURM_NODEID", nodelist.index(nodename)
                                                                      if nodename in nodelist else "this node's index")))
    if found:
        yield from found
        return
    if ntasks is None and per_node is None and nodelist is None:
        yield skip("no task, node or nodelist variable to compare", evidence=ev)
        return
    parts = []
    if ntasks is not None:
        parts.append(f"{ntasks} task(s)")
    if nodelist is not None:
        parts.append(f"on {len(nodelist)} node(s) {fold_hosts(list(nodelist))}")
    if per_node is not None:
        parts.append(f"({','.join(str(n) for n in per_node)} per node)")
    me = f"; this is task {procid}" if procid is not None else ""
    if localid is not None and nodeid is not None:
        me += f" (local {localid} on node {nodeid}{' ' + nodename if nodename else ''})"
    yield ok(" ".join(parts) + me + " — counts agree", evidence=ev)


def _gpu_fix(tasks: int, gpus: int) -> str:
    return (f"#SBATCH --ntasks-per-node={gpus}   # one task per GPU, with --gres=gpu:{gpus}\n"
            f"# or on the command line: srun --ntasks-per-node={gpus} --gres=gpu:{gpus} ...\n"
            f"# or one task per node that drives all {gpus} GPUs: --ntasks-per-node=1 (torchrun --nproc-per-node={gpus})")


@check("slurm.gpus", title="GPUs agree: Slurm's allocation, CUDA_VISIBLE_DEVICES, the node and tasks per node",
       tags=("slurm", "gpu"), timeout=20)
def gpus(ctx: Context):
    """SLURM_GPUS_ON_NODE, SLURM_STEP_GPUS/SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES and the GPUs
    `nvidia-smi -L` shows must tell the same story, and the tasks on this node must match the
    GPUs: one task per GPU, or one task that drives them all."""
    env = ctx.facts.slurm_env
    if not env.in_job:
        yield skip(NOT_IN_JOB, explanation=IN_JOB_HINT)
        return
    slurm_ids = env.gpus
    on_node = env.int("SLURM_GPUS_ON_NODE")
    cvd = env.id_lists.get("CUDA_VISIBLE_DEVICES")
    node = ctx.facts.node_gpus
    seen = node.gpus
    here = env.tasks_on_this_node
    nodename = env.raw.get("SLURMD_NODENAME") or ctx.facts.hostname
    allocated = len(slurm_ids) if slurm_ids else (on_node or 0)
    evidence = {"SLURM_GPUS_ON_NODE": on_node, "slurm_gpus": list(slurm_ids or ()),
                "CUDA_VISIBLE_DEVICES": None if cvd is None else list(cvd),
                "node_gpus": None if seen is None else list(seen), "node_gpus_error": node.error,
                "tasks_on_this_node": here}
    if not allocated and cvd is None and not seen:
        yield skip("Slurm allocated no GPU to this job and none is visible", evidence=evidence)
        return
    found = []
    if on_node is not None and slurm_ids and on_node != len(slurm_ids) and not env.in_step:
        found.append(warn(f"SLURM_GPUS_ON_NODE={on_node} but {len(slurm_ids)} GPU id(s) in SLURM_JOB_GPUS",
                          subject="SLURM_GPUS_ON_NODE", evidence=evidence))
    if not allocated and cvd:
        found.append(warn(
            f"CUDA_VISIBLE_DEVICES={env.raw['CUDA_VISIBLE_DEVICES']} is set but Slurm allocated no GPU to this job",
            subject="CUDA_VISIBLE_DEVICES", evidence=evidence,
            explanation="Without a GPU allocation Slurm does not reserve these GPUs: another job on the node may be "
                        "using them, and where devices are constrained by cgroups CUDA finds none.",
            fix="#SBATCH --gres=gpu:N   # ask Slurm for the GPUs\nunset CUDA_VISIBLE_DEVICES   # let Slurm set it"))
    if allocated and cvd is not None and len(cvd) == 0:
        found.append(fail("CUDA_VISIBLE_DEVICES is set but empty: this task sees no GPU", subject="CUDA_VISIBLE_DEVICES",
                          evidence=evidence, fix=_remove_export("CUDA_VISIBLE_DEVICES", ",".join(slurm_ids or ()))))
    elif allocated and cvd and len(cvd) > allocated:
        found.append(fail(
            f"CUDA_VISIBLE_DEVICES lists {len(cvd)} GPU(s) but Slurm allocated {allocated} on {nodename}",
            subject="CUDA_VISIBLE_DEVICES", evidence=evidence,
            explanation="The extra GPUs belong to other jobs (or do not exist inside the job's device cgroup): "
                        "CUDA fails with 'invalid device ordinal' or shares a GPU with a stranger.",
            fix=_remove_export("CUDA_VISIBLE_DEVICES", ",".join(slurm_ids or ()) or f"{allocated} GPU(s)")))
    elif allocated and cvd and len(cvd) < allocated:
        found.append(warn(
            f"this task sees {len(cvd)} of the {allocated} GPU(s) Slurm allocated on {nodename} "
            f"(CUDA_VISIBLE_DEVICES={env.raw['CUDA_VISIBLE_DEVICES']})", subject="CUDA_VISIBLE_DEVICES",
            evidence=evidence,
            explanation="With one GPU visible per rank, CUDA IPC between the ranks of a node is impossible and NCCL "
                        "fails with 'unhandled system error' (nccl#129); --gpu-bind=per_task:1 gives 'invalid device "
                        "ordinal' (nccl-tests#300).",
            fix="# show every GPU of the node to each rank and pick one in the program:\n"
                "# drop --gpu-bind=per_task:1 / export CUDA_VISIBLE_DEVICES=$LOCAL_RANK, then in python:\n"
                "# torch.cuda.set_device(int(os.environ['LOCAL_RANK']))"))
    if allocated and seen is not None and len(seen) < allocated:
        found.append(fail(
            f"Slurm allocated {allocated} GPU(s) on {nodename} but the node shows {len(seen)}", subject=nodename,
            evidence=evidence,
            explanation="gres.conf declares GPUs the node does not have, or a GPU fell off the bus / the driver "
                        "lost it. Tasks that expect one GPU each will fail or share.",
            fix=f"nvidia-smi -L   # on {one_line(nodename)}; then fix gres.conf or drain the node:\n"
                f"scontrol update nodename={_q(nodename)} state=drain reason=\"GPU missing\""))
    elif allocated and seen is None:
        found.append(warn(f"cannot verify the {allocated} allocated GPU(s): {node.error}", subject=nodename,
                          evidence=evidence, fix=f"srun -w {_q(nodename)} -N1 -n1 nvidia-smi -L   # the node's GPUs"))
    in_torchrun = ctx.run_context.kind == "torchrun"
    if allocated and here is not None and not in_torchrun:
        if here > allocated:
            found.append(fail(
                f"{here} tasks on {nodename} share {allocated} GPU(s)", subject=nodename, evidence=evidence,
                explanation="More tasks than GPUs: two ranks pick the same GPU (LOCAL_RANK beyond the last GPU "
                            "gives 'invalid device ordinal'), or NCCL refuses duplicate GPUs.",
                fix=_gpu_fix(here, allocated)))
        elif 1 < here < allocated:
            found.append(warn(
                f"{here} tasks on {nodename} but {allocated} GPU(s) allocated: {allocated - here} GPU(s) idle",
                subject=nodename, evidence=evidence, fix=_gpu_fix(here, allocated)))
    if found:
        yield from found
        return
    pattern = ""
    if here is not None and not in_torchrun:
        pattern = "; one task per GPU" if here == allocated else ("; one task drives all of them" if here == 1 else "")
    shown = f"{allocated} GPU(s) allocated on {nodename}" if allocated else f"{len(seen or ())} GPU(s) visible"
    yield ok(f"{shown}, CUDA_VISIBLE_DEVICES={env.raw.get('CUDA_VISIBLE_DEVICES', '(unset)')}"
             f"{', node shows ' + str(len(seen)) if seen is not None else ''}{pattern}", evidence=evidence)


@check("slurm.cpus", title="CPUs per task match the cores the task may use", tags=("slurm", "cpu"), timeout=10)
def cpus(ctx: Context):
    """SLURM_CPUS_PER_TASK against this task's CPU affinity mask. Since Slurm 22.05 srun no
    longer inherits --cpus-per-task from sbatch, so tasks silently get one core."""
    env = ctx.facts.slurm_env
    if not env.in_job:
        yield skip(NOT_IN_JOB, explanation=IN_JOB_HINT)
        return
    mask = ctx.host.cpu_affinity()
    per_task = env.int("SLURM_CPUS_PER_TASK")
    on_node = env.int("SLURM_CPUS_ON_NODE")
    here = env.tasks_on_this_node
    omp = ctx.env.get("OMP_NUM_THREADS", "").strip()
    evidence = {"SLURM_CPUS_PER_TASK": per_task, "SLURM_CPUS_ON_NODE": on_node, "affinity": mask,
                "tasks_on_this_node": here, "OMP_NUM_THREADS": omp or None}
    found = []
    if per_task is not None and len(mask) < per_task:
        found.append(fail(
            f"SLURM_CPUS_PER_TASK={per_task} but this task may run on only {len(mask)} core(s) "
            f"({_cpus(mask)})", subject="SLURM_CPUS_PER_TASK", evidence=evidence,
            explanation="Since Slurm 22.05 srun does not take --cpus-per-task from the job: each task is bound to "
                        "fewer cores than asked, and data loaders and OpenMP threads crowd onto them.",
            fix="export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK   # in the job script, before srun\n"
                "# or: srun --cpus-per-task=$SLURM_CPUS_PER_TASK ..."))
    if per_task is not None and on_node is not None and here is not None and per_task * here > on_node:
        found.append(fail(f"{here} task(s) x {per_task} CPUs per task exceed the {on_node} CPUs allocated on this node",
                          subject="SLURM_CPUS_ON_NODE", evidence=evidence,
                          fix=f"#SBATCH --cpus-per-task={max(1, on_node // here)}"))
    if omp.isdigit() and int(omp) > len(mask):
        found.append(warn(f"OMP_NUM_THREADS={omp} but this task may use {len(mask)} core(s)", subject="OMP_NUM_THREADS",
                          evidence=evidence, explanation="Oversubscribed threads slow every rank down.",
                          fix="export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK"))
    if found:
        yield from found
    elif per_task is None:
        yield ok(f"no --cpus-per-task; this task may use {len(mask)} core(s) ({_cpus(mask)})", evidence=evidence)
    else:
        bound = "bound to exactly these" if len(mask) == per_task else "not bound (it may use more)"
        yield ok(f"SLURM_CPUS_PER_TASK={per_task}; the task is {bound}: {len(mask)} core(s) ({_cpus(mask)})",
                 evidence=evidence)


def _cpus(mask: list[int]) -> str:
    return fold_hosts([f"c{c}" for c in mask]).replace("c", "") or "none"


@check("slurm.batch-step", title="The program runs under srun, not alone in the batch step", tags=("slurm",),
       timeout=10)
def batch_step(ctx: Context):
    """`sbatch` runs the job script once, on the first node. A training script started there
    without `srun` is one process, whatever --nodes and --ntasks say."""
    env = ctx.facts.slurm_env
    if not env.in_job:
        yield skip(NOT_IN_JOB, explanation=IN_JOB_HINT)
        return
    tasks = env.int("SLURM_NTASKS", "SLURM_NPROCS")
    per_node = env.counts.get("SLURM_TASKS_PER_NODE")
    if tasks is None and per_node is not None:
        tasks = sum(per_node)
    nodes = env.int("SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    evidence = {"step": env.step_kind, "job_id": env.job_id, "ntasks": tasks, "nodes": nodes}
    if env.in_step:
        yield ok(f"running under srun (step {env.job_id}.{env.step_id})", evidence=evidence)
        return
    where = (f"the batch step of job {env.job_id}" if env.step_kind == "batch"
             else f"job {env.job_id or '(id not set)'} outside any srun step (a batch script or salloc shell)")
    unreadable = [name for name in ("SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE", "SLURM_JOB_NUM_NODES",
                                    "SLURM_NNODES")
                  if env.set(name) and env.int(name) is None and name not in env.counts]
    if tasks is None and nodes is None and unreadable:
        yield skip(f"running in {where}; cannot tell how many tasks the job has: {', '.join(unreadable)} "
                   f"cannot be read (see slurm.environment)", evidence=evidence)
        return
    if (tasks or 1) > 1 or (nodes or 1) > 1:
        asked = f"{tasks or '?'} task(s) on {nodes or '?'} node(s)"
        yield warn(f"running in {where} without srun: only this one process runs, but the job has "
                   f"{asked}", subject="srun", evidence=evidence,
                   explanation="The job script runs once, on the first node. Without srun the other tasks and "
                               "nodes sit idle, and a distributed program waits for peers that never start.",
                   fix="srun python train.py   # start the program with srun in the job script")
    else:
        yield ok(f"running in {where}; the job has one task, so srun is not needed", evidence=evidence)


@check("slurm.torchrun-nproc", title="torchrun under srun: one agent per node, --nproc-per-node = GPUs per node",
       tags=("slurm", "torch", "gpu"), timeout=15)
def torchrun_nproc(ctx: Context):
    """The first launch pattern: srun starts one torchrun per node, and torchrun starts
    --nproc-per-node workers, one per GPU. Checked from a worker: LOCAL_WORLD_SIZE against the
    node's GPUs, the torchrun agents per node, and WORLD_SIZE against nodes x nproc."""
    env = ctx.facts.slurm_env
    rc = ctx.run_context
    if rc.kind != "torchrun":
        yield skip("not a torchrun worker (no TORCHELASTIC_RUN_ID / LOCAL_WORLD_SIZE)")
        return
    if not env.in_job:
        yield skip("torchrun outside a Slurm job")
        return
    nproc = rc.local_world_size
    world = rc.world_size
    here = env.tasks_on_this_node
    nnodes = env.nnodes
    gpus = len(env.gpus) if env.gpus else env.int("SLURM_GPUS_ON_NODE")
    if not gpus:
        cvd = env.id_lists.get("CUDA_VISIBLE_DEVICES")
        seen = ctx.facts.node_gpus.gpus
        gpus = len(cvd) if cvd else (len(seen) if seen else 0)
    nodename = env.raw.get("SLURMD_NODENAME") or ctx.facts.hostname
    evidence = {"LOCAL_WORLD_SIZE": nproc, "WORLD_SIZE": world, "slurm_tasks_on_this_node": here,
                "slurm_nodes": nnodes, "gpus_on_node": gpus}
    fix = ("#SBATCH --ntasks-per-node=1\n"
           "srun torchrun --nnodes=$SLURM_NNODES --nproc-per-node=$SLURM_GPUS_ON_NODE \\\n"
           "  --rdzv-backend=c10d --rdzv-endpoint=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1):29500 "
           "train.py")
    found = []
    if here is not None and here > 1:
        found.append(fail(f"srun started {here} torchrun agents on {nodename}; there should be one per node",
                          subject="--ntasks-per-node", evidence=evidence,
                          explanation="Each agent starts its own --nproc-per-node workers: twice the ranks per node, "
                                      "fighting over the same GPUs and the same rendezvous.", fix=fix))
    if nproc is not None and gpus and nproc != gpus:
        summary = f"torchrun --nproc-per-node={nproc} but {nodename} has {gpus} GPU(s) for this job"
        if nproc > gpus:
            found.append(fail(summary, subject="--nproc-per-node", evidence=evidence,
                              explanation="Workers beyond the last GPU fail with 'invalid device ordinal' or share a GPU.",
                              fix=fix))
        else:
            found.append(warn(summary + f": {gpus - nproc} idle", subject="--nproc-per-node", evidence=evidence,
                              fix=fix))
    if nproc and world and nnodes and world != nproc * nnodes:
        found.append(fail(f"WORLD_SIZE={world} but {nnodes} node(s) x --nproc-per-node={nproc} = {nproc * nnodes}",
                          subject="--nnodes", evidence=evidence,
                          explanation="torchrun's --nnodes disagrees with the nodes srun gave it: rendezvous waits "
                                      "for nodes that never join.", fix=fix))
    if found:
        yield from found
    else:
        yield ok(f"torchrun worker: {nproc} per node x {nnodes or '?'} node(s) = WORLD_SIZE {world}"
                 + (f", {gpus} GPU(s) per node" if gpus else ""), evidence=evidence)


CHECKS = [installation, environment, task_counts, gpus, cpus, batch_step, torchrun_nproc]
