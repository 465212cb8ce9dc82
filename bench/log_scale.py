"""Benchmark: `distdoctor log` on a 1 GiB log of 64 ranks' NCCL INFO chatter.

The log is what `srun --label` collects from a 64-rank job run with NCCL_DEBUG=INFO
NCCL_DEBUG_SUBSYS=INIT,NET,COLL: each rank's init lines (bootstrap, transports), then one
`AllReduce: opCount ...` line per collective per rank with ISO timestamps, and near the end
one failure: rank 17 on gpu003 cannot reach a peer (NCCL WARN ... No route to host), after
which the other 63 ranks' watchdogs time out. `distdoctor log --json` and `grep -c WARN` on
the same file run alternately; medians, their ratio and each one's peak resident memory
(os.wait4 rusage of that child alone) are printed, and the diagnosis is checked to name rank
17 on gpu003 as the root cause.

Goal (issue 22): at most 8 times `grep -c WARN` on the same file, and <= 150 MiB resident,
for 1 GiB: the reasoning (failure markers, launcher context, the lines before a timeout, rank
rosters) must not cost the streaming.

    python bench/log_scale.py [--size-mib 1024] [--pairs 3] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from alternate import distdoctor_argv

RANKS = 64
PER_NODE = 8
FAILING = 17


def _host(rank: int) -> str:
    return f"gpu{rank // PER_NODE + 1:03d}"


def _stamp(t: float) -> str:
    secs = int(t)
    return f"2024-05-01T{secs // 3600 % 24:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}.{int(t * 1e6) % 1000000:06d}"


def generate(path: str, size: int) -> int:
    """Write the log; return its size in bytes."""
    t = 12 * 3600.0
    pids = {r: 20000 + r for r in range(RANKS)}
    with open(path, "w", encoding="utf-8", buffering=8 * 2**20) as fh:
        for r in range(RANKS):
            h, p, d = _host(r), pids[r], r % PER_NODE
            pre = f"{r}: {_stamp(t)} {h}:{p}:{p} [{d}] NCCL INFO "
            fh.write(f"{pre}Bootstrap : Using ib0:10.1.{r // PER_NODE}.{d + 10}<0>\n")
            fh.write(f"{pre}NCCL version 2.21.5+cuda12.4\n" if r == 0 else "")
            fh.write(f"{pre}NET/Plugin : No plugin found (libnccl-net.so), using internal implementation\n")
            fh.write(f"{pre}NET/IB : Using [0]mlx5_{d}:1/IB ; OOB ib0:10.1.{r // PER_NODE}.{d + 10}<0>\n")
            fh.write(f"{pre}Using network IB\n")
            fh.write(f"{pre}comm 0x55d5c8a0 rank {r} nranks {RANKS} cudaDev {d} nvmlDev {d} busId {d + 1}8000 "
                     f"commId 0x9f3e1c - Init COMPLETE\n")
        written = fh.tell()
        op = 0
        fail_at = int(size * 0.97)
        failed = False
        while written < size:
            lines = []
            for r in range(RANKS):
                h, p, d = _host(r), pids[r], r % PER_NODE
                lines.append(f"{r}: {_stamp(t + r * 1e-5)} {h}:{p}:{p + 40} [{d}] NCCL INFO AllReduce: opCount {op:x} "
                             f"sendbuff 0x7f2b4c{op % 4096:06x} recvbuff 0x7f2b4c{op % 4096:06x} count 262144 datatype 7 "
                             f"op 0 root 0 comm 0x55d5c8a0 [nranks={RANKS}] stream 0x55d5c9b0\n")
            if not failed and written >= fail_at:
                failed = True
                r = FAILING
                h, p, d = _host(r), pids[r], r % PER_NODE
                lines.append(f"{r}: {_stamp(t + 0.5)} {h}:{p}:{p + 41} [{d}] misc/socket.cc:484 NCCL WARN socketPollConnect: "
                             f"Connect to 10.1.3.12<43211> returned 113(No route to host) errno 115(Operation now in progress)\n")
                for q in range(RANKS):
                    if q != FAILING:
                        lines.append(f"{q}: {_stamp(t + 600.5)} [E ProcessGroupNCCL.cpp:616] [Rank {q}] Watchdog caught "
                                     f"collective operation timeout: WorkNCCL(SeqNum={op}, OpType=ALLREDUCE, "
                                     f"NumelIn=262144, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n")
            block = "".join(lines)
            fh.write(block)
            written += len(block)
            op += 1
            t += 0.002
        return written


def measured(argv: list[str]) -> tuple[float, float, str, int, float]:
    """(seconds, peak RSS MiB of this child alone, stdout, exit code, CPU seconds of the child
    and the children it waited for: distdoctor's grep)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - start
    return (elapsed, usage.ru_maxrss / 1024.0, out.decode("utf-8", "replace"), proc.returncode,
            usage.ru_utime + usage.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated log (its path is printed)")
    ap.add_argument("--reuse", metavar="PATH", help="measure a log an earlier --keep run generated")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="distdoctor-bench-log-")
    path = args.reuse or os.path.join(workdir, "slurm-4242.out")
    try:
        if args.reuse:
            args.size_mib = round(os.path.getsize(path) / 2**20)
        else:
            start = time.perf_counter()
            size = generate(path, args.size_mib * 2**20)
            print(f"generated {size / 2**20:.0f} MiB, {RANKS} ranks, in {time.perf_counter() - start:.1f} s: {path}")
        log_argv = distdoctor_argv() + ["log", "--json", path]
        grep_argv = ["grep", "-c", "WARN", path]
        measured(grep_argv)  # page cache
        ours, theirs, rss_ours, rss_theirs, cpu_ours, cpu_theirs = [], [], [], [], [], []
        verdict = ""
        for _ in range(args.pairs):
            t, rss, out, code, cpu = measured(log_argv)
            ours.append(t)
            cpu_ours.append(cpu)
            rss_ours.append(rss)
            if code != 1:
                print(f"warning: distdoctor log exited {code}, expected 1 (a failure diagnosed)")
            try:
                doc = json.loads(out)
                diag = next(c for c in doc["checks"] if c["id"] == "log.diagnosis")
                verdict = diag["findings"][0]["summary"]
            except (ValueError, StopIteration, KeyError, IndexError) as exc:
                verdict = f"unreadable report: {exc}"
            t, rss, _out, _code, cpu = measured(grep_argv)
            cpu_theirs.append(cpu)
            theirs.append(t)
            rss_theirs.append(rss)
        ratio = statistics.median(a / b for a, b in zip(ours, theirs))
        print(f"pairs: {args.pairs}")
        print(f"distdoctor log  median {statistics.median(ours):.2f} s  (min {min(ours):.2f}, max {max(ours):.2f})"
              f"  peak RSS {max(rss_ours):.0f} MiB  CPU {statistics.median(cpu_ours):.1f} s (grep's included)")
        print(f"grep -c WARN    median {statistics.median(theirs):.2f} s  (min {min(theirs):.2f}, max {max(theirs):.2f})"
              f"  peak RSS {max(rss_theirs):.0f} MiB  CPU {statistics.median(cpu_theirs):.2f} s")
        print(f"median ratio distdoctor/grep: {ratio:.1f}")
        # the wall ratio moves with the neighbours' load (two processes against one); CPU does not
        cpu_ratio = statistics.median(a / b for a, b in zip(cpu_ours, cpu_theirs) if b > 0)
        print(f"median CPU ratio distdoctor/grep: {cpu_ratio:.1f}")
        print(f"load average when done: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        print(f"diagnosis: {verdict}")
        ok = verdict.startswith(f"rank {FAILING} on {_host(FAILING)} failed first")
        goal = ratio <= 8 and max(rss_ours) <= 150
        print(f"diagnosis names rank {FAILING} on {_host(FAILING)}: {'yes' if ok else 'NO'}; "
              f"goal (<= 8x grep -c WARN, <= 150 MiB): {'met' if goal else 'NOT met'}")
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept {path}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
