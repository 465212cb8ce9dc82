"""What the host answers with: plain records, so facts and checks turn them into findings."""

from __future__ import annotations

import errno as errno_mod
from dataclasses import dataclass, field


MAX_OUTPUT = 16 * 1024 * 1024  # bytes kept of a command's stdout (and of its stderr); beyond, it is killed


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when it was killed: at its timeout, or for printing too much
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    timed_out: bool = False
    error: str = ""  # why it could not run: "not found", "permission denied", ...

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def missing(self) -> bool:
        return self.returncode == 127

    def describe(self) -> str:
        """One line saying how the command ended, for findings."""
        cmd = " ".join(self.argv)
        if self.timed_out:
            return f"`{cmd}` did not finish within {self.duration:.1f} s and was killed"
        if self.missing:
            return f"`{self.argv[0]}` was not found on PATH"
        if self.error:
            return f"`{cmd}` could not run: {self.error}"
        if self.returncode != 0:
            tail = (self.stderr or self.stdout).strip().splitlines()
            said = f": {tail[-1][:200]}" if tail else ""
            return f"`{cmd}` exited with status {self.returncode}{said}"
        return f"`{cmd}` succeeded"


@dataclass(frozen=True)
class ResolveResult:
    name: str
    addresses: tuple[str, ...] = ()
    error: str = ""
    duration: float = 0.0


@dataclass(frozen=True)
class ConnectResult:
    host: str
    port: int
    ok: bool
    error: str = ""  # "refused", "timeout", "unreachable", "no route", or the OS text
    errno: int | None = None
    latency: float = 0.0


@dataclass(frozen=True)
class Distribution:
    name: str
    version: str
    location: str  # the site-packages folder it is installed in
    files: tuple[str, ...] = field(default=())  # paths relative to location


def classify_errno(code: int | None, fallback: str) -> str:
    names = {
        errno_mod.ECONNREFUSED: "refused",
        errno_mod.ETIMEDOUT: "timeout",
        errno_mod.EHOSTUNREACH: "no route to host",
        errno_mod.ENETUNREACH: "network unreachable",
        errno_mod.ECONNRESET: "reset",
        errno_mod.EACCES: "permission denied",
        errno_mod.EADDRNOTAVAIL: "address not available",
        errno_mod.EADDRINUSE: "address in use",
    }
    return names.get(code, fallback) if code is not None else fallback

