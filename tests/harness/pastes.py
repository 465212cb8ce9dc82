"""Scoring `distdoctor log` over the labelled pasted tool outputs (tests/data/logs/pasted/labels.toml):
shared by the floor test and bench/paste_accuracy.py, which prints every miss.

A paste is read right when it is recognised (some pasted run comes out of it), what it shows is
stated back (the label's `state` substrings), the worst pasted verdict is the labelled one (by one
of the labelled checks, where named), nothing the label rules out is said (`never`), and, where the
paste cannot show something, that is said (`unknown`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PASTED = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "logs", "pasted")
FIRST_OF_ROUND = "ulimit-a_memlock64_ucx8229.md"
# the first paste of the second first-sight round (pastesight2)
FIRST_OF_ROUND2 = "topo-mp_14nics_gpu_numa_id_cut_deepep60.md"
# its second batch, collected after the round's first fixes were in
FIRST_OF_ROUND2_BATCH2 = "topo-m_all_sys_10nics_cut_deepep128.md"
# the samples for the unread-tools catalogue (not first sight), then its third batch
UNREAD_SAMPLES = "numactl-H_root_prompt_one_node_unknown_tool_nodejs-benchmarking123.md"
FIRST_OF_ROUND2_BATCH3 = "nvidia-smi-q_remapped_rows_pending_fragment_gpud80.md"
_RANK = {"ok": 0, "skip": 0, "warn": 1, "fail": 2, "error": 3, "timeout": 3}
_UNKNOWN = re.compile(r"unknown|cannot (?:be )?t[eo]ld?|cannot tell|not shown|cut off|not in the paste|"
                      r"does not show|no addresses", re.I)


@dataclass
class Verdict:
    file: str
    right: bool
    misses: list[str] = field(default_factory=list)
    got: str = ""
    summaries: list[str] = field(default_factory=list)


def labels() -> list[dict]:
    with open(os.path.join(PASTED, "labels.toml"), "rb") as fh:
        return tomllib.load(fh)["paste"]


def floor() -> dict:
    with open(os.path.join(PASTED, "score.toml"), "rb") as fh:
        return tomllib.load(fh)


def _pasted_runs(path: str):
    from distdoctor.logs.analysis import analyse

    runs, _ = analyse([path], use_grep=False)
    return [r for r in runs if "pasted" in r.tags or r.id.startswith("log.pasted")]


def judge(entry: dict) -> Verdict:
    runs = _pasted_runs(os.path.join(PASTED, entry["file"]))
    want = entry["verdict"] if isinstance(entry["verdict"], list) else [entry["verdict"]]
    worst = max((r.status.value for r in runs), key=lambda s: _RANK.get(s, 3), default="none")
    summaries = [f.summary for r in runs for f in r.findings]
    said = "\n".join(summaries + [r.title for r in runs]).lower()
    explained = "\n".join(summaries + [f.explanation or "" for r in runs for f in r.findings])
    misses = []
    if want == ["none"]:
        if _RANK.get(worst, 0) > 0:
            misses.append(f"judged {worst} where nothing should be")
    else:
        # "none" in a list of verdicts: recognising nothing is right too, and so is any listed verdict
        if not runs:
            if "none" not in want:
                misses.append("not recognised")
        elif _RANK.get(worst, 3) not in {_RANK[w] for w in want if w != "none"}:
            misses.append(f"verdict {worst}, want {'/'.join(want)}")
        elif entry.get("ids") and _RANK.get(worst, 0) > 0 and not any(
                r.id in entry["ids"] and r.status.value == worst for r in runs):
            by = sorted({r.id for r in runs if r.status.value == worst})
            misses.append(f"{worst} not by {'/'.join(entry['ids'])} (by {by})")
    for s in entry.get("state", []):
        if runs and s.lower() not in said:
            misses.append(f"does not state {s!r}")
    for s in entry.get("never", []):
        if s.lower() in said:
            misses.append(f"says {s!r}")
    if entry.get("unknown") and runs and not _UNKNOWN.search(explained):
        misses.append("does not say what the paste cannot show")
    got = ", ".join(f"{r.id} {r.status.value}" for r in runs) or "nothing recognised"
    return Verdict(entry["file"], not misses, misses, got, summaries)


def score(entries: list[dict] | None = None) -> tuple[float, list[Verdict]]:
    verdicts = [judge(e) for e in (labels() if entries is None else entries)]
    return sum(v.right for v in verdicts) / max(1, len(verdicts)), verdicts


def round_entries(first: str = FIRST_OF_ROUND, last: str | None = None) -> list[dict]:
    """The pastes of a first-sight round: labelled from `first` on, up to (not including) `last`."""
    names = [e["file"] for e in labels()]
    return labels()[names.index(first):names.index(last) if last else None]
