"""Scoring `distdoctor log` over the labelled corpus of real failure logs
(tests/data/logs/corpus/labels.toml): shared by the scoring test and bench/log_corpus.py, which
prints every miss."""

from __future__ import annotations

import os
from dataclasses import dataclass

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

CORPUS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "logs", "corpus")
# what a right "failed, cause not in the catalogue" reading may lead with
GENERIC = frozenset({"job-failed", "unknown-error", "torch.elastic-root-cause", "torch.elastic-child-failed"})


@dataclass
class Verdict:
    file: str
    right: bool
    green: bool  # the diagnosis read as clean (OK or SKIP) although the job failed
    got: str     # subject of the leading finding
    rank: object
    want: list
    want_rank: object
    summary: str


def labels() -> list[dict]:
    with open(os.path.join(CORPUS, "labels.toml"), "rb") as fh:
        return tomllib.load(fh)["log"]


def floor() -> float:
    with open(os.path.join(CORPUS, "score.toml"), "rb") as fh:
        return float(tomllib.load(fh)["min_accuracy"])


def judge(entry: dict) -> Verdict:
    from distdoctor.logs.analysis import analyse

    runs, _ = analyse([os.path.join(CORPUS, entry["file"])], use_grep=False)
    diagnosis = next(r for r in runs if r.id == "log.diagnosis")
    lead = diagnosis.findings[0] if diagnosis.findings else None
    status = lead.status.value if lead else "skip"
    got = (lead.subject or "") if lead else ""
    rank = lead.evidence.get("rank") if lead and isinstance(lead.evidence, dict) else None
    want = list(entry["expect"])
    failed = status in ("fail", "warn", "error")
    if want == ["clean"]:
        # a clean run that merely holds scary words: right when the diagnosis does not fail it
        # (a WARN about its setup is allowed; a failure or "job failed" is not)
        wrong = status in ("fail", "error") or got in GENERIC
        return Verdict(entry["file"], not wrong, False, got, rank, want, None, lead.summary if lead else "")
    ok_subject = got in want or ("failed" in want and got in GENERIC)
    ok_rank = "rank" not in entry or rank == entry["rank"]
    return Verdict(entry["file"], failed and ok_subject and ok_rank, status in ("ok", "skip"), got, rank, want,
                   entry.get("rank"), lead.summary if lead else "")


def score() -> tuple[float, list[Verdict]]:
    verdicts = [judge(e) for e in labels()]
    return sum(v.right for v in verdicts) / len(verdicts), verdicts
