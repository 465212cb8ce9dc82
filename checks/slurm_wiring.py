"""Slurm: torch's env:// wiring under srun. WORLD_SIZE, RANK and LOCAL_RANK against Slurm's own
task numbers, MASTER_ADDR against the step's first node, MASTER_PORT against the ports a job may
use; each mismatch with the line of the job script that sets it right. The fix texts are shared
with the other Slurm checks (checks/slurm.py)."""

from __future__ import annotations

import ipaddress

from distdoctor.api import Context, check, fail, ok, skip, warn
from distdoctor.checks.slurm import (IN_JOB_HINT, MASTER_ADDR_FIX, MASTER_PORT_FIX, NOT_IN_JOB, STEP_MASTER_ADDR_FIX,
                                     TORCH_WIRING_FIX, WIRING_FIXES)


@check("slurm.torch-wiring", title="torch's WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT agree with Slurm",
       tags=("slurm", "torch", "env"), timeout=15)
def torch_wiring(ctx: Context):
    """The usual wiring under srun: WORLD_SIZE = SLURM_NTASKS, RANK = SLURM_PROCID,
    LOCAL_RANK = SLURM_LOCALID, MASTER_ADDR = the first host of the step's nodelist (resolvable
    here), MASTER_PORT a valid port outside the ephemeral range. A mismatch hangs the job at
    rendezvous with only some ranks joined (Lightning#8707 `MEMBER: 4/8`)."""
    env = ctx.facts.slurm_env
    kind = ctx.run_context.kind
    if not env.in_job:
        yield skip(NOT_IN_JOB, explanation=IN_JOB_HINT)
        return
    if kind in ("torchrun", "mpirun"):
        yield skip(f"launched by {ctx.run_context.launcher or kind}: it sets RANK and WORLD_SIZE itself "
                   "(see slurm.torchrun-nproc)")
        return
    if not env.in_step:
        yield skip(f"not inside an srun step ({env.step_kind} step): torch variables are set per task "
                   "(see slurm.batch-step)")
        return
    values = {name: ctx.env.get(name) for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    nodelist = env.nodelist
    expected = {"WORLD_SIZE": env.ntasks, "RANK": env.int("SLURM_PROCID"), "LOCAL_RANK": env.int("SLURM_LOCALID"),
                "MASTER_ADDR": nodelist[0] if nodelist else None}
    evidence = {"set": values, "expected": expected, "step_nodelist": list(nodelist or ())}
    if all(v is None for v in values.values()):
        yield skip("torch's env:// variables are not set in this task (fine when the trainer derives them from "
                   "SLURM_*, as Lightning does)", evidence=evidence, fix=TORCH_WIRING_FIX)
        return
    found = []
    sources = {"WORLD_SIZE": env.ntasks_var or "SLURM_NTASKS", "RANK": "SLURM_PROCID", "LOCAL_RANK": "SLURM_LOCALID"}
    effect = {
        "WORLD_SIZE": "rendezvous waits for WORLD_SIZE ranks that never come (or too many arrive) and hangs",
        "RANK": "two tasks claim the same rank (or one is missing) and rendezvous hangs or fails",
        "LOCAL_RANK": "ranks of this node pick the wrong GPU, two of them the same one",
    }
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        value, want = values[name], expected[name]
        if value is None:
            if name != "LOCAL_RANK" and want is not None:
                found.append(warn(f"{name} is not set but MASTER_ADDR/RANK wiring is partly done "
                                  f"(expected {name}={want}, from {sources[name]})", subject=name, evidence=evidence,
                                  explanation="init_process_group('env://') needs MASTER_ADDR, MASTER_PORT, "
                                              "WORLD_SIZE and RANK.", fix=WIRING_FIXES[name]))
            continue
        if want is None:
            continue
        if value.strip() != str(want):
            found.append(fail(f"{name}={value} but {sources[name]}={want}", subject=name, evidence=evidence,
                              explanation=f"{name} must equal {sources[name]} for this task: otherwise "
                                          f"{effect[name]}.", fix=WIRING_FIXES[name]))
    found.extend(_master_addr(ctx, values["MASTER_ADDR"], expected["MASTER_ADDR"], env, evidence))
    found.extend(_master_port(ctx, values["MASTER_PORT"], evidence))
    if found:
        yield from found
        return
    yield ok(f"WORLD_SIZE={values['WORLD_SIZE']} RANK={values['RANK']} LOCAL_RANK={values['LOCAL_RANK']} "
             f"MASTER_ADDR={values['MASTER_ADDR']} MASTER_PORT={values['MASTER_PORT']} agree with Slurm",
             evidence=evidence)


def _ips(addresses) -> set:
    out = set()
    for a in addresses:
        try:
            out.add(ipaddress.ip_address(str(a).split("%")[0]))
        except ValueError:
            continue
    return out


def _master_addr(ctx: Context, value: str | None, first: str | None, env, evidence: dict):
    fix = MASTER_ADDR_FIX
    job_nodes = env.nodelists.get("SLURM_JOB_NODELIST")
    if first and job_nodes and job_nodes[0] != first:
        # this step does not run on the job's first node (srun -w, -r, or -N smaller than the job):
        # the job-level line would point at a node without rank 0
        fix = STEP_MASTER_ADDR_FIX
    if value is None:
        yield warn("MASTER_ADDR is not set", subject="MASTER_ADDR", evidence=evidence,
                   explanation="init_process_group('env://') fails with 'environment variable MASTER_ADDR expected, "
                               "but not set'.", fix=fix)
        return
    addr = value.strip()
    if not addr or any(ch in addr for ch in "[],"):
        yield fail(f"MASTER_ADDR={value!r} is not one host" + (f" (first node is {first})" if first else ""),
                   subject="MASTER_ADDR", evidence=evidence,
                   explanation="A nodelist expression or list was put into MASTER_ADDR; it must be the first host of "
                               "the step's nodelist, expanded with scontrol (hand-written regexes get this wrong: "
                               "Lightning#14896 turned 'linux[1,2]' into 'linux[1').", fix=fix)
        return
    resolved = ctx.host.resolve(addr, timeout=3)
    evidence = {**evidence, "MASTER_ADDR_resolves_to": list(resolved.addresses)}
    if resolved.error:
        yield fail(f"MASTER_ADDR={addr} does not resolve on this node: {resolved.error}", subject="MASTER_ADDR",
                   evidence=evidence, explanation="Every rank connects to MASTER_ADDR; a name only the login node "
                                                  "knows hangs or fails the rendezvous.", fix=fix)
        return
    if first is None or addr == first:
        return
    first_addrs = ctx.host.resolve(first, timeout=3)
    wanted = _ips(resolved.addresses)
    if _ips(first_addrs.addresses) & wanted:
        return  # an address or alias of the first node is just as good (fd43:0::11 is fd43::11)
    here = {ctx.env.get("SLURMD_NODENAME"), ctx.facts.hostname.split(".", 1)[0]}
    if first in here:
        mine = _ips(a.address for i in ctx.facts.interfaces.interfaces for a in i.addresses)
        if mine & wanted:
            return  # this is the first node, and MASTER_ADDR is one of its addresses (an IPv6 one, say)
    elif wanted and not {ip.version for ip in wanted} & {ip.version for ip in _ips(first_addrs.addresses)}:
        # the first node's name resolves here to the other family only: whether MASTER_ADDR is one
        # of its addresses only the first node can tell, and its own run of this check does
        return
    yield fail(f"MASTER_ADDR={addr} is not the first node of the step ({first})", subject="MASTER_ADDR",
               evidence={**evidence, "first_node_resolves_to": list(first_addrs.addresses)},
               explanation="Rank 0 runs on the first node of the step and hosts the rendezvous store there; other "
                           "ranks connecting elsewhere time out ('The client socket has timed out').",
               fix=fix)


def _master_port(ctx: Context, value: str | None, evidence: dict):
    if value is None:
        yield warn("MASTER_PORT is not set", subject="MASTER_PORT", evidence=evidence,
                   explanation="init_process_group('env://') needs MASTER_PORT.", fix=MASTER_PORT_FIX)
        return
    text = value.strip()
    if not text.isdigit() or not 0 < int(text) < 65536:
        yield fail(f"MASTER_PORT={value!r} is not a TCP port (1-65535)", subject="MASTER_PORT", evidence=evidence,
                   fix=MASTER_PORT_FIX)
        return
    port = int(text)
    low, high = ctx.facts.ephemeral_ports
    if low <= port <= high:
        yield warn(f"MASTER_PORT={port} is inside the ephemeral port range {low}-{high}", subject="MASTER_PORT",
                   evidence={**evidence, "ephemeral_ports": [low, high]},
                   explanation="Any outgoing connection on the first node may be given this port before the "
                               "rendezvous store binds it: 'address already in use', now and then.",
                   fix=MASTER_PORT_FIX)
    elif port < 1024:
        yield warn(f"MASTER_PORT={port} is a privileged port", subject="MASTER_PORT", evidence=evidence,
                   explanation="Only root may listen below 1024.", fix=MASTER_PORT_FIX)


CHECKS = [torch_wiring]
