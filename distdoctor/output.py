"""Where a report goes (`-o PATH` of every command): written to what the path is.

distdoctor runs as root from Slurm's health check, so `-o` must never destroy what it is
pointed at:

- a regular file (or a symlink to one) is replaced atomically: the text goes to a temp file in
  the target's own directory, which is renamed over the target, so a reader (node_exporter's
  textfile collector, a dashboard) never sees half a report. The existing file's mode and owner
  are kept; a new file gets 0666 less the umask, as `>` in a shell would.
- a character device (/dev/null, /dev/full, a tty), a FIFO, or this process's own stdout or
  stderr (/dev/stdout, /proc/self/fd/1) is written in place, never replaced by a file;
  a full device is the error "no space left on device"; a FIFO with no reader is refused
  instead of blocking, and a reader that stops reading cannot hold the run past WRITE_TIMEOUT.
- a directory, a block device, a socket or a dangling symlink is refused with a message.

Every failure is an OutputError with one line for the user; the CLI maps it to EXIT_OUTPUT.
"""

from __future__ import annotations

import errno
import fcntl
import io
import os
import select
import stat
import sys
import tempfile
import time
from typing import TextIO

WRITE_TIMEOUT = 10.0  # seconds a pipe or FIFO reader may stall the final write


class OutputError(Exception):
    """The report cannot be written where -o says; the message names the path and why."""


def _why(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "no space left on device"
    return exc.strerror or str(exc)


def _umask() -> int:
    # /proc/self/status reports the umask without changing it; os.umask() would briefly set it
    # process-wide while other threads (abandoned checks) may be creating files.
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _same_file(st: os.stat_result, fd: int) -> bool:
    try:
        other = os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)


# This process's own stdout and stderr by name. While checks run, fd 1 points at stderr (see
# ReservedStdout), so /dev/stdout resolves to stderr's file: the names decide, not the inode.
_STDOUT_NAMES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
_STDERR_NAMES = ("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2")


def _kind(path: str, stdout_fd: int | None = 1) -> tuple[str, os.stat_result | None]:
    """('new' | 'regular' | 'stream' | 'stdout' | 'stderr', stat) or OutputError for what is refused."""
    normal = os.path.normpath(path)
    if normal in _STDOUT_NAMES or normal == f"/proc/{os.getpid()}/fd/1":
        return "stdout", None
    if normal in _STDERR_NAMES or normal == f"/proc/{os.getpid()}/fd/2":
        return "stderr", None
    try:
        st = os.stat(path)  # follows symlinks: -o writes to a link's target
    except FileNotFoundError:
        if os.path.islink(path):
            raise OutputError(f"cannot write the report to {path}: it is a symlink to "
                              f"{os.readlink(path)}, which does not exist") from None
        return "new", None
    except OSError as exc:
        raise OutputError(f"cannot write the report to {path}: {_why(exc)}") from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise OutputError(f"cannot write the report to {path}: it is a directory; name a file in it")
    if stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        # The file our own stdout (the reserved descriptor) or stderr is, named another way
        # (`-o out.txt > out.txt`): written through that descriptor, keeping its offset.
        if stdout_fd is not None and _same_file(st, stdout_fd) and not _same_file(st, 2):
            return "stdout", st
        if _same_file(st, 2):
            return "stderr", st
        return ("regular" if stat.S_ISREG(mode) else "stream"), st
    what = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    raise OutputError(f"cannot write the report to {path}: it is {what}; distdoctor writes only to "
                      f"regular files, character devices, FIFOs and its own stdout")


def check_writable(path: str) -> None:
    """Refuse, before the checks run, a path the report could never be written to."""
    if path == "-":
        return
    kind, _st = _kind(path)
    if kind == "new":
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise OutputError(f"cannot write the report to {path}: directory {directory} does not exist")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise OutputError(f"cannot write the report to {path}: directory {directory} is not writable")
    elif kind == "regular":
        directory = os.path.dirname(os.path.realpath(path))
        if not os.access(directory, os.W_OK | os.X_OK):
            raise OutputError(f"cannot write the report to {path}: directory {directory} is not writable "
                              f"(the report replaces the file through a temp file there)")


def write_fd(fd: int, data: bytes, timeout: float = WRITE_TIMEOUT) -> None:
    """All of data to fd, waiting at most `timeout` for a stalled reader. The descriptor is made
    non-blocking for the write (and restored): a blocking write into a full pipe whose reader
    never reads (`check --json | sleep 50`) would wait as long as the reader lives."""
    flags = None
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        if not flags & os.O_NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        else:
            flags = None
    except OSError:
        flags = None
    try:
        _write_all(fd, data, timeout)
    finally:
        if flags is not None:
            try:
                fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            except OSError:
                pass


def _write_all(fd: int, data: bytes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            written = 0
        except InterruptedError:
            continue
        view = view[written:]
        if view and written == 0:
            left = deadline - time.monotonic()
            if left <= 0:
                raise OSError(errno.ETIMEDOUT, f"the reader did not take the report within {timeout:g} s")
            select.select([], [fd], [], left)


def _write_stream(path: str, data: bytes) -> None:
    try:
        # O_NONBLOCK: opening a FIFO for writing with no reader would block for ever; this way
        # it fails with ENXIO at once. No O_CREAT, no O_TRUNC: the node is never replaced.
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(f"cannot write the report to {path}: it is a FIFO with no reader") from None
        raise OutputError(f"cannot write the report to {path}: {_why(exc)}") from None
    try:
        write_fd(fd, data)
    except OSError as exc:
        raise OutputError(f"cannot write the report to {path}: {_why(exc)}") from None
    finally:
        os.close(fd)


def _write_regular(path: str, data: bytes, st: os.stat_result | None) -> None:
    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".distdoctor-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot write the report to {path}: cannot create a temp file in "
                          f"{directory}: {_why(exc)}") from None
    try:
        try:
            if st is None:
                os.fchmod(fd, 0o666 & ~_umask())
            else:
                try:
                    os.fchown(fd, st.st_uid, st.st_gid)
                except PermissionError:  # not root: the file becomes ours, as with any editor
                    pass
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            write_fd(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write the report to {path}: {_why(exc)}") from None
        raise


def _encode(text: str, to_stdout: bool) -> bytes:
    """Files are UTF-8; stdout is what the locale or PYTHONIOENCODING says. Text that cannot be
    encoded (a lone surrogate from a check, a glyph under ascii) is escaped or replaced, never an
    exception."""
    encoding = (getattr(sys.__stdout__, "encoding", None) or "utf-8") if to_stdout else "utf-8"
    if "utf" not in encoding.lower():
        try:
            return text.encode(encoding, "replace")
        except LookupError:
            pass
    return text.encode("utf-8", "backslashreplace")


def write_report(text: str, path: str | None, stdout_fd: int | None = 1) -> None:
    """Write text to path as described in the module docstring, or to stdout_fd when path is
    None or '-'. stdout_fd is where the report goes while fd 1 may be pointed elsewhere (None:
    stdout was closed)."""
    kind, st = ("stdout", None) if not path or path == "-" else _kind(path, stdout_fd)
    data = _encode(text, kind == "stdout")
    if kind == "stderr":
        try:
            write_fd(2, data)
        except OSError as exc:
            raise OutputError(f"cannot write the report to {path}: {_why(exc)}") from None
    elif kind == "stdout":
        if stdout_fd is None:
            raise OutputError("cannot write the report to stdout: it is closed")
        try:
            write_fd(stdout_fd, data)
        except OSError as exc:
            raise OutputError(f"cannot write the report to {path if path and path != '-' else 'stdout'}: "
                              f"{_why(exc)}") from None
    elif kind == "stream":
        _write_stream(str(path), data)
    else:
        _write_regular(str(path), data, st)


class ReservedStdout:
    """Keeps stdout for the report alone. While check packs load and checks run, third-party
    code may print or write to fd 1 directly (or start tools that inherit it); so fd 1 is pointed
    at stderr for the rest of the process, and the report is written to a private duplicate of
    the real stdout (`fd`), which child processes do not inherit."""

    def __init__(self) -> None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError, AttributeError):
            pass
        try:
            self.fd: int | None = os.dup(1)
        except OSError:  # started with stdout closed: the report has nowhere to go (EXIT_OUTPUT)
            self.fd = None
        try:
            os.dup2(2, 1)
        except OSError:  # stderr closed too: chatter goes nowhere rather than into the report
            null = os.open(os.devnull, os.O_WRONLY)
            if null != 1:  # with fd 1 closed, open() itself may have returned 1
                os.dup2(null, 1)
                os.close(null)
        # Python sets sys.stdout/sys.stderr to None when started with the descriptor closed;
        # give them fd 1 (stderr, or /dev/null when that is closed too) so nothing fails on them.
        if sys.stdout is None:
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), errors="replace", line_buffering=True)
        if sys.stderr is None:
            sys.stderr = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), errors="backslashreplace",
                                          line_buffering=True)
        self._text: TextIO | None = None

    def text(self) -> TextIO:
        """A text stream on the real stdout, in stdout's encoding; characters it cannot encode
        (PYTHONIOENCODING=ascii) are replaced, never an exception."""
        if self._text is None:
            if self.fd is None:
                raise OutputError("cannot write the report to stdout: it is closed")
            encoding = getattr(sys.__stdout__, "encoding", None) or "utf-8"
            self._text = io.TextIOWrapper(io.FileIO(self.fd, "w", closefd=False), encoding=encoding,
                                          errors="replace", line_buffering=True)
        return self._text

    def restore(self) -> None:
        """fd 1 back to the real stdout (only when no abandoned thread may still write to it)."""
        if self._text is not None:
            try:
                self._text.flush()
            except (OSError, ValueError):
                pass
        if self.fd is not None:
            try:
                sys.stdout.flush()
            except (OSError, ValueError, AttributeError):
                pass
            os.dup2(self.fd, 1)
            os.close(self.fd)
            self.fd = None
