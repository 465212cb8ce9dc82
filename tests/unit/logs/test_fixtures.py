"""Every captured public log: the expected diagnosis (root signature, rank, host, what the NCCL
setup comparison flags) is recorded beside it as <name>.diagnosis.json and reviewed by hand."""

import glob
import json
import os

import pytest

from distdoctor.logs.analysis import analyse

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data")
# NCCL logs, pasted-tool captures (each judged as if pasted into an issue) and issue-like pastes
LOGS = sorted([p for pattern in ("nccl_debug/*.txt", "collect_env/*.txt", "ibstat/*.txt", "nvidia_smi_topo/*.txt",
                                   "ip_addr/*.txt", "ompi_info/*.txt", "logs/*/*.md", "logs/*/*.log")
                for p in glob.glob(os.path.join(DATA, pattern))])
# the labelled corpus is scored as a whole instead (test_corpus.py)
LOGS = [p for p in LOGS if os.path.basename(p) != "INDEX.md" and os.sep + "corpus" + os.sep not in p]


def digest(path: str) -> dict:
    runs, _ok = analyse([path])
    runs = [r for r in runs if r.id != "log.input"]
    by_id = {r.id: r for r in runs}
    diag = by_id["log.diagnosis"]
    first = diag.findings[0]
    out = {"status": diag.status.value, "cause": first.subject if first.status.value in ("fail", "warn") else None}
    if out["cause"]:
        out["rank"] = first.evidence.get("rank")
        out["host"] = first.evidence.get("host")
        # a fix may point at the fixture by path: the checkout's own location is not the expectation
        out["fix"] = [line.replace(os.path.dirname(path), "<fixtures>") for line in first.fix.splitlines()]
    out["also"] = [f.subject for f in diag.findings[1:] if f.status.value in ("fail", "warn")]
    out["setup"] = [f"{f.status.value} {f.subject}: {f.summary}" for f in by_id["log.nccl-setup"].findings
                    if f.status.value in ("fail", "warn")]
    # pasted output is judged by other areas' checks: their ids and verdicts, not their wording
    pasted = [f"{r.id} {r.status.value}" for r in runs if "pasted" in r.tags or r.id == "log.pasted-output"]
    if pasted:
        out["pasted"] = pasted
    return out


@pytest.mark.parametrize("path", LOGS, ids=os.path.basename)
def test_expected_diagnosis(path):
    expected_path = os.path.splitext(path)[0] + ".diagnosis.json"
    with open(expected_path) as fh:
        expected = json.load(fh)
    assert digest(path) == expected


def test_every_fixture_has_an_expectation():
    assert LOGS
    for path in LOGS:
        assert os.path.exists(os.path.splitext(path)[0] + ".diagnosis.json"), path
