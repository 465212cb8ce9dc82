"""The labelled corpus of real failure logs (tests/data/logs/corpus): every one of them is a failed
job, so none may read as clean, and the share read right (the labelled cause, and rank where
labelled, leading the diagnosis) must not fall below the figure in score.toml.
`python3 bench/log_corpus.py` prints every miss."""

import os
import re

import pytest

from tests.harness import corpus

LABELS = corpus.labels()


def test_every_file_is_labelled_and_every_label_complete():
    files = {f for f in os.listdir(corpus.CORPUS) if f.endswith(".log")}
    labelled = [e["file"] for e in LABELS]
    assert len(labelled) == len(set(labelled)), "a file labelled twice"
    assert files == set(labelled)
    for e in LABELS:
        assert re.match(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull|discussions)/\d+$", e["source"]), e
        assert e["cause"].strip() and e["fix"].strip() and e["expect"], e


@pytest.mark.parametrize("entry", LABELS, ids=lambda e: e["file"])
def test_no_failed_job_reads_clean(entry):
    verdict = corpus.judge(entry)
    assert not verdict.green, verdict.summary


def test_score_does_not_fall():
    accuracy, verdicts = corpus.score()
    misses = [f"{v.file}: led with {v.got!r} (rank {v.rank}), want {v.want} (rank {v.want_rank})"
              for v in verdicts if not v.right]
    assert accuracy >= corpus.floor(), f"accuracy {accuracy:.3f} < {corpus.floor()}:\n" + "\n".join(misses)


def test_index_is_generated_from_the_labels():
    import subprocess
    import sys

    made = subprocess.run([sys.executable, os.path.join(corpus.CORPUS, "make_index.py")], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    with open(os.path.join(corpus.CORPUS, "INDEX.md"), encoding="utf-8") as fh:
        assert fh.read() == made, "run: python3 tests/data/logs/corpus/make_index.py > tests/data/logs/corpus/INDEX.md"
