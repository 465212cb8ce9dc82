# The session-scoped real clusters, shared by every test under tests/integration/slurm.
from tests.harness.slurm import slurm_cluster, slurm_gpu_cluster  # noqa: F401
