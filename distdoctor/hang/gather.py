"""--job ID: the snapshot of every node of a running Slurm job, gathered in one bounded round;
--hosts: the same over ssh (ClusterShell, as `fleet --hosts`).

`squeue` says where the job runs; `srun --jobid ID --overlap` then starts one task per node
inside the job's own allocation (--overlap: beside the job's steps, without waiting for their
CPUs), each running `distdoctor hang --node-snapshot --job ID` under `timeout`, which prints the
node's snapshot as one JSON line. srun's --label says which task wrote which line; a node whose
line is missing or garbled is named, not waited for.
"""

from __future__ import annotations

import shlex

import json
import re
from typing import Sequence

from distdoctor import hostlist, remote
from distdoctor.text import fold_hosts

SLACK = 8.0  # seconds srun gets beyond the nodes' bound before the whole round is cut
_LABEL = re.compile(r"^\s*(\d+): ?(.*)$")
_DECODER = json.JSONDecoder()
Missing = tuple[str, str, str]  # (node, why, fix)


def parse_squeue(text: str) -> tuple[str, str] | None:
    """`squeue -h -o '%T %N'`: (state, nodelist) of the job, or None when it printed nothing."""
    for line in text.splitlines():
        parts = line.split()
        if parts:
            return parts[0], parts[1] if len(parts) > 1 else ""
    return None


def node_command(python: str, job: str, timeout: float, native: bool) -> list[str]:
    argv = [python, "-m", "distdoctor", "hang", "--node-snapshot", "--job", job, "--timeout", f"{max(2.0, timeout):g}"]
    return argv + (["--native"] if native else [])


def srun_argv(job: str, nodes: Sequence[str], command: Sequence[str], timeout: float) -> list[str]:
    n = len(nodes)
    return ["srun", f"--jobid={job}", "--overlap", "--label", f"-N{n}", f"-n{n}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=0", f"--nodelist={fold_hosts(list(nodes))}",
            "timeout", "-k", "2", f"{timeout:g}", *command]


def split(stdout: str, nodes: Sequence[str]) -> tuple[list[dict], dict[str, str]]:
    """srun --label output: the snapshots, and per node that gave none why not. srun cuts long
    lines into labelled pieces; a task's pieces joined again are its line."""
    pieces: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        m = _LABEL.match(line)
        if m:
            pieces.setdefault(int(m.group(1)), []).append(m.group(2))
    snapshots, bad = [], {}
    for task, texts in sorted(pieces.items()):
        node = nodes[task] if task < len(nodes) else f"task {task}"
        start = next((i for i, t in enumerate(texts) if t.lstrip().startswith("{")), None)
        if start is None:
            bad[node] = f"printed no snapshot ({(texts[-1] if texts else '')[:160]})"
            continue
        try:
            doc, _end = _DECODER.raw_decode("".join(texts[start:]).lstrip())
        except ValueError:
            bad[node] = "printed a snapshot that is not JSON (cut short?)"
            continue
        if not isinstance(doc, dict) or "hang_snapshot" not in doc:
            bad[node] = "printed JSON that is not a hang snapshot"
            continue
        snapshots.append(doc)
    return snapshots, bad


def job(host, job_id: str, timeout: float, native: bool = False) -> tuple[list[dict], list[Missing]]:
    """Every node's snapshot, and the nodes (or the job itself) that gave none, with why."""
    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        return [], [(f"job {job_id}", f"{job_id!r} is not a Slurm job id", "squeue --me")]
    q = host.run(["squeue", "-h", "-j", job_id, "-o", "%T %N"], timeout=10)
    if q.missing:
        return [], [(f"job {job_id}", "squeue is not installed here: --job needs Slurm's client tools",
                     remote.comment("run distdoctor hang on the job's nodes, or with --pids"))]
    if not q.ok:
        said = (q.stderr or q.stdout).strip().splitlines()
        why = said[-1][:200] if said else q.describe()
        return [], [(f"job {job_id}", f"job {job_id}: squeue: {why}", "squeue --me")]
    found = parse_squeue(q.stdout)
    if found is None:
        return [], [(f"job {job_id}", f"job {job_id} is not in the queue (finished, or never existed)",
                     f"sacct -j {job_id} -o JobID,State,ExitCode,NodeList")]
    state, nodelist = found
    if state != "RUNNING" or not nodelist:
        return [], [(f"job {job_id}", f"job {job_id} is {state}, not running: it has no ranks to read",
                     f"scontrol show job {job_id}")]
    try:
        nodes = hostlist.expand(nodelist)
    except hostlist.HostlistError as exc:
        return [], [(f"job {job_id}", f"job {job_id}: cannot read its node list {nodelist!r}: {exc}", "")]
    node_bound = max(2.0, timeout - 3.0)
    argv = srun_argv(job_id, nodes, node_command(host.python_executable(), job_id, node_bound - 1, native), node_bound)
    res = host.run(argv, timeout=node_bound + SLACK)
    snapshots, bad = split(res.stdout, nodes)
    # A snapshot names its node by hostname, which may differ from Slurm's name for it
    # (gpu012.cluster vs gpu012): short names are compared.
    answered = {str(s.get("node", "")).split(".")[0] for s in snapshots}
    missing: list[Missing] = []
    tail = (res.stderr.strip().splitlines() or [""])[-1][:200]
    for node in nodes:
        if node.split(".")[0] in answered:
            continue
        why = bad.get(node) or (f"no answer within {node_bound:g} s" if res.timed_out else
                                f"no answer{f' (srun: {tail})' if tail else ''}")
        missing.append((node, f"{node}: {why}", remote.on([node], shlex.join(["python3", "-m", "distdoctor", "hang",
                                                                                    "--job", str(job_id)]))))
    return snapshots, missing



def _snapshot_in(text: str) -> tuple[dict | None, str]:
    for i, line in enumerate(text.splitlines()):
        if line.lstrip().startswith("{"):
            try:
                doc, _end = _DECODER.raw_decode("\n".join(text.splitlines()[i:]).lstrip())
            except ValueError:
                return None, "printed a snapshot that is not JSON (cut short?)"
            if isinstance(doc, dict) and "hang_snapshot" in doc:
                return doc, ""
            return None, "printed JSON that is not a hang snapshot"
    return None, ""


def hosts(host, names: Sequence[str], timeout: float, base: Sequence[str], native: bool = False, fanout: int = 64,
          ssh_options: Sequence[str] = ()) -> tuple[list[dict], list[Missing]]:
    """Every host's snapshot over ssh, at most `fanout` connections at once, in one bounded round."""
    node_bound = max(2.0, timeout - 3.0)
    argv = [*base, "hang", "--node-snapshot", "--timeout", f"{max(2.0, node_bound - 1):g}"] + (["--native"] if native else [])
    results = host.fan_out(list(names), argv, fanout, node_bound, ssh_options=ssh_options)
    snapshots: list[dict] = []
    missing: list[Missing] = []
    for name in names:
        res = results.get(name)
        retry = remote.on([name], "python3 -m distdoctor hang")
        if res is None or res.timed_out:
            missing.append((name, f"{name}: no answer within {node_bound:g} s", retry))
            continue
        doc, why = _snapshot_in(res.stdout)
        if doc is None:
            said = (res.stderr.strip().splitlines() or [""])[-1][:200]
            why = why or (f"ssh failed ({said})" if res.returncode == 255 else
                          f"no snapshot (exit {res.returncode}{': ' + said if said else ''})")
            missing.append((name, f"{name}: {why}", retry))
            continue
        snapshots.append(doc)
    return snapshots, missing
