"""`distdoctor fleet`: every node's `check`, gathered (bounded) and compared in one report.

    salloc -N64 distdoctor fleet              # the allocation's nodes, one srun task per node
    distdoctor fleet --nodes gpu[001-064]     # starts its own step
    distdoctor fleet --hosts a,b,c            # outside Slurm: ssh through ClusterShell

Each node runs `distdoctor check --node-report`, which writes its report as one JSON line in
one write; srun's --label says which task wrote it, and the report names its node. The node's
command runs under `timeout`, so a hung node ends at the bound and is named, not waited for.
Commands go through host.py; the parsing and the comparison are pure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from distdoctor import hostlist
from distdoctor.crosscheck.nodes import ClusterView, Missing, NotAReport, build, check_node_report
from distdoctor.model import RunContext
from distdoctor.remote import Fix
from distdoctor.text import fold_hosts

_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
SLACK = 10.0  # seconds srun and ssh get beyond the nodes' bound before the whole fan-out is cut


@dataclass
class Gathered:
    reports: dict[str, dict]
    missing: list[Missing]


def node_argv(base: Sequence[str], timeout: float, only: Sequence[str], skip: Sequence[str]) -> list[str]:
    # The node's own checks end a little before the bound, so a slow node still reports.
    argv = [*base, "check", "--node-report", "--timeout", f"{max(1.0, timeout - 3):g}"]
    for value in only:
        argv += ["--only", value]
    for value in skip:
        argv += ["--skip", value]
    return argv


def srun_argv(nodes: Sequence[str], inside_allocation: bool, command: Sequence[str], timeout: float) -> list[str]:
    argv = ["srun", "--label", "--ntasks-per-node=1", f"-N{len(nodes)}", "-n", str(len(nodes)),
            "--kill-on-bad-exit=0", "-w", fold_hosts(list(nodes))]
    if not inside_allocation:
        argv.append(f"--immediate={max(1, int(timeout))}")  # busy nodes: say so instead of queueing
    return [*argv, "timeout", "-k", "2", f"{timeout:g}", *command]


def split_srun(stdout: str, nodes: Sequence[str], timeout: float, result_note: str = "") -> Gathered:
    """srun --label output of one task per node: each node's report, and the nodes that gave none
    (task i runs on the i-th node of the step, in Slurm's order: the order given)."""
    lines: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        m = _LABEL.match(line)
        if m:
            lines.setdefault(int(m.group(1)), []).append(m.group(2))
    reports: dict[str, dict] = {}
    missing: list[Missing] = []
    garbage: dict[str, str] = {}
    for task, texts in sorted(lines.items()):
        guess = nodes[task] if task < len(nodes) else f"task {task}"
        doc, why = _first_report(texts)
        if doc is None:
            garbage[guess] = why or "output is not a distdoctor report"
            continue
        reports[str(doc.get("node") or guess)] = doc
    for node, why in garbage.items():
        if node not in reports:
            missing.append(Missing(node, f"{node}: {why}", _retry_fix(node, slurm=True)))
    for node in nodes:
        if node not in reports and node not in garbage:
            missing.append(Missing(node, f"{node}: no answer within {timeout:g} s{result_note}",
                                           _retry_fix(node, slurm=True)))
    return Gathered(reports, missing)


_DECODER = json.JSONDecoder()


def _first_report(pieces: Sequence[str]) -> tuple[dict | None, str]:
    """The report among one task's output lines. srun --label cuts a long line into pieces of
    its buffer size (1024 bytes in 22.05), each labelled on its own line; a report has no raw
    newline, so the pieces joined without one are the line again, whatever the piece size."""
    why = ""
    for i, piece in enumerate(pieces):
        if not piece.lstrip().startswith("{"):
            continue
        text = "".join(pieces[i:]).lstrip()
        try:
            doc, _end = _DECODER.raw_decode(text)
            check_node_report(doc)
            return doc, ""
        except ValueError as exc:  # NotAReport is a ValueError too
            why = str(exc) if isinstance(exc, NotAReport) else "output is not a distdoctor report (not JSON)"
    return None, why


def split_ssh(results: Mapping[str, object], timeout: float) -> Gathered:
    """Per host: the report its one line holds, or why there is none."""
    reports: dict[str, dict] = {}
    missing: list[Missing] = []
    for host, res in results.items():
        if res.timed_out:
            missing.append(Missing(host, f"{host}: no answer within {timeout:g} s", _retry_fix(host, False)))
            continue
        lines = res.stdout.splitlines()
        if not any(line.lstrip().startswith("{") for line in lines):
            said = (res.stderr.strip().splitlines() or [""])[-1][:200]
            why = (f"ssh failed ({said})" if res.returncode == 255 else
                   f"no report (exit {res.returncode}{': ' + said if said else ''})")
            fix = _ssh_fix(host, res.returncode, res.stderr) if res.returncode == 255 else _retry_fix(host, False)
            missing.append(Missing(host, f"{host}: {why}", fix))
            continue
        doc, why = _first_report(lines)
        if doc is None:
            missing.append(Missing(host, f"{host}: {why}", _retry_fix(host, False)))
            continue
        reports[host] = doc
    return Gathered(reports, missing)


def _ssh_fix(node: str, returncode: int, stderr: str) -> Fix:
    """What to do when ssh itself failed: the same ssh again would fail the same way."""
    from distdoctor import remote
    from distdoctor.parsers import ssh as S

    kind = S.parse_ssh_result(returncode, stderr).kind
    if not remote.host_name(node):
        return Fix(comment=f"ssh to {remote.shown([node])} failed: reach it by its cluster name or address")
    if kind == S.REFUSED:
        return Fix((f"nc -vz -w 3 {node} 22",), (),
                   f"nothing listens on {node}'s ssh port: start sshd from its console (systemctl enable --now ssh), "
                   "or give ssh the port it listens on (Port in ~/.ssh/config)")
    if kind == S.TIMEOUT:
        return Fix((f"nc -vz -w 3 {node} 22",), (),
                   f"{node} does not answer on port 22: it is down, or a firewall drops ssh; "
                   "from its console open port 22 to this host")
    if kind == S.KEY_DENIED:
        return Fix((f"ssh-copy-id {node}",), (), "this user's key is not in the node's authorized_keys (asks the "
                                                  "password once)")
    if kind in (S.HOSTKEY_UNKNOWN, S.HOSTKEY_CHANGED):
        return Fix((f"ssh-keygen -F {node}",), (), "the node's host key is unknown or changed here: compare its "
                                                    "fingerprint with the one its admin reads on the console, then "
                                                    "add it to ~/.ssh/known_hosts; never switch host-key checking off")
    if kind == S.NOT_RESOLVED:
        return Fix((f"getent hosts {node}",), (), "the name does not resolve: add it to DNS or /etc/hosts")
    return _retry_fix(node, False)


def _retry_fix(node: str, slurm: bool) -> Fix:
    return Fix(("python3 -m distdoctor check -v",), [node], srun=slurm)


def save(directory: str, reports: Mapping[str, dict]) -> None:
    """Each node's report as DIR/<node>.json, written whole: to a temp file of a random name
    created with O_EXCL (mkstemp: never through a symlink someone planted at a name they could
    predict, as `<node>.json.tmp<pid>` was), then renamed over the name, which replaces a
    symlink there instead of writing through it."""
    import tempfile

    os.makedirs(directory, exist_ok=True)
    for node, doc in reports.items():
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", node).lstrip(".") or "node"
        path = os.path.join(directory, f"{safe}.json")
        fd, tmp = tempfile.mkstemp(prefix=".distdoctor-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2)
                fh.write("\n")
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


def run(args, host, expect: Mapping[str, object]) -> ClusterView:
    """Gather and compare; raises ValueError for a usage problem (no nodes to ask)."""
    started_wall, started = time.time(), time.monotonic()
    env = host.env
    if args.timeout <= 0 or args.fanout < 1:
        raise ValueError("--timeout must be positive and --fanout at least 1")
    hosts = [h for value in args.hosts for part in value.split(",") if part.strip()
             for h in hostlist.expand(part.strip())]
    if hosts:
        base = shlex.split(args.distdoctor) if args.distdoctor else ["python3", "-m", "distdoctor"]
        argv = node_argv(base, args.timeout, args.only, args.skip)
        results = host.fan_out(hosts, argv, args.fanout, args.timeout, ssh_options=args.ssh_option)
        gathered = split_ssh(results, args.timeout)
        how = f"ssh to {len(hosts)} hosts"
    else:
        from distdoctor.launch import step_kind

        step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or ""
        if step and step_kind(step) == "normal":
            # srun inside a step waits for the resources the step itself holds
            raise ValueError("fleet runs its own srun step: start it from the allocation's shell "
                             "(salloc -N2 distdoctor fleet), not under srun")
        inside = bool(env.get("SLURM_JOB_ID")) and not args.nodes
        expr = args.nodes or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
        if not expr:
            raise ValueError("no nodes to check: run it inside an allocation (salloc -N2 distdoctor fleet), "
                             "or name them: --nodes gpu[001-064] (Slurm) or --hosts a,b,c (ssh)")
        nodes = hostlist.expand(expr)
        base = shlex.split(args.distdoctor) if args.distdoctor else [sys.executable, "-m", "distdoctor"]
        command = node_argv(base, args.timeout, args.only, args.skip)
        res = host.run(srun_argv(nodes, inside, command, args.timeout), timeout=args.timeout + SLACK)
        if res.missing or res.error:
            raise ValueError(f"cannot run srun ({res.describe()}): outside Slurm, name the hosts with --hosts")
        note = ""
        if not res.stdout.strip() and res.stderr.strip() and not res.timed_out:
            note = f" (srun: {res.stderr.strip().splitlines()[-1][:200]})"
        gathered = split_srun(res.stdout, nodes, args.timeout, note)
        how = f"srun on {len(nodes)} nodes"
    if args.save:
        save(args.save, gathered.reports)
    from datetime import datetime, timezone

    stamp = datetime.fromtimestamp(started_wall, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    context = RunContext("fleet", f"fleet: {how}", "slurm" if not hosts else "ssh",
                         job_id=env.get("SLURM_JOB_ID", "") if not hosts else "")
    return build(gathered.reports, missing=gathered.missing, expect=expect, command="fleet",
                         host=host.hostname(), started_at=stamp, duration=time.monotonic() - started,
                         context=context)
