"""`distdoctor health`: the checks as Slurm's HealthCheckProgram/Prolog/Epilog; drains this node
on failure and resumes only its own drains (the policy is distdoctor/health.py)."""

from __future__ import annotations

import argparse
import io
import time

from distdoctor import limits, output
from distdoctor import config as config_mod
from distdoctor import registry as registry_mod
from distdoctor.commands.common import UsageError, load_config, select, split, validate_selection, write_output
from distdoctor.model import EXIT_ERROR, exit_code
from distdoctor.text import plural

EPILOG = ("On a failure that needs the node out of service: scontrol update nodename=<node> state=drain "
          "reason=\"distdoctor: <action>: <check>: <what>\", unless its state or its partition's cannot be read or more "
          "than --max-drained-share of the partition is drained by distdoctor already. On success: resume the node only "
          "if distdoctor drained it. See docs/health.md.")
RAW_EPILOG = False


def add_arguments(health: argparse.ArgumentParser) -> None:
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
    health.add_argument("--format", choices=("text", "json", "prometheus"), default="text",
                        help="text (default: the verdict in lines for slurmd's log), json (the check report with a "
                             "'health' object, docs/report.schema.json) or prometheus (node_exporter textfile)")
    health.add_argument("--max-drained-share", type=limits.arg_fraction, default=None, metavar="FRACTION",
                        help="circuit breaker: do not drain when more than this share of the node's partitions is "
                             "already drained by distdoctor (default 0.10, or run.max_drained_share)")


def run(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor import health
    from distdoctor.api import Context
    from distdoctor.engine import run_checks
    from distdoctor.facts import Facts
    from distdoctor.host import Host

    started = time.monotonic()
    started_wall = time.time()
    if args.node is not None:
        problem = health.node_name_problem(args.node)
        if problem:
            raise UsageError(f"--node: {problem}")
    if args.output:
        output.check_writable(args.output)  # an unwritable -o is exit 74 before any node is touched
    host = Host()
    config = load_config(args.config, host)
    bound = args.timeout if args.timeout is not None else health.DEFAULT_TIMEOUT
    registry = registry_mod.load(args.checks_dir, host.env, budget=bound / 2, run_bound=bound)
    try:
        config.validate_against(registry.checks)
    except config_mod.ConfigError as exc:
        raise UsageError(str(exc)) from None
    # A node's health is the node's: the reach area (probes of other hosts) runs only when asked for.
    skip = split(args.skip) + ([] if args.only else list(health.DEFAULT_SKIP))
    validate_selection(registry.sorted(), args, incomplete=registry.incomplete)
    chosen = [c for c in select(registry.sorted(), split(args.only), skip) if config.enabled(c.id)]
    if bound <= health.SCONTROL_RESERVE + 1:
        raise UsageError(f"--timeout must be more than {health.SCONTROL_RESERVE + 1:g} s: the checks need time, "
                         f"and scontrol gets {health.SCONTROL_RESERVE:g} s")
    jobs = args.jobs if args.jobs is not None else int(config.run.get("jobs", 8))
    budget = bound - health.SCONTROL_RESERVE - (time.monotonic() - started)
    node = args.node or health.node_name(host)
    # Fixes name the node being judged (Slurm's name for it), not whatever the local hostname is.
    facts = Facts(host, config, options={"hosts": [], "ports": [], "probe_torch": False, "node": node,
                                         "inventory_timeout": max(1.0, min(20.0, budget - 2))})
    runs = run_checks(chosen, lambda info: Context(facts, config.params_for(info.id, info.params)),
                      timeout_for=lambda info: min(config.timeout_for(info.id, info.timeout), budget),
                      jobs=jobs, total_timeout=budget, run_bound=bound)
    fail_on = args.fail_on or config.run.get("fail_on", "fail")
    failed = health.failing(runs, fail_on)
    bad = health.draining(runs, fail_on)
    max_share = args.max_drained_share if args.max_drained_share is not None else \
        float(config.run.get("max_drained_share", health.MAX_DRAINED_SHARE))
    stream = io.StringIO()
    for run in failed:
        finding = next((f for f in run.findings if f.status.severity >= run.status.severity), None)
        needs = f" [{finding.action}]" if finding is not None and finding.action else ""
        kept = "" if run in bad else "   (reported; not a reason to drain)"
        stream.write(f"{run.status.value.upper()} {run.id}{needs}: {finding.summary if finding else run.status.value}"
                     f"{kept}\n")
        if finding is not None and finding.fix:
            stream.write("".join(f"    $ {line}\n" for line in finding.fix.splitlines()))
    name_problem = health.node_name_problem(node)
    if name_problem:
        state, problem = None, name_problem
    else:
        state, problem = health.node_state(host, node)
    if problem:
        stream.write(f"distdoctor health: cannot read the state of node {node[:80]}: {problem}\n")
    usable, drained = health.in_service(state) if state is not None else (False, False)
    ours = drained and state is not None and state.reason.startswith(health.REASON_PREFIX)
    breaker = health.partition_load(host, node) if bad and usable and not ours else None
    action = health.decide(node, state, bad, breaker, max_share, runs=runs, fail_on=fail_on,
                           full_selection=not args.only and not args.skip)
    error = ""
    if args.dry_run:
        stream.write(f"{action.why}\n")
        if action.argv:
            stream.write(f"would run: {action.shell()}\n")
    else:
        if args.output and action.argv:
            output.check_writable(args.output)  # still writable now that the checks are done
        error = health.apply(host, action)
        stream.write(f"{action.why}\n")
        if error:
            stream.write(f"distdoctor health: {error}\n")
    elapsed = time.monotonic() - started
    stream.write(f"distdoctor health: {plural(len(runs), 'check')} on {node} in {elapsed:.1f} s, "
                 f"{len(failed)} at or above {fail_on}, {len(bad)} needing the node out of service\n")
    verdict = {"node": node, "action": action.kind, "command": list(action.argv), "why": action.why,
               "dry_run": bool(args.dry_run), "error": error, "fail_on": fail_on,
               "state": None if state is None else {"state": state.state, "reason": state.reason},
               "state_problem": problem, "draining_checks": [r.id for r in bad],
               "breaker": None if breaker is None else {**breaker.to_dict(), "max_share": max_share}}
    text = stream.getvalue()
    if args.format != "text":
        from distdoctor.engine import build_report
        from distdoctor.render import prometheus
        from distdoctor.render import json as json_render

        report = build_report(runs, host=node, context=facts.run_context, started=started_wall,
                              duration=elapsed, command="health")
        text = (json_render.render(report, {"health": verdict}) if args.format == "json"
                else prometheus.render(report) + prometheus.render_health(node, verdict))
    write_output(text, args.output, out.fd)
    return EXIT_ERROR if error else exit_code(runs, fail_on)
