"""Real logs against the catalogue: the lab's recorded failures (tests/data/logs/lab, made by
record.py with real Slurm, gloo, nftables, torchrun and Open MPI) and the public NCCL captures
(tests/data/nccl_debug, verbatim from the cited issues; <name>.signatures.json lists, in order
of first appearance, the signatures each shows, reviewed by hand)."""

import glob
import json
import os
import re

import pytest

from distdoctor.logs import signatures as sigs
from tests.conftest import data_path

LAB = data_path("logs", "lab")
PUBLIC = data_path("nccl_debug")
LAB_LOGS = sorted(glob.glob(os.path.join(LAB, "*.log")))
PUBLIC_LOGS = sorted(glob.glob(os.path.join(PUBLIC, "*.txt")))
LABEL = re.compile(r"^(\d+): ")  # srun --label


def matched(path: str) -> list[tuple[str, sigs.Signature]]:
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            sig = sigs.match_line(line.rstrip("\n"))
            if sig:
                out.append((line, sig))
    return out


def expected(path: str, suffix: str = ".expected.json") -> dict:
    with open(path.rsplit(".", 1)[0] + suffix) as fh:
        return json.load(fh)


def test_every_lab_case_was_recorded():
    import importlib.util

    spec = importlib.util.spec_from_file_location("record", os.path.join(LAB, "record.py"))
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    recorded = {os.path.basename(p)[:-4] for p in LAB_LOGS}
    assert recorded == set(record.CASES)


@pytest.mark.parametrize("path", LAB_LOGS, ids=os.path.basename)
def test_lab_log_shows_the_provoked_cause(path):
    want = expected(path)
    hits = matched(path)
    lines = [line for line, sig in hits if sig.id == want["id"]]
    assert lines, (want["id"], [s.id for _, s in hits])
    if want["rank"] is not None:
        # a rank's own line carries srun's label; srun's own report names the task instead
        label = LABEL.match(lines[0])
        rank = int(label.group(1)) if label else None
        named = re.search(r"\btasks? (\d+)\b", lines[0])
        assert want["rank"] in (rank, int(named.group(1)) if named else None), lines[0]
    if want["host"] is not None:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        # srun names the node of each failed task; torchrun's case runs on one named node
        assert re.search(rf"\b{re.escape(want['host'])}\b", text), want["host"]


@pytest.mark.parametrize("path", PUBLIC_LOGS, ids=os.path.basename)
def test_public_capture_matches_its_signatures(path):
    want = expected(path, ".signatures.json")
    seen: list[str] = []
    for _, sig in matched(path):
        if sig.id not in seen:
            seen.append(sig.id)
    assert seen == want["signatures"]
    assert re.match(r"^[\w.-]+/[\w.-]+#\d+$", want["source"])



@pytest.mark.parametrize("path", LAB_LOGS, ids=os.path.basename)
def test_log_command_names_the_provoked_cause(path):
    """The whole `distdoctor log` diagnosis, not just the catalogue, finds the provoked cause
    first; where it can tell the rank, it is the rank at fault."""
    from distdoctor.logs.analysis import analyse

    want = expected(path)
    runs, _ok = analyse([path])
    first = next(r for r in runs if r.id == "log.diagnosis").findings[0]
    assert first.subject == want["id"]
    if want["rank"] is not None and first.evidence.get("rank") is not None:
        assert first.evidence["rank"] == want["rank"]


def test_log_command_names_the_host_of_a_killed_rank():
    from distdoctor.logs.analysis import analyse

    runs, _ok = analyse([os.path.join(LAB, "rank-killed.log")])
    first = next(r for r in runs if r.id == "log.diagnosis").findings[0]
    assert (first.evidence.get("rank"), first.evidence.get("host")) == (1, "node2")
