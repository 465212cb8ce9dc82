"""Every process distdoctor starts, and every process those start, ends when distdoctor says so.

Host.run starts each command in its own session (its own process group) with a random token in
its environment (DISTDOCTOR_RUN_TOKEN), which its descendants inherit; the CLI also puts a token
for the whole distdoctor process in its own environment (DISTDOCTOR_PROCESS_TOKEN), which
everything it starts inherits, including what a check pack starts without Host.run.

At a command's timeout its process group is killed at once. A descendant that left the group
(setsid, a double-forked daemon) is found by its token: a sweep reads the environment of the
machine's processes and kills every one carrying a token of a command that was killed. Sweeps
cost one pass over /proc, so they run at most every SWEEP_INTERVAL (a thousand probes timing
out together must not each pay for one); `kill_all`, at exit (normal, interrupted, or abandoning
hung checks with os._exit), kills every group still running and sweeps for every token.

Once exit begins (`kill_all`) no command may start: Host asks `may_start` before each start, and
`kill_all` waits for the starts already under way (fork and exec: milliseconds), so every
process is either in the table when `kill_all` reads it or is killed by `started` itself.
A second signal during exit calls `kill_all` again without waiting for the lock the first one
may hold.

What escapes: a descendant that both leaves the process group and clears its environment, or one
running as another user while distdoctor is not root (its /proc/PID/environ is unreadable).
"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
import threading
import time

TOKEN_VAR = "DISTDOCTOR_RUN_TOKEN"  # one per command Host.run starts
PROCESS_TOKEN_VAR = "DISTDOCTOR_PROCESS_TOKEN"  # one per distdoctor process, in os.environ
SWEEP_INTERVAL = 0.5  # seconds between two sweeps for escaped descendants

_lock = threading.Lock()
_live: dict[int, str] = {}  # process group id (the command's pid) -> its token
_tokens: set[str] = set()  # every token handed out: swept at exit
_dead: set[str] = set()  # tokens of commands killed at their timeout: swept now
_state: dict[str, object] = {"armed": False, "last_sweep": 0.0, "closing": False}
_starting = [0]  # starts under way: may_start() said yes, started()/start_failed() not yet called
_no_starts = threading.Condition(_lock)
START_WAIT = 2.0  # seconds kill_all waits for starts under way


def _arm() -> None:
    if not _state["armed"]:
        _state["armed"] = True
        atexit.register(kill_all, exiting=True)


def arm_process() -> None:
    """For the CLI, at start: mark the environment every child of this process inherits,
    whoever starts it, so `kill_all` finds what they leave behind."""
    with _lock:
        _arm()
        _state["closing"] = False
        _state["run_started"] = time.time()
        token = os.environ.get(PROCESS_TOKEN_VAR)
        if token not in _tokens:
            token = secrets.token_hex(8)
            _tokens.add(token)
            os.environ[PROCESS_TOKEN_VAR] = token


def new_token() -> str:
    """A token for one command's environment; arms the exit hook once."""
    token = secrets.token_hex(8)
    with _lock:
        _arm()
        _tokens.add(token)
    return token


def may_start() -> bool:
    """Before starting a command: False once exit has begun; else the start is counted until
    `started` or `start_failed` says how it went."""
    with _lock:
        # The main thread is the one exiting; what asks after that is an abandoned check.
        if _state["closing"] and threading.current_thread() is not threading.main_thread():
            return False
        _starting[0] += 1
        return True


def start_failed() -> None:
    with _lock:
        _starting[0] -= 1
        _no_starts.notify_all()


def started(pid: int, token: str) -> None:
    """A command is running. If exit began meanwhile, it is killed now: kill_all may already
    have read the table."""
    with _lock:
        _starting[0] -= 1
        _no_starts.notify_all()
        closing = bool(_state["closing"])
        if not closing:
            _live[pid] = token
        else:
            _tokens.add(token)
    if closing:
        _killpg(pid)


def ended(pid: int) -> None:
    with _lock:
        _live.pop(pid, None)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _sweep(tokens: set[str]) -> int:
    """Kill every process (other than this one) whose environment carries one of tokens."""
    import psutil

    me = os.getpid()
    killed = 0
    try:
        procs = list(psutil.process_iter())
    except (psutil.Error, OSError):  # /proc unreadable (no mount, out of descriptors): nothing to sweep
        return 0
    for proc in procs:
        if proc.pid == me:
            continue
        try:
            environ = proc.environ()
        except (psutil.Error, OSError):
            continue
        if environ.get(TOKEN_VAR) in tokens or environ.get(PROCESS_TOKEN_VAR) in tokens:
            try:
                proc.kill()
                killed += 1
            except psutil.Error:
                continue
    return killed


def kill_tree(pid: int, token: str) -> None:
    """A command at its timeout: its process group now, its escaped descendants at the next
    sweep (now, unless one ran less than SWEEP_INTERVAL ago; at the latest at exit)."""
    _killpg(pid)
    with _lock:
        _dead.add(token)
        now = time.monotonic()
        if now - float(_state["last_sweep"]) < SWEEP_INTERVAL:
            return
        _state["last_sweep"] = now
        tokens = set(_dead)
    _sweep(tokens)


def kill_all(wait: bool = True, exiting: bool = False) -> None:
    """Every command still running and everything any command left behind. exiting (the CLI's
    last step, a second signal, atexit): from then on no other thread may start a command, and
    the run's own child processes are killed too. wait=False (a second signal, inside a handler
    that may have interrupted a holder of the lock): do not wait for the lock or for starts."""
    locked = _lock.acquire(timeout=START_WAIT if wait else 0.2)
    try:
        if exiting:
            _state["closing"] = True
        if locked and wait:
            _no_starts.wait_for(lambda: _starting[0] <= 0, timeout=START_WAIT)
        live = list(_live)
        _live.clear()
        tokens = set(_tokens)
    finally:
        if locked:
            _lock.release()
    for pgid in live:
        _killpg(pgid)
    if exiting:
        _kill_children()
    if tokens:
        _sweep(tokens)


def _kill_children() -> None:
    """Every descendant still attached to this process: a pack's multiprocessing child is a
    fork without exec, so its /proc/PID/environ shows the environment distdoctor was started
    with (no token), and multiprocessing's exit handler would wait on it for ever."""
    import psutil

    since = _state.get("run_started")
    if not isinstance(since, float):  # not the CLI (a library user, a test): its children are its own
        return
    try:
        children = psutil.Process().children(recursive=True)
    except (psutil.Error, OSError):
        return
    for child in children:
        try:
            if child.create_time() >= since - 1.0:  # started during this run, not before it
                child.kill()
        except psutil.Error:
            continue
