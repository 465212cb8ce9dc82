"""`distdoctor health`: the checks as Slurm's HealthCheckProgram, Prolog or Epilog.

What LBNL NHC does for a node, with distdoctor's checks: run the selected checks within a
bound slurmd can live with, and act on this node only. A failure drains it with a reason
`sinfo -R` shows whole ("distdoctor: <check>: <what>", at most REASON_MAX characters); a clean
run resumes it only when distdoctor was the one that drained it, so a node a person drained
("maint") stays drained. Every scontrol call is an argv list with a timeout; `--dry-run`
prints the commands instead.

Only findings whose action needs the node out of service drain it (reset-gpu, reboot,
replace-hardware; distdoctor/hardware/actions.py), and findings that name no action (a node that
does not match its [expect] table, a check that errored); the action is in the reason. Two
safeguards keep a health check deployed on every node from draining a cluster: when the node's
state cannot be read nothing is drained, and a circuit breaker refuses to drain when more than
`max_share` of the node's partitions is already drained by distdoctor (a cause common to many
nodes is distdoctor's or the site's, not each node's). Both say so instead.

The decision is a pure function of the report, the node's state and the partition's
(`decide`), so it is tested without Slurm; `apply` runs what was decided.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from distdoctor.hardware.actions import needs_drain
from distdoctor.model import CheckRun, Finding, Status
from distdoctor.parsers import ParseError
from distdoctor.parsers.slurm import NodeState, parse_node_show, parse_sinfo_nodes

REASON_PREFIX = "distdoctor:"
REASON_MAX = 64  # `sinfo -R` prints the reason in a 20-column field by default; 64 reads whole with -o %60E
DEFAULT_TIMEOUT = 50.0  # slurmd kills a HealthCheckProgram after 60 s
SCONTROL_TIMEOUT = 4.0
# Left out unless --only names them: probing other hosts judges the network, not this node, and
# a health check of one node must not fail because another is down.
DEFAULT_SKIP = ("reach",)
SCONTROL_RESERVE = 3 * SCONTROL_TIMEOUT + 1  # what the checks leave for `show node`, `sinfo` and `update`
MAX_DRAINED_SHARE = 0.10  # the circuit breaker: no drain past this share of a partition drained by distdoctor


@dataclass(frozen=True)
class Action:
    kind: str  # "drain", "resume", "none"
    argv: tuple[str, ...] = ()
    why: str = ""  # one line for the log

    def shell(self) -> str:
        return shlex.join(self.argv)


def failing(runs: list[CheckRun], fail_on: str) -> list[CheckRun]:
    """The runs at or above the fail_on level, worst first (ERROR and TIMEOUT count as FAIL: a
    check that cannot finish on this node is a reason to look at it)."""
    floor = Status.WARN.severity if fail_on == "warn" else Status.FAIL.severity
    bad = [r for r in runs if r.status.severity >= floor]
    return sorted(bad, key=lambda r: -r.status.severity)


def drains(finding: Finding, floor: int) -> bool:
    """A finding at or above the floor whose action takes the node out of service, or that names
    no action (a node unlike its [expect] table; a check that errored): what `health` drains for."""
    return finding.status.severity >= floor and (not finding.action or needs_drain(finding.action))


def draining(runs: list[CheckRun], fail_on: str) -> list[CheckRun]:
    """Of the failing runs, those with a finding that drains (see `drains`), worst first; a run
    that ended in ERROR or TIMEOUT drains as before. The others (an application's Xid, a
    configuration to fix) are reported, not drained for."""
    floor = Status.WARN.severity if fail_on == "warn" else Status.FAIL.severity
    return [r for r in failing(runs, fail_on)
            if r.status in (Status.ERROR, Status.TIMEOUT) or any(drains(f, floor) for f in r.findings)]


def _drain_finding(run: CheckRun) -> Finding | None:
    worst = [f for f in run.findings if f.status.severity >= run.status.severity]
    return next((f for f in worst if not f.action or needs_drain(f.action)), worst[0] if worst else None)


def reason_for(bad: list[CheckRun]) -> str:
    """`distdoctor: <action>: <check>: <what>` (no action part when the finding names none), cut
    to REASON_MAX characters, naming the worst check and how many more failed."""
    first = bad[0]
    finding = _drain_finding(first)
    what = finding.summary if finding is not None else first.status.value
    action = f"{finding.action}: " if finding is not None and finding.action else ""
    more = f" (+{len(bad) - 1})" if len(bad) > 1 else ""
    text = " ".join(f"{REASON_PREFIX} {action}{first.id}: {what}".split())
    if len(text) + len(more) > REASON_MAX:
        text = text[:REASON_MAX - len(more) - 3].rstrip() + "..."
    return text + more


@dataclass(frozen=True)
class Breaker:
    """How much of this node's partitions distdoctor has drained already."""
    drained: tuple[str, ...] = ()  # other nodes drained with a distdoctor: reason
    total: int = 0  # nodes in the partitions this node belongs to
    partitions: tuple[str, ...] = ()
    problem: str = ""  # why it could not be read

    @property
    def share(self) -> float:
        return len(self.drained) / self.total if self.total else 0.0

    def to_dict(self) -> dict:
        return {"drained_by_distdoctor": list(self.drained), "nodes": self.total, "partitions": list(self.partitions),
                "share": round(self.share, 4), "problem": self.problem}


def decide(node: str, state: NodeState | None, bad: list[CheckRun], breaker: Breaker | None = None,
           max_share: float = MAX_DRAINED_SHARE) -> Action:
    """What to do with this node. state None: its state could not be read, and nothing is
    drained (a health check that cannot see the node must not act on it). breaker None: not
    consulted (a resume, or nothing to do)."""
    ours = state is not None and state.drained and state.reason.startswith(REASON_PREFIX)
    if bad:
        reason = reason_for(bad)
        if state is None:
            return Action("none", why=f"not draining {node}: its state cannot be read, so distdoctor will not act "
                                      f"on it. distdoctor found: {reason}")
        if breaker is not None and not (ours and state.drained):
            if breaker.problem:
                return Action("none", why=f"not draining {node}: the partition's state cannot be read "
                                          f"({breaker.problem}), so the circuit breaker cannot be judged. "
                                          f"distdoctor found: {reason}")
            if breaker.share > max_share:
                return Action("none", why=f"not draining {node}: {len(breaker.drained)} of {breaker.total} nodes of "
                                          f"{','.join(breaker.partitions) or 'its partition'} are already drained by "
                                          f"distdoctor ({breaker.share:.0%} > {max_share:.0%}); a fault on that many "
                                          f"nodes is more likely the site's or distdoctor's than this node's. "
                                          f"distdoctor found: {reason}")
        if state is not None and state.drained and not ours:
            return Action("none", why=f"{node} is already drained by someone else ({state.reason or 'no reason'}); "
                                      f"left as it is. distdoctor found: {reason}")
        if ours and state.reason == reason:
            return Action("none", why=f"{node} stays drained: {reason}")
        return Action("drain", ("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"),
                      f"draining {node}: {reason}")
    if ours:
        return Action("resume", ("scontrol", "update", f"nodename={node}", "state=resume"),
                      f"resuming {node}: the checks pass again (it was drained with reason \"{state.reason}\")")
    if state is not None and state.drained:
        return Action("none", why=f"{node} passes, but stays drained: the reason is not distdoctor's "
                                  f"({state.reason or 'no reason'})")
    return Action("none", why=f"{node} passes")


def node_name(host) -> str:
    """Slurm's name for this node: SLURMD_NODENAME (set for Prolog, Epilog and jobs), else the
    short hostname, which is what slurmd uses unless started with -N."""
    name = host.env.get("SLURMD_NODENAME", "").strip()
    return name or host.hostname().split(".")[0]


def node_state(host, node: str) -> tuple[NodeState | None, str]:
    result = host.run(["scontrol", "show", "node", node], timeout=SCONTROL_TIMEOUT)
    if not result.ok:
        return None, result.describe()
    try:
        return parse_node_show(result.stdout), ""
    except ParseError as exc:
        return None, str(exc)


def partition_load(host, node: str) -> Breaker:
    """The nodes of every partition this node is in, and which of them distdoctor drained
    (`sinfo -h -N -o '%N|%P|%T|%E'`, one argv, bounded)."""
    result = host.run(["sinfo", "-h", "-N", "-o", "%N|%P|%T|%E"], timeout=SCONTROL_TIMEOUT)
    if not result.ok:
        return Breaker(problem=result.describe())
    try:
        rows = parse_sinfo_nodes(result.stdout)
    except ParseError as exc:
        return Breaker(problem=str(exc))
    partitions = sorted({r.partition for r in rows if r.name == node})
    if not partitions:
        return Breaker(problem=f"sinfo lists {node} in no partition")
    states = {r.name: r.state for r in rows if r.partition in partitions}
    drained = tuple(sorted(n for n, st in states.items()
                           if n != node and st.drained and st.reason.startswith(REASON_PREFIX)))
    return Breaker(drained, len(states), tuple(partitions))


def apply(host, action: Action) -> str:
    """Run the action's command; '' on success, else why it failed."""
    if not action.argv:
        return ""
    result = host.run(list(action.argv), timeout=SCONTROL_TIMEOUT)
    return "" if result.ok else result.describe()
