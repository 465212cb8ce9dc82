"""Fixtures shared by the integration tests: the real Slurm clusters, started once per session.

`slurm_cluster` is one three-node cluster (three so that a majority exists for the fleet
tests), started on first use and stopped at the end of the session even when tests fail. It is
shared: a test that changes it (drains a node, mounts over /dev/shm, sets an MTU, a hostname, a
qdisc or an nftables table inside a node) puts it back in a `finally`. After every test the
fixture compares the cluster with its state just after start, restores what differs and fails
the test that left it changed, so one forgetful test cannot break the ones after it.

`slurm_gpu_cluster` is a second shape (two stand-in GPUs per node, 8 CPUs), for the GPU tests.
"""

from __future__ import annotations

import os

import pytest

from tests.harness.groups import RATE_FILES, TORCH_FILES
from tests.harness.slots import every_slot, slot
from tests.harness.slurm import SlurmCluster

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _torch_slot(request):
    """At most three torch-rank tests per two cores at once (slots.py), the rate-judging ones
    alone among them (groups.RATE_FILES)."""
    here = os.path.relpath(str(request.node.path), _REPO)
    if not here.startswith(TORCH_FILES):
        yield
        return
    with every_slot("torch") if here.startswith(RATE_FILES) else slot("torch"):
        yield


@pytest.fixture(scope="session")
def _slurm_session():
    cluster = SlurmCluster(prefix="s", nodes=3)
    try:
        cluster.start()
        yield cluster, cluster.snapshot()
    finally:
        cluster.stop()


@pytest.fixture
def slurm_cluster(_slurm_session):
    cluster, started = _slurm_session
    yield cluster
    changed = cluster.restore(started)
    if changed:
        pytest.fail("the test left the shared Slurm cluster changed (now restored): " + "; ".join(changed),
                    pytrace=False)


@pytest.fixture(scope="session")
def slurm_gpu_cluster():
    """Nodes that declare two stand-in GPUs each (Gres=gpu:2) and 8 CPUs, so that more tasks
    than GPUs fit on a node."""
    cluster = SlurmCluster(prefix="g", gpus_per_node=2, cpus=8)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
