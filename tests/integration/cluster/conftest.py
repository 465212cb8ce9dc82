import pytest

from tests.harness.slurm import SlurmCluster


@pytest.fixture(scope="module")
def qb_cluster():
    """This area's own real Slurm cluster (three nodes, so a majority exists), stopped at the end
    even when tests fail."""
    cluster = SlurmCluster(prefix="qb", net16="10.121", nodes=3)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
