"""Pasted `sinfo` tables (the default one, `sinfo -N`, `sinfo -N -l`): the nodes Slurm will not
start jobs on (down, drained or draining, failed, in maintenance, not responding) named with
their state. Why a node is in that state is not in these tables (`sinfo -R` or `scontrol show
node` shows the reason): said so. pasted.py finds the sections and calls in here."""

from __future__ import annotations

from distdoctor.model import CheckRun, Finding, Status

KINDS = ("sinfo",)

# sinfo's abbreviated states (and their long forms in `-N -l`) of nodes that take no new jobs
_OUT = {"down", "drain", "drng", "drained", "draining", "fail", "failg", "failing", "maint", "inval", "unk",
        "unknown", "boot", "npc", "futr", "future", "plnd", "planned", "reboot"}


def detect(lines: list[str], i: int) -> tuple[str, int] | None:
    from distdoctor.parsers.slurm import is_sinfo_header

    if not is_sinfo_header(lines[i]):
        return None
    end = i + 1
    while end < len(lines) and end - i < 20000 and lines[end].strip() and not lines[end].lstrip().startswith("`"):
        end += 1
    return ("sinfo", end) if end > i + 1 else None


def runs(_kind: str, text: str, where: str, _env: dict[str, str]) -> list[CheckRun]:
    from distdoctor.parsers import ParseError
    from distdoctor.parsers.slurm import parse_sinfo_table

    title = f"Slurm nodes (pasted sinfo at {where})"
    try:
        rows = parse_sinfo_table(text)
    except ParseError as exc:
        # a table cut off inside a row: the rows before it were read, the rest is not shown
        rows = parse_sinfo_table("\n".join(text.splitlines()[:max(1, (exc.line or 2) - 1)]))
        cut = f"; the table is cut off at line {exc.line} (the rows after it are not shown)"
    else:
        cut = ""
    out_rows = [r for r in rows if r.base in _OUT or r.state.endswith("*")]
    count = sum(r.nodes or 1 for r in rows)
    evidence = {"rows": [[r.partition, r.state, r.nodes, r.nodelist] for r in rows[:64]]}

    def listed(selected) -> str:
        text = "; ".join(f"{r.state} {r.nodelist}" + (f" ({r.partition})" if r.partition else "")
                         for r in selected[:12])
        return text + (f"; and {len(selected) - 12} more row(s)" if len(selected) > 12 else "")

    if not out_rows:
        return [CheckRun("log.pasted-output", title, ("log", "pasted", "slurm"), Status.OK,
                         (Finding(Status.OK, f"pasted `sinfo`: {count} node(s) in {len(rows)} row(s), none down or "
                                             f"drained: {listed(rows)}{cut}", subject=where, evidence=evidence),),
                         0.0, f"pasted at {where}")]
    summary = f"pasted `sinfo`: Slurm starts no jobs on {sum(r.nodes or 1 for r in out_rows)} node(s): " \
              f"{listed(out_rows)}{cut}"
    finding = Finding(Status.WARN, summary, subject=where, evidence=evidence,
                      explanation="A trailing * means the node does not respond to slurmctld; drng/drain nodes finish "
                                  "their jobs and take no new ones; fail/maint/down nodes take none. Why is not in "
                                  "this table: `sinfo -R` lists each node's reason.",
                      fix="# on a Slurm login node: why each is out, then (an admin, once fixed) return it:\n"
                          "sinfo -R\n# scontrol update nodename=<node> state=resume")
    return [CheckRun("log.pasted-output", title, ("log", "pasted", "slurm"), Status.WARN, (finding,), 0.0,
                     f"pasted at {where}")]
