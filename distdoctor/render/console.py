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
from typing import IO, Any, Callable, Mapping, Sequence


from distdoctor.text import fold, one_line
from distdoctor.text import plural
from distdoctor.model import CheckRun, Finding, Report, Status
from distdoctor.render import layout

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
_TRAILING = re.compile(r"(?<![ \t])[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.M)


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


Span = tuple[str, str]  # (text, rich style name)


class Page:
    """Where the console view is drawn: lines of styled spans, blank lines and tables, written
    to file at width. Without escape codes it lays the text out itself (render/layout.py);
    with them, or for a block that layout declines, it draws through rich, imported then."""

    def __init__(self, file: IO[str], width: int, color: bool, use_rich: bool = False):
        self.file = file
        self.width = width
        self.color = color
        self.use_rich = use_rich or color  # use_rich without color: for the test that both agree
        self._console: Any = None
        encoding = (getattr(file, "encoding", None) or "utf-8").lower()
        self.ascii = "utf" not in encoding

    def glyph(self, status: Status) -> Span:
        symbol, style = GLYPHS[status]
        return (ASCII_GLYPHS[status] if self.ascii else symbol), style

    def blank(self) -> None:
        self.file.write("\n")

    def line(self, spans: Sequence[Span | str], indent: int = 0, wrap: bool = True) -> None:
        """One logical line: wrapped at the width with its continuation lines indented as its
        first (indent), or never wrapped (wrap=False: a fix must paste as one command)."""
        parts = layout.expand_tabs([(p, "") if isinstance(p, str) else (p[0], p[1]) for p in spans])
        text = "".join(t for t, _style in parts)
        if not wrap and "\n" in text:
            for one in _split_lines(parts):  # each line unwrapped and indented alike
                self.line(one, indent, wrap=False)
            return
        if self.use_rich or not layout.plain_ok(text):
            self._rich_line(parts, indent, wrap)
            return
        if wrap and indent and not text.replace("\n", ""):
            return  # rich draws an indented block of no width as nothing at all; so do we
        lines = layout.wrap(text, self.width - indent) if wrap else text.split("\n")
        self.file.write("".join(" " * indent + piece + "\n" for piece in lines))

    def hanging(self, spans: Sequence[Span | str], indent: int, hang: int, tail: str = "") -> None:
        """One logical line wrapped with its continuation lines `hang` further in than the first
        (a heading's wrapped words stay under its text, not at the margin), and `tail` (a check
        id) never alone on the last line: the word before it comes along."""
        parts = layout.expand_tabs([(p, "") if isinstance(p, str) else (p[0], p[1]) for p in spans])
        text = "".join(t for t, _style in parts)
        first, rest = self.width - indent, self.width - indent - hang
        if "\n" in text or not layout.plain_ok(text) or rest < 20 or len(text) <= first:
            self.line(spans, indent)
            return
        breaks = layout.breaks(text, first)[:1]
        if breaks:
            breaks += [breaks[0] + b for b in layout.breaks(text[breaks[0]:], rest)]
        if tail and len(breaks) >= 1 and text[breaks[-1]:].strip() == tail.strip():
            # The id alone on the last line reads as an item of its own: take the word before it.
            previous = breaks[-2] if len(breaks) > 1 else 0
            end = breaks[-1]
            while end > previous and text[end - 1] == " ":
                end -= 1
            start = text.rfind(" ", previous, end) + 1
            if start > previous and len(text) - start <= rest:
                breaks[-1] = start
        out: list[Span] = []
        cuts = set(breaks)
        position = 0
        for piece, style in parts:
            chunk = ""
            for char in piece:
                if position in cuts:
                    # The spaces before a break end the line; none is left at its end.
                    chunk = chunk.rstrip(" ")
                    if not chunk:
                        out = [(t.rstrip(" ") if i == len(out) - 1 else t, st) for i, (t, st) in enumerate(out)]
                    chunk += "\n" + " " * hang + char
                else:
                    chunk += char
                position += 1
            out.append((chunk, style))
        self.line(out, indent, wrap=False)

    def table(self, columns: list, rows: list, indent: int = 0) -> None:
        drawn = None if self.use_rich else layout.table([str(c) for c in columns], [[str(c) for c in r] for r in rows],
                                                        self.width - indent)
        if drawn is None:
            self._rich_table(columns, rows, indent)
            return
        self.file.write("".join(" " * indent + row + "\n" for row in drawn))

    # --- rich, imported only when drawn with -------------------------------------------------

    def _rich(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.file, width=self.width, force_terminal=self.color,
                                    color_system="standard" if self.color else None, no_color=not self.color,
                                    highlight=False, soft_wrap=False, emoji=False, legacy_windows=False)
        return self._console

    def _rich_line(self, parts: list[Span], indent: int, wrap: bool) -> None:
        from rich.padding import Padding
        from rich.text import Text

        console = self._rich()
        text = Text()
        for part, style in parts:
            text.append(part, style=style or None)
        if not wrap:
            console.print(Text(" " * indent) + text if indent else text, soft_wrap=True)
        elif indent:
            # Wrapped lines keep the indent, so the report still reads as a tree at 80 columns.
            console.print(Padding(text, (0, 0, 0, indent), expand=False))
        else:
            console.print(text, overflow="fold")

    def _rich_table(self, columns: list, rows: list, indent: int) -> None:
        from rich.padding import Padding
        from rich.table import Table
        from rich.text import Text

        table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
        for column in columns:
            # Text, not str: a cell such as "[bold]" is data, never markup.
            table.add_column(Text(layout.sanitize(str(column))), overflow="fold")
        for row in rows:
            table.add_row(*(Text(layout.sanitize(str(cell))) for cell in row))
        console = self._rich()
        console.print(Padding(table, (0, 0, 0, indent), expand=False) if indent else table)


def _comment_lines(line: str, width: int) -> list[str]:
    """A `# comment` line longer than width as several comment lines broken at spaces (never
    mid-word); anything else, a command above all, as it is."""
    body = line.lstrip()
    if not body.startswith("#") or len(line) <= width or width < 30 or not layout.plain_ok(line):
        return [line]
    lead = line[:len(line) - len(body)]
    text = body.lstrip("#").strip()
    pieces = layout.wrap(text, width - len(lead) - 2)
    return [f"{lead}# {piece.rstrip()}" for piece in pieces if piece.strip()] or [line]


def _split_lines(parts: list[Span]) -> list[list[Span]]:
    lines: list[list[Span]] = [[]]
    for text, style in parts:
        for index, piece in enumerate(text.split("\n")):
            if index:
                lines.append([])
            lines[-1].append((piece, style))
    return lines


def to_text(subject, width: int, color: bool, verbose: bool = False, draw: Callable | None = None,
            encoding: str = "utf-8", use_rich: bool = False) -> str:
    """What `draw` (render by default) prints for subject, as text: with escape codes only when
    color is on, and never a trailing space."""
    buf = _Buffer(encoding)
    (draw or render)(subject, Page(buf, width, color, use_rich), verbose)
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


def make_console(file: IO[str] | None = None, width: int | None = None, color: bool | None = None) -> Page:
    """A Page on file (stdout by default), at width (the rule's default), with escape codes
    only when color is true."""
    import sys

    return Page(file if file is not None else sys.stdout, width or DEFAULT_WIDTH, bool(color))


def _finding_lines(page: Page, run: CheckRun, verbose: bool) -> None:
    findings: list[Finding] = list(run.findings)
    shown = findings if verbose else [f for f in findings if f.status is not Status.OK] or findings[:1]
    hidden = len(findings) - len(shown)
    for finding in shown:
        line: list[Span] = []
        if len(findings) > 1:
            line += [page.glyph(finding.status), (" ", "")]
        line.append((finding.summary, "dim" if finding.status in (Status.OK, Status.SKIP) else ""))
        if finding.action and finding.status.severity >= Status.WARN.severity:
            line.append((f"  [{finding.action}]", "dim"))
        page.line(line, indent=4)
        if verbose and finding.explanation:
            page.line([(finding.explanation, "dim")], indent=6)
        table = finding.evidence.get("table") if isinstance(finding.evidence, dict) else None
        if isinstance(table, dict) and isinstance(table.get("columns"), list) and isinstance(table.get("rows"), list) \
                and all(isinstance(row, (list, tuple)) for row in table["rows"]):
            page.table(table["columns"], table["rows"], indent=4)
    if hidden:
        page.line([(f"(+{hidden} OK; -v shows them)", "dim")], indent=4)


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
    # Worst first (a FAIL is not read after five WARNs); the report's order within a severity.
    return sorted(items.values(), key=lambda same: -max(f.status.severity for _r, f in same))


def render(report: Report, page: Page, verbose: bool = False) -> None:
    page.line([(f"distdoctor {report.tool_version}", "bold"),
               f" · {report.command} · host {report.host} · {report.context.description}"])
    if report.context.rank is not None:
        page.line([(f"rank {report.context.rank} of {report.context.world_size}, local rank "
                    f"{report.context.local_rank}", "dim")])
    runs = sorted(report.runs, key=lambda r: r.area)
    for area, grouped in groupby(runs, key=lambda r: r.area):
        page.blank()
        page.line([(area, "bold underline")])
        group = list(grouped)
        folded = [] if verbose else _fold_skips(group)
        hidden = {r.id for _reason, skipped in folded for r in skipped}
        for run in group:
            if run.id in hidden:
                continue
            page.hanging([page.glyph(run.status), " ", (run.title, "bold" if run.status.severity >= Status.WARN.severity else ""),
                          (f"  [{run.id}]", "dim")], indent=2, hang=2, tail=f"[{run.id}]")
            _finding_lines(page, run, verbose)
        # After the checks that ran: "skipped: an earlier step failed" reads after that step.
        for reason, skipped in folded:
            page.line([page.glyph(Status.SKIP), (f" {plural(len(skipped), 'check')} skipped: {reason}", "dim"),
                       (f"  [{', '.join(r.id for r in skipped)}]", "dim")], indent=2)

    fixes = fix_items(report)
    if fixes:
        page.blank()
        page.line([("How to fix", "bold underline")])
        printed: dict[str, int] = {}  # command line -> the item that printed it first
        for number, same in enumerate(fixes, 1):
            run, finding = same[0]
            page.hanging([f"{number}. ", page.glyph(finding.status), (f" {finding.summary}", "bold"),
                          (f"  [{run.id}]", "dim")], indent=0, hang=3, tail=f"[{run.id}]")
            if len(same) > 1:
                subjects = fold([f.subject for _r, f in same if f.subject])
                ids = ", ".join(dict.fromkeys(r.id for r, _f in same))
                page.line([(f"the same fix for {len(same)} findings" + (f": {subjects}" if subjects else "")
                            + (f"  [{ids}]" if ids != run.id else ""), "dim")], indent=3)
            if finding.explanation:
                page.line([finding.explanation], indent=3)
            if finding.action:
                page.line([("action: ", "dim"), (finding.action, "bold")], indent=3)
            if finding.fix:
                for fix_line in finding.fix.splitlines():
                    command = fix_line.strip()
                    if command and not command.startswith("#") and printed.setdefault(command, number) != number:
                        # Two causes, one command to confirm them: run it once.
                        fix_line = f"# as in {printed[command]}. above: {command}"
                    # A command is never wrapped by us: broken over two lines it pastes as two
                    # commands (the terminal may wrap it visually). A long comment is wrapped at
                    # words into comment lines, each still a comment when pasted.
                    for piece in _comment_lines(fix_line, page.width - 5):
                        page.line([("   $ ", "dim"), (piece, "cyan")], wrap=False)

    counts = report.counts()
    parts = [f"{counts[s.value]} {s.value}" for s in Status if counts[s.value] or s in (Status.OK, Status.WARN, Status.FAIL)]
    page.blank()
    page.line([(f"{plural(len(report.runs), 'check')}: ", "bold"), " · ".join(parts) + f" in {report.duration:.2f} s"])


def render_cluster(view, page: Page, verbose: bool = False) -> None:
    """A crosscheck.nodes.ClusterView: the summary line, the comparison as a report, then one section per
    odd node naming what it differs in (the nodes that agree need no section)."""
    page.line([(view.summary, "bold")])
    render(view.report, page, verbose)
    odd = [(node, info) for node, info in view.per_node.items() if info.get("outlier_in") or info.get("differing_checks")]
    if not odd:
        return
    page.blank()
    page.line([("Odd nodes", "bold underline")])
    # Nodes odd in the same facts (and with no check results of their own to show) are one line:
    # 1,000 nodes sharing one difference are one host list, not 1,000 lines.
    folded: dict[tuple[str, ...], list[str]] = {}
    for node, info in odd:
        if not info.get("differing_checks"):
            folded.setdefault(tuple(info.get("outlier_in") or ()), []).append(node)
    groups = [([node], info) for node, info in odd if info.get("differing_checks")] + \
        [(nodes, {"outlier_in": list(facts)}) for facts, nodes in folded.items()]
    shown = groups if verbose else groups[:50]
    for nodes, info in shown:
        # Indented as blocks, so a long list of facts wraps under its node, not at column 0.
        page.line([(f"{one_line(fold(nodes))}: ", "bold"),
                   ", ".join(info.get("outlier_in") or ["checks ended differently"])], indent=2)
        # A job's report: what this node's own checks said where nodes differ.
        for run in info.get("differing_checks", []):
            status = Status(run.get("status", "error")) if run.get("status") in {s.value for s in Status} else Status.ERROR
            page.line([page.glyph(status), f" {run.get('title', run.get('id'))}  [{run.get('id')}]"], indent=4)
            for finding in run.get("findings", []):
                if verbose or finding.get("status") != Status.OK.value:
                    page.line([str(finding.get("summary", ""))], indent=6)
    if len(shown) < len(groups):
        page.line([(f"(+{len(groups) - len(shown)} more; -v shows them)", "dim")], indent=2)


__all__ = ["render", "render_cluster", "make_console", "Page"]
