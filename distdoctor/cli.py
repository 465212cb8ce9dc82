"""Command line: parses arguments, wires Host -> Facts -> engine -> renderer, picks the exit code."""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import time
from typing import Sequence

from distdoctor import __version__
from distdoctor import config as config_mod
from distdoctor import output
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

    cmp = sub.add_parser("compare", help="compare saved node reports: the odd nodes and their fix",
                         epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmp.add_argument("reports", nargs="+", metavar="REPORT.json|DIR",
                     help="reports from `check --format json -o FILE` or a `fleet --save` directory")
    add_cluster_output(cmp)

    from distdoctor import nccltest

    nccl = sub.add_parser("nccl-test", help="all_reduce smoke test across every rank of a job")
    nccltest.add_arguments(nccl)

    from distdoctor.logs import command as log_command

    log = sub.add_parser("log", help="read a failed job's logs: the rank that failed first, its host, the cause, the fix",
                         description=log_command.DESCRIPTION, epilog=EXIT_CODES_HELP,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    log_command.add_arguments(log)
    return parser


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


def write_cluster(view, args: argparse.Namespace) -> int:
    """Render a cluster.ClusterView in the chosen format; the exit code like check's."""
    if args.format == "json":
        from distdoctor.render import json as json_render

        text = json_render.render(view.report, view.to_dict())
    elif args.format == "prometheus":
        from distdoctor.render import prometheus

        text = prometheus.render_cluster(view)
    else:
        import io

        from distdoctor.render import console as console_render

        buf = io.StringIO() if args.output else None
        console = (console_render.make_console(buf, width=100, color=False) if buf is not None
                   else console_render.make_console())
        console_render.render_cluster(view, console, args.verbose)
        text = buf.getvalue() if buf is not None else ""
    try:
        if text:
            write_output(text, args.output)
    except OSError as exc:
        print(f"distdoctor: cannot write the report to {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_OUTPUT
    return exit_code(view.report.runs, args.fail_on or "fail")


def cmd_compare(args: argparse.Namespace) -> int:
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
            docs.append((path, cluster.parse_report(text)))
        except cluster.NotAReport as exc:
            errors.append(f"{path}: {exc}")
    if errors or not docs:
        raise UsageError("\n".join(errors) if errors else "no report files (*.json) given")
    # Nodes are named by the host in their report; two files from one host (or two nodes that
    # share a hostname, which is itself a finding) keep their file names apart.
    hosts = [str(doc.get("host") or os.path.basename(path)) for path, doc in docs]
    reports = {}
    for (path, doc), name in zip(docs, hosts):
        reports[name if hosts.count(name) == 1 else path] = doc
    from distdoctor.engine import build_report

    stamp = build_report([], host=host.hostname(), context=cluster_context(len(reports)), started=started_wall,
                         duration=0.0)
    view = cluster.build(reports, expect=expect, command="compare", host=host.hostname(),
                         started_at=stamp.started_at, duration=time.monotonic() - started,
                         context=stamp.context)
    return write_cluster(view, args)


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


def write_output(text: str, path: str | None, stdout_fd: int = 1) -> None:
    """The report to stdout or to what -o names (see distdoctor/output.py)."""
    output.write_report(text, path, stdout_fd)


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
        try:
            output.check_writable(args.output)
        except output.OutputError as exc:
            print(f"distdoctor: {exc}", file=sys.stderr)
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
                gatherer = jobreport.Gatherer(job, key, _bind_address(host, job.address))
        except jobreport.GatherError as exc:
            job_problem = str(exc)

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
    inventory = None
    if args.format in ("json", "jsonl") or job.role in ("leader", "gatherer"):
        from distdoctor import inventory as inventory_mod

        # Inside the run's bound: what is not known when the time is up is left out.
        left = max(1.0, total_timeout - (time.monotonic() - started))
        inventory = inventory_mod.collect(facts, host, timeout=min(inventory_mod.COLLECT_TIMEOUT, left))
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
        return _job_report(args, job, gatherer, job_problem, doc, report, host, config, gather_deadline)
    if args.format == "jsonl":
        doc = json.loads(render(report, "json", False, True, inventory))
        doc["node"] = job.node
        line = json.dumps(doc, separators=(",", ":")) + "\n"
        try:
            if args.output:
                write_output(line, args.output)
            else:
                host.write_stdout_once(line.encode())
        except OSError as exc:
            print(f"distdoctor: cannot write the report: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_OUTPUT
        return exit_code(report.runs, args.fail_on or config.run.get("fail_on", "fail"))
    text = render(report, args.format, args.verbose, bool(args.output), inventory)
    try:
        if text:
            write_output(text, args.output)
        elif args.output:
            write_output(render(report, "console", args.verbose, True), args.output)
    except output.OutputError as exc:
        print(f"distdoctor: {exc}", file=sys.stderr)
        return EXIT_OUTPUT
    fail_on = args.fail_on or config.run.get("fail_on", "fail")
    return exit_code(report.runs, fail_on)


def _bind_address(host, name: str) -> str:
    """The address rank 0 listens on: its rendezvous name as resolved here, and only if that is
    one of this host's own, non-loopback addresses (peers on other nodes must reach it)."""
    from distdoctor import jobreport

    resolved = host.resolve(name, timeout=5.0)
    if not resolved.addresses:
        raise jobreport.GatherError(f"rank 0's host {name} does not resolve: {resolved.error or 'no address'}")
    mine = {a.get("address", "").split("%")[0] for addrs in host.net_if_addrs().values() for a in addrs}
    for addr in resolved.addresses:
        if addr in mine and not addr.startswith("127.") and addr != "::1":
            return addr
    raise jobreport.GatherError(f"rank 0's host {name} resolves to {', '.join(resolved.addresses)}, not to an "
                                f"address of this host that other nodes can reach")


def _job_report(args, job, gatherer, job_problem: str, doc: dict, report: Report, host, config,
                deadline: float) -> int:
    """Rank 0: wait (bounded) for the other nodes' reports and print one report for the job."""
    from distdoctor import cluster, jobreport

    reports = {job.node: doc}
    missing: list = []
    if gatherer is not None:
        try:
            reports.update(gatherer.wait(job.nodes - 1, deadline))
        finally:
            gatherer.close()
        for reason in gatherer.rejected:
            missing.append(cluster.Missing(reason.split(":", 1)[0], f"a report was refused from {reason}",
                                           f"# give every node of the job the same {jobreport.SECRET_FILE} "
                                           f"(a shared home), or export DISTDOCTOR_JOB_SECRET before launching"))
    absent = [n for n in job.expected if n not in reports]
    for node in absent:
        why = job_problem or f"no report within the job's bound ({args.timeout or 60:g} s + 10 s)"
        missing.append(cluster.Missing(node, f"{node}: {why}",
                                       f"srun -w {node} -N1 -n1 python3 -m distdoctor check --each-task"))
    if not job.expected and len(reports) < job.nodes:
        short = job.nodes - len(reports)
        why = job_problem or "no report within the job's bound"
        missing.append(cluster.Missing(f"{short} node{'s' if short > 1 else ''}",
                                       f"{short} of {job.nodes} nodes sent no report: {why}"))
    view = cluster.job_view(reports, job.node, missing=missing, expect=getattr(config, "expect", None) or None,
                            host=report.host, started_at=report.started_at, duration=report.duration,
                            context=report.context)
    return write_cluster(view, args)


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
        elif args.command == "compare":
            code = cmd_compare(args)
        elif args.command == "nccl-test":
            from distdoctor import nccltest

            code = nccltest.run(args)
        elif args.command == "log":
            from distdoctor.logs import command as log_command

            code = log_command.run(args)
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
