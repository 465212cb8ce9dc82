"""Command line: parses arguments, wires Host -> Facts -> engine -> renderer, picks the exit code."""

from __future__ import annotations

import argparse
import fnmatch
import io
import json
import os
import signal
import sys
import threading
import time
from typing import Sequence

from distdoctor import __version__, limits, output
from distdoctor import config as config_mod
from distdoctor.grammar import plural
from distdoctor import registry as registry_mod
from distdoctor.model import (  # noqa: F401
    EXIT_CODES_HELP,
    EXIT_ERROR,
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_TERMINATED,
    EXIT_USAGE,
    CheckInfo,
    CheckRun,
    Report,
    Status,
    exit_code,
)


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own code (2) would collide with EXIT_ERROR
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def add_fleet_arguments(parser: argparse.ArgumentParser) -> None:
    """fleet's options, here so that parsing any command does not import fleet (and cluster)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--nodes", metavar="NODELIST", help="Slurm nodes to check (starts its own step)")
    where.add_argument("--hosts", action="append", default=[], metavar="HOSTS",
                       help="hosts to check over ssh (names or hostlist expressions, comma-separated)")
    parser.add_argument("--timeout", type=limits.arg_seconds, default=30.0,
                        help="seconds a node has to answer (default 30); later nodes are named, not waited for")
    parser.add_argument("--fanout", type=limits.arg_count(limits.MAX_JOBS), default=64,
                        help="ssh connections at once (default 64)")
    parser.add_argument("--ssh-option", action="append", default=[], metavar="OPT",
                        help="extra ssh option, e.g. -F ~/.ssh/cluster_config (repeatable)")
    parser.add_argument("--distdoctor", metavar="COMMAND", default=None,
                        help="how to run distdoctor on the nodes (default: this interpreter's `-m distdoctor` "
                             "under srun, `python3 -m distdoctor` over ssh)")
    parser.add_argument("--only", action="append", default=[], metavar="ID|TAG", help="passed to each node's check")
    parser.add_argument("--skip", action="append", default=[], metavar="ID|TAG", help="passed to each node's check")
    parser.add_argument("--save", metavar="DIR", help="write each node's report to DIR/<node>.json")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with command given, one where only that command has its options:
    building every command's options imports nccl-test's and log's modules on every run. The
    top-level --help lists the commands and needs none of them."""

    def want(name: str) -> bool:
        return command is None or command == name

    parser = _Parser(prog="distdoctor", description="Diagnose distributed deep-learning clusters.",
                     epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"distdoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    check = sub.add_parser("check", help="run the checks on this node", epilog=EXIT_CODES_HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    if want("check"):
        add_check_arguments(check)

    lst = sub.add_parser("list", help="list the available checks")
    lst.add_argument("--json", action="store_true")
    lst.add_argument("--checks-dir", action="append", default=[], metavar="DIR")

    explain = sub.add_parser("explain", help="describe one check")
    explain.add_argument("id")
    explain.add_argument("--checks-dir", action="append", default=[], metavar="DIR")

    health = sub.add_parser(
        "health", help="run the checks as Slurm's HealthCheckProgram/Prolog/Epilog: drain this node on failure",
        epilog="On failure: scontrol update nodename=<node> state=drain reason=\"distdoctor: <check>: <what>\". "
               "On success: resume the node only if distdoctor drained it. See docs/health.md.")
    if want("health"):
        add_health_arguments(health)

    inv = sub.add_parser("inventory", help="print this node's inventory of named facts")
    if want("inventory"):
        add_inventory_arguments(inv)

    cmp = sub.add_parser("compare", help="compare saved node reports: the odd nodes and their fix",
                         epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmp.add_argument("reports", nargs="+", metavar="REPORT.json|DIR",
                     help="reports from `check --format json -o FILE` or a `fleet --save` directory")
    if want("compare"):
        add_cluster_output(cmp)

    fleet = sub.add_parser("fleet", help="run check on every node (srun or ssh) and name the odd ones",
                           epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    if want("fleet"):
        add_fleet_arguments(fleet)
        add_cluster_output(fleet)

    nccl = sub.add_parser("nccl-test", help="all_reduce smoke test across every rank of a job")
    if want("nccl-test"):
        from distdoctor import nccltest

        nccltest.add_arguments(nccl)

    log = sub.add_parser("log", help="read a failed job's logs: the rank that failed first, its host, the cause, the fix",
                         epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    if want("log"):
        from distdoctor.logs import command as log_command

        log.description = log_command.DESCRIPTION
        log_command.add_arguments(log)
    return parser


def add_check_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument("--only", action="append", default=[], metavar="ID|TAG",
                       help="run only these checks (id, area, tag or glob; repeatable, comma-separated)")
    check.add_argument("--skip", action="append", default=[], metavar="ID|TAG", help="skip these checks")
    check.add_argument("--format", choices=("console", "json", "jsonl", "prometheus"), default="console",
                       help="jsonl: this node's report as one line (under a launcher: one line per node, no gathering)")
    check.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    check.add_argument("--node-report", action="store_true",
                       help="print this node's report as one JSON line naming the node (what `fleet` runs)")
    check.add_argument("--each-task", action="store_true",
                       help="under a launcher, every task runs the checks and prints its own report "
                            "(default: once per node, one report for the job from rank 0)")
    check.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically) instead of stdout")
    check.add_argument("--fail-on", choices=("warn", "fail"), default=None,
                       help="lowest status that makes the exit code non-zero (default: fail)")
    check.add_argument("--timeout", type=limits.arg_seconds, default=None,
                       help=f"bound for the whole run, seconds (default 60, at most {limits.MAX_SECONDS:g})")
    check.add_argument("--jobs", type=limits.arg_count(limits.MAX_JOBS), default=None,
                       help="checks run in parallel (default 8)")
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
    check.add_argument("--no-cache", action="store_true",
                       help="run every tool and look up check packs now instead of reusing answers cached under "
                            "$XDG_CACHE_HOME/distdoctor "
                            "(they are reused only while the tool, its files and environment are unchanged)")


def add_health_arguments(health: argparse.ArgumentParser) -> None:
    health.add_argument("--only", action="append", default=[], metavar="ID|TAG", help="as for check")
    health.add_argument("--skip", action="append", default=[], metavar="ID|TAG", help="as for check")
    health.add_argument("--fail-on", choices=("warn", "fail"), default=None,
                        help="lowest status that drains the node (default: fail, or run.fail_on)")
    health.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="extra config file (TOML), [expect] table included")
    health.add_argument("--checks-dir", action="append", default=[], metavar="DIR")
    health.add_argument("--timeout", type=limits.arg_seconds, default=None,
                        help="bound for the whole command, seconds (default 50: slurmd allows 60)")
    health.add_argument("--jobs", type=limits.arg_count(limits.MAX_JOBS), default=None, help="checks run in parallel (default 8)")
    health.add_argument("--node", default=None, help="Slurm's name for this node (default: SLURMD_NODENAME, "
                                                    "else the short hostname)")
    health.add_argument("-o", "--output", metavar="FILE", help="write the verdict here (atomically) instead of stdout")
    health.add_argument("--dry-run", action="store_true", help="print the scontrol command instead of running it")


def add_inventory_arguments(inv: argparse.ArgumentParser) -> None:
    inv.add_argument("--format", choices=("text", "json"), default="text")
    inv.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    inv.add_argument("--snapshot", action="store_true",
                     help="print an [expect] table of the facts that should agree across nodes, for the config file")
    inv.add_argument("--config", action="append", default=[], metavar="FILE", help="extra config file (TOML)")
    inv.add_argument("--timeout", type=limits.arg_seconds, default=None,
                     help="bound for the whole inventory, seconds (default 20)")
    inv.add_argument("-o", "--output", metavar="FILE", help="write it here (atomically) instead of stdout")


def add_cluster_output(parser: argparse.ArgumentParser) -> None:
    """Options every command that compares node reports shares (compare, fleet)."""
    parser.add_argument("--format", choices=("console", "json", "prometheus"), default="console")
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically) instead of stdout")
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
        table[key.strip()] = int(value) if value.isdigit() else value
    return table


def write_cluster(view, args: argparse.Namespace, out: output.ReservedStdout, fail_on: str | None = None) -> int:
    """Render a cluster.ClusterView in the chosen format; the exit code like check's."""
    if args.format == "json":
        from distdoctor.render import json as json_render

        text = json_render.render(view.report, view.to_dict())
    elif args.format == "prometheus":
        from distdoctor.render import prometheus

        text = prometheus.render_cluster(view)
    else:
        from distdoctor.render import console as console_render

        text = console_text(view, args.verbose, bool(args.output), console_render.render_cluster,
                            None if args.output else out.text())
    try:
        if text:
            write_output(text, args.output, out.fd)
    except output.OutputError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        return EXIT_OUTPUT
    return exit_code(view.report.runs, args.fail_on or fail_on or "fail")


def cmd_compare(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor import cluster
    from distdoctor.host import Host

    started_wall, started = time.time(), time.monotonic()
    host = Host()
    config = load_config(args.config, host)
    expect = expectations(args, config)
    paths: list[str] = []
    for path in args.reports:
        names = host.list_dir(path) if os.path.isdir(path) else None
        if names is not None:
            paths += [os.path.join(path, n) for n in names if n.endswith(".json")]
        else:
            paths.append(path)
    errors: list[str] = []
    docs: list[tuple[str, dict]] = []
    import gc

    # Parsing thousands of reports makes millions of objects and no garbage: the cyclic
    # collector would walk them again and again (10,000 reports: 4x slower with it on).
    gc.disable()
    try:
        for path in paths:
            try:
                text = host.read_text(path, max_bytes=64 * 1024 * 1024)
            except OSError as exc:
                errors.append(f"{path}: cannot read: {exc.strerror or exc}")
                continue
            if text is None:
                errors.append(f"{path}: no such file")
                continue
            try:
                docs.append((path, cluster.slim(cluster.parse_report(text))))
            except cluster.NotAReport as exc:
                errors.append(f"{path}: {exc}")
    finally:
        gc.enable()
    if errors or not docs:
        raise UsageError("\n".join(errors) if errors else "no report files (*.json) given")
    # Nodes are named by the host in their report; two files from one host (or two nodes that
    # share a hostname, which is itself a finding) keep their file names apart.
    hosts = [str(doc.get("host") or os.path.basename(path)) for path, doc in docs]
    from collections import Counter

    seen = Counter(hosts)
    reports = {}
    by_file = []
    for (path, doc), name in zip(docs, hosts):
        reports[name if seen[name] == 1 else path] = doc
        if seen[name] > 1:
            by_file.append(path)
    from distdoctor.engine import build_report

    stamp = build_report([], host=host.hostname(), context=cluster_context(len(reports)), started=started_wall,
                         duration=0.0)
    view = cluster.build(reports, expect=expect, command="compare", host=host.hostname(),
                         started_at=stamp.started_at, duration=time.monotonic() - started,
                         context=stamp.context, by_file=by_file)
    return write_cluster(view, args, out, config.run.get("fail_on", "fail"))


def cmd_fleet(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor import fleet, hostlist
    from distdoctor.host import Host

    host = Host()
    config = load_config(args.config, host)
    expect = expectations(args, config)
    try:
        view = fleet.run(args, host, expect)
    except (ValueError, hostlist.HostlistError) as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot save the reports: {exc.strerror or exc}") from None
    return write_cluster(view, args, out, config.run.get("fail_on", "fail"))


def cluster_context(n: int):
    from distdoctor.model import RunContext

    return RunContext("none", f"comparing {n} node report{'s' if n != 1 else ''}")


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


def write_output(text: str, path: str | None, stdout_fd: int | None = 1) -> None:
    """The report to stdout or to what -o names (see distdoctor/output.py)."""
    output.write_report(text, path, stdout_fd)


def render(report: Report, fmt: str, verbose: bool, to_file: bool, inventory: dict | None = None,
           stream=None) -> str:
    """The report as text; a console report for a terminal is printed to stream (the reserved
    stdout) instead, and "" returned."""
    if fmt == "json":
        from distdoctor.render import json as json_render

        return json_render.render(report, {"inventory": inventory} if inventory is not None else None)
    if fmt == "prometheus":
        from distdoctor.render import prometheus

        return prometheus.render(report)
    return console_text(report, verbose, to_file, None, stream)


def _codes_allowed_on_stderr() -> bool:
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


def _validate_selection(checks: list[CheckInfo], args: argparse.Namespace) -> None:
    """--only/--skip name what exists: a typo must not silently run everything (or nothing)."""
    import difflib

    names = sorted({c.id for c in checks} | {c.area for c in checks} | {t for c in checks for t in c.tags}
                   | set(CORE_RUNS))
    for option in ("only", "skip"):
        given = getattr(args, option)
        patterns = _split(given)
        if given and not patterns:
            raise UsageError(f"--{option} {','.join(given)!r} names no check, area or tag")
        unknown = _unknown_selectors(checks, patterns)
        if unknown:
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


def cmd_check(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor.api import Context
    from distdoctor.engine import Interrupted, build_report, problem_run, run_checks
    from distdoctor.facts import Facts
    from distdoctor.host import Host

    started_wall = time.time()
    started = time.monotonic()
    host = Host()
    if not args.no_cache:
        host.cache = tool_cache(host)
    config = load_config(args.config, host)
    if args.output:
        try:
            output.check_writable(args.output)
        except output.OutputError as exc:
            print(f"distdoctor: {exc}", file=sys.stderr)
            return EXIT_OUTPUT
    # Both were range-checked where they were read (argparse, config.load_file). The bound
    # covers loading the packs too: a pack that hangs at import is abandoned within it.
    total_timeout = args.timeout if args.timeout is not None else float(config.run.get("timeout", 60))
    jobs = args.jobs if args.jobs is not None else int(config.run.get("jobs", 8))
    registry = registry_mod.load(args.checks_dir, host.env, budget=total_timeout / 2, run_bound=total_timeout,
                                 cache=host.cache)
    try:
        config.validate_against(registry.checks)
    except config_mod.ConfigError as exc:
        raise UsageError(str(exc)) from None
    _validate_selection(registry.sorted(), args)
    chosen = [c for c in select(registry.sorted(), _split(args.only), _split(args.skip)) if config.enabled(c.id)]
    if (args.only and not chosen):
        raise UsageError(f"--only {','.join(_split(args.only))} matches no enabled check (see `distdoctor list`)")
    from distdoctor.facts import slowtools

    slowtools.start(host, [c.id for c in chosen])  # nothing without a cache (--no-cache)

    facts = Facts(host, config, options={
        "hosts": _split(args.hosts), "hostfile": args.hostfile, "horovod_hosts": args.horovod_hosts,
        "ports": _split([args.ports]) if args.ports else [],
        "probe_torch": args.probe_torch,
    })

    if args.node_report:
        args.format = "jsonl"
    try:
        context = facts.run_context
    except Exception:  # the header must never stop the report
        from distdoctor.launch import detect_context

        context = detect_context({})
    from distdoctor import jobreport

    job = jobreport.plan(context, host.env, host.hostname(), each_task=args.each_task)
    if job.role == "quiet":
        return EXIT_OK  # this node's local rank 0 runs the checks for it
    if args.format == "jsonl" and job.role in ("leader", "gatherer"):
        job = jobreport.Plan("solo", job.nodes, job.expected, node=job.node)
    gather_deadline = started + total_timeout + 10
    gatherer, job_problem, key = None, jobreport.plan_problem(job), b""
    if job.role in ("leader", "gatherer") and not job_problem:
        try:
            key = jobreport.job_key(jobreport.read_secret(host.env), job.seed)
            if job.role == "gatherer":
                gatherer = jobreport.Gatherer(job, key, jobreport.bind_address(host, job.address))
        except jobreport.GatherError as exc:
            job_problem = str(exc)

    progress = None
    on_progress = None
    # The spinner redraws with escape codes: only on a terminal that the colour rule allows.
    if sys.stderr.isatty() and (args.format == "console" or args.output) and _codes_allowed_on_stderr():
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn

        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), transient=True,
                            console=Console(file=sys.stderr))
        task = progress.add_task(f"running {plural(len(chosen), 'check')}", total=len(chosen))
        progress.start()

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, description=f"running checks: {done}/{total} done")

    interrupted: Interrupted | None = None
    try:
        runs = run_checks(
            chosen, lambda info: Context(facts, config.params_for(info.id, info.params)),
            timeout_for=lambda info: config.timeout_for(info.id, info.timeout),
            jobs=jobs, total_timeout=max(0.0, total_timeout - (time.monotonic() - started)),
            debug=args.debug, on_progress=on_progress, run_bound=total_timeout)
    except Interrupted as exc:
        # Finish with what finished: the report below is written, then the signal's exit code.
        interrupted, runs = exc, exc.runs
        _exit_hard_on_second_signal()
    finally:
        if progress is not None:
            progress.stop()
    if interrupted is None:
        # The checks are done: a signal now is kept until the report is written, not raised
        # in the middle of writing it.
        _defer_signals()

    extra_runs: list[CheckRun] = []
    if registry.problems:
        extra_runs.append(problem_run("core.check-packs", "Check packs load", Status.ERROR,
                                      [m for _s, m in registry.problems],
                                      fix="distdoctor list   # shows what loaded; fix or remove the pack named above"))
    if config.problems:
        extra_runs.append(problem_run("core.config", "Configuration files are valid", Status.WARN,
                                      config.problems, fix="# remove or correct the keys named above in the config file"))
    inventory = None
    if args.format in ("json", "jsonl") or job.role in ("leader", "gatherer"):
        from distdoctor import inventory as inventory_mod

        # Inside the run's bound: what is not known when the time is up is left out. A check
        # (node.expectations) may have collected it already.
        left = max(1.0, total_timeout - (time.monotonic() - started))
        facts.options.setdefault("inventory_timeout", min(inventory_mod.COLLECT_TIMEOUT, left))
        try:
            inventory = facts.inventory
        except Exception as exc:  # the report must not be lost to it
            inventory = {"inventory.errors": [f"{type(exc).__name__}: {exc}"[:200]]}
    report = build_report(extra_runs + runs, host=host.hostname(), context=context, started=started_wall,
                          duration=time.monotonic() - started)
    if job.role in ("leader", "gatherer"):
        doc = json.loads(render(report, "json", False, True, inventory))
        doc["node"] = job.node
        if job.role == "leader":
            if job_problem:
                print(f"distdoctor: {job.node}: cannot hand this node's report to rank 0: {job_problem}", file=sys.stderr)
                return EXIT_ERROR
            why = jobreport.send_report(job, key, doc, gather_deadline)
            if why:
                print(f"distdoctor: {job.node}: {why}", file=sys.stderr)
                return EXIT_ERROR
            return EXIT_OK
        return _job_report(args, job, gatherer, job_problem, doc, report, host, config, gather_deadline, out)
    if args.format == "jsonl":
        doc = json.loads(render(report, "json", False, True, inventory))
        doc["node"] = job.node
        line = json.dumps(doc, separators=(",", ":")) + "\n"
        try:
            # One write(2) to the reserved stdout, so the line leaves this process whole; srun
            # may still forward it in pieces (docs/fleet.md: use --label, as fleet does).
            write_output(line, args.output, out.fd)
        except output.OutputError as exc:
            print(f"distdoctor: {exc}", file=sys.stderr)
            return EXIT_OUTPUT
        return exit_code(report.runs, args.fail_on or config.run.get("fail_on", "fail"))
    try:
        text = render(report, args.format, args.verbose, bool(args.output), inventory,
                      stream=None if args.output or args.format != "console" else out.text())
        if text:
            write_output(text, args.output, out.fd)
        elif args.output:
            write_output(render(report, "console", args.verbose, True), args.output, out.fd)
    except output.OutputError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        return EXIT_OUTPUT
    except OSError as exc:  # the console renderer writing to a closed pipe
        print(f"distdoctor: cannot write the report to stdout: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_OUTPUT
    if interrupted is not None:
        return _signal_exit_code(interrupted.signum)
    if _DEFERRED:
        return _signal_exit_code(_DEFERRED[0])
    fail_on = args.fail_on or config.run.get("fail_on", "fail")
    return exit_code(report.runs, fail_on)


def _job_report(args, job, gatherer, job_problem: str, doc: dict, report: Report, host, config,
                deadline: float, out: output.ReservedStdout) -> int:
    """Rank 0: wait (bounded) for the other nodes' reports and print one report for the job."""
    from distdoctor import cluster, jobreport, remote

    reports = {job.node: doc}
    missing: list = []
    if gatherer is not None:
        try:
            reports.update(gatherer.wait(job.nodes - 1, deadline))
        finally:
            gatherer.close()
        for node, why in gatherer.rejected.items():
            if node not in reports:
                missing.append(cluster.Missing(node, f"{node}: its report was refused: {why}",
                                               f"# give every node of the job the same {jobreport.SECRET_FILE} "
                                               f"(a shared home), or export DISTDOCTOR_JOB_SECRET before launching"))
    absent = [n for n in job.expected if n not in reports and n not in {m.node for m in missing}]
    for node in absent:
        why = job_problem or f"no report within the job's bound ({args.timeout or 60:g} s + 10 s)"
        missing.append(cluster.Missing(node, f"{node}: {why}",
                                       remote.on([node], "python3 -m distdoctor check --each-task", srun=True)))
    if not job.expected and len(reports) < job.nodes:
        short = job.nodes - len(reports)
        why = job_problem or "no report within the job's bound"
        missing.append(cluster.Missing(f"{short} node{'s' if short > 1 else ''}",
                                       f"{short} of {plural(job.nodes, 'node')} sent no report: {why}"))
    view = cluster.job_view(reports, job.node, missing=missing, expect=getattr(config, "expect", None) or None,
                            host=report.host, started_at=report.started_at, duration=report.duration,
                            context=report.context)
    return write_cluster(view, args, out, args.fail_on or config.run.get("fail_on", "fail"))


def cmd_list(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor.host import Host

    host = Host()
    registry = registry_mod.load(args.checks_dir, host.env, cache=tool_cache(host))
    checks = registry.sorted()
    stream = out.text()
    if args.json:
        from distdoctor.render.json import json_safe

        print(json.dumps(json_safe([{"id": c.id, "title": c.title, "area": c.area, "tags": list(c.tags),
                                     "timeout_s": c.timeout, "params": dict(c.params), "source": c.source}
                                    for c in checks]), indent=2, allow_nan=False), file=stream)
    else:
        width = max((len(c.id) for c in checks), default=10)
        for c in checks:
            print(f"{c.id:<{width}}  {c.title}", file=stream)
    stream.flush()
    for _source, message in registry.problems:
        print(f"distdoctor: {message}", file=sys.stderr)
    return EXIT_ERROR if registry.problems else EXIT_OK


def cmd_explain(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor.host import Host

    host = Host()
    registry = registry_mod.load(args.checks_dir, host.env, cache=tool_cache(host))
    info = registry.checks.get(args.id)
    if info is None:
        close = [c for c in registry.checks if args.id in c]
        hint = f" (did you mean {', '.join(close[:5])}?)" if close else ""
        raise UsageError(f"no check named {args.id!r}{hint}")
    stream = out.text()
    print(f"{info.id}: {info.title}", file=stream)
    print(f"tags: {', '.join(info.tags) or '-'}   timeout: {info.timeout:g} s   source: {info.source}", file=stream)
    if info.params:
        print("parameters (set them under [checks.\"%s\"] in the config file):" % info.id, file=stream)
        for key, value in info.params.items():
            print(f"  {key} = {config_mod.toml_value(value)}", file=stream)
    if info.description:
        print(file=stream)
        print(info.description, file=stream)
    stream.flush()
    return EXIT_OK


def cmd_health(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor import health
    from distdoctor.api import Context
    from distdoctor.engine import run_checks
    from distdoctor.facts import Facts
    from distdoctor.host import Host

    started = time.monotonic()
    host = Host()
    config = load_config(args.config, host)
    bound = args.timeout if args.timeout is not None else health.DEFAULT_TIMEOUT
    registry = registry_mod.load(args.checks_dir, host.env, budget=bound / 2, run_bound=bound)
    try:
        config.validate_against(registry.checks)
    except config_mod.ConfigError as exc:
        raise UsageError(str(exc)) from None
    # A node's health is the node's: the reach area (probes of other hosts) runs only when asked for.
    skip = _split(args.skip) + ([] if args.only else list(health.DEFAULT_SKIP))
    _validate_selection(registry.sorted(), args)
    chosen = [c for c in select(registry.sorted(), _split(args.only), skip) if config.enabled(c.id)]
    if bound <= health.SCONTROL_RESERVE + 1:
        raise UsageError(f"--timeout must be more than {health.SCONTROL_RESERVE + 1:g} s: the checks need time, "
                         f"and scontrol gets {health.SCONTROL_RESERVE:g} s")
    jobs = args.jobs if args.jobs is not None else int(config.run.get("jobs", 8))
    budget = bound - health.SCONTROL_RESERVE - (time.monotonic() - started)
    facts = Facts(host, config, options={"hosts": [], "ports": [], "probe_torch": False,
                                         "inventory_timeout": max(1.0, min(20.0, budget - 2))})
    runs = run_checks(chosen, lambda info: Context(facts, config.params_for(info.id, info.params)),
                      timeout_for=lambda info: min(config.timeout_for(info.id, info.timeout), budget),
                      jobs=jobs, total_timeout=budget, run_bound=bound)
    fail_on = args.fail_on or config.run.get("fail_on", "fail")
    bad = health.failing(runs, fail_on)
    node = args.node or health.node_name(host)
    stream = io.StringIO()
    for run in bad:
        finding = next((f for f in run.findings if f.status.severity >= run.status.severity), None)
        stream.write(f"{run.status.value.upper()} {run.id}: {finding.summary if finding else run.status.value}\n")
        if finding is not None and finding.fix:
            stream.write("".join(f"    $ {line}\n" for line in finding.fix.splitlines()))
    state, problem = health.node_state(host, node)
    if problem:
        stream.write(f"distdoctor health: cannot read the state of node {node}: {problem}\n")
    action = health.decide(node, state, bad)
    error = ""
    if args.dry_run:
        stream.write(f"{action.why}\n")
        if action.argv:
            stream.write(f"would run: {action.shell()}\n")
    else:
        error = health.apply(host, action)
        stream.write(f"{action.why}\n")
        if error:
            stream.write(f"distdoctor health: {error}\n")
    stream.write(f"distdoctor health: {plural(len(runs), 'check')} on {node} in {time.monotonic() - started:.1f} s, "
                 f"{len(bad)} at or above {fail_on}\n")
    try:
        write_output(stream.getvalue(), args.output, out.fd)
    except output.OutputError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        return EXIT_OUTPUT
    return EXIT_ERROR if error else exit_code(runs, fail_on)


def cmd_inventory(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor import inventory as inventory_mod
    from distdoctor.facts import Facts
    from distdoctor.host import Host
    from distdoctor.render.json import json_safe

    host = Host()
    config = load_config(args.config, host)
    timeout = args.timeout if args.timeout is not None else inventory_mod.COLLECT_TIMEOUT
    inventory = inventory_mod.collect(Facts(host, config), host, timeout=timeout)
    if args.snapshot:
        text = inventory_mod.snapshot_toml(inventory, host.hostname())
    elif args.format == "json":
        text = json.dumps(json_safe(inventory), indent=2, allow_nan=False) + "\n"
    else:
        text = "".join(f"{name} = {inventory_mod.text_value(value)}\n" for name, value in inventory.items())
    try:
        write_output(text, args.output, out.fd)
    except output.OutputError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        return EXIT_OUTPUT
    return EXIT_OK


def _signal_exit_code(signum: int) -> int:
    return EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED


def _raise_interrupted(signum: int, _frame) -> None:
    from distdoctor.engine import Interrupted

    raise Interrupted(signum)


def _exit_at_once(signum: int, _frame) -> None:
    os._exit(_signal_exit_code(signum))


_DEFERRED: list[int] = []


def _defer(signum: int, _frame) -> None:
    if _DEFERRED:
        os._exit(_signal_exit_code(signum))
    _DEFERRED.append(signum)


def _defer_signals() -> None:
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _defer)


def _exit_hard_on_second_signal() -> None:
    """After the first Ctrl-C the partial report is being written; a second one means now."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _exit_at_once)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # The command is the first word that is not an option: the top-level parser has no option
    # that takes a value. A word that names no command, or none (--help), builds no command's
    # options; the parser refuses the first with the list of commands.
    first = next((a for a in argv if not a.startswith("-")), "")
    parser = build_parser(first)
    args = parser.parse_args(argv)
    # nccl-test and log run no third-party code and manage their own output.
    if args.command == "nccl-test":
        from distdoctor import nccltest

        # _finish ends with os._exit while the rank's daemon threads (heartbeat, mesh listener)
        # may sit in torch's C++ store calls: tearing those down at interpreter exit can abort
        # the process ("terminate called without an active exception") after a passing test.
        return _finish(nccltest.run(args), None)
    if args.command == "log":
        from distdoctor.logs import command as log_command

        try:
            return _finish(log_command.run(args), None)
        except UsageError as exc:
            print(f"distdoctor: {exc}", file=sys.stderr)
            return _finish(EXIT_USAGE, None)
    if args.command not in COMMANDS:
        parser.print_help()
        return EXIT_USAGE
    from distdoctor import reaper
    from distdoctor.engine import Interrupted

    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _raise_interrupted)
    reaper.arm_process()
    _DEFERRED.clear()
    out = output.ReservedStdout()
    try:
        code = COMMANDS[args.command](args, out)
    except UsageError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except output.OutputError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        code = EXIT_OUTPUT
    except BrokenPipeError:  # `distdoctor list | head -1`
        code = EXIT_OUTPUT
    except Interrupted as exc:  # before any check ran (config, packs) or while writing
        print(f"distdoctor: interrupted by {exc.signal_name}", file=sys.stderr)
        code = _signal_exit_code(exc.signum)
    if in_main_thread:
        _exit_hard_on_second_signal()
    return _finish(code, out)


def _finish(code: int, out: output.ReservedStdout | None) -> int:
    from distdoctor import reaper

    # Before os._exit below, which skips atexit: no tool a check started outlives the run.
    reaper.kill_all()
    abandoned = any(t.daemon and t.is_alive() for t in threading.enumerate())
    if out is not None and not abandoned:
        out.restore()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None when Python started with the descriptor closed
                stream.flush()
        except (OSError, ValueError):
            pass
    if abandoned:
        # A check or pack was abandoned at its deadline: do not let interpreter shutdown wait on it.
        os._exit(code)
    return code


COMMANDS = {"check": cmd_check, "list": cmd_list, "explain": cmd_explain, "inventory": cmd_inventory,
            "compare": cmd_compare, "health": cmd_health, "fleet": cmd_fleet}
