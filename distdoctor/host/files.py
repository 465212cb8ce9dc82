"""Files, limits and the process itself: /proc, /sys, rlimits, CPU affinity, the clock."""

from __future__ import annotations

import os
import resource
import shutil
import time
from typing import Mapping




class Files:
    env: Mapping[str, str]

    def read_text(self, path: str, max_bytes: int = 4 * 1024 * 1024) -> str | None:
        """The file's text, or None when it does not exist. Other errors (permission, EINVAL
        from a sysfs attribute of a down link) raise OSError for the caller to report."""
        try:
            with open(path, "rb") as fh:
                return fh.read(max_bytes).decode("utf-8", "replace")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_bytes(self, path: str, max_bytes: int = 4 * 1024 * 1024) -> bytes | None:
        """At most max_bytes of the file, or None when it does not exist (a process that exited:
        /proc/<pid>/environ). Other errors raise OSError, as for read_text."""
        try:
            with open(path, "rb") as fh:
                return fh.read(max_bytes)
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
            return None

    def file_info(self, path: str) -> tuple[int, float] | None:
        """(size in bytes, modification time) of the file, or None when it does not exist."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st.st_size, st.st_mtime

    def sleep(self, seconds: float) -> None:
        """Waiting between two samples (CPU time, RAS): FakeHost skips it."""
        time.sleep(max(0.0, seconds))

    def read_kmsg(self, max_bytes: int = 16 * 1024 * 1024, timeout: float = 2.0) -> str | None:
        """The kernel's ring buffer from /dev/kmsg, one record per line ("6,1234,5678901,-;msg"),
        read without consuming it (each open reads from the oldest record) and without blocking
        at the end (O_NONBLOCK: EAGAIN means no more). None when there is no /dev/kmsg; OSError
        (EPERM under kernel.dmesg_restrict, a container without it) for the caller to fall back."""
        try:
            fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        records: list[str] = []
        size = 0
        deadline = time.monotonic() + timeout
        try:
            while size < max_bytes and time.monotonic() < deadline:
                try:
                    chunk = os.read(fd, 8192)  # one record per read
                except BlockingIOError:
                    break
                except BrokenPipeError:
                    continue  # EPIPE: the record was overwritten while we read; the next one follows
                if not chunk:
                    break
                size += len(chunk)
                records.append(chunk.decode("utf-8", "replace").rstrip("\n"))
        finally:
            os.close(fd)
        return "\n".join(records) + ("\n" if records else "")

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def readlink(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    def realpath(self, path: str) -> str:
        return os.path.realpath(path)

    def disk_usage(self, path: str) -> tuple[int, int, int] | None:
        """(total, used, free) bytes of the filesystem holding path, or None if absent."""
        try:
            usage = shutil.disk_usage(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return usage.total, usage.used, usage.free

    def home(self) -> str:
        return self.env.get("HOME") or os.path.expanduser("~")

    def rlimit(self, name: str) -> tuple[int, int]:
        """(soft, hard) for RLIMIT_<name>; -1 means unlimited."""
        soft, hard = resource.getrlimit(getattr(resource, f"RLIMIT_{name.upper()}"))
        inf = resource.RLIM_INFINITY
        return (-1 if soft == inf else soft, -1 if hard == inf else hard)

    def cpu_affinity(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))

    def cpu_count(self) -> int:
        return os.cpu_count() or 1

    def pid(self) -> int:
        return os.getpid()

    def uid(self) -> int:
        return os.getuid()

    def time(self) -> float:
        return time.time()

