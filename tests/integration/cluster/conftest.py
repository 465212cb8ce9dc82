import pytest


@pytest.fixture
def qb_cluster(slurm_cluster):
    """This area's old name for the shared three-node cluster (tests/integration/conftest.py)."""
    return slurm_cluster
