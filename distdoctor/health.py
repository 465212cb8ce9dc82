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

import re
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


# Slurm's base states in which a node is in service, and the flags that say nothing about who
# took it out of service (slurm.h's NODE_STATE_*; `scontrol show node` prints BASE+FLAG+...).
# Anything else (DOWN, FAIL, FAILING, MAINT, REBOOT_*, POWER*, NOT_RESPONDING, FUTURE, UNKNOWN,
# ERROR, a flag this list has never heard of) is the operator's or Slurm's: health leaves it.
IN_SERVICE = frozenset({"IDLE", "ALLOCATED", "ALLOC", "MIXED", "COMPLETING"})
NEUTRAL_FLAGS = frozenset({"COMPLETING", "CLOUD", "PLANNED", "RESERVED", "RES", "DYNAMIC_NORM", "PERFCTRS"})
# Older scontrol prints a drained node's base state as DRAINED or DRAINING.
DRAIN_BASES = {"DRAINED": "IDLE", "DRAINING": "ALLOCATED", "DRAIN": "IDLE"}
# A Slurm node name, and only one: Slurm expands `n[1-100]` and `a,b` into many nodes, and
# `ALL` is a keyword to some of its commands.
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# distdoctor's reason: `distdoctor: [<action>: ]<check id>: <what>[ (+N)]`; a check id has a dot,
# an action (reboot, reset-gpu) has none.
_OURS = re.compile(r"^distdoctor: (?:[a-z][a-z-]*: )?([A-Za-z0-9_-]+\.[^\s:]+): .*?(?: \(\+(\d+)\))?$")


def node_name_problem(name: str) -> str:
    """'' when name is one Slurm node name, else why health will not act on it."""
    if not _NODE_NAME.fullmatch(name):
        return (f"{name[:80]!r} is not one Slurm node name (a host list such as n[1-4] or a,b names "
                f"several; health acts on one node only)")
    if name.upper() == "ALL":
        return "'ALL' names every node; health acts on one node only"
    return ""


def in_service(state: NodeState) -> tuple[bool, bool]:
    """(in service apart from a drain, drained): whether the state is one health may act on."""
    parts = [p for p in state.state.upper().replace("*", "+NOT_RESPONDING").split("+") if p]
    if not parts:
        return False, False
    base, flags = parts[0], set(parts[1:])
    drained = "DRAIN" in flags or base in DRAIN_BASES
    base = DRAIN_BASES.get(base, base)
    flags.discard("DRAIN")
    return base in IN_SERVICE and flags <= NEUTRAL_FLAGS, drained


def _passed(run: CheckRun, fail_on: str) -> bool:
    floor = Status.WARN.severity if fail_on == "warn" else Status.FAIL.severity
    return run.status is not Status.SKIP and run.status.severity < floor


def decide(node: str, state: NodeState | None, bad: list[CheckRun], breaker: Breaker | None = None,
           max_share: float = MAX_DRAINED_SHARE, runs: list[CheckRun] | None = None, fail_on: str = "fail",
           full_selection: bool = True) -> Action:
    """What to do with this node. Nothing unless its state was read and it is in service (or in
    service and drained by distdoctor): a node DOWN, FAIL, MAINT, rebooting, powered down or
    drained by someone else is the operator's or Slurm's. breaker None: not consulted (a resume,
    or nothing to do). A resume needs the check named in distdoctor's reason to be among `runs`
    and to have passed; a reason that counts others (+N) does not name them, so only a run of
    the whole default selection (full_selection), every check passing, may resume it."""
    if state is None:
        if bad:
            return Action("none", why=f"not draining {node}: its state cannot be read, so distdoctor will not act "
                                      f"on it. distdoctor found: {reason_for(bad)}")
        return Action("none", why=f"{node} passes; its state could not be read, so nothing is resumed")
    usable, drained = in_service(state)
    ours = drained and bool(_OURS.match(state.reason))
    if not usable:
        found = f". distdoctor found: {reason_for(bad)}" if bad else ""
        return Action("none", why=f"{node} is {state.state} ({state.reason or 'no reason'}): not in service, "
                                  f"so it is the operator's or Slurm's; left as it is{found}")
    if bad:
        reason = reason_for(bad)
        if breaker is not None and not ours:
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
        if drained and not ours:
            return Action("none", why=f"{node} is already drained by someone else ({state.reason or 'no reason'}); "
                                      f"left as it is. distdoctor found: {reason}")
        if ours and state.reason == reason:
            return Action("none", why=f"{node} stays drained: {reason}")
        return Action("drain", ("scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"),
                      f"draining {node}: {reason}")
    if ours:
        match = _OURS.match(state.reason)
        assert match is not None
        named, more = match.group(1), int(match.group(2) or 0)
        run = next((r for r in runs or () if r.id == named), None)
        if run is None or not _passed(run, fail_on):
            did = "did not run" if run is None else f"is {run.status.value.upper()}"
            return Action("none", why=f"{node} stays drained: {named}, which drained it, {did} here")
        if more and not full_selection:
            return Action("none", why=f"{node} stays drained: {more} more check(s) failed with {named} and only a "
                                      f"run of every check (no --only, no --skip) may resume it")
        return Action("resume", ("scontrol", "update", f"nodename={node}", "state=resume"),
                      f"resuming {node}: {named} passes again (it was drained with reason \"{state.reason}\")")
    if drained:
        return Action("none", why=f"{node} passes, but stays drained: the reason is not distdoctor's "
                                  f"({state.reason or 'no reason'})")
    return Action("none", why=f"{node} passes")


def node_name(host) -> str:
    """Slurm's name for this node: SLURMD_NODENAME (set for Prolog, Epilog and jobs), else the
    short hostname, which is what slurmd uses unless started with -N."""
    name = host.env.get("SLURMD_NODENAME", "").strip()
    return name or host.hostname().split(".")[0]


def node_state(host, node: str) -> tuple[NodeState | None, str]:
    """The state of exactly this node: a record for any other node, or for more than one, is a
    problem, never a state to act on."""
    result = host.run(["scontrol", "show", "node", node], timeout=SCONTROL_TIMEOUT)
    if not result.ok:
        return None, result.describe()
    records = len(re.findall(r"(?:^|\s)NodeName=", result.stdout))
    if records > 1:
        return None, f"`scontrol show node {node}` describes {records} nodes, not one"
    try:
        state = parse_node_show(result.stdout)
    except ParseError as exc:
        return None, str(exc)
    if state.name != node:
        return None, f"`scontrol show node {node}` describes node {state.name[:80]!r}"
    return state, ""


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
