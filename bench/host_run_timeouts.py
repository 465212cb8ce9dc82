"""Benchmark: what killing whole process trees costs when many commands time out at once.

Host.run kills a timed-out command's process group and sweeps /proc for descendants that left
it (distdoctor/reaper.py). A sweep per timeout made 2000 unreachable hosts in reach.hosts take
over 100 s; sweeps are now at most every 0.5 s. This runs THREADS threads, each running
`sleep 1` with a 0.05 s timeout PER_THREAD times, through Host.run and through a bare
Popen + killpg (the baseline: no sweep, no output cap), alternately, and prints the medians
and their ratio.

    python bench/host_run_timeouts.py [--pairs 5] [--threads 50] [--per-thread 5]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from alternate import compare  # noqa: E402

HOST_RUN = """
import threading
from distdoctor.host import Host
host = Host()
def work():
    for _ in range({per}):
        assert host.run(["sleep", "1"], timeout=0.05).timed_out
threads = [threading.Thread(target=work) for _ in range({threads})]
[t.start() for t in threads]; [t.join() for t in threads]
"""

BARE = """
import os, signal, subprocess, threading
def work():
    for _ in range({per}):
        proc = subprocess.Popen(["sleep", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            proc.communicate(timeout=0.05)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
threads = [threading.Thread(target=work) for _ in range({threads})]
[t.start() for t in threads]; [t.join() for t in threads]
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--per-thread", type=int, default=5)
    args = parser.parse_args()
    fill = {"threads": args.threads, "per": args.per_thread}
    compare("bare Popen+killpg", [sys.executable, "-c", BARE.format(**fill)],
            "Host.run", [sys.executable, "-c", HOST_RUN.format(**fill)], args.pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
