"""The lab's quick failures produced live (real two-node Slurm in network namespaces, torch,
Open MPI) and matched against the catalogue: catches a torch, Slurm or Open MPI upgrade that
rewords the message a signature relies on, which the recorded logs cannot."""

import importlib.util
import os
import shutil
import tempfile

import pytest

from distdoctor.logs import signatures as sigs
from tests.conftest import data_path



def _record():
    spec = importlib.util.spec_from_file_location("lab_record", data_path("logs", "lab", "record.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def lab(slurm_cluster):
    record = _record()
    work = tempfile.mkdtemp(prefix="lab-")
    os.chmod(work, 0o755)
    try:
        yield record, record.Lab(slurm_cluster, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("case", ["missing-rank", "slurm-invalid-partition", "slurm-too-many-nodes", "mpi-as-root"])
def test_live_failure_matches_its_signature(lab, case):
    record, live = lab
    function, expected = record.CASES[case]
    text = function(live)
    ids = [s.id for s in map(sigs.match_line, text.splitlines()) if s]
    assert expected["id"] in ids, text[-2000:]
