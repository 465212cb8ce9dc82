"""The cluster view: node reports side by side, the odd nodes named with their fix.

Input is {node: report}, each report the JSON document `distdoctor check --format json` writes
(its flat `"inventory"` of named facts and its check results), compared with the one table of
rules (crosscheck/rules.py: which facts must agree across nodes, which must differ) on the
shared comparison engine (crosscheck/engine.py). `fleet`, `compare` and `check` under a launcher (one report per job)
all build their report here.

Pure: no I/O. The caller reads the files or gathers the reports and says which nodes gave none.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from distdoctor import __version__, remote
from distdoctor.crosscheck import engine, identity
from distdoctor.crosscheck.engine import DIFFER, Rule, fold
from distdoctor.crosscheck.rules import NODE_RULES, under_slurm
from distdoctor.model import CheckRun, Finding, Report, RunContext, Status, worst
from distdoctor.remote import Fix

# Reports this code can read: the same MAJOR schema (docs/report.schema.json).
SCHEMA_MAJOR = "1"
_STATUS_BY_NAME = {s.value: s for s in Status}
_RESULTS = frozenset(s.value for s in Status if s is not Status.SKIP)  # SKIP is not a result to compare
_OK = Status.OK.value


# Which run of the cluster report a difference belongs to.
_RUNS = (
    ("cluster.reports", "Every node answered with a report"),
    ("cluster.host-identity", "Nodes have distinct identities"),
    ("cluster.facts-agree", "Nodes agree on versions, hardware and settings"),
    ("cluster.expectations", "Nodes match the [expect] table"),
    ("cluster.check-results", "Checks end the same on every node"),
)


class NotAReport(ValueError):
    """A document that is not a distdoctor node report; the message says why in a few words."""


def check_node_report(doc: Any) -> None:
    """NotAReport unless doc is one node's `check` report (not garbage, another tool's JSON,
    another schema MAJOR, a fleet, compare or whole-job report)."""
    if not isinstance(doc, dict):
        raise NotAReport("output is not a distdoctor report (not a JSON object)")
    tool = doc.get("tool")
    if not isinstance(tool, dict) or tool.get("name") != "distdoctor" or not isinstance(doc.get("checks"), list):
        raise NotAReport("output is not a distdoctor report")
    version = str(doc.get("schema_version", ""))
    if version.split(".")[0] != SCHEMA_MAJOR:
        raise NotAReport(f"report schema {version or '(none)'} is not one this distdoctor reads ({SCHEMA_MAJOR}.x)")
    if doc.get("command") != "check":
        raise NotAReport(f"a '{doc.get('command')}' report, not a node's 'check' report")
    if "cluster" in doc:
        raise NotAReport("a whole job's report, not one node's")


def node_facts(doc: Any) -> dict[str, Any]:
    """The flat facts one node report contributes: its inventory and `check.<id>` statuses.
    Raises NotAReport for what is not a node report (see check_node_report)."""
    check_node_report(doc)
    inventory = doc.get("inventory")
    facts: dict[str, Any] = dict(inventory) if isinstance(inventory, dict) else {}
    for run in doc["checks"]:
        if isinstance(run, dict):
            check_id, status = run.get("id"), run.get("status")
            if status in _RESULTS and isinstance(check_id, str):
                facts["check." + check_id] = status
    return facts


def parse_report(text: str) -> dict[str, Any]:
    """One node's report from its JSON text; NotAReport says what is wrong with it."""
    text = text.strip()
    if not text:
        raise NotAReport("empty: no report")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        raise NotAReport("output is not a distdoctor report (not JSON" + (f": {exc.msg} at line {line})"
                         if line else ")")) from None
    check_node_report(doc)
    return doc


def slim(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a node report the comparison reads (identity, status, inventory, each
    check's result), without findings and evidence: 10,000 whole reports held at once cost
    gigabytes and most of the time."""
    out = {k: doc[k] for k in ("schema_version", "tool", "command", "host", "node", "status", "inventory")
           if k in doc}
    out["checks"] = [{"id": r.get("id"), "status": r.get("status")} for r in doc.get("checks", [])
                     if isinstance(r, dict)]
    return out


@dataclass(frozen=True)
class Missing:
    """A node that gave no usable report: why, and what to run about it."""

    node: str
    reason: str
    fix: str | Fix | Sequence[str | Fix] = ""
    status: Status = Status.FAIL


@dataclass
class ClusterView:
    report: Report
    nodes: list[str]
    differences: list[engine.Difference]
    missing: list[Missing]
    outliers: list[str]
    per_node: dict[str, dict[str, Any]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)  # one per difference, in order

    @property
    def summary(self) -> str:
        answered = len(self.nodes)
        total = answered + len(self.missing)
        parts = [f"{total} node{'s' if total != 1 else ''}"]
        if self.missing:
            parts.append(f"{len(self.missing)} without a report ({fold(m.node for m in self.missing)})")
        # A tie has no majority to be an outlier of: "2 nodes, 2 outliers" would say each is odd.
        ties = [d for d in self.differences if d.basis == "tie"]
        odd = sorted({m for d in self.differences if d.basis != "tie" for m in d.outliers})
        if odd or not ties:
            parts.append(f"{len(odd)} outlier{'s' if len(odd) != 1 else ''}" + (f" ({fold(odd)})" if odd else ""))
        if ties:
            labels = list(dict.fromkeys(d.rule.label for d in ties))
            shown = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
            parts.append(f"no majority for {shown}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The cluster part of the JSON document (docs/report.schema.json: `cluster`, `nodes`)."""
        return {
            "cluster": {
                "summary": self.summary,
                "nodes": len(self.nodes) + len(self.missing),
                "answered": len(self.nodes),
                "outliers": fold(self.outliers),
                "outlier_count": len(self.outliers),
                "missing": {m.node: m.reason for m in self.missing},
                "differences": [_diff_dict(d, f) for d, f in zip(self.differences, self.findings)],
            },
            "nodes": self.per_node,
        }


def _diff_dict(diff: engine.Difference, finding: Finding) -> dict[str, Any]:
    return {"fact": diff.key, "label": diff.rule.label, "status": diff.status.value, "basis": diff.basis,
            "reference": finding.evidence["reference"], "outliers": finding.evidence["outliers"],
            "groups": finding.evidence["groups"], "summary": finding.summary, "fix": finding.fix}


# Nodes that are containers or namespaces on one machine share its kernel (boot id) and often
# its /etc/machine-id. That is harmless while NCCL can tell them apart: its host hash (hostname +
# boot id, or NCCL_HOSTID) differs. Then a shared boot or machine id is no difference; the
# host-identity run's OK line names the nodes that share a kernel (crosscheck/identity.py).
_SHARED_BY_ONE_MACHINE = ("host.boot_id", "host.machine_id")


def _same_machine(diff: engine.Difference, members: Mapping[str, Mapping[str, Any]]) -> bool:
    if diff.key not in _SHARED_BY_ONE_MACHINE or diff.basis != "duplicate":
        return False
    for group in diff.groups:
        for fact in ("nccl.host_hash", "host.name"):
            values = [members[m].get(fact) for m in group.members]
            if all(values):
                if len(set(map(str, values))) < len(values):
                    return False
                break
        else:
            return False
    return True


def _run_of(diff: engine.Difference) -> str:
    if diff.basis == "expected":
        return "cluster.expectations"
    if diff.key.startswith("check."):
        return "cluster.check-results"
    if diff.rule.must == DIFFER:
        return "cluster.host-identity"
    return "cluster.facts-agree"


def _status_of(diff: engine.Difference) -> engine.Difference:
    """A check failing on some nodes is as bad as the check says, not a mere difference."""
    if diff.basis != "best":
        return diff
    odd = [_STATUS_BY_NAME.get(g.value, Status.WARN) for g in diff.groups[1:]]
    status = worst(odd)
    return dataclasses.replace(diff, status=Status.FAIL if status in (Status.ERROR, Status.TIMEOUT) else status)


def build(reports: Mapping[str, Mapping[str, Any]], *, missing: Sequence[Missing] = (),
          expect: Mapping[str, Any] | None = None, rules: Sequence[Rule] = NODE_RULES,
          command: str = "compare", host: str = "", started_at: str = "", duration: float = 0.0,
          context: RunContext | None = None, by_file: Sequence[str] = ()) -> ClusterView:
    """Compare node reports: {node: report document}. A document that is not a node report
    (see check_node_report) goes to `missing` with the reason; `missing` also takes the nodes
    the caller got nothing from. `by_file` names the nodes known only by their report file
    (their reports share a hostname): no command can address them, so fixes that name them
    are printed as comments."""
    members: dict[str, dict[str, Any]] = {}
    missing = list(missing)
    for node, doc in reports.items():
        try:
            members[node] = node_facts(doc)
        except NotAReport as exc:
            missing.append(Missing(node, f"{node}: {exc}", remote.comment(f"look at {node}'s output by hand")))
    no_inventory = [n for n, doc in reports.items() if n in members and not isinstance(doc.get("inventory"), dict)]

    compared = engine.compare(members, rules, expect) if members else []
    one_machine = [d for d in compared if _same_machine(d, members)]
    diffs = [_status_of(d) for d in compared if d not in one_machine]
    findings: dict[str, list[Finding]] = {run_id: [] for run_id, _title in _RUNS}
    for m in missing:
        findings["cluster.reports"].append(Finding(m.status, m.reason, subject=m.node, fix=m.fix))
    if no_inventory:
        findings["cluster.reports"].append(Finding(
            Status.WARN, f"{fold(no_inventory)}: report has no inventory (an older distdoctor): only check results compared",
            subject=fold(no_inventory), fix=f"# upgrade distdoctor on {fold(no_inventory)}"))
    def address(fix: Fix) -> Fix:
        return dataclasses.replace(fix, by_file=[n for n in fix.nodes if n in by_file])

    diff_findings = [engine.to_finding(diff, address=address) for diff in diffs]
    diffs, diff_findings = identity.fold_into_hostname(diffs, diff_findings)
    for diff, finding in zip(diffs, diff_findings):
        findings[_run_of(diff)].append(finding)

    ok_text = {
        "cluster.reports": f"all {len(members)} nodes answered with a report",
        "cluster.host-identity": identity.one_kernel(one_machine)
        or "every node has its own hostname, boot id and NCCL host hash",
        "cluster.facts-agree": f"the {len(members)} nodes agree on every compared fact",
        "cluster.expectations": "every node matches the [expect] table" if expect else "no [expect] table given",
        "cluster.check-results": "every check ends the same on every node",
    }
    # Fewer than two reports compare nothing: no ✓ "the 0 nodes agree" when no node answered.
    alone = (f"only {next(iter(members))} answered: no other node to compare it with" if len(members) == 1
             else "no node answered with a report: nothing to compare")
    runs = []
    for run_id, title in _RUNS:
        found = findings[run_id]
        if not found and len(members) < 2 and run_id not in ("cluster.reports", "cluster.expectations"):
            found = [Finding(Status.SKIP, alone)]
        elif not found:
            status = Status.SKIP if run_id == "cluster.expectations" and not expect else Status.OK
            found = [Finding(status, ok_text[run_id])]
        runs.append(CheckRun(run_id, title, ("cluster",), worst(f.status for f in found), tuple(found), 0.0,
                             "distdoctor"))

    outliers = sorted({m for d in diffs for m in d.outliers})
    per_node: dict[str, dict[str, Any]] = {}
    odd_in: dict[str, list[str]] = {}
    for d in diffs:
        for m in d.outliers:
            odd_in.setdefault(m, []).append(d.key)
    for node, doc in reports.items():
        if node not in members:
            continue
        # Only what did not end OK: the node's own status says the rest, and 10,000 nodes times
        # every check would make the document mostly "ok".
        checks = {k[len("check."):]: v for k, v in members[node].items()
                  if k.startswith("check.") and v != _OK}
        per_node[node] = {"host": str(doc.get("host", node)), "status": str(doc.get("status", "ok")),
                          "outlier_in": odd_in.get(node, []), "checks": checks}
    for m in missing:
        per_node[m.node] = {"host": m.node, "status": "missing", "outlier_in": [], "checks": {},
                            "problem": m.reason}

    context = context or RunContext("none", f"{len(members) + len(missing)} node reports")
    report = Report(__version__, host, context, started_at or "1970-01-01T00:00:00.000Z", duration,
                    tuple(runs), command)
    return ClusterView(report, sorted(members), diffs, missing, outliers, per_node, diff_findings)


# --- one report per job -------------------------------------------------------------------------

def run_from_dict(run: Mapping[str, Any]) -> CheckRun:
    """A check run as a node report wrote it, back into the model (for the job's report)."""
    findings = tuple(Finding(_STATUS_BY_NAME.get(f.get("status"), Status.ERROR), str(f.get("summary") or "-"),
                             str(f.get("subject", "")), str(f.get("explanation", "")), str(f.get("fix", "")),
                             dict(f.get("evidence") or {}))
                     for f in run.get("findings", []) if isinstance(f, dict))
    status = _STATUS_BY_NAME.get(run.get("status"), Status.ERROR)
    return CheckRun(str(run.get("id")), str(run.get("title", run.get("id"))), tuple(run.get("tags", ())), status,
                    findings or (Finding(status, "-"),), float(run.get("duration_s", 0.0)), str(run.get("source", "")))


def job_view(reports: Mapping[str, Mapping[str, Any]], leader: str, *, missing: Sequence[Missing] = (),
             expect: Mapping[str, Any] | None = None, host: str = "", started_at: str = "",
             duration: float = 0.0, context: RunContext | None = None) -> ClusterView:
    """The report of a whole job: each check once where every node agrees (the leader's run, or
    the one node where it did not skip), the cluster comparison, and per node only the checks
    that ended differently there (`nodes.<name>.differing_checks`)."""
    # slurmd starts a Slurm job's tasks (mpirun's daemons too): they inherit its limits
    rules = under_slurm(NODE_RULES) if context is not None and context.job_id else NODE_RULES
    view = build(reports, missing=missing, expect=expect, rules=rules, command="check", host=host,
                 started_at=started_at, duration=duration, context=context)
    order: list[str] = []
    by_check: dict[str, dict[str, Mapping[str, Any]]] = {}
    for node in [leader] + [n for n in reports if n != leader]:
        doc = reports.get(node)
        if not isinstance(doc, Mapping) or node not in view.nodes:
            continue
        for run in doc.get("checks", []):
            if isinstance(run, Mapping) and isinstance(run.get("id"), str):
                if run["id"] not in by_check:
                    order.append(run["id"])
                by_check.setdefault(run["id"], {})[node] = run
    common: list[CheckRun] = []
    for check_id in order:
        runs = by_check[check_id]
        results = {r.get("status") for r in runs.values() if r.get("status") != Status.SKIP.value}
        if len(results) <= 1:
            shown = next((r for r in runs.values() if r.get("status") != Status.SKIP.value), runs.get(leader)) \
                or next(iter(runs.values()))
            common.append(run_from_dict(shown))
            continue
        for node, run in runs.items():
            view.per_node[node].setdefault("differing_checks", []).append(dict(run))
    view.report = dataclasses.replace(view.report, runs=tuple(common) + view.report.runs)
    return view
