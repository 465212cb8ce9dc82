"""The outer bound. gloo and TCPStore calls can hang well past their own timeouts (a gloo peer
advertising the wrong address hangs ~40 s whatever timeout init_process_group got), so the
bound is enforced from a separate thread: at the deadline it runs the rank's last words
(rank 0 prints the report of what is known) and ends the process with os._exit, which no
blocked C++ call can delay."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable


class Watchdog:
    def __init__(self, deadline: float, last_words: Callable[[], int], grace: float = 3.0):
        """deadline: time.monotonic() value. last_words returns the exit code; if it has not
        returned after `grace` seconds the process exits with 2 anyway."""
        self.deadline = deadline
        self._last_words = last_words
        self._grace = grace
        self._cleanups: list[Callable[[], None]] = []
        self._cancelled = threading.Event()
        self.fired = threading.Event()
        threading.Thread(target=self._wait, daemon=True, name="nccl-test-watchdog").start()

    def on_exit(self, cleanup: Callable[[], None]) -> None:
        """Run before the process ends at the deadline (kill spawned children)."""
        self._cleanups.append(cleanup)

    def cancel(self) -> None:
        self._cancelled.set()

    def _wait(self) -> None:
        if self._cancelled.wait(max(0.0, self.deadline - time.monotonic())):
            return
        self.fired.set()
        # A second timer ends the process even if the last words themselves hang.
        backstop = threading.Timer(self._grace, self._exit, args=(2,))
        backstop.daemon = True
        backstop.start()
        try:
            code = self._last_words()
        except BaseException:  # the bound matters more than a tidy report
            code = 2
        self._exit(code)

    def _exit(self, code: int) -> None:
        from distdoctor.nccltest.report import final_code

        code = final_code(code)
        for cleanup in self._cleanups:
            try:
                cleanup()
            except BaseException:
                pass
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
