"""Running commands: bounded, never through a shell, killed with their children at the timeout;
answers cached while the tool is unchanged."""

from __future__ import annotations

import errno
import os
import queue
import selectors
import shutil
import subprocess
import sys
import threading
import time
from typing import Any, Mapping, Sequence

from distdoctor import bounded, reaper

from distdoctor.host.results import MAX_OUTPUT, CommandResult


class Processes:
    env: Mapping[str, str]
    cache: Any
    _started: dict[str, bounded.Pending[CommandResult]]
    _started_lock: threading.Lock

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.env.get("PATH", os.defpath))

    def run(self, argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
            input: str | bytes | None = None) -> CommandResult:
        """Run argv (never through a shell) and wait at most `timeout` seconds. The command
        runs in its own process group so that a hung child and its children are all killed.
        `input` (text, or bytes passed as they are) is written to its stdin."""
        argv = tuple(str(a) for a in argv)
        run_env = dict(self.env)
        run_env["LC_ALL"] = "C"  # parsers expect the C locale's wording
        if env:
            run_env.update(env)
        exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=run_env.get("PATH", os.defpath))
        start = time.monotonic()
        if exe is None:
            return CommandResult(argv, 127, error="not found")
        token = reaper.new_token()
        run_env[reaper.TOKEN_VAR] = token
        if not reaper.may_start():  # distdoctor is exiting: an abandoned check starts nothing more
            return CommandResult(argv, None, error="not started: distdoctor is exiting")
        try:
            proc = subprocess.Popen(
                [exe, *argv[1:]], stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env,
                start_new_session=True,
            )
        except FileNotFoundError:
            reaper.start_failed()
            return CommandResult(argv, 127, error="not found")
        except PermissionError:
            reaper.start_failed()
            return CommandResult(argv, 126, error="permission denied")
        except OSError as exc:
            reaper.start_failed()
            return CommandResult(argv, 126, error=exc.strerror or str(exc))
        except BaseException:
            reaper.start_failed()
            raise
        reaper.started(proc.pid, token)
        try:
            data = input.encode() if isinstance(input, str) else input
            writer = None
            if data is not None:
                # From a thread, whole: the reader below never blocks on a tool that reads slowly.
                writer = threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True)
                writer.start()
            out, err, ended_how = _collect(proc, timeout)
            if ended_how != "exited":
                reaper.kill_tree(proc.pid, token)
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:  # stuck in the kernel (D state): abandon it
                    pass
            if writer is not None:
                writer.join(timeout=2)
        finally:
            reaper.ended(proc.pid)
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
        duration = time.monotonic() - start
        if ended_how == "flooded":
            return CommandResult(argv, None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                                 duration, False, error=f"printed more than {MAX_OUTPUT // (1024 * 1024)} MiB "
                                                        f"and was killed")
        timed_out = ended_how == "timeout"
        return CommandResult(
            argv, None if timed_out else proc.returncode,
            out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
            duration, timed_out,
        )

    def run_cached(self, argv: Sequence[str], timeout: float, depends_on: Sequence[str] = ()) -> CommandResult:
        """run() for a tool whose answer only changes with the tool itself, the files in
        depends_on, and the environment (see toolcache.py): from the cache when this exact
        answer is there, else run and store it when it succeeded."""
        argv = tuple(str(a) for a in argv)
        key = self._cache_key(argv, depends_on)
        if key is None:
            return self.run(argv, timeout)
        with self._started_lock:
            started = self._started.get(key)
        if started is not None:
            answer = started.wait(timeout + 5)  # run() inside it is bounded by the same timeout
            if isinstance(answer, bounded.TimedOut):  # past its own bound: starting it again would not help
                return CommandResult(argv, None, duration=timeout, timed_out=True)
            return answer
        entry = self.cache.get(key)
        if entry is not None:
            return CommandResult(argv, entry["returncode"], entry["stdout"], entry["stderr"], 0.0, False)
        return self._run_and_store(argv, timeout, key)

    def _cache_key(self, argv: tuple[str, ...], depends_on: Sequence[str]) -> str | None:
        """The tool cache's key for argv, or None when there is no cache or no such tool."""
        exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=self.env.get("PATH", os.defpath))
        if self.cache is None or exe is None:
            return None
        return self.cache.key(argv, exe, self.env, depends_on)

    def _run_and_store(self, argv: tuple[str, ...], timeout: float, key: str) -> CommandResult:
        result = self.run(argv, timeout)
        if result.returncode == 0 and not result.timed_out and not result.error:
            self.cache.put(key, result.returncode, result.stdout, result.stderr)
        return result

    def start_cached(self, argv: Sequence[str], timeout: float, depends_on: Sequence[str] = ()) -> bool:
        """Start run_cached(argv) now on a daemon thread when its answer is not cached, so a
        slow tool runs while Python is still importing the checks; a later run_cached of the
        same argv waits for it instead of running it again. False when nothing was started."""
        argv = tuple(str(a) for a in argv)
        key = self._cache_key(argv, depends_on)
        # has(), not get(): a cached ompi_info answer is 0.6 MB of JSON that the fact reads anyway.
        if key is None or self.cache.has(key):
            return False
        with self._started_lock:
            if key in self._started:
                return False
            self._started[key] = bounded.start(lambda: self._run_and_store(argv, timeout, key),
                                               name=f"start {os.path.basename(argv[0])}")
        return True

    def line_filter(self, argv: Sequence[str], timeout: float) -> LineFilter | None:
        """Start argv once as a streaming filter (`grep -E -n ...` for `distdoctor log`): feed
        it bytes, collect its output lines while it runs. None when the command is missing.
        `timeout` bounds the wait for its last output after the input ends."""
        run_env = dict(self.env)
        run_env["LC_ALL"] = "C"
        exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], path=run_env.get("PATH", os.defpath))
        if exe is None:
            return None
        token = reaper.new_token()
        run_env[reaper.TOKEN_VAR] = token
        if not reaper.may_start():
            return None
        try:
            proc = subprocess.Popen([exe, *argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, env=run_env, start_new_session=True)
        except OSError:
            reaper.start_failed()
            return None
        except BaseException:
            reaper.start_failed()
            raise
        reaper.started(proc.pid, token)

        def kill(proc: subprocess.Popen) -> None:
            reaper.kill_tree(proc.pid, token)
            try:
                proc.kill()
            except ProcessLookupError:
                pass

        return LineFilter(proc, timeout, kill, ended=lambda: reaper.ended(proc.pid))

    def python(self, code: str, timeout: float, env: Mapping[str, str] | None = None) -> CommandResult:
        """Run a snippet in a fresh interpreter: how distdoctor asks about torch or loads a
        library that might crash, without putting its own process at risk."""
        return self.run([sys.executable, "-c", code], timeout=timeout, env=env)

    def fan_out(self, hosts: Sequence[str], argv: Sequence[str], fanout: int, timeout: float,
                ssh_options: Sequence[str] = ()) -> dict[str, CommandResult]:
        """argv on every host over ssh through ClusterShell, at most `fanout` at once, each
        bounded by `timeout`. ssh runs in batch mode with host-key checking as configured (never
        turned off here): an unknown host key is that host's error, not a prompt."""
        import shlex

        from ClusterShell.NodeSet import NodeSet
        from ClusterShell.Task import task_self

        task = task_self()
        task.set_info("fanout", max(1, fanout))
        task.set_info("connect_timeout", max(1, min(10, int(timeout))))
        task.set_info("ssh_options", " ".join(shlex.quote(o) for o in ["-oBatchMode=yes", *ssh_options]))
        task.set_default("stderr", True)
        start = time.monotonic()
        task.shell(shlex.join(argv), nodes=NodeSet.fromlist(hosts), timeout=timeout)
        task.run(timeout=timeout + 5)
        duration = time.monotonic() - start
        out = {str(n): b"" for n in hosts}
        err = dict(out)
        for buf, nodes in task.iter_buffers():
            for n in nodes:
                out[str(n)] = bytes(buf)
        for buf, nodes in task.iter_errors():
            for n in nodes:
                err[str(n)] = bytes(buf)
        codes = {str(n): rc for rc, nodes in task.iter_retcodes() for n in nodes}
        late = {str(n) for n in task.iter_keys_timeout()}
        results = {}
        for name in hosts:
            results[name] = CommandResult(tuple(argv), None if name in late else codes.get(name),
                                          out[name][:MAX_OUTPUT].decode("utf-8", "replace"),
                                          err[name][:MAX_OUTPUT].decode("utf-8", "replace"), duration,
                                          timed_out=name in late,
                                          error="" if name in codes or name in late else "no result")
        return results


def _collect(proc: subprocess.Popen, timeout: float) -> tuple[bytes, bytes, str]:
    """stdout and stderr of proc until it exits and both pipes close, at most `timeout`
    seconds and MAX_OUTPUT bytes each. How it ended: "exited", "timeout" or "flooded". A
    grandchild that keeps a pipe open after the command exits counts against the timeout."""
    deadline = time.monotonic() + timeout
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    open_fds = set(buffers)
    with selectors.DefaultSelector() as sel:
        for fd in open_fds:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), "timeout"
            for key, _ in sel.select(min(left, 1.0)):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                    open_fds.discard(key.fd)
                    continue
                buf = buffers[key.fd]
                buf += chunk
                if len(buf) > MAX_OUTPUT:
                    del buf[MAX_OUTPUT:]
                    return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), "flooded"
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:  # closed its output but did not exit
        return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), "timeout"
    return bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), "exited"


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass  # the command exited or was killed at its deadline: nothing more to say
    finally:
        try:
            pipe.close()
        except (BrokenPipeError, OSError):
            pass


class LineFilter:
    """A running filter process: `feed()` queues input that a writer thread sends to its stdin
    (`feed_range()` queues a byte range of an open file, sent from the page cache with sendfile,
    never read into this process), a reader thread collects its stdout lines; `take()` returns
    the lines so far, `close()` ends the input and waits (bounded) for the rest. Two threads so
    that neither pipe can fill and stall the other while the caller keeps reading its own input."""

    def __init__(self, proc: subprocess.Popen, timeout: float, kill, ended=lambda: None):
        self.proc = proc
        self.timeout = timeout
        self._kill = kill
        self._ended = ended
        self._input: queue.Queue[bytes | tuple[int, int, int] | None] = queue.Queue(maxsize=4)
        self._lines: list[bytes] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._eof = False
        self.error = ""
        self.shrunk = ""  # a range was cut short: its file shrank since
        self._writer = threading.Thread(target=self._write, daemon=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._writer.start()
        self._reader.start()

    def _write(self) -> None:
        try:
            while True:
                data = self._input.get()
                if data is None:
                    break
                if isinstance(data, tuple):
                    try:
                        self._send(*data)
                    finally:
                        os.close(data[0])
                else:
                    self.proc.stdin.write(data)
                    self.proc.stdin.flush()  # a range sent next goes straight to the pipe: after this
        except (BrokenPipeError, OSError, ValueError) as exc:
            self.error = self.error or f"the filter stopped reading its input: {exc}"
            while (data := self._input.get()) is not None:  # keep feed() from blocking forever
                if isinstance(data, tuple):
                    os.close(data[0])
        finally:
            try:
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    def _send(self, src: int, start: int, end: int) -> None:
        out = self.proc.stdin.fileno()
        at = start
        while at < end:
            try:
                sent = os.sendfile(out, src, at, min(end - at, 1 << 30))
            except OSError as exc:
                if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSOCK, errno.EOPNOTSUPP):
                    raise
                sent = self._copy(out, src, at, end)  # no sendfile from this file into a pipe here
            if sent == 0:
                # the file shrank since the range was cut: end the partial line, so the
                # caller's next line (a sentinel) stays a line of its own
                self.shrunk = f"the input ended {end - at} bytes early (it shrank while read)"
                os.write(out, b"\n")
                return
            at += sent

    @staticmethod
    def _copy(out: int, src: int, at: int, end: int) -> int:
        data = os.pread(src, min(end - at, 1 << 20), at)
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]
        return len(data)

    def _read(self) -> None:
        try:
            for line in self.proc.stdout:
                with self._lock:
                    self._lines.append(line)
                    self._arrived.notify_all()
        except (ValueError, OSError):
            pass  # close() gave up on a filter that would not finish and closed the pipe
        finally:
            with self._lock:
                self._eof = True
                self._arrived.notify_all()

    def feed(self, data: bytes) -> None:
        """Queue data for the filter; a filter that stops reading for `timeout` is killed (its
        output so far is kept, and `error` says so) rather than blocking the caller."""
        self._queue(data)

    def feed_range(self, file, start: int, end: int) -> None:
        """Queue bytes [start, end) of an open file. The range holds a descriptor of its own
        (a dup, closed once sent), so the caller may close the file at any time: what was
        queued is still sent from it, never from whatever file takes its number."""
        if self.error:
            return
        try:
            fd = os.dup(file.fileno())
        except (OSError, ValueError) as exc:
            self.error = f"cannot send from the file: {exc}"
            return
        if not self._queue((fd, start, end)):
            os.close(fd)

    def _queue(self, item: bytes | tuple[int, int, int]) -> bool:
        if self.error:
            return False
        try:
            self._input.put(item, timeout=self.timeout)
        except queue.Full:
            self.error = f"the filter read nothing for {self.timeout:g} s and was stopped"
            self._kill(self.proc)
            return False
        return True

    def take(self, wait: float = 0.0) -> list[bytes]:
        """The output lines so far; with `wait`, waits up to that long for one when there are
        none yet (not once the output has ended: `ended`)."""
        with self._lock:
            if wait > 0 and not self._lines and not self._eof:
                self._arrived.wait(wait)
            lines, self._lines = self._lines, []
        return lines

    @property
    def ended(self) -> bool:
        """Its output has ended: it exited or was killed."""
        return self._eof

    def kill(self) -> None:
        self._kill(self.proc)

    def close(self) -> tuple[list[bytes], int | None]:
        """(the remaining output lines, the exit code; None when it had to be killed here)."""
        try:
            self._input.put(None, timeout=self.timeout)
        except queue.Full:
            self._kill(self.proc)  # the writer is stuck on a full pipe: this unblocks it
        self._writer.join(self.timeout)
        self._reader.join(self.timeout)
        code = None
        if self._reader.is_alive():
            self._kill(self.proc)
            self.error = self.error or f"the filter did not finish within {self.timeout:g} s"
        else:
            try:
                code = self.proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self._kill(self.proc)
        self.proc.stdout.close()
        if self.proc.poll() is not None:
            self._ended()
        return self.take(), code

