"""A fix as a record (`Fix`: the command lines, the nodes they are for, a comment) and the one
place that prints it: `ssh NODE CMD` for one node, `clush -w NODES -- CMD` for several, `srun -w`
through Slurm, or a comment when no command can name them. Every command that prints fixes
renders them here; equal records print the same, so a report can drop one shown twice by value.

Node names and the values filled into commands come from reports, logs and ranks, which anyone
can write, and operators paste fixes as root: a name that is not a plain host name, or a value
that is not a plain word, never goes into a command; that part of the fix becomes a comment, and
a comment is one line (a newline in a name cannot start a command of its own).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Iterable, Sequence

from distdoctor.text import fold, one_line

_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
# The operator's own machine: `ssh localhost` pasted elsewhere runs there, not on the node.
_LOOPBACK = re.compile(r"^(localhost|ip6-localhost|ip6-loopback)(\.localdomain)?$|^127\.|^0\.0\.0\.0$", re.I)
_WORD = re.compile(r"^[\w@%+=:,./-]+$", re.ASCII)


def host_name(name: str) -> bool:
    """A plain host name or IPv4 address that names another machine: safe as `ssh NAME`."""
    return bool(_HOST.match(name)) and not loopback(name)


def loopback(name: str) -> bool:
    """Whether name reaches the operator's own machine, judged by what it resolves to: the
    loopback names, `*.localhost` (RFC 6761), and every spelling the resolver turns into an
    IPv4 address in 127/8 or 0.0.0.0: `127.1`, `0`, `2130706433`, `0x7f000001`, `0177.0.0.1`
    (inet_aton accepts one to four parts, each decimal, octal or hex)."""
    if _LOOPBACK.match(name) or name.lower().rstrip(".").endswith(".localhost") or name.lower() == "localhost.":
        return True
    address = numeric_ipv4(name)
    return address is not None and (address >> 24 == 127 or address == 0)


def numeric_ipv4(name: str) -> int | None:
    """The IPv4 address inet_aton(3) reads from name, or None when it is not one."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        if not part or len(part) > 12:
            return None
        if part[:2].lower() == "0x":
            digits, base, allowed = part[2:], 16, "0123456789abcdefABCDEF"
        elif part.startswith("0") and len(part) > 1:
            digits, base, allowed = part[1:], 8, "01234567"
        else:
            digits, base, allowed = part, 10, "0123456789"
        if not all(c in allowed for c in digits):
            return None
        values.append(int(digits, base) if digits else 0)
    *head, last = values
    if any(v > 255 for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    address = 0
    for value in head:
        address = address << 8 | value
    return address << (8 * (4 - len(head))) | last


def plain(value: object) -> bool:
    """A value that is one shell word as it is (a version, a size, an interface name)."""
    return isinstance(value, (str, int, float)) and not isinstance(value, bool) and bool(_WORD.match(str(value)))


def shown(names: Iterable[str]) -> str:
    """Node names for a comment: folded when they are plain, else each as it is, escaped."""
    names = list(dict.fromkeys(names))
    if all(_HOST.match(n) for n in names):
        return fold(names)
    return one_line(", ".join(names))


def argument(command: str) -> str:
    """command as one argument of ssh or clush: as it is when every word is plain (readable),
    else quoted once, so that `&&`, `>` and `|` run on the node and not here. A word that needs
    quotes needs them twice: ssh and clush join their arguments and the node's shell parses the
    line again, so `ssh n ls ';x;'` runs `x` there."""
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes
        return shlex.quote(command)
    if words and " ".join(words) == command and all(shlex.quote(w) == w for w in words):
        return command
    return shlex.quote(command)


def on(nodes: Sequence[str], command: str, by_file: Iterable[str] = (), srun: bool = False) -> str:
    """The lines that run command on every node: a command for the nodes a shell can name, a
    comment with the command for the rest. by_file: names that are report files (their nodes
    share a hostname with another report, so no name reaches them). srun: through Slurm, one
    task per node, instead of ssh or clush (srun runs a program, not a shell line)."""
    nodes = list(dict.fromkeys(str(n) for n in nodes))
    files = set(by_file)
    named = [n for n in nodes if n not in files and host_name(n)]
    lines = []
    if named and srun:
        program = command if argument(command) == command else f"bash -c {shlex.quote(command)}"
        lines.append(f"srun -w {shlex.quote(fold(named))} -N{len(named)} -n{len(named)} {program}")
    elif len(named) == 1:
        lines.append(f"ssh {named[0]} {argument(command)}")
    elif named:
        lines.append(f"clush -w {shlex.quote(fold(named))} -- {argument(command)}")
    unnamed = [n for n in nodes if n not in named]
    if unnamed:
        by_files = [n for n in unnamed if n in files]
        others = [n for n in unnamed if n not in files]
        why = []
        if by_files:
            what = "is a report file whose node shares" if len(by_files) == 1 else \
                "are report files whose nodes share"
            why.append(f"{shown(by_files)} {what} a hostname with another report")
        if others:
            why.append(f"{shown(others)} {'is not a host name' if len(others) == 1 else 'are not host names'} "
                       "a command can use")
        each = "that node" if len(unnamed) == 1 else "each of them"
        lines.append(one_line(f"# {'; '.join(why)}: on {each}, run:"))
        lines.append(one_line(f"#   {command}"))
    return "\n".join(lines)


def toward(node: str, command: str, target: str) -> str:
    """command (a template with {} for target: `tracepath {}`) run on node, aimed at target, a
    host name or address from a rank or a report: a comment when it is not plainly one."""
    return render(toward_fix(node, command, target))


def toward_fix(node: str, command: str, target: str, note: str = "") -> "Fix":
    """toward as a record (note: its comment)."""
    if not host_name(target):
        return Fix((), [node], f"{command.format(target)}" + (f"   # {note}" if note else ""))
    return Fix((command.format(target),), [node], note)


def comment(text: str) -> str:
    """A comment line, whatever text holds."""
    return one_line(text if text.startswith("#") else f"# {text}")


@dataclass(frozen=True)
class Fix:
    """One remedy as data. commands: shell commands, run in order, each only after the last one
    succeeded (printed joined with `&&`). nodes: where they run; empty means the shell that
    reads the report (the node it was made on, or the operator's). comment: one line (why, where
    "here" is, or what no command can do). srun: reach the nodes through Slurm instead of ssh/clush.
    by_file: nodes known only by their report file (see `on`)."""

    # Any sequence of strings is taken; each is kept as a tuple (a record hashes by value).
    commands: Sequence[str] = ()
    nodes: Sequence[str] = ()
    comment: str = ""
    srun: bool = False
    by_file: Sequence[str] = ()

    def __post_init__(self):
        # Callers pass lists and generators; a record compares and hashes by value.
        for name in ("commands", "nodes", "by_file"):
            value = getattr(self, name)
            value = [value] if isinstance(value, str) else [str(v) for v in value if v]
            object.__setattr__(self, name, tuple(value if name == "commands" else dict.fromkeys(value)))

    def __bool__(self) -> bool:
        """A record with nothing to run or say is no fix (a remedy given values it cannot use)."""
        return bool(self.commands or self.comment)

    def to_dict(self) -> dict:
        return {"commands": list(self.commands), "nodes": list(self.nodes), "comment": self.comment}


def render(fix: Fix) -> str:
    """The lines an operator pastes for fix. Commands for nodes come first (the ssh or clush
    line names them) and the comment after, as a note; commands for here come after the
    comment, which is the only thing that can say where "here" is (`as root on gpu07: ...`)."""
    note = comment(fix.comment.lstrip("# ")) if fix.comment else ""
    if fix.nodes and fix.commands:
        lines = [on(fix.nodes, script(fix), fix.by_file, fix.srun), note]
    elif fix.nodes:
        lines = [comment(f"on {shown(fix.nodes)}: {fix.comment.lstrip('# ')}") if fix.comment else ""]
    else:
        lines = [note, script(fix)]
    return "\n".join(line for line in lines if line)


def script(fix: Fix) -> str:
    """fix's commands as the one line a node's shell runs: each step only after the last one
    succeeded."""
    return " && ".join(fix.commands)


def render_all(fixes: Iterable[Fix]) -> str:
    """Several records as one fix, each printed once."""
    return "\n".join(filter(None, (render(f) for f in dict.fromkeys(fixes) if f)))
