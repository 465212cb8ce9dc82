"""Every process distdoctor starts, and every process those start, ends when distdoctor says so.

Host.run starts each command in its own session (its own process group) with a random token
in its environment (DISTDOCTOR_RUN_TOKEN), which its descendants inherit. At a command's timeout
its whole group is killed, and so is every descendant that left the group with setsid() (a
daemonising grandchild): distdoctor makes itself a child subreaper (prctl
PR_SET_CHILD_SUBREAPER), so such orphans are re-parented to distdoctor instead of init, where
they can be found by walking its own children and reading the token from their environment.
At exit (normal, interrupted or abandoned with os._exit) `kill_all` does the same for every
command still running and every detached descendant of any command.

What escapes: a descendant that clears its environment AND leaves the process group, or one
that runs as another user (its /proc/PID/environ is unreadable to a non-root distdoctor).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import secrets
import signal
import threading
import time

TOKEN_VAR = "DISTDOCTOR_RUN_TOKEN"  # one per command Host.run starts
PROCESS_TOKEN_VAR = "DISTDOCTOR_PROCESS_TOKEN"  # one per distdoctor process, in os.environ
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h

_lock = threading.Lock()
_live: dict[int, str] = {}  # process group id (the command's pid) -> its token
_tokens: set[str] = set()  # every token handed out, for detached descendants at exit
_state = {"armed": False}


def _arm() -> None:
    if _state["armed"]:
        return
    _state["armed"] = True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: process groups alone
        pass
    atexit.register(kill_all)


def arm_process() -> None:
    """For the CLI, at start: become the subreaper now (before any pack runs) and mark the
    environment every child of this process inherits, whoever starts it (a pack calling
    subprocess directly too), so `kill_all` finds what they leave behind."""
    with _lock:
        _arm()
        token = os.environ.get(PROCESS_TOKEN_VAR) if os.environ.get(PROCESS_TOKEN_VAR) in _tokens else None
        if token is None:
            token = secrets.token_hex(8)
            _tokens.add(token)
            os.environ[PROCESS_TOKEN_VAR] = token
        _state["process_token"] = token


def new_token() -> str:
    """A token for one command's environment; arms the subreaper and the exit hook once."""
    token = secrets.token_hex(8)
    with _lock:
        _arm()
        _tokens.add(token)
    return token


def started(pid: int, token: str) -> None:
    with _lock:
        _live[pid] = token


def ended(pid: int) -> None:
    with _lock:
        _live.pop(pid, None)


def _descendants_with(tokens: set[str]) -> list:
    """Our descendants whose environment carries one of tokens (as the command's or the
    process's token)."""
    import psutil

    found = []
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return found
    for child in children:
        try:
            environ = child.environ()
            if environ.get(TOKEN_VAR) in tokens or environ.get(PROCESS_TOKEN_VAR) in tokens:
                found.append(child)
        except (psutil.Error, OSError):
            continue
    return found


def _kill(pgid: int | None, tokens: set[str]) -> list[int]:
    """SIGKILL the group and the token carriers; the pids of those that are not a Popen's own
    child (orphans that are, or will be, re-parented to us), for `collect`."""
    import psutil

    # The snapshot first: a killed process is a zombie whose environment can no longer be read.
    carriers = _descendants_with(tokens)
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    with _lock:
        managed = set(_live)  # subprocess.Popen waits for these itself; reaping them here would
        # leave it ECHILD and a made-up exit status of 0
    orphans = []
    for _round in range(3):  # again, for any that forked between the snapshot and the kill
        for proc in carriers:
            try:
                proc.kill()
            except psutil.Error:
                continue
            if proc.pid not in managed and proc.pid not in orphans:
                orphans.append(proc.pid)
        carriers = _descendants_with(tokens)
        if not carriers:
            break
    return orphans


def collect(pids: list[int], seconds: float = 1.0) -> None:
    """Wait for killed orphans, which as our (subreaper's) children would otherwise stay
    zombies as long as distdoctor runs. Bounded: one stuck in the kernel (D state) is left."""
    deadline = time.monotonic() + seconds
    left = set(pids)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not (yet) ours, or already collected
                done = pid if not _exists(pid) else 0
            if done:
                left.discard(pid)
        if left:
            time.sleep(0.02)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_tree(pid: int, token: str) -> list[int]:
    """A command at its timeout: its process group and its detached descendants. Returns the
    orphans to `collect` once the command itself has been waited for."""
    return _kill(pid, {token})


def kill_all() -> None:
    """At exit: every command still running and everything any command left behind."""
    with _lock:
        live = list(_live.items())
        _live.clear()
        tokens = set(_tokens)
    for pgid, _token in live:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if tokens:
        collect(_kill(None, tokens), seconds=0.5)
