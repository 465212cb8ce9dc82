"""The outer bound ends a process whose main thread is stuck, even if the last words hang."""

import subprocess
import sys
import time

CODE = """
import sys, time
from distdoctor.nccltest.watchdog import Watchdog
def last_words():
    print("what is known", flush=True)
    if sys.argv[1] == "hang":
        time.sleep(60)
    return 7
Watchdog(time.monotonic() + 0.5, last_words, grace=1.0)
time.sleep(60)  # the stuck collective
"""


def run(mode: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", CODE, mode], capture_output=True, text=True, timeout=30)
    return proc, time.monotonic() - start


def test_last_words_then_exit_code():
    proc, wall = run("ok")
    assert proc.returncode == 7 and proc.stdout == "what is known\n"
    assert wall < 5


def test_hanging_last_words_still_end_the_process():
    proc, wall = run("hang")
    assert proc.returncode == 2 and "what is known" in proc.stdout
    assert wall < 6
