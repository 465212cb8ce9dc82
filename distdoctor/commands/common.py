"""What every command shares: the usage error, output options, config loading, check selection,
rendering and writing the report."""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
from typing import Sequence

from distdoctor import __version__, limits, output
from distdoctor import config as config_mod
from distdoctor.model import CheckInfo, Report, exit_code


class UsageError(Exception):
    pass


def add_output_arguments(parser: argparse.ArgumentParser, formats: Sequence[str] = ("console", "json", "prometheus"),
                         format_help: str | None = None, what: str = "the report") -> None:
    """--format, its --json alias and -o: declared once for every command that writes a report."""
    parser.add_argument("--format", choices=tuple(formats), default=formats[0], help=format_help)
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    parser.add_argument("-o", "--output", metavar="FILE", help=f"write {what} here (atomically) instead of stdout")


def add_cluster_output(parser: argparse.ArgumentParser) -> None:
    """Options every command that compares node reports shares (compare, fleet)."""
    add_output_arguments(parser)
    parser.add_argument("--fail-on", choices=("warn", "fail"), default=None,
                        help="lowest status that makes the exit code non-zero (default: fail)")
    parser.add_argument("--expect", action="append", default=[], metavar="FACT=VALUE",
                        help="pin an inventory fact (`gpu.count=8`, `nccl.version=>=2.18`); wins over the majority")
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="config file (TOML); its [expect] table pins facts like --expect")
    parser.add_argument("-v", "--verbose", action="store_true", help="show OK findings and every odd node")


def expectations(args: argparse.Namespace, config) -> dict:
    """[expect] from the config files, then --expect on top (the command line wins)."""
    table = dict(getattr(config, "expect", None) or {})
    for item in args.expect:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--expect {item!r}: write FACT=VALUE, e.g. gpu.count=8")
        value = value.strip()
        try:
            limits.expected_value(value, f"--expect {key.strip()}")
        except limits.RangeError as exc:
            raise UsageError(str(exc)) from None
        table[key.strip()] = int(value) if value.isascii() and value.isdigit() else value
    return table


def write_cluster(view, args: argparse.Namespace, out: output.ReservedStdout, fail_on: str | None = None) -> int:
    """Write a crosscheck view in the chosen format; the exit code like check's."""
    text = render(view, args.format, args.verbose, bool(args.output), stream=None if args.output else out.text())
    if text:
        write_output(text, args.output, out.fd)
    return exit_code(view.report.runs, args.fail_on or fail_on or "fail")


def cluster_context(n: int):
    from distdoctor.model import RunContext

    return RunContext("none", f"comparing {n} node report{'s' if n != 1 else ''}")


def split(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _matches(info: CheckInfo, pattern: str) -> bool:
    return (fnmatch.fnmatchcase(info.id, pattern) or info.area == pattern or pattern in info.tags)


def select(checks: list[CheckInfo], only: list[str], skip: list[str]) -> list[CheckInfo]:
    chosen = [c for c in checks if not only or any(_matches(c, p) for p in only)]
    return [c for c in chosen if not any(_matches(c, p) for p in skip)]


def _config_text(host, path: str) -> str | None:
    try:
        text = host.read_text(path, max_bytes=config_mod.MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    if text is not None and len(text.encode("utf-8", "surrogateescape")) > config_mod.MAX_BYTES:
        raise UsageError(f"{path}: config file is larger than {config_mod.MAX_BYTES // (1024 * 1024)} MiB; "
                         f"refused rather than read in part")
    return text


def load_config(paths: list[str], host) -> config_mod.Config:
    pairs = []
    for path in config_mod.default_files(host.env, host.home()):
        pairs.append((path, _config_text(host, path)))
    for path in paths:
        text = _config_text(host, path)
        if text is None:
            raise UsageError(f"{path}: config file does not exist")
        pairs.append((path, text))
    try:
        return config_mod.load(pairs)
    except config_mod.ConfigError as exc:
        raise UsageError(str(exc)) from None


def write_output(text: str, path: str | None, stdout_fd: int | None = 1) -> None:
    """The report to stdout or to what -o names (see distdoctor/output.py)."""
    output.write_report(text, path, stdout_fd)


def render(subject, fmt: str, verbose: bool, to_file: bool, inventory: dict | None = None, stream=None) -> str:
    """The one place --format is dispatched. subject is a Report, or a crosscheck view (its
    .report and .to_dict()). A console report for a terminal is printed to stream (the reserved
    stdout) instead, and "" returned."""
    view = None if isinstance(subject, Report) else subject
    if fmt == "json":
        from distdoctor.render import json as json_render

        if view is not None:
            return json_render.render(view.report, view.to_dict())
        return json_render.render(subject, {"inventory": inventory} if inventory is not None else None)
    if fmt == "prometheus":
        from distdoctor.render import prometheus

        return prometheus.render_cluster(view) if view is not None else prometheus.render(subject)
    draw = None
    if view is not None:
        from distdoctor.render import console as console_render

        draw = console_render.render_cluster
    return console_text(subject, verbose, to_file, draw, stream)


def codes_allowed_on_stderr() -> bool:
    from distdoctor.render import console as console_render

    return console_render.choose(True, None, os.environ)[1]


def console_text(subject, verbose: bool, to_file: bool, draw=None, stream=None) -> str:
    """The console view as text, for stream (the reserved stdout: its terminal decides width
    and colour) or, with to_file, for -o FILE."""
    from distdoctor.render import console as console_render

    return console_render.text_for(subject, verbose, stream or sys.stdout, os.environ, to_file, draw)


# Runs the CLI itself adds to every report (broken packs, config problems): selecting them is
# not a typo, though they are reported whenever they have something to say.
CORE_RUNS = ("core.check-packs", "core.config")


def _unknown_selectors(checks: list[CheckInfo], patterns: list[str]) -> list[str]:
    def known(pattern: str) -> bool:
        return (any(_matches(c, pattern) for c in checks) or pattern == "core"
                or any(fnmatch.fnmatchcase(core, pattern) for core in CORE_RUNS))
    return [p for p in patterns if not known(p)]


def validate_selection(checks: list[CheckInfo], args: argparse.Namespace, incomplete: bool = False) -> None:
    """--only/--skip name what exists: a typo must not silently run everything (or nothing).
    incomplete: a pack did not load (it timed out under a tiny --timeout, or failed), so a name
    missing from `checks` may be one of its checks, not a typo; core.check-packs says why."""
    import difflib

    names = sorted({c.id for c in checks} | {c.area for c in checks} | {t for c in checks for t in c.tags}
                   | set(CORE_RUNS))
    for option in ("only", "skip"):
        given = getattr(args, option)
        patterns = split(given)
        if given and not patterns:
            raise UsageError(f"--{option} {','.join(given)!r} names no check, area or tag")
        unknown = _unknown_selectors(checks, patterns)
        if unknown and not incomplete:
            hints = []
            for pattern in unknown:
                close = difflib.get_close_matches(pattern, names, n=3, cutoff=0.6)
                hints.append(f"{pattern!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
            raise UsageError(f"--{option}: no check, area or tag matches {'; '.join(hints)} "
                             f"(see `distdoctor list`)")


def tool_cache(host):
    """The cache of tool answers and entry points under $XDG_CACHE_HOME/distdoctor (toolcache.py)."""
    from distdoctor import toolcache

    return toolcache.ToolCache(toolcache.directory_for(host.env, host.home()), __version__)


