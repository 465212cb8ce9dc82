"""A real hung process standing in for nvidia-smi: the check is abandoned at its deadline."""

import time

import pytest

from distdoctor.checks import gpu as gpu_checks
from distdoctor.facts.gpu import NVIDIA_SMI_TIMEOUT
from distdoctor.host import Host
from distdoctor.model import Status
from distdoctor.testing import run_check
from tests.harness.fake_nvidia_smi import StandIn


@pytest.fixture
def smi(tmp_path):
    return StandIn(tmp_path)


def statuses(findings):
    return [f.status for f in findings]


@pytest.mark.slow
def test_hung_nvidia_smi_is_explained_within_the_deadline(smi):
    smi.answer("*", hang=True)
    host = Host(env=smi.env())
    start = time.monotonic()
    findings = run_check(gpu_checks.inventory, host)
    elapsed = time.monotonic() - start
    assert statuses(findings) == [Status.TIMEOUT]
    assert f"did not answer within {NVIDIA_SMI_TIMEOUT:g} s" in findings[0].summary
    assert "fell off the bus" in findings[0].summary
    assert elapsed < gpu_checks.inventory.timeout
    assert len(smi.calls()) == 1  # one hang, not one per question
