"""The console view: findings grouped by area, then what to paste to fix them.

Plain when piped (rich drops styles on a non-terminal), no colour under NO_COLOR, and laid
out to stay readable at 80 columns. A finding whose evidence holds a `table`
({"columns": [...], "rows": [[...], ...]}) is drawn as a table under its check.
"""

from __future__ import annotations

from itertools import groupby
from typing import IO

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from distdoctor.model import CheckRun, Finding, Report, Status

GLYPHS = {
    Status.OK: ("✓", "green"),
    Status.WARN: ("!", "yellow"),
    Status.FAIL: ("✗", "red"),
    Status.SKIP: ("-", "dim"),
    Status.ERROR: ("E", "magenta"),
    Status.TIMEOUT: ("⏱", "magenta"),
}
ASCII_GLYPHS = {Status.OK: "ok", Status.WARN: "!!", Status.FAIL: "XX", Status.SKIP: "--",
                Status.ERROR: "EE", Status.TIMEOUT: "TO"}


def make_console(file: IO[str] | None = None, width: int | None = None, color: bool | None = None) -> Console:
    return Console(file=file, width=width, no_color=None if color is None else not color,
                   highlight=False, soft_wrap=False, emoji=False)


def _glyph(console: Console, status: Status) -> Text:
    symbol, style = GLYPHS[status]
    encoding = (getattr(console.file, "encoding", None) or "utf-8").lower()
    if "utf" not in encoding:
        symbol = ASCII_GLYPHS[status]
    return Text(symbol, style=style)


def _table(evidence_table: dict) -> Table | None:
    columns = evidence_table.get("columns")
    rows = evidence_table.get("rows")
    if not isinstance(columns, list) or not isinstance(rows, list):
        return None
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for column in columns:
        table.add_column(str(column), overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    return table


def _finding_lines(console: Console, run: CheckRun, verbose: bool) -> None:
    findings: list[Finding] = list(run.findings)
    shown = findings if verbose else [f for f in findings if f.status is not Status.OK] or findings[:1]
    hidden = len(findings) - len(shown)
    for finding in shown:
        line = Text()
        if len(findings) > 1:
            line.append_text(_glyph(console, finding.status))
            line.append(" ")
        line.append(finding.summary, style="dim" if finding.status in (Status.OK, Status.SKIP) else "")
        # Wrapped lines keep the indent, so the report still reads as a tree at 80 columns.
        console.print(Padding(line, (0, 0, 0, 4), expand=False))
        if verbose and finding.explanation:
            console.print(Padding(Text(finding.explanation, style="dim"), (0, 0, 0, 6), expand=False))
        table = finding.evidence.get("table") if isinstance(finding.evidence, dict) else None
        if isinstance(table, dict):
            drawn = _table(table)
            if drawn is not None:
                console.print(Padding(drawn, (0, 0, 0, 4), expand=False))
    if hidden:
        console.print(Padding(Text(f"(+{hidden} OK; -v shows them)", style="dim"), (0, 0, 0, 4), expand=False))


def _fold_skips(runs: list[CheckRun]) -> list[tuple[str, list[CheckRun]]]:
    """SKIP checks of one area that skipped for the same reason, as one line each: on a login
    node 'not inside a Slurm job' once, not seven times."""
    by_reason: dict[str, list[CheckRun]] = {}
    for run in runs:
        if run.status is Status.SKIP and len(run.findings) == 1:
            by_reason.setdefault(run.findings[0].summary, []).append(run)
    return [(reason, skipped) for reason, skipped in by_reason.items() if len(skipped) > 1]


def render(report: Report, console: Console, verbose: bool = False) -> None:
    header = Text()
    header.append(f"distdoctor {report.tool_version}", style="bold")
    header.append(f" · {report.command} · host {report.host} · {report.context.description}")
    console.print(header, overflow="fold")
    if report.context.rank is not None:
        console.print(Text(f"rank {report.context.rank} of {report.context.world_size}, local rank "
                           f"{report.context.local_rank}", style="dim"))
    runs = sorted(report.runs, key=lambda r: r.area)
    for area, group in groupby(runs, key=lambda r: r.area):
        console.print()
        console.print(Text(area, style="bold underline"))
        group = list(group)
        folded = [] if verbose else _fold_skips(group)
        for reason, skipped in folded:
            line = Text()
            line.append_text(_glyph(console, Status.SKIP))
            line.append(f" {len(skipped)} checks skipped: {reason}", style="dim")
            line.append(f"  [{', '.join(r.id for r in skipped)}]", style="dim")
            console.print(Padding(line, (0, 0, 0, 2), expand=False))
        hidden = {r.id for _reason, skipped in folded for r in skipped}
        for run in group:
            if run.id in hidden:
                continue
            line = Text()
            line.append_text(_glyph(console, run.status))
            line.append(" ")
            line.append(run.title, style="bold" if run.status.severity >= Status.WARN.severity else "")
            line.append(f"  [{run.id}]", style="dim")
            console.print(Padding(line, (0, 0, 0, 2), expand=False))
            _finding_lines(console, run, verbose)

    fixes = [(run, f) for run in report.runs for f in run.findings
             if f.status.severity >= Status.WARN.severity and (f.fix or f.explanation)]
    if fixes:
        console.print()
        console.print(Text("How to fix", style="bold underline"))
        for number, (run, finding) in enumerate(fixes, 1):
            title = Text(f"{number}. ")
            title.append_text(_glyph(console, finding.status))
            title.append(f" {finding.summary}", style="bold")
            title.append(f"  [{run.id}]", style="dim")
            console.print(title, overflow="fold")
            if finding.explanation:
                console.print(Padding(Text(finding.explanation), (0, 0, 0, 3), expand=False))
            if finding.fix:
                for fix_line in finding.fix.splitlines():
                    # Never wrapped by us: a fix broken over two lines pastes as two commands
                    # (the tail of a comment would run). The terminal may wrap it visually.
                    console.print(Text("   $ ", style="dim") + Text(fix_line, style="cyan"), soft_wrap=True)

    counts = report.counts()
    summary = Text()
    summary.append(f"\n{len(report.runs)} checks: ", style="bold")
    parts = [f"{counts[s.value]} {s.value}" for s in Status if counts[s.value] or s in (Status.OK, Status.WARN, Status.FAIL)]
    summary.append(" · ".join(parts))
    summary.append(f" in {report.duration:.2f} s")
    console.print(summary)


def render_cluster(view, console: Console, verbose: bool = False) -> None:
    """A cluster.ClusterView: the summary line, the comparison as a report, then one section per
    odd node naming what it differs in (the nodes that agree need no section)."""
    console.print(Text(view.summary, style="bold"), overflow="fold")
    render(view.report, console, verbose)
    odd = [(node, info) for node, info in view.per_node.items() if info.get("outlier_in") or info.get("differing_checks")]
    if not odd:
        return
    console.print()
    console.print(Text("Odd nodes", style="bold underline"))
    shown = odd if verbose else odd[:50]
    for node, info in shown:
        line = Text(f"  {node}: ", style="bold")
        line.append(", ".join(info.get("outlier_in") or ["checks ended differently"]))
        console.print(line, overflow="fold")
        # A job's report: what this node's own checks said where nodes differ.
        for run in info.get("differing_checks", []):
            line = Text("    ")
            status = Status(run.get("status", "error")) if run.get("status") in {s.value for s in Status} else Status.ERROR
            line.append_text(_glyph(console, status))
            line.append(f" {run.get('title', run.get('id'))}  [{run.get('id')}]")
            console.print(line, overflow="fold")
            for finding in run.get("findings", []):
                if verbose or finding.get("status") != Status.OK.value:
                    console.print(Padding(Text(str(finding.get("summary", ""))), (0, 0, 0, 6), expand=False))
    if len(shown) < len(odd):
        console.print(Text(f"  (+{len(odd) - len(shown)} more; -v shows them)", style="dim"))


__all__ = ["render", "render_cluster", "make_console", "escape"]
