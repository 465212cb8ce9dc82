"""What `ssh -o BatchMode=yes host true` said, sorted into the cases a user can act on.

OpenSSH reports every failure with exit status 255 and one or more lines on stderr; the
wording below is OpenSSH's (checked against 9.2p1, see tests/data/ssh/). Banners, warnings
and the long "REMOTE HOST IDENTIFICATION HAS CHANGED" box come before the deciding line, so
the text is searched as a whole, most specific case first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OK = "ok"
KEY_DENIED = "key_denied"
HOSTKEY_UNKNOWN = "hostkey_unknown"
HOSTKEY_CHANGED = "hostkey_changed"
REFUSED = "refused"
TIMEOUT = "timeout"
NOT_RESOLVED = "not_resolved"
OTHER = "other"

KINDS = (OK, KEY_DENIED, HOSTKEY_UNKNOWN, HOSTKEY_CHANGED, REFUSED, TIMEOUT, NOT_RESOLVED, OTHER)

_OFFENDING = re.compile(r"Offending \S+ key in (?P<file>.+?):(?P<line>\d+)\s*$", re.M)
_IGNORED = re.compile(r"^(Warning: Permanently added|Pseudo-terminal will not be allocated|\*\*|@)")


@dataclass(frozen=True)
class SshOutcome:
    kind: str
    message: str  # the line that decided it, or a short description
    known_hosts_file: str = ""  # for a changed host key: the file and line holding the old key
    known_hosts_line: int | None = None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not _IGNORED.match(line.strip())]
    return lines[-1] if lines else ""


def _line_with(text: str, *needles: str) -> str:
    for line in text.splitlines():
        if any(n in line for n in needles):
            return line.strip()
    return _last_line(text)


def parse_ssh_result(returncode: int | None, stderr: str, timed_out: bool = False) -> SshOutcome:
    """returncode None or timed_out: the process was killed at distdoctor's own deadline."""
    if timed_out or returncode is None:
        return SshOutcome(TIMEOUT, "ssh did not finish before the deadline and was killed")
    if returncode == 0:
        return SshOutcome(OK, "")
    text = stderr or ""
    if returncode != 255:
        # ssh itself worked (it exits 255 for its own errors); the remote `true` did not: a
        # forced command, a broken login shell.
        line = _last_line(text)
        return SshOutcome(OTHER, f"logged in, but the remote command exited with status {returncode}"
                          + (f": {line}" if line else ""))
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or re.search(r"Host key for .* has changed", text):
        found = _OFFENDING.search(text)
        return SshOutcome(HOSTKEY_CHANGED, _line_with(text, "has changed and", "HAS CHANGED"),
                          found.group("file") if found else "", int(found.group("line")) if found else None)
    if "Host key verification failed" in text:
        return SshOutcome(HOSTKEY_UNKNOWN, _line_with(text, "host key is known", "authenticity of host",
                                                      "Host key verification failed"))
    if "Permission denied" in text or "Too many authentication failures" in text:
        return SshOutcome(KEY_DENIED, _line_with(text, "Permission denied", "Too many authentication failures"))
    if "Could not resolve hostname" in text:
        return SshOutcome(NOT_RESOLVED, _line_with(text, "Could not resolve hostname"))
    if "Connection refused" in text:
        return SshOutcome(REFUSED, _line_with(text, "Connection refused"))
    if re.search(r"Connection timed out|Operation timed out|timed out during banner exchange", text):
        return SshOutcome(TIMEOUT, _line_with(text, "timed out"))
    if "kex_exchange_identification" in text:  # sshd hung up before the key exchange
        return SshOutcome(OTHER, _line_with(text, "kex_exchange_identification"))
    return SshOutcome(OTHER, _last_line(text) or "ssh failed with status 255 and no message")


@dataclass(frozen=True)
class SshTarget:
    """Where ssh would really connect, from `ssh -G host` (after ~/.ssh/config's Host
    blocks: HostName, Port, User, ProxyJump/ProxyCommand)."""

    hostname: str
    port: int
    user: str = ""
    proxy: str = ""  # a ProxyJump or ProxyCommand: ssh does not connect to hostname:port itself


def parse_ssh_g(text: str) -> SshTarget:
    from distdoctor.parsers import ParseError

    values: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        key = key.lower()
        if key and key not in values:  # ssh -G prints each option once; keep the first anyway
            values[key] = value.strip()
    if "hostname" not in values or not values.get("port", "").isdigit():
        raise ParseError("ssh -G", "no 'hostname' and numeric 'port' lines in the configuration dump")
    proxy = values.get("proxyjump", "") or values.get("proxycommand", "")
    if proxy.lower() == "none":
        proxy = ""
    return SshTarget(values["hostname"], int(values["port"]), values.get("user", ""), proxy)
