"""The watchdog's report at the bound keeps what the phase had already concluded: a loaded node
can reach the bound while rank 0 writes up the ranks that never arrived, and that finding, not
'did not finish', is the cause the user needs."""

from __future__ import annotations

import argparse
import json
import time

from distdoctor.api import fail
from distdoctor.nccltest.clock import Clock
from distdoctor.nccltest.rendezvous import Endpoint, Identity
from distdoctor.nccltest.session import Rank
from distdoctor.testing import FakeHost


def _rank() -> Rank:
    args = argparse.Namespace(timeout=10.0, format="json", bench=False, verbose=False, output=None)
    ident = Identity(0, 4, 0, "srun", "Slurm step 7.0", kind="slurm-step")
    endpoint = Endpoint("node1", 29500, "first host of the step", "derived from Slurm job 7")
    clock = Clock(time.monotonic() - 10.5, 10.0)
    clock.enter("start", clock.started)
    rank = Rank(args, FakeHost(hostname="node1"), ident, endpoint, clock, time.time() - 10.5, None)
    return rank


def _rendezvous(doc: dict) -> dict:
    return next(c for c in doc["checks"] if c["id"] == "nccl-test.rendezvous")


def test_the_bound_during_the_write_up_keeps_the_missing_ranks_first(capfd):
    rank = _rank()
    rank.set_phase("rendezvous")
    missing = fail("ranks 2-3 of 4 never arrived (expected on node2)", subject="2-3",
                   evidence={"missing_ranks": [2, 3]})
    rank.recorder.add("nccl-test.rendezvous", [missing])
    assert rank.last_words() == 2  # incomplete: the run hit its bound
    check = _rendezvous(json.loads(capfd.readouterr().out))
    assert check["status"] == "timeout"
    first, second = check["findings"][:2]
    assert first["evidence"]["missing_ranks"] == [2, 3]
    assert second["summary"].startswith("rendezvous had its answer, but the report was not out within the 10 s bound")


def test_the_bound_in_a_phase_with_no_answer_says_it_did_not_finish(capfd):
    rank = _rank()
    rank.set_phase("rendezvous")
    assert rank.last_words() == 2  # incomplete: the run hit its bound
    check = _rendezvous(json.loads(capfd.readouterr().out))
    assert check["findings"][0]["summary"].startswith("rendezvous did not finish within the 10 s bound")
