"""Prometheus text exposition for node_exporter's textfile collector."""

from __future__ import annotations

from distdoctor.model import Report, Status


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _status_series(name: str, labels: str, current: str) -> list[str]:
    """One series per status, 1 for `current` and 0 for the others: the one style every status
    metric here follows (an alert is `name{status="fail"} == 1`, and a status that went away reads
    0 instead of vanishing)."""
    return [f'{name}{{{labels},status="{status.value}"}} {1 if status.value == current else 0}' for status in Status]


def render(report: Report) -> str:
    from distdoctor.render.json import SCHEMA_VERSION

    host = _label(report.host)
    lines = [
        "# HELP distdoctor_build_info The distdoctor version and report schema that wrote these series (always 1).",
        "# TYPE distdoctor_build_info gauge",
        f'distdoctor_build_info{{host="{host}",version="{_label(report.tool_version)}",'
        f'schema_version="{_label(SCHEMA_VERSION)}"}} 1',
        "# HELP distdoctor_status 1 for the status the whole run ended with (its worst check), 0 for the others.",
        "# TYPE distdoctor_status gauge",
        *_status_series("distdoctor_status", f'host="{host}",command="{_label(report.command)}"', report.status.value),
        "# HELP distdoctor_check_status 1 for the status each distdoctor check ended with, 0 for the others.",
        "# TYPE distdoctor_check_status gauge",
    ]
    for run in report.runs:
        for status in Status:
            value = 1 if run.status is status else 0
            lines.append(f'distdoctor_check_status{{host="{host}",check="{_label(run.id)}",'
                         f'area="{_label(run.area)}",status="{status.value}"}} {value}')
    lines += [
        "# HELP distdoctor_check_duration_seconds How long each check took.",
        "# TYPE distdoctor_check_duration_seconds gauge",
    ]
    for run in report.runs:
        lines.append(f'distdoctor_check_duration_seconds{{host="{host}",check="{_label(run.id)}"}} {run.duration:.6f}')
    lines += [
        "# HELP distdoctor_checks Number of checks that ended with each status.",
        "# TYPE distdoctor_checks gauge",
    ]
    for status_name, count in report.counts().items():
        lines.append(f'distdoctor_checks{{host="{host}",status="{status_name}"}} {count}')
    from datetime import datetime

    started = datetime.fromisoformat(report.started_at.replace("Z", "+00:00")).timestamp()
    lines += [
        "# HELP distdoctor_run_timestamp_seconds When the run started, in seconds since the epoch.",
        "# TYPE distdoctor_run_timestamp_seconds gauge",
        f'distdoctor_run_timestamp_seconds{{host="{host}"}} {started:.3f}',
        "# HELP distdoctor_run_duration_seconds How long the whole run took.",
        "# TYPE distdoctor_run_duration_seconds gauge",
        f'distdoctor_run_duration_seconds{{host="{host}"}} {report.duration:.6f}',
    ]
    return "\n".join(lines) + "\n"


def render_health(node: str, verdict: dict) -> str:
    """What `health` decided for its node, after the checks' series."""
    host = _label(node)
    breaker = verdict.get("breaker") or {}
    lines = [
        "# HELP distdoctor_health_action 1 for what distdoctor health did with the node (drain, resume, none).",
        "# TYPE distdoctor_health_action gauge",
    ]
    for kind in ("drain", "resume", "none"):
        lines.append(f'distdoctor_health_action{{host="{host}",action="{kind}"}} {1 if verdict.get("action") == kind else 0}')
    lines += [
        "# HELP distdoctor_health_draining_checks Checks whose findings need the node out of service.",
        "# TYPE distdoctor_health_draining_checks gauge",
        f'distdoctor_health_draining_checks{{host="{host}"}} {len(verdict.get("draining_checks") or [])}',
        "# HELP distdoctor_health_state_readable 1 when the node's Slurm state could be read.",
        "# TYPE distdoctor_health_state_readable gauge",
        f'distdoctor_health_state_readable{{host="{host}"}} {0 if verdict.get("state") is None else 1}',
    ]
    if breaker:
        lines += [
            "# HELP distdoctor_health_partition_drained_share Share of the node's partitions drained by distdoctor.",
            "# TYPE distdoctor_health_partition_drained_share gauge",
            f'distdoctor_health_partition_drained_share{{host="{host}"}} {float(breaker.get("share", 0.0)):.4f}',
        ]
    return "\n".join(lines) + "\n"


def render_cluster(view) -> str:
    """A crosscheck.nodes.ClusterView: the comparison's own runs, then per node its status and one series
    per fact it is odd in, so one textfile serves a dashboard of the whole fleet."""
    lines = [render(view.report).rstrip("\n"),
             "# HELP distdoctor_node_up 1 if the node answered with a report, 0 if not.",
             "# TYPE distdoctor_node_up gauge"]
    for node, info in view.per_node.items():
        lines.append(f'distdoctor_node_up{{node="{_label(node)}"}} {0 if info["status"] == "missing" else 1}')
    lines += ["# HELP distdoctor_node_status 1 for the status the node's own report ended with, 0 for the others.",
              "# TYPE distdoctor_node_status gauge"]
    for node, info in view.per_node.items():
        if info["status"] != "missing":
            lines += _status_series("distdoctor_node_status", f'node="{_label(node)}"', str(info["status"]))
    lines += ["# HELP distdoctor_node_outlier 1 for each fact in which the node differs from the rest.",
              "# TYPE distdoctor_node_outlier gauge"]
    for node, info in view.per_node.items():
        for fact in info["outlier_in"]:
            lines.append(f'distdoctor_node_outlier{{node="{_label(node)}",fact="{_label(fact)}"}} 1')
    return "\n".join(lines) + "\n"
