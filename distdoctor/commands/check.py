"""`distdoctor check`: run the checks on this node; under a launcher, one report for the job."""

from __future__ import annotations

import argparse
import json
import sys
import time

from distdoctor import limits, output, signals
from distdoctor import config as config_mod
from distdoctor import registry as registry_mod
from distdoctor.commands.common import (
    UsageError,
    add_output_arguments,
    codes_allowed_on_stderr,
    load_config,
    render,
    select,
    split,
    tool_cache,
    validate_selection,
    write_cluster,
    write_output,
)
from distdoctor.model import EXIT_CODES_HELP, EXIT_ERROR, EXIT_OK, EXIT_OUTPUT, CheckRun, Report, Status, exit_code
from distdoctor.remote import Fix
from distdoctor.text import plural

EPILOG = EXIT_CODES_HELP


def add_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument("--only", action="append", default=[], metavar="ID|TAG",
                       help="run only these checks (id, area, tag or glob; repeatable, comma-separated)")
    check.add_argument("--skip", action="append", default=[], metavar="ID|TAG", help="skip these checks")
    add_output_arguments(check, ("console", "json", "jsonl", "prometheus"),
                         "jsonl: this node's report as one line (under a launcher: one line per node, no gathering)")
    check.add_argument("--node-report", action="store_true",
                       help="print this node's report as one JSON line naming the node (what `fleet` runs)")
    check.add_argument("--each-task", action="store_true",
                       help="under a launcher, every task runs the checks and prints its own report "
                            "(default: once per node, one report for the job from rank 0)")
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


def run(args: argparse.Namespace, out: output.ReservedStdout) -> int:
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
        output.check_writable(args.output)  # before the checks run: an OutputError is exit 74
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
    validate_selection(registry.sorted(), args, incomplete=registry.incomplete)
    chosen = [c for c in select(registry.sorted(), split(args.only), split(args.skip)) if config.enabled(c.id)]
    if args.only and not chosen and not registry.incomplete:
        raise UsageError(f"--only {','.join(split(args.only))} matches no enabled check (see `distdoctor list`)")
    from distdoctor.facts import slowtools

    slowtools.start(host, [c.id for c in chosen])  # nothing without a cache (--no-cache)

    facts = Facts(host, config, options={
        "hosts": split(args.hosts), "hostfile": args.hostfile, "horovod_hosts": args.horovod_hosts,
        "ports": split([args.ports]) if args.ports else [],
        "probe_torch": args.probe_torch,
    })

    if args.node_report:
        args.format = "jsonl"
    try:
        context = facts.run_context
    except Exception:  # the header must never stop the report
        from distdoctor.launch import detect_context

        context = detect_context({})
    from distdoctor.crosscheck import jobreport

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
    if sys.stderr.isatty() and (args.format == "console" or args.output) and codes_allowed_on_stderr():
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
        signals.exit_hard_on_second_signal()
    finally:
        if progress is not None:
            progress.stop()
    if interrupted is None:
        # The checks are done: a signal now is kept until the report is written, not raised
        # in the middle of writing it.
        signals.defer_signals()

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
            if not why:
                return EXIT_OK
            print(f"distdoctor: {job.node}: {why}", file=sys.stderr)
            if why.startswith("rank 0 could not authenticate"):
                return EXIT_ERROR  # rank 0 has it and names this node with the reason
            # Rank 0 never got this node's results: they go to this task's stderr (the job's log;
            # stdout stays the one report rank 0 prints), with why they did not arrive and the
            # fix for rank 0's node.
            report = _undelivered(report, job, why, host)
            fmt = "json" if args.format in ("json", "jsonl") else "console"
            sys.stderr.write(render(report, fmt, args.verbose, True, inventory if fmt == "json" else None))
            return exit_code(report.runs, args.fail_on or config.run.get("fail_on", "fail"))
        else:
            return _job_report(args, job, gatherer, job_problem, doc, report, host, config, gather_deadline, out)
    if args.format == "jsonl":
        doc = json.loads(render(report, "json", False, True, inventory))
        doc["node"] = job.node
        line = json.dumps(doc, separators=(",", ":")) + "\n"
        # One write(2) to the reserved stdout, so the line leaves this process whole; srun
        # may still forward it in pieces (docs/fleet.md: use --label, as fleet does).
        write_output(line, args.output, out.fd)
        return exit_code(report.runs, args.fail_on or config.run.get("fail_on", "fail"))
    try:
        text = render(report, args.format, args.verbose, bool(args.output), inventory,
                      stream=None if args.output or args.format != "console" else out.text())
        if text:
            write_output(text, args.output, out.fd)
        elif args.output:
            write_output(render(report, "console", args.verbose, True), args.output, out.fd)
    except OSError as exc:  # the console renderer writing to a closed pipe
        print(f"distdoctor: cannot write the report to stdout: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_OUTPUT
    if interrupted is not None:
        return signals.exit_code_for(interrupted.signum)
    if signals.DEFERRED:
        return signals.exit_code_for(signals.DEFERRED[0])
    fail_on = args.fail_on or config.run.get("fail_on", "fail")
    return exit_code(report.runs, fail_on)


def _undelivered(report: Report, job, why: str, host) -> Report:
    import dataclasses

    from distdoctor.crosscheck import jobreport
    from distdoctor.model import Finding

    resolved = host.resolve(job.address, timeout=2.0)
    try:
        network = jobreport.network_toward(resolved.addresses[0], host.net_if_addrs()) if resolved.addresses else ""
    except OSError:
        network = ""
    summary, explanation, fix = jobreport.undelivered(job, why, network, resolved.addresses,
                                                      _slurm_address(host, job.address), _hosts_text(host))
    run = CheckRun("core.job-report", "This node's report reached rank 0", ("core",), Status.FAIL,
                   (Finding(Status.FAIL, summary, job.address, explanation, "",
                            {"rank0": job.address, "port": job.port, "why": why}, remedy=fix),), 0.0, "distdoctor")
    return dataclasses.replace(report, runs=(run, *report.runs))


def _slurm_address(host, node: str) -> str:
    """Where Slurm reaches node (its NodeAddr), '' outside Slurm or when scontrol cannot say."""
    from distdoctor.parsers import ParseError
    from distdoctor.parsers.slurm import parse_node_show

    if not host.env.get("SLURM_JOB_ID") or not node or node.startswith("-"):
        return ""
    result = host.run(["scontrol", "show", "node", node], timeout=5.0)
    try:
        state = parse_node_show(result.stdout) if result.ok else None
    except ParseError:
        return ""
    return state.address if state is not None and state.name == node else ""


def _hosts_text(host) -> str:
    try:
        return host.read_text("/etc/hosts", max_bytes=1 << 20) or ""
    except OSError:
        return ""


def _job_report(args, job, gatherer, job_problem: str, doc: dict, report: Report, host, config,
                deadline: float, out: output.ReservedStdout) -> int:
    """Rank 0: wait (bounded) for the other nodes' reports and print one report for the job."""
    from distdoctor import fixes, remote
    from distdoctor.crosscheck import jobreport, nodes

    reports = {job.node: doc}
    missing: list = []
    if gatherer is not None:
        try:
            reports.update(gatherer.wait(job.nodes - 1, deadline))
        finally:
            gatherer.close()
        for node, why in gatherer.rejected.items():
            if node not in reports:
                missing.append(nodes.Missing(node, f"{node}: its report was refused: {why}",
                                               f"# give every node of the job the same {jobreport.SECRET_FILE} "
                                               f"(a shared home), or export DISTDOCTOR_JOB_SECRET before launching"))
    absent = [n for n in job.expected if n not in reports and n not in {m.node for m in missing}]
    own_network = ""
    if absent and job.address:
        resolved = host.resolve(job.address, timeout=2.0)
        try:
            own_network = jobreport.network_toward(resolved.addresses[0], host.net_if_addrs()) \
                if resolved.addresses else ""
        except OSError:
            own_network = ""
    for node in absent:
        why = job_problem or f"no report within the job's bound ({args.timeout or 60:g} s + 10 s)"
        fix: list[Fix] = [Fix(("python3 -m distdoctor check --each-task",), [node], srun=True)]
        if own_network and remote.plain(own_network) and not job_problem:
            # The node's own output says why (it prints its report when it cannot hand it over);
            # when that is 'timed out', this node (rank 0) drops what the others send.
            fix += [Fix(comment=f"if {node}'s output says its report timed out reaching rank 0: this node "
                                "drops inbound connections; let the cluster network in:"),
                    fixes.firewall_allow_from(job.node, [own_network])]
        missing.append(nodes.Missing(node, f"{node}: {why}", fix))
    if not job.expected and len(reports) < job.nodes:
        short = job.nodes - len(reports)
        why = job_problem or "no report within the job's bound"
        missing.append(nodes.Missing(f"{short} node{'s' if short > 1 else ''}",
                                       f"{short} of {plural(job.nodes, 'node')} sent no report: {why}"))
    view = nodes.job_view(reports, job.node, missing=missing, expect=getattr(config, "expect", None) or None,
                            host=report.host, started_at=report.started_at, duration=report.duration,
                            context=report.context)
    return write_cluster(view, args, out, args.fail_on or config.run.get("fail_on", "fail"))
