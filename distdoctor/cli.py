"""Command line: parses arguments, wires Host -> Facts -> engine -> renderer, picks the exit code."""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import tempfile
import time
from typing import Sequence

from distdoctor import __version__
from distdoctor import config as config_mod
from distdoctor import registry as registry_mod
from distdoctor.model import (EXIT_CODES_HELP, EXIT_ERROR, EXIT_FAIL, EXIT_OK, EXIT_OUTPUT,  # noqa: F401
                              EXIT_USAGE, CheckInfo, CheckRun, Report, Status, exit_code)

class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own code (2) would collide with EXIT_ERROR
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="distdoctor", description="Diagnose distributed deep-learning clusters.",
                     epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"distdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    check = sub.add_parser("check", help="run the checks on this node", epilog=EXIT_CODES_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("--only", action="append", default=[], metavar="ID|TAG",
                       help="run only these checks (id, area, tag or glob; repeatable, comma-separated)")
    check.add_argument("--skip", action="append", default=[], metavar="ID|TAG", help="skip these checks")
    check.add_argument("--format", choices=("console", "json", "prometheus"), default="console")
    check.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    check.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically) instead of stdout")
    check.add_argument("--fail-on", choices=("warn", "fail"), default=None,
                       help="lowest status that makes the exit code non-zero (default: fail)")
    check.add_argument("--timeout", type=float, default=None, help="bound for the whole run, seconds (default 60)")
    check.add_argument("--jobs", type=int, default=None, help="checks run in parallel (default 8)")
    check.add_argument("--checks-dir", action="append", default=[], metavar="DIR",
                       help="load drop-in check files (*.py) from DIR (repeatable)")
    check.add_argument("--config", action="append", default=[], metavar="FILE", help="extra config file (TOML)")
    check.add_argument("--hosts", action="append", default=[], metavar="HOSTS",
                       help="hosts to probe: names or hostlist expressions, comma-separated")
    check.add_argument("--hostfile", metavar="FILE", help="MPI-style hostfile of hosts to probe")
    check.add_argument("-H", dest="horovod_hosts", metavar="H1:N,H2:N", help="Horovod-style host list")
    check.add_argument("--ports", default="", metavar="P1,P2", help="extra TCP ports to probe on every host")
    check.add_argument("-v", "--verbose", action="store_true", help="show OK findings and explanations")
    check.add_argument("--debug", action="store_true", help="include tracebacks of failing checks")
    check.add_argument("--probe-torch", action="store_true",
                       help="import torch in a subprocess to report its real distributed backends and NCCL (slower)")

    lst = sub.add_parser("list", help="list the available checks")
    lst.add_argument("--json", action="store_true")
    lst.add_argument("--checks-dir", action="append", default=[], metavar="DIR")

    explain = sub.add_parser("explain", help="describe one check")
    explain.add_argument("id")
    explain.add_argument("--checks-dir", action="append", default=[], metavar="DIR")

    inv = sub.add_parser("inventory", help="print this node's inventory of named facts")
    inv.add_argument("--format", choices=("text", "json"), default="text")
    inv.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    inv.add_argument("--snapshot", action="store_true",
                     help="print an [expect] table of the facts that should agree across nodes, for the config file")
    inv.add_argument("--config", action="append", default=[], metavar="FILE", help="extra config file (TOML)")
    inv.add_argument("--timeout", type=float, default=None, help="bound for the whole inventory, seconds (default 20)")

    from distdoctor import nccltest

    nccl = sub.add_parser("nccl-test", help="all_reduce smoke test across every rank of a job")
    nccltest.add_arguments(nccl)
    return parser


def _split(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _matches(info: CheckInfo, pattern: str) -> bool:
    return (fnmatch.fnmatchcase(info.id, pattern) or info.area == pattern or pattern in info.tags)


def select(checks: list[CheckInfo], only: list[str], skip: list[str]) -> list[CheckInfo]:
    chosen = [c for c in checks if not only or any(_matches(c, p) for p in only)]
    return [c for c in chosen if not any(_matches(c, p) for p in skip)]


def load_config(paths: list[str], host) -> config_mod.Config:
    pairs = []
    for path in config_mod.default_files(host.env, host.home()):
        try:
            pairs.append((path, host.read_text(path)))
        except OSError as exc:
            raise UsageError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    for path in paths:
        try:
            text = host.read_text(path)
        except OSError as exc:
            raise UsageError(f"{path}: cannot read config: {exc.strerror or exc}") from None
        if text is None:
            raise UsageError(f"{path}: config file does not exist")
        pairs.append((path, text))
    try:
        return config_mod.load(pairs)
    except config_mod.ConfigError as exc:
        raise UsageError(str(exc)) from None


def write_output(text: str, path: str | None) -> None:
    """To stdout, or to path through a temp file in the same directory and a rename, so a
    reader (node_exporter, a dashboard) never sees half a report."""
    if not path:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".distdoctor-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def render(report: Report, fmt: str, verbose: bool, to_file: bool, inventory: dict | None = None) -> str:
    if fmt == "json":
        from distdoctor.render import json as json_render

        return json_render.render(report, {"inventory": inventory} if inventory is not None else None)
    if fmt == "prometheus":
        from distdoctor.render import prometheus

        return prometheus.render(report)
    import io

    from distdoctor.render import console as console_render

    if to_file:
        buf = io.StringIO()
        console_render.render(report, console_render.make_console(buf, width=100, color=False), verbose)
        return buf.getvalue()
    console_render.render(report, console_render.make_console(), verbose)
    return ""


def cmd_check(args: argparse.Namespace) -> int:
    from distdoctor.engine import build_report, problem_run, run_checks
    from distdoctor.facts import Facts
    from distdoctor.host import Host
    from distdoctor.api import Context

    started_wall = time.time()
    started = time.monotonic()
    host = Host()
    config = load_config(args.config, host)
    if args.output:
        directory = os.path.dirname(os.path.abspath(args.output)) or "."
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            print(f"distdoctor: cannot write the report to {args.output}: directory {directory} "
                  f"{'does not exist' if not os.path.isdir(directory) else 'is not writable'}", file=sys.stderr)
            return EXIT_OUTPUT
    registry = registry_mod.load(args.checks_dir, host.env)
    try:
        config.validate_against(registry.checks)
    except config_mod.ConfigError as exc:
        raise UsageError(str(exc)) from None
    chosen = [c for c in select(registry.sorted(), _split(args.only), _split(args.skip)) if config.enabled(c.id)]
    if (args.only and not chosen):
        raise UsageError(f"--only {','.join(_split(args.only))} matches no check (see `distdoctor list`)")

    facts = Facts(host, config, options={
        "hosts": _split(args.hosts), "hostfile": args.hostfile, "horovod_hosts": args.horovod_hosts,
        "ports": _split([args.ports]) if args.ports else [],
        "probe_torch": args.probe_torch,
    })
    total_timeout = args.timeout if args.timeout is not None else float(config.run.get("timeout", 60))
    jobs = args.jobs if args.jobs is not None else int(config.run.get("jobs", 8))
    if jobs < 1 or total_timeout <= 0:
        raise UsageError("--jobs must be at least 1 and --timeout positive")

    progress = None
    on_progress = None
    if sys.stderr.isatty() and args.format == "console" or (sys.stderr.isatty() and args.output):
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn

        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), transient=True,
                            console=Console(file=sys.stderr))
        task = progress.add_task(f"running {len(chosen)} checks", total=len(chosen))
        progress.start()

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, description=f"running checks: {done}/{total} done")

    try:
        runs = run_checks(
            chosen, lambda info: Context(facts, config.params_for(info.id, info.params)),
            timeout_for=lambda info: config.timeout_for(info.id, info.timeout),
            jobs=jobs, total_timeout=total_timeout, debug=args.debug, on_progress=on_progress)
    finally:
        if progress is not None:
            progress.stop()

    extra_runs: list[CheckRun] = []
    if registry.problems:
        extra_runs.append(problem_run("core.check-packs", "Check packs load", Status.ERROR,
                                      [m for _s, m in registry.problems],
                                      fix="fix or remove the pack; `distdoctor list` shows what loaded"))
    if config.problems:
        extra_runs.append(problem_run("core.config", "Configuration files are valid", Status.WARN,
                                      config.problems, fix="remove or correct the keys named"))
    try:
        context = facts.run_context
    except Exception:  # the header must never stop the report
        from distdoctor.launch import detect_context

        context = detect_context({})
    inventory = None
    if args.format == "json":
        from distdoctor import inventory as inventory_mod

        # Inside the run's bound: what is not known when the time is up is left out. A check
        # (node.expectations) may have collected it already.
        left = max(1.0, total_timeout - (time.monotonic() - started))
        facts.options.setdefault("inventory_timeout", min(inventory_mod.COLLECT_TIMEOUT, left))
        try:
            inventory = facts.inventory
        except Exception as exc:  # the report must not be lost to it
            inventory = {"inventory.error": str(exc)}
    report = build_report(extra_runs + runs, host=host.hostname(), context=context, started=started_wall,
                          duration=time.monotonic() - started)
    text = render(report, args.format, args.verbose, bool(args.output), inventory)
    try:
        if text:
            write_output(text, args.output)
        elif args.output:
            write_output(render(report, "console", args.verbose, True), args.output)
    except OSError as exc:
        print(f"distdoctor: cannot write the report to {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_OUTPUT
    fail_on = args.fail_on or config.run.get("fail_on", "fail")
    return exit_code(report.runs, fail_on)


def cmd_list(args: argparse.Namespace) -> int:
    from distdoctor.host import Host

    registry = registry_mod.load(args.checks_dir, Host().env)
    checks = registry.sorted()
    if args.json:
        print(json.dumps([{"id": c.id, "title": c.title, "area": c.area, "tags": list(c.tags),
                           "timeout_s": c.timeout, "params": {k: v for k, v in c.params.items()},
                           "source": c.source} for c in checks], indent=2, default=str))
    else:
        width = max((len(c.id) for c in checks), default=10)
        for c in checks:
            print(f"{c.id:<{width}}  {c.title}")
    for _source, message in registry.problems:
        print(f"distdoctor: {message}", file=sys.stderr)
    return EXIT_ERROR if registry.problems else EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from distdoctor.host import Host

    registry = registry_mod.load(args.checks_dir, Host().env)
    info = registry.checks.get(args.id)
    if info is None:
        close = [c for c in registry.checks if args.id in c]
        hint = f" (did you mean {', '.join(close[:5])}?)" if close else ""
        raise UsageError(f"no check named {args.id!r}{hint}")
    print(f"{info.id}: {info.title}")
    print(f"tags: {', '.join(info.tags) or '-'}   timeout: {info.timeout:g} s   source: {info.source}")
    if info.params:
        print("parameters (set them under [checks.\"%s\"] in the config file):" % info.id)
        for key, value in info.params.items():
            print(f"  {key} = {value!r}")
    if info.description:
        print()
        print(info.description)
    return EXIT_OK


def cmd_inventory(args: argparse.Namespace) -> int:
    from distdoctor import inventory as inventory_mod
    from distdoctor.facts import Facts
    from distdoctor.host import Host

    host = Host()
    config = load_config(args.config, host)
    timeout = args.timeout if args.timeout is not None else inventory_mod.COLLECT_TIMEOUT
    if timeout <= 0:
        raise UsageError("--timeout must be positive")
    inventory = inventory_mod.collect(Facts(host, config), host, timeout=timeout)
    if args.snapshot:
        sys.stdout.write(inventory_mod.snapshot_toml(inventory, host.hostname()))
    elif args.format == "json":
        sys.stdout.write(json.dumps(inventory, indent=2) + "\n")
    else:
        for name, value in inventory.items():
            sys.stdout.write(f"{name} = {inventory_mod.text_value(value)}\n")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            code = cmd_check(args)
        elif args.command == "list":
            code = cmd_list(args)
        elif args.command == "explain":
            code = cmd_explain(args)
        elif args.command == "inventory":
            code = cmd_inventory(args)
        elif args.command == "nccl-test":
            from distdoctor import nccltest

            code = nccltest.run(args)
        else:
            parser.print_help()
            code = EXIT_USAGE
    except UsageError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    sys.stdout.flush()
    sys.stderr.flush()
    import threading

    if any(t.daemon and t.is_alive() for t in threading.enumerate()):
        # A check was abandoned at its deadline: do not let interpreter shutdown wait on it.
        os._exit(code)
    return code
