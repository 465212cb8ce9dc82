"""Signals to exit codes: the first SIGINT/SIGTERM ends the run with a partial report, a second
one ends the process at once; while the report is written a signal is kept until it is done."""

from __future__ import annotations

import os
import signal
import threading

from distdoctor.model import EXIT_INTERRUPTED, EXIT_TERMINATED


def exit_code_for(signum: int) -> int:
    return EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED


def raise_interrupted(signum: int, _frame) -> None:
    from distdoctor.engine import Interrupted

    raise Interrupted(signum)


def _exit_at_once(signum: int, _frame) -> None:
    os._exit(exit_code_for(signum))


DEFERRED: list[int] = []


def _defer(signum: int, _frame) -> None:
    if DEFERRED:
        os._exit(exit_code_for(signum))
    DEFERRED.append(signum)


def defer_signals() -> None:
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _defer)


def exit_hard_on_second_signal() -> None:
    """After the first Ctrl-C the partial report is being written; a second one means now."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _exit_at_once)


def raise_on_signals() -> None:
    """While the checks run: a signal raises Interrupted in the main thread, so the run ends with what finished."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, raise_interrupted)
