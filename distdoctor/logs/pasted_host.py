"""Pasted output about the node's limits and settings: `ulimit -a` (locked memory, which RDMA
registration needs), `df -h` (the size of /dev/shm, which NCCL's shared-memory transport needs),
and environment dumps (`env | grep NCCL`, `export X=...` lines) pasted on their own.

Judged by the live checks' own thresholds and remedies (host.memlock-limit, host.shm-size), with
what a paste cannot show said: whether the node has RDMA devices, which node the paste came from.
pasted.py finds the sections and calls in here."""

from __future__ import annotations

import re

from distdoctor.model import CheckRun, Finding, Status
from distdoctor.text import plural

KINDS = ("ulimit", "df", "env")
# a paste's node is not named by the paste: its fixes are addressed to it in words
THE_NODE = "the node the paste came from"
# an IPv4 address the user hid before pasting (*.*.*.*, x.x.x.x, 10.xx.xx.xx)
# (or X.Y.Z.Q: one letter an octet, nccl#1053)
MASKED = re.compile(r"\binet (?:addr:)?(?=[\d.]*[A-Za-z*])(?:\d{1,3}|[x*X]{1,3}|[A-Za-z])"
                    r"(?:\.(?:\d{1,3}|[x*X]{1,3}|[A-Za-z])){3}(?![\w.])")
# the first line of an `ip` entry that the paste cut short ("2", "6: ens16f2: <NO-CARRIER,BROAD")
_CUT_ENTRY = re.compile(r"^\d+:?(?:\s+[^\s:]+:?(?:\s+<[^>]*)?)?\s*$")

_ULIMIT_LINE = re.compile(r"^[a-z][a-z ]+\((?:[a-z]+, )?-[a-zA-Z]\)\s+(?:\d+|unlimited)\s*$")
_DF_HEADER = re.compile(r"^Filesystem\s+(?:Type\s+)?(?:Size|1K-blocks|1024-blocks)\s+Used\s+Avail")
_DF_ROW = re.compile(r"^\S+(?:\s+\S+)?\s*$|^\S+\s+(?:[a-z]\w*\s+)?\d")
# the variables distributed jobs and their launchers read (Slurm's own dump is judged apart)
_ENV_WORD = re.compile(r"^(?:export\s+|declare -x\s+)?(?P<k>(?:NCCL|GLOO|TORCH|TORCHELASTIC|OMPI_MCA|UCX|PMIX|FI|NVIDIA|"
                       r"HOROVOD|CUDA)_\w+|MASTER_ADDR|MASTER_PORT|WORLD_SIZE|RANK|LOCAL_RANK)=(?P<v>.*)$")


def detect(lines: list[str], i: int) -> tuple[str, int] | None:
    from distdoctor.parsers.ulimit import is_limit_line

    body = lines[i].strip()
    if is_limit_line(body):
        end = i
        while end < len(lines) and end - i < 60 and is_limit_line(lines[end].strip()):
            end += 1
        # a whole `ulimit -a`, not a sentence that happens to look like one line of it; or one line
        # quoted with ulimit's own "(unit, -flag)" (gardenlinux#170: the memlock line alone)
        if end - i >= 3 or _ULIMIT_LINE.match(body):
            return "ulimit", end
    if _DF_HEADER.match(body):
        end = i + 1
        while end < len(lines) and end - i < 5000 and lines[end].strip() and _DF_ROW.match(lines[end].strip()):
            end += 1
        return "df", end
    return None


def env_section(lines: list[str]) -> tuple[int, str] | None:
    """(first line, text) of an environment dump pasted on its own: two or more NAME=value lines
    of the variables distributed jobs read (several nodes' or containers' dumps in one paste kept
    together: their values are compared)."""
    dump = [(k, line.strip()) for k, line in enumerate(lines) if _ENV_WORD.match(line.strip())]
    if len(dump) < 2:
        return None
    return dump[0][0], "\n".join(line for _k, line in dump)


def _note(where: str, status: Status, summary: str, title: str, evidence: dict, check: str = "log.pasted-output",
          **kw) -> CheckRun:
    return CheckRun(check, title, ("log", "pasted", "host"), status,
                    (Finding(status, summary, subject=where, evidence=evidence, **kw),), 0.0, f"pasted at {where}")


def runs(kind: str, text: str, where: str, env: dict[str, str]) -> list[CheckRun]:
    from distdoctor.parsers import ParseError

    try:
        if kind == "ulimit":
            return _ulimit(text, where)
        if kind == "df":
            return _df(text, where)
        if kind == "env":
            return _env(text, where)
    except (ParseError, ValueError, OverflowError) as exc:
        return [_note(where, Status.WARN, f"pasted {kind} output at {where} could not be read: {str(exc)[:200]}",
                      "Tool output pasted into the log", {})]
    return []


def _ulimit(text: str, where: str) -> list[CheckRun]:
    from distdoctor import fixes
    from distdoctor.parsers.ulimit import parse_ulimit

    limits = parse_ulimit(text)
    shown = "; ".join(f"{lim.label} {'unlimited' if lim.value is None else lim.value}"
                      + (f" {lim.unit}" if lim.unit and lim.value is not None else "")
                      for flag, lim in limits.items() if flag in "lnsuv")
    out = [_note(where, Status.OK, f"pasted `ulimit -a`: {shown or plural(len(limits), 'limit')}",
                 f"Limits (pasted ulimit -a at {where})",
                 {f: (None if lim.value is None else lim.value) for f, lim in limits.items()})]
    memlock = limits.get("l")
    if memlock is not None and memlock.value is not None:
        size = memlock.bytes or 0
        out.append(_note(where, Status.WARN, f"pasted `ulimit -a`: locked memory is limited to {size // 1024} KiB",
                         f"Locked-memory limit (pasted ulimit -a at {where})",
                         {"soft_bytes": size}, check="host.memlock-limit",
                         explanation="InfiniBand and RoCE register (pin) memory under this limit: NCCL fails with "
                                     "`ibv_reg_mr ... Cannot allocate memory`, UCX with `ibv_create_cq ... Cannot "
                                     "allocate memory`, Open MPI's openib with a completion-queue error. The paste "
                                     "does not show whether this node has RDMA devices (on one without, the limit "
                                     "does not matter), nor the hard limit; and it is the limit of the shell it ran "
                                     "in: inside srun or mpirun it can differ.",
                         fix=fixes.memlock(here=THE_NODE)))
    return out


def _df(text: str, where: str) -> list[CheckRun]:
    from distdoctor.parsers.df import parse_df
    from distdoctor.logs.pasted_tools import run_checks
    from distdoctor.testing import FakeHost

    mounts = parse_df(text)
    shm = next((m for m in mounts if m.mount == "/dev/shm"), None)
    others = [m for m in mounts if m.mount != "/dev/shm" and m.mount.endswith("/shm")]
    summary = f"pasted `df`: {plural(len(mounts), 'filesystem')}; " + (
        f"/dev/shm is {shm.size}" if shm else "no /dev/shm row: its size is not shown")
    if others:
        summary += (f"; {plural(len(others), 'other shm mount')} ({', '.join(sorted({m.size for m in others}))}) "
                    "under other paths: containers' own /dev/shm seen from the host, not this one's")
    out = [_note(where, Status.OK, summary, f"Filesystems (pasted df at {where})",
                 {"mounts": [[m.filesystem, m.mount, m.size] for m in mounts[:64]]})]
    if shm is None or shm.size_bytes is None:
        return out
    host = FakeHost(disk={"/dev/shm": (shm.size_bytes, 0, shm.size_bytes)}, hostname=THE_NODE)
    for r in run_checks(("host.shm-size",), host):
        # the paste shows the size, not what is free: the check's "free" figure is not repeated
        findings = tuple(Finding(f.status, f.summary.split(" (")[0] if f.status == Status.OK else f.summary,
                                 subject=f.subject, explanation=f.explanation, fix=f.fix, evidence=f.evidence)
                         for f in r.findings)
        out.append(CheckRun(r.id, f"{r.title} (pasted df at {where})", r.tags + ("pasted",), r.status, findings,
                            r.duration, f"pasted df at {where}"))
    return out


def _env(text: str, where: str) -> list[CheckRun]:
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = _ENV_WORD.match(line.strip())
        if m:
            value = m["v"].strip().strip("'\"")
            if value not in values.setdefault(m["k"], []):
                values[m["k"]].append(value)
    shown = ", ".join(f"{k}={'|'.join(v)[:60]}" for k, v in list(values.items())[:16])
    differ = sorted(k for k, v in values.items() if len(v) > 1)
    explanation = "The variables every check above reads from the environment (interfaces, HCAs, transports)."
    if differ:
        explanation += (f" {', '.join(differ)} has more than one value in this paste: it holds several nodes' or "
                        "runs' settings, so which one a given rank had is not shown.")
    return [_note(where, Status.OK, f"pasted environment: {plural(len(values), 'variable')}: {shown}",
                  f"Environment (pasted at {where})", {"variables": {k: v for k, v in list(values.items())[:64]}},
                  explanation=explanation)]


def masked_interfaces(text: str, where: str) -> list[CheckRun]:
    """An interface listing whose IPv4 addresses the user masked: the names and states are stated;
    which address NCCL or Gloo would use cannot be told (judging the addresses left, the IPv6
    link-local ones, would invent a verdict about an interface whose real address is hidden)."""
    from distdoctor.parsers.ip import parse_ip_addr

    links = parse_ip_addr(text)
    names = ", ".join(f"{link.name} ({link.state or 'state not shown'})" for link in links[:16])
    return [_note(where, Status.OK, f"pasted interface list with masked addresses: {names}",
                  f"Interfaces (pasted at {where})", {"interfaces": [link.name for link in links[:64]]},
                  explanation="The IPv4 addresses are masked (*.*.*.* or x.x.x.x) in this paste: which interface "
                              "NCCL or Gloo would use, and whether it reaches the other nodes, cannot be told from "
                              "it. Paste `ip -br addr` with the addresses, or run distdoctor check on the node.")]


def listing_cut(lines: list[str], start: int, end: int) -> str:
    """How a pasted interface listing shows it is cut off: the entry after it cut short, or the
    input ending inside a code fence that was opened before it and never closed ("" when whole)."""
    after = next((lines[k].strip() for k in range(end, min(end + 3, len(lines))) if lines[k].strip()), None)
    if after is not None:
        return f"after it: {after[:40]!r}" if _CUT_ENTRY.match(after) else ""
    fences = sum(1 for line in lines[:start] if line.lstrip().startswith(("```", "~~~")))
    return "the paste ends inside its code block" if fences % 2 else ""


def names_shown(env: dict[str, str], links) -> bool:
    """Whether NCCL_SOCKET_IFNAME names interfaces by their exact names (`=eth0` or `eth0,ib0`)
    that the listing shows: then what NCCL does with them can be told from a cut listing."""
    value = env.get("NCCL_SOCKET_IFNAME", "")
    names = [n.lstrip("=") for n in value.split(",") if n.strip()]
    shown = {link.name for link in links}
    return bool(names) and not value.startswith("^") and all(n in shown for n in names)


def cut_listing_note(links, cut: str, where: str) -> CheckRun:
    names = ", ".join(link.name + "".join(f" {a[1].split('/')[0]}" for a in link.addresses[:2])
                      for link in links[:16])
    return _note(where, Status.OK, f"the pasted interface list is cut off ({cut}): shown {names}; the "
                                   "interfaces after it are not shown, so which one NCCL would use cannot be told",
                 f"Interfaces (pasted at {where})", {"interfaces": [link.name for link in links[:64]]},
                 explanation="NCCL prefers an ib* interface, then any other that is not docker* or lo*: an "
                             "interface the paste cuts off could be the one it picks.")
