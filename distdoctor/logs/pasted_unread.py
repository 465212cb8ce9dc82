"""Tool output that distdoctor does not read (ucx_info, fi_info, show_gids, ethtool, ...),
recognised by the line it starts with (distdoctor/logs/unread_tools.toml) so that a paste of it
is said seen and not read, its state unknown, instead of passing in silence. Never judged.
pasted.py finds the sections and calls in here."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from distdoctor.model import CheckRun, Finding, Status

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

KINDS = ("unread",)


@dataclass(frozen=True)
class UnreadTool:
    tool: str
    start: re.Pattern
    within: re.Pattern
    read: str


@functools.lru_cache(maxsize=1)
def catalogue() -> tuple[UnreadTool, ...]:
    data = tomllib.loads(resources.files("distdoctor.logs").joinpath("unread_tools.toml").read_text(encoding="utf-8"))
    return tuple(UnreadTool(t["tool"], re.compile(t["start"]), re.compile(t["within"]), t["read"])
                 for t in data["tool"])


def _which(line: str) -> UnreadTool | None:
    body = line.strip()
    return next((t for t in catalogue() if t.start.match(body)), None)


def detect(lines: list[str], i: int) -> tuple[str, int] | None:
    tool = _which(lines[i])
    if tool is None:
        return None
    # the paste's own indentation (a quote, a list item) is not the tool's: taken off every line
    indent = len(lines[i]) - len(lines[i].lstrip())
    end = i + 1
    while end < len(lines) and end - i < 20000 and lines[end].strip() and \
            tool.within.match(lines[end][indent:].rstrip() if lines[end][:indent].isspace() or not indent
                              else lines[end].strip()):
        end += 1
    return "unread", end


def runs(_kind: str, text: str, where: str, _env: dict[str, str]) -> list[CheckRun]:
    tool = _which(next((line for line in text.splitlines() if line.strip()), ""))
    if tool is None:
        return []
    summary = (f"pasted `{tool.tool}` output: distdoctor does not read this tool's output, so what it shows is "
               "not judged (unknown)")
    return [CheckRun("log.pasted-output", f"Tool output pasted into the log (at {where})", ("log", "pasted"),
                     Status.OK, (Finding(Status.OK, summary, subject=where, evidence={"tool": tool.tool},
                                         explanation=f"What would show it in a form distdoctor reads: {tool.read}."),),
                     0.0, f"pasted at {where}")]
