"""`distdoctor health`: the checks as Slurm's HealthCheckProgram, Prolog or Epilog.

What LBNL NHC does for a node, with distdoctor's checks: run the selected checks within a
bound slurmd can live with, and act on this node only. A failure drains it with a reason
`sinfo -R` shows whole ("distdoctor: <check>: <what>", at most REASON_MAX characters); a clean
run resumes it only when distdoctor was the one that drained it, so a node a person drained
("maint") stays drained. Every scontrol call is an argv list with a timeout; `--dry-run`
prints the commands instead.

The decision is a pure function of the report and the node's state (`decide`), so it is
tested without Slurm; `apply` runs what was decided.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from distdoctor.model import CheckRun, Status
from distdoctor.parsers import ParseError
from distdoctor.parsers.slurm import NodeState, parse_node_show

REASON_PREFIX = "distdoctor:"
REASON_MAX = 64  # `sinfo -R` prints the reason in a 20-column field by default; 64 reads whole with -o %60E
DEFAULT_TIMEOUT = 50.0  # slurmd kills a HealthCheckProgram after 60 s
SCONTROL_TIMEOUT = 4.0
# Left out unless --only names them: probing other hosts judges the network, not this node, and
# a health check of one node must not fail because another is down.
DEFAULT_SKIP = ("reach",)
SCONTROL_RESERVE = 2 * SCONTROL_TIMEOUT + 1  # what the checks leave for `show node` and `update`


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


def reason_for(bad: list[CheckRun]) -> str:
    """`distdoctor: <check>: <what>`, cut to REASON_MAX characters, naming the worst check and
    how many more failed."""
    first = bad[0]
    finding = next((f for f in first.findings if f.status.severity >= first.status.severity), None)
    what = finding.summary if finding is not None else first.status.value
    more = f" (+{len(bad) - 1})" if len(bad) > 1 else ""
    text = " ".join(f"{REASON_PREFIX} {first.id}: {what}".split())
    if len(text) + len(more) > REASON_MAX:
        text = text[:REASON_MAX - len(more) - 3].rstrip() + "..."
    return text + more


def decide(node: str, state: NodeState | None, bad: list[CheckRun]) -> Action:
    """What to do with this node. state None: the node's state could not be read (drain anyway
    on failure: scontrol will say if the node does not exist)."""
    ours = state is not None and state.drained and state.reason.startswith(REASON_PREFIX)
    if bad:
        reason = reason_for(bad)
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


def apply(host, action: Action) -> str:
    """Run the action's command; '' on success, else why it failed."""
    if not action.argv:
        return ""
    result = host.run(list(action.argv), timeout=SCONTROL_TIMEOUT)
    return "" if result.ok else result.describe()
