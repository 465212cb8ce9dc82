"""From the snapshots of one or more nodes (collect.py) to findings: which ranks are stuck,
where, and what the others wait for. Pure: snapshots in, CheckRuns out."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Sequence

from distdoctor import remote
from distdoctor.hang import gpuwait, grouping, ptrace
from distdoctor.hang.discovery import RankProcess
from distdoctor.hang.stacks import StackDump
from distdoctor.model import CheckRun, Finding, Status, worst
from distdoctor.text import plural, rank_ranges

BUSY_CPU = 80.0  # percent of a core: a rank this busy outside a collective is computing, not waiting


@dataclass
class Rank:
    process: RankProcess
    stack: StackDump
    state: dict
    node: str  # the node whose snapshot it came from

    @property
    def frames(self):
        main = self.stack.main()
        return main.frames if main else ()

    @property
    def code(self) -> str:
        """The source line its main thread is at (collect.py reads it on the node), or ""."""
        return str(self.state.get("code") or "")[:gpuwait.MAX_CODE]

    def gpu_wait(self) -> str:
        return gpuwait.why(self.frames, self.code)


def ranks_of(snapshots: Sequence[dict]) -> list[Rank]:
    out = []
    for snap in snapshots:
        for entry in snap.get("ranks") or []:
            try:
                out.append(Rank(RankProcess.from_dict(entry["process"]), StackDump.from_dict(entry.get("stack") or {}),
                                dict(entry.get("state") or {}), str(snap.get("node", ""))))
            except (KeyError, TypeError, ValueError, IndexError):
                continue  # a snapshot from another version: the node's other ranks still count
    return out


def _run(check_id: str, title: str, findings: list[Finding], empty: str = "nothing to judge") -> CheckRun:
    if not findings:  # a run always says something (the report schema requires a finding)
        findings = [Finding(Status.SKIP, empty)]
    status = worst(f.status for f in findings)
    return CheckRun(check_id, title, ("hang",), status, tuple(findings), 0.0, "distdoctor")


def _on(here: str, node: str, command: str) -> str:
    """command for node: as it is when the report is read on that node, else through remote."""
    return command if node == here else remote.on([node], command)


def ptrace_fix(pt: dict, here: str, node: str) -> str:
    """The fix a node's snapshot gives for py-spy's permission, for that node: only one that
    distdoctor itself writes (ptrace.KNOWN_FIXES), its commands addressed to the node."""
    text = str(pt.get("fix") or "")
    if not text:
        return ""
    if text not in ptrace.KNOWN_FIXES:
        return remote.comment(f"on {node}: run distdoctor hang there for the way to let py-spy read the ranks "
                              "(its snapshot's own fix is not one distdoctor writes)")
    return "\n".join(line if line.startswith("#") else _on(here, node, line) for line in text.splitlines())


def pyspy_line(pyspy: str, pid: int, native: bool = True) -> str:
    argv = [pyspy or "py-spy", "dump", "--pid", str(pid)]
    return shlex.join(argv + (["--native"] if native else []))


def _jobs(ranks: list[Rank]) -> dict[str, list[Rank]]:
    jobs: dict[str, list[Rank]] = {}
    for r in ranks:
        jobs.setdefault(r.process.job, []).append(r)
    return jobs


def found_run(snapshots: Sequence[dict], ranks: list[Rank], job_mode: bool) -> CheckRun:
    findings = []
    for snap in snapshots:
        for problem in snap.get("problems") or []:
            findings.append(Finding(Status.FAIL, f"{snap.get('node', '')}: {problem}", subject=str(snap.get("node", ""))))
    if not ranks:
        unreadable = sum(int(s.get("unreadable") or 0) for s in snapshots)
        extra = (f"; the environment of {plural(unreadable, 'process', 'processes')} could not be read by this user"
                 if unreadable else "")
        findings.append(Finding(Status.WARN, "no rank of a distributed job found" + extra, explanation=(
            "A rank is a process whose environment names its rank (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, "
            "SLURM_PROCID). Name the processes with --pids, or the Slurm job with --job."),
            fix="ps -eo pid,user,etime,args --sort=-etime"))
        return _run("hang.ranks", "The job's ranks", findings)
    for job, members in _jobs(ranks).items():
        nodes = sorted({r.process.host for r in members})
        world = next((r.process.world_size for r in members if r.process.world_size), None)
        seen = {r.process.rank for r in members if r.process.rank is not None}
        summary = f"{job}: {plural(len(members), 'rank')} on {remote.shown(nodes)}"
        status = Status.OK
        explanation = ""
        if world:
            summary += f" of {world}"
            lacking = sorted(set(range(world)) - seen)
            if lacking and job_mode:
                status = Status.FAIL
                summary += f"; rank{'s' if len(lacking) > 1 else ''} {rank_ranges(lacking)} found on no node"
                explanation = "A rank that is not running on any node of the job has exited or was never started."
            elif lacking:
                are = "Rank" if len(lacking) == 1 else "Ranks"
                explanation = (f"{are} {rank_ranges(lacking)} {'is' if len(lacking) == 1 else 'are'} not on this node; "
                               "read them all with "
                               "`distdoctor hang --job ID` (Slurm) or on their nodes.")
        findings.append(Finding(status, summary, subject=job, explanation=explanation,
                                evidence={"job": job, "nodes": nodes, "world_size": world, "ranks": sorted(seen)}))
    return _run("hang.ranks", "The job's ranks", findings)


_STACK_PROBLEMS = {
    "gone": (Status.FAIL, "exited while being read"),
    "denied": (Status.FAIL, "cannot be read: ptrace refused"),
    "missing": (Status.FAIL, "cannot be read: py-spy is not installed"),
    "not python": (Status.WARN, "is not a Python process: no Python stack"),
    "timeout": (Status.WARN, "gave no stack in time"),
    "failed": (Status.WARN, "gave no stack"),
    "garbled": (Status.WARN, "gave no stack"),
}


def stacks_run(snapshots: Sequence[dict], ranks: list[Rank], here: str) -> CheckRun:
    findings = []
    ptrace_shown = False
    for r in ranks:
        kind = r.stack.error
        if not kind:
            continue
        status, what = _STACK_PROBLEMS.get(kind, (Status.WARN, "gave no stack"))
        fix, explanation = "", r.stack.detail
        if kind == "missing":
            fix = _on(here, r.process.host, "python3 -m pip install py-spy")
        elif kind == "denied":
            snap = next((s for s in snapshots if s.get("node") == r.node), {})
            pt = snap.get("ptrace") or {}
            explanation = f"{pt.get('why')}. py-spy: {r.stack.detail}" if pt.get("why") else r.stack.detail
            fix = "" if ptrace_shown else ptrace_fix(pt, here, str(snap.get("node") or r.process.host))
            ptrace_shown = True
        elif kind in ("timeout", "failed", "garbled"):
            fix = _on(here, r.process.host, f"timeout 30 {pyspy_line('py-spy', r.process.pid, native=False)}")
        findings.append(Finding(status, f"{r.process.where()} {what}", subject=r.process.label,
                                explanation=explanation, fix=fix,
                                evidence={"pid": r.process.pid, "error": kind, "detail": r.stack.detail}))
    for snap in snapshots:
        pt = snap.get("ptrace") or {}
        if pt and not pt.get("allowed") and not ptrace_shown and snap.get("ranks"):
            findings.append(Finding(Status.FAIL, f"{snap.get('node')}: {pt.get('why')}",
                                    fix=ptrace_fix(pt, here, str(snap.get("node") or ""))))
            ptrace_shown = True
    read = [r for r in ranks if not r.stack.error]
    if read:
        slowest = max(r.stack.duration for r in read)
        findings.append(Finding(Status.OK, f"read the stacks of {plural(len(read), 'rank')} (py-spy, non-blocking; "
                                           f"slowest {slowest:.2f} s)"))
    return _run("hang.stacks", "Every rank's Python stack", findings, "no stack to read")


def _others_line(wave: grouping.Group) -> str:
    if wave.size == 1:
        return f"{grouping.place(wave.frames)} like {wave.members[0].process.where().split(' (')[0]}"
    return f"{grouping.place(wave.frames)} like the other {wave.size}"


def wave_run(ranks: list[Rank], here: str) -> CheckRun:
    findings = []
    for job, members in _jobs(ranks).items():
        readable = [r for r in members if not r.stack.error and r.frames]
        if not readable:
            continue
        groups = grouping.group([(r, r.frames) for r in readable])
        wave = groups[0]
        evidence = {"job": job, "groups": [
            {"ranks": sorted(r.process.rank for r in g.members if r.process.rank is not None), "size": g.size,
             "place": grouping.place(g.frames), "collective": g.collective} for g in groups[:16]]}
        if len(groups) == 1:
            where = grouping.place(wave.frames)
            if wave.collective:
                findings.append(Finding(Status.WARN, f"{job}: all {plural(wave.size, 'rank')} read wait in {where}",
                                        subject=job, explanation=(
                                            "No rank read is elsewhere: the one they wait for is on a node not read "
                                            "here, has exited, or is stuck below Python (a GPU kernel, the network). "
                                            "Read every node (--job), and the Flight Recorder or NCCL RAS."),
                                        evidence=evidence))
            elif (waits := wave.members[0].gpu_wait()):
                code = wave.members[0].code
                findings.append(Finding(Status.WARN, f"{job}: all {plural(wave.size, 'rank')} read wait for their GPU "
                                                     f"in {where}" + (f" (`{code}`)" if code else ""),
                                        subject=job, explanation=(
                                            f"{waits[0].upper() + waits[1:]}: it waits for every kernel and "
                                            "collective queued on the GPU before it, so the job is stuck below "
                                            "Python: a collective that waits for a rank on another node, or a "
                                            "kernel that does not end. The Flight Recorder and NCCL RAS say which "
                                            "collective; `py-spy dump --native` shows the CUDA call."),
                                        evidence={**evidence, "gpu_wait": waits, "code": code}))
            else:
                findings.append(Finding(Status.OK, f"{job}: all {plural(wave.size, 'rank')} read are in {where}, "
                                                   "outside any collective", subject=job, evidence=evidence))
            continue
        if wave.size == groups[1].size and wave.collective == groups[1].collective:
            findings.append(Finding(Status.WARN, f"{job}: no majority: {len(groups)} groups of ranks, the largest "
                                                 f"{plural(wave.size, 'rank')}", subject=job, evidence=evidence))
        for g in groups[1:]:
            for r in g.members:
                where = grouping.place(g.frames)
                # a wave waiting for its GPUs (.item() after a collective) waits for the others as surely
                # as one inside the collective call
                waiting = wave.collective or bool(wave.members[0].gpu_wait())
                status = Status.FAIL if waiting and not (g.collective or g.members[0].gpu_wait()) else Status.WARN
                fix = _on(here, r.process.host, pyspy_line(str(r.state.get("pyspy") or "py-spy"), r.process.pid))
                findings.append(Finding(
                    status, f"{r.process.where()} is in {where}, not in {_others_line(wave)}",
                    subject=r.process.label,
                    explanation=(("The other ranks wait for it in a collective." if wave.collective else
                                  "The other ranks wait for their GPUs, which wait for it in a collective.")
                                 if status == Status.FAIL else
                                 "Its stack differs from the wave's."),
                    fix=remote.comment("its Python and C/C++ stack (py-spy pauses the rank for the length of the dump):")
                    + "\n" + fix,
                    evidence={"pid": r.process.pid, "host": r.process.host, "gpu": r.process.gpu,
                              "frames": [[f.name, f.file, f.line] for f in g.frames[:32]], **evidence}))
    return _run("hang.wave", "Where the ranks are: the wave and the outliers", findings,
                "no rank's Python stack could be read: nothing to group")


def state_run(ranks: list[Rank], here: str) -> CheckRun:
    findings = []
    for r in ranks:
        st = r.state
        where = r.process.where()
        if not st.get("alive", True):
            findings.append(Finding(Status.FAIL, f"{where} has exited (its process is gone)",
                                    subject=r.process.label, evidence={"pid": r.process.pid}))
            continue
        state = str(st.get("state") or "")
        wchan = str(st.get("wchan") or "")
        if state == "D":
            findings.append(Finding(Status.FAIL, f"{where} is in uninterruptible sleep (D)"
                                                 + (f" in the kernel at {wchan}" if wchan else ""),
                                    subject=r.process.label, explanation=(
                                        "A process in D state waits on the kernel (storage, a driver) and no "
                                        "signal reaches it; the rank and every rank waiting for it are stuck there."),
                                    fix=_on(here, r.process.host, f"cat /proc/{r.process.pid}/stack"),
                                    evidence={"pid": r.process.pid, "wchan": wchan}))
            continue
        cpu = st.get("cpu_percent")
        if isinstance(cpu, (int, float)) and cpu >= BUSY_CPU and r.frames and not grouping.in_collective(r.frames) \
                and (waits := r.gpu_wait()):
            code = f" (`{r.code}`)" if r.code else ""
            findings.append(Finding(Status.WARN, f"{where} spins ({cpu:.0f}% CPU) waiting for its GPU in "
                                                 f"{grouping.place(r.frames)}{code}", subject=r.process.label,
                                    explanation=(f"{waits[0].upper() + waits[1:]}: CUDA spins a core while it waits "
                                                 "for the work queued before it, so this rank is not computing: its "
                                                 "GPU has not finished a kernel or a collective."),
                                    fix=_on(here, r.process.host, pyspy_line(str(r.state.get("pyspy") or "py-spy"),
                                                                             r.process.pid)),
                                    evidence={"pid": r.process.pid, "cpu_percent": cpu, "gpu_wait": waits,
                                              "code": r.code}))
        elif isinstance(cpu, (int, float)) and cpu >= BUSY_CPU and r.frames and not grouping.in_collective(r.frames):
            findings.append(Finding(Status.WARN, f"{where} is busy ({cpu:.0f}% CPU) in {grouping.place(r.frames)}, "
                                                 "outside any collective", subject=r.process.label,
                                    explanation="A rank computing while the others wait is the one they wait for, "
                                                "or a loop that does not end.",
                                    evidence={"pid": r.process.pid, "cpu_percent": cpu}))
    if ranks and not findings:
        states = sorted({str(r.state.get("state") or "?") for r in ranks})
        findings.append(Finding(Status.OK, f"no rank in D state, gone, or busy outside a collective "
                                           f"(states {', '.join(states)})"))
    return _run("hang.process-state", "The ranks' process state", findings)


def _who(ranks_by_number: dict[int, Rank], numbers: list[int], limit: int = 8) -> str:
    """`rank 1 on n1 (pid 4411)`, or `ranks 1,5 (rank 1 on n1 (pid 4411), ...)`."""
    named = [ranks_by_number[n].process.where() if n in ranks_by_number else f"rank {n}" for n in numbers[:limit]]
    more = f" and {len(numbers) - limit} more" if len(numbers) > limit else ""
    return ", ".join(named) + more


def fr_run(snapshots: Sequence[dict], ranks: list[Rank], here: str) -> CheckRun | None:
    from distdoctor.hang import frmatch

    title = "Flight Recorder: the collectives every rank entered"
    reads = []  # (rank, its dump record)
    by_node = {snap.get("node"): snap.get("flight_recorder") or {} for snap in snapshots}
    for r in ranks:
        fr = by_node.get(r.node) or {}
        if str(r.process.pid) in fr:
            reads.append((r, fr[str(r.process.pid)]))
    if not reads:
        return None
    findings = []
    if not any(d.get("enabled") or d.get("status") not in ("disabled",) for _r, d in reads):
        return _run("hang.flight-recorder", title, [Finding(
            Status.SKIP, "the Flight Recorder is not enabled in the job (TORCH_FR_BUFFER_SIZE unset)",
            explanation="With it, torch records each rank's collectives; the ranks missing from the first unmatched "
                        "one are then named. Enable it for the next run.",
            fix="export TORCH_FR_BUFFER_SIZE=2000")])
    traces: dict[int, dict] = {}
    by_number = {r.process.rank: r for r in ranks if r.process.rank is not None}
    missing_dumps = []
    for r, d in reads:
        status = d.get("status")
        if status == "ok" and r.process.rank is not None:
            traces[r.process.rank] = d
        elif status == "missing":
            missing_dumps.append((r, d))
        elif status in ("stale", "huge", "unreadable", "bad", "foreign"):
            findings.append(Finding(Status.WARN, f"{r.process.where()}: Flight Recorder dump {d.get('path')} not used: "
                                                 f"{d.get('detail')}", subject=r.process.label,
                                    evidence={"path": d.get("path"), "status": status}))
    if missing_dumps:
        r0, d0 = missing_dumps[0]
        pipes = [(r, d) for r, d in missing_dumps if d.get("pipe")]
        handled = [r for r, _d in missing_dumps if r.state.get("usr1") in ("caught", "blocked")]
        if pipes:
            # torch dumps, without stopping the job, when a byte is written to <prefix><rank>.pipe
            fix = "\n".join(_on(here, r.process.host, shlex.join(
                ["sh", "-c", "echo 1 > " + shlex.quote(f"{d['pipe']}{r.process.rank}.pipe")])) for r, d in pipes[:8])
        elif handled:
            # The ranks catch (or sigwait for) SIGUSR1: the job's own dump handler. Never offered
            # otherwise: SIGUSR1's default action ends the process.
            per_host: dict[str, list[int]] = {}
            for r in handled:
                per_host.setdefault(r.process.host, []).append(r.process.pid)
            fix = "\n".join(_on(here, h, "kill -USR1 " + " ".join(map(str, sorted(p)))) for h, p in per_host.items())
        else:
            fix = remote.comment("torch writes the dump when a collective times out (the NCCL watchdog), or the job "
                                 "dumps it from its own handler (torch._C._distributed_c10d._dump_fr_trace)")
        findings.append(Finding(Status.SKIP if not traces else Status.WARN,
                                f"no Flight Recorder dump yet for {plural(len(missing_dumps), 'rank')} "
                                f"(e.g. {d0.get('path')})", subject=r0.process.label, fix=fix,
                                evidence={"paths": [d.get("path") for _r, d in missing_dumps[:16]]}))
    if len(traces) >= 2:
        m = frmatch.match(traces)
        for u in m.unmatched:
            op = f" ({u.op})" if u.op else ""
            findings.append(Finding(
                Status.FAIL, f"collective #{u.seq}{op} of process group {u.pg} was entered by "
                             f"{plural(len(u.entered), 'rank')} but not by {_who(by_number, u.missing)}",
                subject=f"pg {u.pg} seq {u.seq}",
                explanation=("The first collective not every rank entered: the ranks named never called it; "
                             "the others wait in it. Their Python frames are under hang.wave."),
                fix="\n".join(_on(here, by_number[n].process.host, pyspy_line(str(by_number[n].state.get("pyspy") or
                                                                                  "py-spy"), by_number[n].process.pid))
                              for n in u.missing[:4] if n in by_number) or remote.comment("read the ranks' stacks"),
                evidence={"pg": u.pg, "seq": u.seq, "op": u.op, "entered": u.entered, "missing": u.missing,
                          "missing_last": {str(k): v for k, v in u.missing_last.items()}}))
        for dsc in m.desyncs:
            major_op, major_sizes = dsc.majority
            for (op, sizes), odd in dsc.odd.items():
                findings.append(Finding(
                    Status.FAIL, f"desync at collective #{dsc.seq} of process group {dsc.pg}: {_who(by_number, odd)} "
                                 f"ran {op} {sizes} where {plural(len(dsc.majority_ranks), 'rank')} ran "
                                 f"{major_op} {major_sizes}", subject=f"pg {dsc.pg} seq {dsc.seq}",
                    explanation="Ranks that enter different collectives (or the same one with different sizes) under "
                                "one sequence number wait for each other forever, or corrupt each other's data.",
                    evidence={"pg": dsc.pg, "seq": dsc.seq, "odd": odd, "majority": dsc.majority_ranks,
                              "odd_op": op, "majority_op": major_op}))
        if not m.unmatched and not m.desyncs:
            findings.append(Finding(Status.OK, f"the {plural(len(traces), 'rank')} with a dump entered the same "
                                               f"collectives, in the same order (last common: "
                                               f"{', '.join(f'pg {k} #{v}' for k, v in sorted(m.last_common.items()))})"))
    elif traces and not findings:
        findings.append(Finding(Status.SKIP, "a Flight Recorder dump of one rank only: nothing to match it with"))
    return _run("hang.flight-recorder", title, findings)


def nodes_run(missing: Sequence[tuple[str, str, str]]) -> CheckRun | None:
    if not missing:
        return None
    return _run("hang.nodes", "Every node of the job answered",
                [Finding(Status.FAIL, why, subject=node, fix=fix) for node, why, fix in missing])


def runs(snapshots: Sequence[dict], here: str, job_mode: bool = False,
         missing: Sequence[tuple[str, str, str]] = ()) -> list[CheckRun]:
    ranks = ranks_of(snapshots)
    pyspy = {snap.get("node"): snap.get("pyspy") or "py-spy" for snap in snapshots}
    for r in ranks:  # which py-spy the fix names: the one that ran on that node
        r.state.setdefault("pyspy", pyspy.get(r.node, "py-spy"))
    out = [found_run(snapshots, ranks, job_mode)]
    node_run = nodes_run(missing)
    if node_run:
        out.append(node_run)
    if ranks:
        out += [stacks_run(snapshots, ranks, here), wave_run(ranks, here), state_run(ranks, here)]
        fr = fr_run(snapshots, ranks, here)
        if fr is not None:
            out.append(fr)
        from distdoctor.hang.rasreport import ras_run

        nccl = ras_run(snapshots)
        if nccl is not None:
            out.append(nccl)
    return out
