"""The console view: findings grouped by area, then what to paste to fix them.

One rule for every command and every destination (stdout or -o FILE), see `choose`:
- width: $COLUMNS when set, else the terminal's width on a terminal, else 100;
- escape codes: none at all unless the output is a terminal, NO_COLOR is unset, and the
  process is not a rank under a launcher (mpirun and srun --pty give ranks a pty, and their
  logs then fill with codes); FORCE_COLOR turns them on anywhere (not for -o FILE).
Lines never end in spaces. Laid out to stay readable at 80 columns. A finding whose evidence holds a `table`
({"columns": [...], "rows": [[...], ...]}) is drawn as a table under its check.
"""

from __future__ import annotations

import io
import re
from itertools import groupby
from typing import IO, Callable, Mapping

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from distdoctor.compare import fold
from distdoctor.grammar import plural
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


DEFAULT_WIDTH = 100
# A rank of a launched job: its stdout is the launcher's log, even when that is a pty.
_LAUNCHER_VARS = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "PMI_RANK", "PMIX_RANK",
                  "LOCAL_RANK")
_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.M)


def choose(is_tty: bool, terminal_width: int | None, env: Mapping[str, str]) -> tuple[int, bool]:
    """(width, escape codes on) by the rule in this module's docstring."""
    columns = env.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) >= 20:
        width = int(columns)
    elif is_tty and terminal_width:
        width = terminal_width
    else:
        width = DEFAULT_WIDTH
    if env.get("FORCE_COLOR"):
        return width, True
    if env.get("NO_COLOR") or any(env.get(name) for name in _LAUNCHER_VARS):
        return width, False
    return width, is_tty


class _Buffer(io.StringIO):
    def __init__(self, encoding: str):
        super().__init__()
        self._encoding = encoding

    @property
    def encoding(self) -> str:  # type: ignore[override]  # the glyphs follow the destination's encoding
        return self._encoding


def to_text(subject, width: int, color: bool, verbose: bool = False, draw: Callable | None = None,
            encoding: str = "utf-8") -> str:
    """What `draw` (render by default) prints for subject, as text: with escape codes only when
    color is on, and never a trailing space."""
    buf = _Buffer(encoding)
    console = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None,
                      no_color=not color, highlight=False, soft_wrap=False, emoji=False, legacy_windows=False)
    (draw or render)(subject, console, verbose)
    return _TRAILING.sub(r"\1", buf.getvalue())


def text_for(subject, verbose: bool, stream: IO[str], env: Mapping[str, str], to_file: bool = False,
             draw: Callable | None = None) -> str:
    """The console view for stdout (stream) or for -o FILE, by the rule in the docstring: the
    same width for both; escape codes only on a terminal, never in a file."""
    import shutil

    is_tty = not to_file and stream.isatty()
    width, color = choose(is_tty, shutil.get_terminal_size().columns if is_tty else None, env)
    encoding = "utf-8" if to_file else (getattr(stream, "encoding", None) or "utf-8")
    return to_text(subject, width, color and not to_file, verbose, draw, encoding)


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


def fix_items(report: Report) -> list[list[tuple[CheckRun, Finding]]]:
    """The "How to fix" items: findings at WARN or worse with a fix or an explanation, those
    with the same fix and explanation as one item (30 nodes short of one limit need one fix,
    printed once, with the nodes folded)."""
    items: dict[object, list[tuple[CheckRun, Finding]]] = {}
    for run in report.runs:
        for finding in run.findings:
            if finding.status.severity >= Status.WARN.severity and (finding.fix or finding.explanation):
                key = (finding.fix, finding.explanation) if finding.fix else id(finding)
                items.setdefault(key, []).append((run, finding))
    return list(items.values())


def render(report: Report, console: Console, verbose: bool = False) -> None:
    header = Text()
    header.append(f"distdoctor {report.tool_version}", style="bold")
    header.append(f" · {report.command} · host {report.host} · {report.context.description}")
    console.print(header, overflow="fold")
    if report.context.rank is not None:
        console.print(Text(f"rank {report.context.rank} of {report.context.world_size}, local rank "
                           f"{report.context.local_rank}", style="dim"))
    runs = sorted(report.runs, key=lambda r: r.area)
    for area, grouped in groupby(runs, key=lambda r: r.area):
        console.print()
        console.print(Text(area, style="bold underline"))
        group = list(grouped)
        folded = [] if verbose else _fold_skips(group)
        for reason, skipped in folded:
            line = Text()
            line.append_text(_glyph(console, Status.SKIP))
            line.append(f" {plural(len(skipped), 'check')} skipped: {reason}", style="dim")
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

    fixes = fix_items(report)
    if fixes:
        console.print()
        console.print(Text("How to fix", style="bold underline"))
        for number, same in enumerate(fixes, 1):
            run, finding = same[0]
            title = Text(f"{number}. ")
            title.append_text(_glyph(console, finding.status))
            title.append(f" {finding.summary}", style="bold")
            title.append(f"  [{run.id}]", style="dim")
            console.print(title, overflow="fold")
            if len(same) > 1:
                subjects = fold([f.subject for _r, f in same if f.subject])
                ids = ", ".join(dict.fromkeys(r.id for r, _f in same))
                console.print(Padding(Text(f"the same fix for {len(same)} findings" + (f": {subjects}" if subjects else "")
                                           + (f"  [{ids}]" if ids != run.id else ""), style="dim"),
                                      (0, 0, 0, 3), expand=False))
            if finding.explanation:
                console.print(Padding(Text(finding.explanation), (0, 0, 0, 3), expand=False))
            if finding.fix:
                for fix_line in finding.fix.splitlines():
                    # Never wrapped by us: a fix broken over two lines pastes as two commands
                    # (the tail of a comment would run). The terminal may wrap it visually.
                    console.print(Text("   $ ", style="dim") + Text(fix_line, style="cyan"), soft_wrap=True)

    counts = report.counts()
    summary = Text()
    summary.append(f"\n{plural(len(report.runs), 'check')}: ", style="bold")
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
