"""The labelled pasted tool outputs (tests/data/logs/pasted/labels.toml): every one is read right
(recognised, stated back, the labelled verdict by the labelled check, nothing invented, what the
paste cannot show said), and the share read right does not fall below score.toml's floor.
`python3 bench/paste_accuracy.py` prints every miss."""

import os

import pytest

from tests.harness import pastes

LABELS = pastes.labels()


def test_every_paste_is_labelled_once_and_indexed():
    files = {f for f in os.listdir(pastes.PASTED) if f.endswith(".md") and f != "INDEX.md"}
    labelled = [e["file"] for e in LABELS]
    assert len(labelled) == len(set(labelled)), "a paste labelled twice"
    assert files == set(labelled)
    with open(os.path.join(pastes.PASTED, "INDEX.md")) as fh:
        index = fh.read()
    assert all(f"`{name}`" in index for name in labelled)
    for e in LABELS:
        assert e["verdict"] and set(e) <= {"file", "tools", "verdict", "state", "ids", "never", "unknown"}, e


def test_score_does_not_fall():
    accuracy, verdicts = pastes.score(LABELS)
    misses = [f"{v.file}: {'; '.join(v.misses)}" for v in verdicts if not v.right]
    assert accuracy >= pastes.floor()["min_accuracy"], misses


@pytest.mark.parametrize("entry", LABELS, ids=lambda e: e["file"])
def test_every_paste_reads_right(entry):
    verdict = pastes.judge(entry)
    assert verdict.right, f"{verdict.misses}; got {verdict.got}; said {verdict.summaries}"


def test_a_paste_read_wrong_is_scored_as_a_miss():
    """The scorer itself: a label that wants what the paste does not show is a miss, so the
    floor cannot pass by a scorer that passes everything."""
    df = next(e for e in LABELS if e["file"] == "df-h_laptop_devshm_14G_console_prompt_inference-snaps211.md")
    entry = dict(df, verdict="fail", state=["no such statement"], never=["/dev/shm"])
    verdict = pastes.judge(entry)
    assert not verdict.right and len(verdict.misses) == 3, verdict.misses


def test_an_nvidia_device_answering_rev_ff_fails(tmp_path):
    """No citable real paste of `(rev ff)` was found: this is dracula/tmux#272's real line with its
    revision replaced by the all-ones answer of a device gone from the bus, read in a paste."""
    from distdoctor.logs.analysis import analyse

    line = "06:00.0 3D controller: NVIDIA Corporation GP108M [GeForce MX250] (rev ff)"
    path = tmp_path / "paste.md"
    path.write_text(f"```\n$ lspci | grep -i nvidia\n{line}\n```\n")
    runs, _ = analyse([str(path)], use_grep=False)
    failed = [f for r in runs if r.id == "log.pasted-output" for f in r.findings if f.status.value == "fail"]
    assert len(failed) == 1 and "06:00.0" in failed[0].summary and "no longer responds" in failed[0].summary
