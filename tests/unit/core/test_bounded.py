"""distdoctor.bounded: a hung call is abandoned on time, what a call raises reaches the caller,
results keep the items' order, and a hung call never keeps the process from exiting."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from distdoctor import bounded

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_call_returns_the_value():
    assert bounded.call(lambda: 42, 1.0) == 42


def test_call_abandons_a_hung_call_after_its_bound():
    release = threading.Event()
    start = time.monotonic()
    result = bounded.call(lambda: release.wait(30), 0.2)
    elapsed = time.monotonic() - start
    release.set()
    assert isinstance(result, bounded.TimedOut)
    assert result.seconds == 0.2
    assert str(result) == "no answer within 0.2 s"
    assert 0.15 <= elapsed < 5


def test_call_raises_what_the_call_raised_in_the_caller():
    def broken():
        raise ValueError("bad driver")

    with pytest.raises(ValueError, match="bad driver"):
        bounded.call(broken, 1.0)


def test_call_runs_on_a_daemon_thread_named_for_it():
    seen = {}

    def look():
        me = threading.current_thread()
        seen.update(daemon=me.daemon, name=me.name)

    bounded.call(look, 1.0, name="nvml")
    assert seen == {"daemon": True, "name": "nvml"}


def test_start_runs_now_and_is_waited_for_later():
    gate = threading.Event()
    pending = bounded.start(lambda: (gate.wait(5), "answer")[1])
    assert not pending.ended
    assert isinstance(pending.wait(0.05), bounded.TimedOut)
    gate.set()
    assert pending.wait(5) == "answer"
    assert pending.ended


def test_map_keeps_the_items_order_whatever_order_they_end_in():
    delays = [0.3, 0.0, 0.15, 0.05]
    result = bounded.map(lambda d: (time.sleep(d), d)[1], delays, timeout=5)
    assert result == delays


def test_map_gives_timed_out_for_the_hung_items_only_and_keeps_the_others():
    release = threading.Event()

    def work(item):
        if item == "hung":
            release.wait(30)
        return item.upper()

    start = time.monotonic()
    result = bounded.map(work, ["a", "hung", "b"], timeout=0.3)
    elapsed = time.monotonic() - start
    release.set()
    assert result[0] == "A" and result[2] == "B"
    assert isinstance(result[1], bounded.TimedOut)
    assert elapsed < 5


def test_map_with_fewer_workers_than_items_runs_at_most_that_many_at_once():
    running = []
    peak = []
    lock = threading.Lock()

    def work(item):
        with lock:
            running.append(item)
            peak.append(len(running))
        time.sleep(0.05)
        with lock:
            running.remove(item)
        return item * 2

    assert bounded.map(work, range(9), timeout=10, workers=3) == [i * 2 for i in range(9)]
    assert max(peak) <= 3


def test_map_items_never_started_before_the_deadline_are_timed_out():
    # one worker stuck on the first item: the second never starts, and still has an answer
    release = threading.Event()
    result = bounded.map(lambda item: release.wait(30) if item == 0 else item, [0, 1], timeout=0.2, workers=1)
    release.set()
    assert all(isinstance(r, bounded.TimedOut) for r in result)


def test_map_raises_the_first_exception_in_the_items_order():
    def work(item):
        if item == 1:
            time.sleep(0.1)
            raise KeyError("first")
        if item == 2:
            raise OSError("second")
        return item

    with pytest.raises(KeyError, match="first"):
        bounded.map(work, [0, 1, 2], timeout=5)


def test_map_of_nothing_starts_nothing():
    assert bounded.map(lambda item: item, [], timeout=1) == []


def test_a_hung_call_does_not_keep_the_process_alive():
    """The reason for the module: a pool's worker is joined at exit, a daemon thread is not."""
    script = ("import threading, time\n"
              "from distdoctor import bounded\n"
              "hang = threading.Event()\n"
              "print(bounded.call(lambda: hang.wait(), 0.1))\n"
              "print(bounded.map(lambda i: hang.wait() if i else i, [0, 1], timeout=0.1, workers=1))\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "no answer within 0.1 s"
    assert "TimedOut(seconds=0.1)" in done.stdout.splitlines()[1]
    assert elapsed < 10


def test_no_thread_pool_in_the_package():
    """A pool's workers are joined at interpreter exit: one hung call would hold the process past
    every deadline. Bounded calls go through distdoctor.bounded."""
    import ast

    for root in ("distdoctor", "checks"):
        for folder, _dirs, files in os.walk(os.path.join(REPO, root)):
            for name in (f for f in files if f.endswith(".py")):
                with open(os.path.join(folder, name)) as fh:
                    tree = ast.parse(fh.read())
                for node in ast.walk(tree):
                    modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                        [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                    assert not any(m.startswith(("concurrent.futures", "multiprocessing.pool")) for m in modules), \
                        os.path.join(folder, name)
