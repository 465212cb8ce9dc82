"""The JSON report: one document per run, described by docs/report.schema.json."""

from __future__ import annotations

import json
from typing import Any

from distdoctor.model import CheckRun, Report, Status

SCHEMA_VERSION = "1.1"


def run_to_dict(run: CheckRun) -> dict[str, Any]:
    return {
        "id": run.id,
        "area": run.area,
        "title": run.title,
        "tags": list(run.tags),
        "status": run.status.value,
        "duration_s": round(run.duration, 4),
        "source": run.source,
        "findings": [f.to_dict() for f in run.findings],
    }


def report_to_dict(report: Report, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "distdoctor", "version": report.tool_version},
        "command": report.command,
        "host": report.host,
        "context": report.context.to_dict(),
        "started_at": report.started_at,
        "duration_s": round(report.duration, 4),
        "status": report.status.value if report.runs else Status.OK.value,
        "summary": report.counts(),
        "checks": [run_to_dict(r) for r in report.runs],
    }
    if extra:
        doc.update(extra)
    return doc


def render(report: Report, extra: dict[str, Any] | None = None) -> str:
    return json.dumps(report_to_dict(report, extra), indent=2, sort_keys=False) + "\n"
