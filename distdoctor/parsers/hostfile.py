"""Host lists as MPI launchers and Horovod take them.

- MPI hostfiles: Open MPI (`node1 slots=4 max_slots=8`, `user@node1`), MPICH/Intel MPI
  (`node1:4`), DeepSpeed and Horovod (`node1 slots=4`), plain one-name-per-line lists; `#`
  starts a comment, blank lines are ignored.
- Horovod's `-H node1:4,node2:4`.

A bad line does not stop the parse: the hosts that could be read are kept and every bad line
becomes a problem with its line number, so one finding can name them all. Names that begin
with `-` are refused: they would reach ssh's command line as an option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Letters, digits, dots, dashes and underscores (DNS and /etc/hosts names), colons and %zone
# for IPv6 literals. Anything else (spaces, quotes, slashes, `$`) is not a host name.
_NAME = re.compile(r"^[A-Za-z0-9_.:%-]+$")
_USER = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.-]*$")
_SLOT_KEYS = ("slots", "max_slots", "max-slots", "cpu", "count")


@dataclass(frozen=True)
class HostEntry:
    name: str
    slots: int | None = None
    user: str = ""
    line: int | None = None  # where it was read (hostfile line, or position in a -H list)


@dataclass(frozen=True)
class HostProblem:
    line: int | None
    text: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}{self.message}" + (f" ({self.text.strip()[:80]!r})" if self.text.strip() else "")


@dataclass(frozen=True)
class HostList:
    entries: tuple[HostEntry, ...]
    problems: tuple[HostProblem, ...] = ()

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]


def check_name(name: str) -> str:
    """'' when name can be handed to ssh and the resolver as a host name, else why not."""
    if not name:
        return "empty host name"
    if name.startswith("-"):
        return f"host name {name!r} begins with '-' and would be read as an option; refused"
    if len(name) > 253:
        return f"host name of {len(name)} characters is longer than 253"
    if not _NAME.match(name):
        return f"{name!r} is not a host name (only letters, digits, '.', '-', '_' and IPv6 literals)"
    return ""


def split_user(token: str) -> tuple[str, str, str]:
    """(user, host, error) from `user@host`."""
    if "@" not in token:
        return "", token, ""
    user, _, name = token.rpartition("@")
    if not _USER.match(user):
        return "", name, f"{user!r} is not a user name"
    return user, name, ""


def _split_slots(token: str) -> tuple[str, str | None]:
    """`host:N` -> (host, "N"). `[v6addr]:N` and bare IPv6 literals (several colons) keep
    their colons."""
    if token.startswith("["):
        addr, _, rest = token[1:].partition("]")
        return addr, rest[1:] if rest.startswith(":") else None
    if token.count(":") == 1:
        name, _, slots = token.partition(":")
        return name, slots
    return token, None


def _slots_value(text: str) -> int | None:
    if not text.isdigit():
        return None
    value = int(text)
    return value if value >= 1 else None


def _entry(token: str, line: int | None) -> tuple[HostEntry | None, str]:
    user, rest, error = split_user(token)
    if error:
        return None, error
    name, slots_text = _split_slots(rest)
    why = check_name(name)
    if why:
        return None, why
    slots = None
    if slots_text is not None:
        slots = _slots_value(slots_text)
        if slots is None:
            return None, f"slot count {slots_text!r} after ':' is not a positive integer"
    return HostEntry(name, slots, user, line), ""


def parse_hostfile(text: str) -> HostList:
    entries: list[HostEntry] = []
    problems: list[HostProblem] = []
    for number, raw in enumerate(text.splitlines(), 1):
        body = raw.split("#", 1)[0].strip()
        if not body:
            continue
        tokens = body.split()
        entry, error = _entry(tokens[0], number)
        if entry is None:
            problems.append(HostProblem(number, raw, error))
            continue
        for token in tokens[1:]:
            key, eq, value = token.partition("=")
            if not eq:
                problems.append(HostProblem(number, raw, f"unexpected {token!r} after the host name (one host "
                                                         "per line; options are key=value such as slots=4)"))
                entry = None
                break
            if key not in _SLOT_KEYS:
                problems.append(HostProblem(number, raw, f"unknown option {key!r} (known: slots, max_slots)"))
                continue
            slots = _slots_value(value)
            if slots is None:
                problems.append(HostProblem(number, raw, f"{key}={value!r} is not a positive integer"))
                entry = None
                break
            if key in ("slots", "cpu", "count"):
                entry = HostEntry(entry.name, slots, entry.user, number)
        if entry is not None:
            entries.append(entry)
    return HostList(tuple(entries), tuple(problems))


def parse_horovod_hosts(text: str) -> HostList:
    """`-H node1:4,node2:4` (Horovod requires the slot count; a missing one means 1). The
    `line` of each entry and problem is its position in the list, from 1."""
    entries: list[HostEntry] = []
    problems: list[HostProblem] = []
    items = text.split(",")
    for position, item in enumerate(items, 1):
        token = item.strip()
        if not token:
            if len(items) > 1 or not text.strip():
                problems.append(HostProblem(position, item, "empty entry in the -H list"))
            continue
        entry, error = _entry(token, position)
        if entry is None:
            problems.append(HostProblem(position, item, error))
        else:
            entries.append(entry)
    return HostList(tuple(entries), tuple(problems))
