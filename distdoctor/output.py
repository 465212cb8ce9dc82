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
import os
import select
import stat
import tempfile
import time

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


def _kind(path: str) -> tuple[str, os.stat_result | None]:
    """('new' | 'regular' | 'stream' | 'stdout' | 'stderr', stat) or OutputError for what is refused."""
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
        # Writing to our own stdout through its /dev or /proc name goes to fd 1 itself, so a
        # shell redirection (`-o /dev/stdout > file`) keeps its offset and its file.
        if _same_file(st, 1):
            return "stdout", st
        if _same_file(st, 2):
            return "stderr", st
        return ("regular" if stat.S_ISREG(mode) else "stream"), st
    what = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    raise OutputError(f"cannot write the report to {path}: it is {what}; distdoctor writes only to "
                      f"regular files, character devices, FIFOs and its own stdout")


def check_writable(path: str) -> None:
    """Refuse, before the checks run, a path the report could never be written to."""
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
    """All of data to fd, waiting at most `timeout` for a stalled reader."""
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


def write_report(text: str, path: str | None, stdout_fd: int = 1) -> None:
    """Write text to path as described in the module docstring, or to stdout_fd when path is
    None or '-'. stdout_fd is where the report goes while fd 1 may be pointed elsewhere."""
    data = text.encode("utf-8")
    if not path or path == "-":
        try:
            write_fd(stdout_fd, data)
        except OSError as exc:
            raise OutputError(f"cannot write the report to stdout: {_why(exc)}") from None
        return
    kind, st = _kind(path)
    if kind == "stdout":
        try:
            write_fd(stdout_fd, data)
        except OSError as exc:
            raise OutputError(f"cannot write the report to {path}: {_why(exc)}") from None
    elif kind in ("stderr", "stream"):
        _write_stream(path, data)
    else:
        _write_regular(path, data, st)
