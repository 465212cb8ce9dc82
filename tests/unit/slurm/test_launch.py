"""Run context detection for the report header, from real environment captures."""

from distdoctor.launch import detect_context
from distdoctor.parsers.slurm import parse_env_dump
from tests.conftest import data_path


def capture(*parts):
    with open(data_path(*parts)) as fh:
        return parse_env_dump(fh.read()).values


def test_srun_step():
    ctx = detect_context(capture("slurm", "env_srun_N2_ntasks_per_node2_gres2_rank3.txt"))
    assert (ctx.kind, ctx.rank, ctx.local_rank, ctx.world_size, ctx.node_rank) == ("slurm-step", 3, 1, 4, 1)
    assert ctx.description == "srun step 2.0"


def test_batch_step_without_srun():
    ctx = detect_context(capture("slurm", "env_sbatch_batch_step_N2_n3_gres2.txt"))
    assert ctx.kind == "slurm-batch" and "no srun" in ctx.description


def test_torchrun_under_srun():
    env = dict(capture("slurm", "env_srun_N2_ntasks_per_node2_gres2_rank3.txt"), TORCHELASTIC_RUN_ID="x",
               LOCAL_WORLD_SIZE="2", GROUP_RANK="1", RANK="3", WORLD_SIZE="4", LOCAL_RANK="1")
    ctx = detect_context(env)
    assert ctx.kind == "torchrun" and ctx.description == "torchrun under srun (Slurm job 2)"
    assert (ctx.rank, ctx.local_world_size, ctx.node_rank) == (3, 2, 1)


def test_mpirun_inside_an_allocation():
    env = dict(capture("slurm_env", "slurm_env_mpirun_bynode_head_8x2.txt"), OMPI_COMM_WORLD_SIZE="2",
               OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_LOCAL_RANK="0")
    ctx = detect_context(env)
    assert ctx.kind == "mpirun" and ctx.description == "Open MPI mpirun inside Slurm job 29"


def test_login_node_and_no_scheduler():
    assert detect_context({"SLURM_CONF": "/etc/slurm/slurm.conf"}, slurm_installed=True).kind == "login"
    assert detect_context({}, slurm_installed=False).kind == "none"
