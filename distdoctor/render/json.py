"""The JSON report: one document per run, described by docs/report.schema.json."""

from __future__ import annotations

import json
import math
from typing import Any

from distdoctor.model import CheckRun, Report, Status

SCHEMA_VERSION = "1.2"


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


_MAX_DEPTH = 64


def json_safe(value: Any, depth: int = 0) -> Any:
    """value as strict JSON can carry it: NaN and infinities (which json.dumps would print as
    bare NaN/Infinity, rejected by jq, Go and browsers) become the strings "nan", "inf", "-inf";
    tuples and sets become lists; other objects and anything nested deeper than _MAX_DEPTH
    become their text. Evidence comes from third-party checks, so nothing is assumed."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else ("nan" if value != value else "inf" if value > 0 else "-inf")
    if depth >= _MAX_DEPTH:
        return "<nested too deeply>"
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [json_safe(v, depth + 1) for v in items]
    try:
        return str(value)
    except RecursionError:
        return "<nested too deeply>"


def render(report: Report, extra: dict[str, Any] | None = None) -> str:
    doc = json_safe(report_to_dict(report, extra))
    return json.dumps(doc, indent=2, sort_keys=False, allow_nan=False) + "\n"
