"""Signals to exit codes: the first SIGINT/SIGTERM/SIGHUP ends the run with a partial report, a
second one ends the process at once (after killing every process distdoctor started); while the
report is written a signal is kept until it is done."""

from __future__ import annotations

import os
import signal
import threading

from distdoctor.model import EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_TERMINATED

# SIGHUP: the terminal or the ssh session that started distdoctor went away (a health check
# started by hand, a Prolog under a dying slurmstepd); ended like SIGTERM, report included.
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def exit_code_for(signum: int) -> int:
    if signum == signal.SIGTERM:
        return EXIT_TERMINATED
    if signum == signal.SIGHUP:
        return EXIT_HANGUP
    return EXIT_INTERRUPTED


def raise_interrupted(signum: int, _frame) -> None:
    from distdoctor.engine import Interrupted

    raise Interrupted(signum)


def _exit_at_once(signum: int, _frame) -> None:
    from distdoctor import reaper

    # os._exit skips atexit: the tools still running are killed here or never.
    try:
        reaper.kill_all(wait=False, exiting=True)
    finally:
        os._exit(exit_code_for(signum))


DEFERRED: list[int] = []


def _defer(signum: int, frame) -> None:
    if DEFERRED:
        _exit_at_once(signum, frame)
    DEFERRED.append(signum)


def defer_signals() -> None:
    if threading.current_thread() is threading.main_thread():
        for signum in HANDLED:
            signal.signal(signum, _defer)


def exit_hard_on_second_signal() -> None:
    """After the first Ctrl-C the partial report is being written; a second one means now."""
    if threading.current_thread() is threading.main_thread():
        for signum in HANDLED:
            signal.signal(signum, _exit_at_once)


def raise_on_signals() -> None:
    """While the checks run: a signal raises Interrupted in the main thread, so the run ends with what finished."""
    if threading.current_thread() is threading.main_thread():
        for signum in HANDLED:
            signal.signal(signum, raise_interrupted)
