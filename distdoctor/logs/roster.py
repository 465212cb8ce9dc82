"""Which ranks a log shows starting, from the lines where a process states its rank and the
world size: Lightning's `initializing ddp: GLOBAL_RANK: 3, MEMBER: 4/8`, c10d's `Rank 3:
Completed store-based barrier for key:... with 8 nodes`, NCCL's `comm 0x.. rank 3 nranks 8 ...
commId 0x.. - Init COMPLETE`. Two findings come from it, neither visible line by line:

- only k of N ranks ever announced themselves: the rest never started (a launcher that ran the
  script on one node only, tasks per node not matching the trainer), and the job hangs at
  rendezvous without an error;
- one rank number announced by two processes: two launchers (or two jobs on one port) gave
  their processes the same ranks, and half the world never exists.

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
    return out[:3]
