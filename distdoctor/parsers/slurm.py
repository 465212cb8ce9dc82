"""Slurm's own notations and command outputs, parsed without I/O.

- `parse_counts("2(x3),1")` -> [2, 2, 2, 1]: the compressed per-node lists of
  SLURM_TASKS_PER_NODE, SLURM_STEP_TASKS_PER_NODE and SLURM_JOB_CPUS_PER_NODE.
- `parse_env_dump(text)`: `env | grep SLURM` output as users paste it (prompts, program output,
  interleaved tasks mixed in).
- `parse_hostnames`, `parse_version`, `parse_ping`, `parse_partitions`: scontrol/sinfo outputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from distdoctor import limits
from distdoctor.parsers import ParseError

_COUNT = re.compile(r"^([0-9]+)(?:\(x([0-9]+)\))?$")


def parse_counts(text: str, name: str = "SLURM_TASKS_PER_NODE") -> list[int]:
    """Expand Slurm's compressed per-node counts: `3,1(x3)` is 3,1,1,1."""
    value = text.strip()
    if not value:
        raise ParseError(name, "empty value; expected counts such as 2(x3),1")
    counts: list[int] = []
    shown = value if len(value) <= 80 else value[:77] + "..."
    for element in value.split(","):
        element = element.strip()
        match = _COUNT.match(element) if len(element) <= 40 else None
        if not match:
            raise ParseError(name, f"element {element[:40]!r} is not N or N(xM) in {shown!r}")
        count = int(match.group(1))
        repeat = int(match.group(2)) if match.group(2) is not None else 1
        if repeat == 0:
            raise ParseError(name, f"element {element!r} repeats zero times in {shown!r}")
        if count > limits.MAX_TASKS:
            raise ParseError(name, f"element {element!r} counts more than {limits.MAX_TASKS} in {shown!r}")
        if len(counts) + repeat > limits.MAX_COUNT_ELEMENTS:
            # Checked before the list is built: '2(x100000000)' once cost 23 GB.
            raise ParseError(name, f"lists more than {limits.MAX_COUNT_ELEMENTS} nodes, "
                                   f"more than Slurm allows in a job")
        counts.extend([count] * repeat)
    return counts


def parse_id_list(text: str, name: str) -> list[str]:
    """A comma-separated list of GPU ids/UUIDs as in CUDA_VISIBLE_DEVICES or SLURM_STEP_GPUS.
    Empty elements are rejected: `0,,1` makes CUDA stop at the gap."""
    value = text.strip()
    if not value:
        return []
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ParseError(name, f"empty element in {value!r}")
    return items


@dataclass(frozen=True)
class EnvDump:
    values: dict[str, str]
    skipped: tuple[str, ...] = ()  # lines that are not NAME=value (prompts, program output)
    conflicts: dict[str, tuple[str, ...]] = field(default_factory=dict)  # a name seen with different values


_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def parse_env_dump(text: str) -> EnvDump:
    """`env`/`printenv` output. Lines that are not assignments are kept aside; a name repeated
    with the same value (two tasks' output interleaved) counts once, with different values it is
    a conflict and the first value is kept."""
    values: dict[str, str] = {}
    skipped: list[str] = []
    conflicts: dict[str, list[str]] = {}
    for line in text.splitlines():
        match = _ASSIGN.match(line.rstrip("\r"))
        if not match:
            if line.strip():
                skipped.append(line)
            continue
        name, value = match.groups()
        if name in values and values[name] != value:
            conflicts.setdefault(name, [values[name]]).append(value)
            continue
        values.setdefault(name, value)
    return EnvDump(values, tuple(skipped), {k: tuple(v) for k, v in conflicts.items()})


def parse_hostnames(text: str) -> list[str]:
    """`scontrol show hostnames EXPR`: one host per line. scontrol exits 0 even for an invalid
    expression and prints `Invalid hostlist: ...` instead, so that is an error here."""
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if "Invalid hostlist" in line or line.startswith("scontrol:") or " " in line:
            raise ParseError("scontrol show hostnames", "rejected the expression", number, line)
        hosts.append(line)
    return hosts


_VERSION = re.compile(r"^slurm(?:-wlm)?\s+(\d+\.\d+(?:\.\d+)?\S*)\s*$", re.IGNORECASE)


def parse_version(text: str) -> str:
    """`sinfo --version` / `srun --version`: `slurm 23.11.4` or Debian's `slurm-wlm 22.05.8`."""
    for line in text.splitlines():
        match = _VERSION.match(line.strip())
        if match:
            return match.group(1)
    raise ParseError("sinfo --version", "no 'slurm X.Y.Z' line", 1 if text else None, text)


@dataclass(frozen=True)
class Controller:
    name: str
    role: str  # primary, backup1, ...
    up: bool


_PING = re.compile(r"^Slurmctld\((\w+)\) at (\S+) is (UP|DOWN)", re.IGNORECASE)


def parse_ping(text: str) -> list[Controller]:
    """`scontrol ping`: `Slurmctld(primary) at vm is UP`, one line per controller."""
    found = []
    for line in text.splitlines():
        match = _PING.match(line.strip())
        if match:
            found.append(Controller(match.group(2), match.group(1), match.group(3).upper() == "UP"))
    if not found:
        raise ParseError("scontrol ping", "no 'Slurmctld(...) at HOST is UP|DOWN' line", 1 if text else None, text)
    return found


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    available: str  # up, down, drain, inact
    nodes: int
    gres: tuple[str, ...]  # ("gpu:a100:4", ...) for one node group

    @property
    def gpus_per_node(self) -> int:
        total = 0
        for item in self.gres:
            fields = item.split("(")[0].split(":")
            if fields[0] == "gpu":
                total += int(fields[-1]) if fields[-1].isdigit() else 1
        return total


PARTITION_FORMAT = "%P|%a|%D|%G"


def parse_partitions(text: str) -> list[Partition]:
    """`sinfo -h -o '%P|%a|%D|%G'`: one line per partition and node group (sinfo splits a
    partition whose nodes differ in GRES). The default partition is marked with '*'. GRES
    `(null)` means none; `gpu:a100:4(S:0-1)` carries socket affinity."""
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 4 or not fields[2].strip().isdigit():
            raise ParseError("sinfo", "expected PARTITION|AVAIL|NODES|GRES", number, line)
        name, avail, nodes, gres = (f.strip() for f in fields)
        # GRES lists are comma-separated, but a socket range inside parentheses has commas too
        items = [g for g in re.split(r",(?![^(]*\))", gres) if g and g != "(null)"]
        rows.append(Partition(name.rstrip("*"), name.endswith("*"), avail, int(nodes), tuple(items)))
    return rows


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # IDLE, IDLE+DRAIN, MIXED+DRAIN, DOWN+NOT_RESPONDING ...
    reason: str = ""  # without Slurm's " [user@time]" suffix
    address: str = ""  # NodeAddr: where slurmctld reaches the node ("" when not shown)

    @property
    def flags(self) -> set[str]:
        return set(self.state.upper().replace("*", "").split("+"))

    @property
    def drained(self) -> bool:
        """DRAIN (set on running nodes: DRAINING, then DRAINED) or DRAINED/DRAINING as a base state."""
        return any(f.startswith("DRAIN") for f in self.flags)


_REASON_BY = re.compile(r"(?<!\s)\s*\[[^\[\]\s@]+@[^\[\]\s]+\]\s*$")  # linear: one '@', no '[' inside


def parse_node_show(text: str) -> NodeState:
    """`scontrol show node NAME` (multi-line or --oneliner): name, state and reason. The reason
    runs to the end of its line (it may hold spaces and '='), minus the ` [user@time]` Slurm adds."""
    name = re.search(r"(?:^|\s)NodeName=(\S+)", text)
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    if not name or not state:
        first = text.strip().splitlines()[0] if text.strip() else ""
        raise ParseError("scontrol show node", "no NodeName=/State= fields", 1, first)
    reason = re.search(r"(?:^|\s)Reason=(.*)$", text, re.M)
    text_reason = _REASON_BY.sub("", reason.group(1)).strip() if reason else ""
    address = re.search(r"(?:^|\s)NodeAddr=(\S+)", text)
    return NodeState(name.group(1), state.group(1), "" if text_reason == "(null)" else text_reason,
                     address.group(1) if address else "")


@dataclass(frozen=True)
class PartitionNode:
    name: str
    partition: str  # without the default partition's '*'
    state: NodeState


def parse_sinfo_nodes(text: str) -> list[PartitionNode]:
    """`sinfo -h -N -o '%N|%P|%T|%E'`: one line per node and partition (a node in two partitions
    is listed twice). The reason (%E) is last and may hold '|'."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[0].strip():
            raise ParseError("sinfo", "not 'node|partition|state|reason'", number, line)
        node, partition, state, reason = (p.strip() for p in parts)
        reason = "" if reason in ("none", "(null)") else _REASON_BY.sub("", reason).strip()
        out.append(PartitionNode(node, partition.rstrip("*"), NodeState(node, state.upper(), reason)))
    return out


@dataclass(frozen=True)
class SinfoRow:
    partition: str  # without the default partition's '*'; "" where the table has no PARTITION column
    state: str  # as sinfo abbreviates it, with its flag suffix: idle, mix, drng@, fail*, down$, idle~
    nodes: int | None  # the NODES column (None where not shown)
    nodelist: str  # NODELIST as printed (a hostlist expression)

    @property
    def base(self) -> str:
        """The state without sinfo's flag suffix (* not responding, ~ powered off, # powering up,
        ! pending power down, % powering down, $ maintenance reservation, @ pending reboot, ^ rebooting,
        - planned)."""
        return self.state.rstrip("*~#!%$@^-").lower()


# sinfo's tables start with PARTITION (the default) or NODELIST (-N); -N -l adds S:C:T
_SINFO_HEADER = re.compile(r"^(?=.*\bSTATE\b)(?=.*\bNODELIST\b)\s*(?:PARTITION|NODELIST)\s[A-Z_: ]+$")


def is_sinfo_header(line: str) -> bool:
    """The header of sinfo's default table (PARTITION AVAIL TIMELIMIT NODES STATE NODELIST) or of
    `sinfo -N [-l]` (NODELIST NODES PARTITION STATE ...)."""
    return bool(_SINFO_HEADER.match(line)) and len(line.split()) >= 3


def parse_sinfo_table(text: str) -> list[SinfoRow]:
    """sinfo's human tables: the default one, `-N` and `-N -l` (which add CPUS, S:C:T, MEMORY ...
    and REASON, whose words may hold spaces: it is last, and only the columns before it are read).
    Columns are found by the header's names, so any order sinfo prints is read."""
    lines = [line for line in text.splitlines() if line.strip()]
    start = next((k for k, line in enumerate(lines) if is_sinfo_header(line)), None)
    if start is None:
        raise ParseError("sinfo", "no header with STATE and NODELIST", 1, lines[0] if lines else "")
    names = lines[start].split()
    col = {name: k for k, name in enumerate(names)}
    before_reason = col.get("REASON", len(names))
    rows = []
    for number, line in enumerate(lines[start + 1:], start + 2):
        cells = line.split()
        if len(cells) < min(before_reason, len(names)) or is_sinfo_header(line):
            if line.strip().startswith(("NODELIST", "PARTITION")) or not cells:
                continue
            raise ParseError("sinfo", f"{len(cells)} cells where the header has {len(names)}", number, line)
        nodes = cells[col["NODES"]] if "NODES" in col else None
        rows.append(SinfoRow(cells[col["PARTITION"]].rstrip("*") if "PARTITION" in col else "",
                             cells[col["STATE"]], int(nodes) if nodes and nodes.isdigit() else None,
                             cells[col["NODELIST"]]))
    return rows
