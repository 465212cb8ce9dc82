"""Which ranks a log shows starting, from the lines where a process states its rank and the
world size: Lightning's `initializing ddp: GLOBAL_RANK: 3, MEMBER: 4/8`, c10d's `Rank 3:
Completed store-based barrier for key:... with 8 nodes`, NCCL's `comm 0x.. rank 3 nranks 8 ...
commId 0x.. - Init COMPLETE`. Two findings come from it, neither visible line by line:

- only k of N ranks ever announced themselves: the rest never started (a launcher that ran the
  script on one node only, tasks per node not matching the trainer), and the job hangs at
  rendezvous without an error;
- one rank number announced by two processes: two launchers (or two jobs on one port) gave
  their processes the same ranks, and half the world never exists.

A third comes from NCCL's transport lines: two ranks NCCL places on one GPU of one host name
(`Ring 00 : 6[6] -> 10[2] via P2P/IPC` while rank 2 also runs on GPU 2 of that host, or two
`Init COMPLETE` lines of one communicator with the same host and busId) mean two machines answer
to one host name: NCCL then takes them for one node and uses P2P/IPC or shared memory between
machines, which fails as a CUDA or system error that looks like a driver problem.

Statements are compared only within one kind (NCCL's per communicator, keyed by commId), so a
process that logs its rank twice through two loggers is not a duplicate. Pure: scan in,
findings out.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from distdoctor.crosscheck.engine import fold
from distdoctor.model import Finding, Status

KEYWORDS = ("GLOBAL_RANK: ", "Completed store-based barrier")
_STATEMENTS = (
    ("lightning", re.compile(r"GLOBAL_RANK: (?P<rank>\d+), MEMBER: \d+/(?P<world>\d+)")),
    ("c10d", re.compile(r"Rank (?P<rank>\d+): Completed store-based barrier for key:\S+ with (?P<world>\d+) nodes")),
    ("nccl", re.compile(r"\brank (?P<rank>\d+) nranks (?P<world>\d+) cudaDev \d+.*?\bcommId (?P<comm>0x[0-9a-f]+)"
                        r".*Init COMPLETE")),
)
MAX_WORLD = 100_000
# intra-node transports: both ends of such a link run on the line's host
_LINK = re.compile(r"(?:Ring|Channel) \d+(?:/\d+)? : (?P<a>\d+)\[(?P<da>\w+)\] -> (?P<b>\d+)\[(?P<db>\w+)\]"
                   r"(?: \[\w+\])? via (?P<how>P2P/\w+|SHM|direct shared memory|P2P)")
_INIT = re.compile(r"\brank (?P<rank>\d+) nranks \d+ cudaDev \d+ (?:nvmlDev \d+ )?busId (?P<bus>\w+)"
                   r".*?\bcommId (?P<comm>0x[0-9a-f]+).*Init COMPLETE")


def _statements(scan):
    """(kind, world, rank, who) per statement; who tells processes apart where the line can."""
    for p in scan.info:
        body = p.body
        if "GLOBAL_RANK: " not in body and "store-based barrier" not in body and "Init COMPLETE" not in body:
            continue
        for kind, pattern in _STATEMENTS:
            m = pattern.search(body)
            if m:
                world = int(m.group("world"))
                if 0 < world <= MAX_WORLD:
                    comm = m.groupdict().get("comm") or ""
                    # the same process states its rank once per logger: the text tells them apart
                    who = (p.host, p.pid) if kind == "nccl" else (p.host, p.pid, body)
                    yield (kind, comm, world), int(m.group("rank")), who
                break


def host_collisions(scan) -> Finding | None:
    """Two ranks on one GPU of one host name: two machines share the name."""
    gpus: dict[tuple, set[int]] = defaultdict(set)
    links = 0
    for p in scan.info:
        if not p.host:
            continue
        body = p.body
        if " via " in body and (m := _LINK.search(body)):
            gpus[(p.host, "", m.group("da"))].add(int(m.group("a")))
            gpus[(p.host, "", m.group("db"))].add(int(m.group("b")))
            links += 1
        elif "Init COMPLETE" in body and (m := _INIT.search(body)):
            gpus[(p.host, m.group("comm"), m.group("bus"))].add(int(m.group("rank")))
    shared = {k: v for k, v in gpus.items() if len(v) > 1}
    if not shared:
        return None
    (host, _comm, gpu), ranks = sorted(shared.items(), key=lambda kv: -len(kv[1]))[0]
    hosts = sorted({k[0] for k in shared})
    return Finding(
        Status.FAIL, f"two machines answer to the host name {host}: ranks {fold(str(r) for r in sorted(ranks))} "
                     f"both run on its GPU {gpu}, so NCCL takes them for one node",
        subject="duplicate-hostnames",
        explanation="NCCL decides which ranks share a node by host name (older releases by its part before the "
                    "first dot): ranks of two machines with one name are given P2P/IPC or shared-memory links "
                    "to each other, which fail as 'unhandled cuda error' or 'unhandled system error'. Cloned "
                    "images, containers that all call themselves localhost, and names that differ only after "
                    "the first dot do this.",
        fix="# give every node its own host name (hostnamectl set-hostname on each), or give each node its own "
            "NCCL_HOSTID; then rerun with NCCL_DEBUG=INFO and check that P2P/IPC and SHM links stay within nodes",
        evidence={"host_names": hosts, "gpu": gpu, "ranks": fold(str(r) for r in sorted(ranks)),
                  "intra_node_links": links})


def judge(scan) -> list[Finding]:
    seen: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for key, rank, who in _statements(scan):
        seen[key][rank].append(who)
    out = []
    for (kind, comm, world), ranks in sorted(seen.items(), key=lambda kv: -kv[0][2]):
        if kind == "nccl":
            twice = sorted(r for r, whos in ranks.items() if len(set(whos)) > 1)
        else:
            # the same statement, word for word, from where a second process would print it
            twice = sorted(r for r, whos in ranks.items() if max(Counter(whos).values()) > 1)
        missing = sorted(set(range(world)) - set(ranks))
        stated = {"kind": kind, "world": world, "ranks_seen": fold(str(r) for r in ranks),
                  "comm": comm}
        if twice:
            out.append(Finding(
                Status.FAIL if len(twice) * 2 >= len(ranks) else Status.WARN,
                f"rank{'s' if len(twice) > 1 else ''} {fold(str(r) for r in twice)} of {world} started twice "
                f"({kind}): two launchers or two jobs gave their processes the same rank numbers",
                subject="duplicate-ranks",
                explanation="Each rank number must belong to one process. The same number announced by two "
                            "processes means the launch ran twice (srun around a launcher that starts every "
                            "rank itself, the node rank not set per node, two jobs sharing MASTER_PORT): "
                            "the ranks that should hold the other numbers never exist and the job hangs or "
                            "fails at rendezvous.",
                fix="# start one launcher per node (srun --ntasks-per-node=1 around torchrun), or let srun start "
                    "every rank with RANK=$SLURM_PROCID; and give each job its own MASTER_PORT",
                evidence={**stated, "duplicated": fold(str(r) for r in twice)}))
        elif missing and len(ranks) < world:
            out.append(Finding(
                Status.WARN,
                f"only {len(ranks)} of {world} ranks announced themselves ({kind}); never seen: "
                f"{fold(str(r) for r in missing)}",
                subject="missing-ranks",
                explanation="If these are all the job's logs, the missing ranks never started and the others wait "
                            "for them at rendezvous: the launch started fewer processes than the world size (the "
                            "script run without srun on one node, --ntasks-per-node not matching the trainer's "
                            "devices, --nodes not matching num_nodes). If other nodes log to other files, pass "
                            "them too.",
                fix="# compare the launch with the world size: srun --nodes=N --ntasks-per-node=GPUS_PER_NODE "
                    "with the trainer's num_nodes=N and devices=GPUS_PER_NODE",
                evidence={**stated, "missing": fold(str(r) for r in missing)}))
    collision = host_collisions(scan)
    return ([collision] if collision else []) + out[:3]
