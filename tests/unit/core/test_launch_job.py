"""Every process of one job must derive the same job identity, rank-0 endpoint and port.

The two environments are real (tests/data/launch/INDEX.md): `mpirun` inside a Slurm batch
script runs rank 0 in the batch step, without Slurm step variables, while the ranks on the other
nodes run in the step of the daemon mpirun started there with srun. A seed from Slurm's job and
step then differs between nodes, and so does any port or key derived from it."""

from __future__ import annotations

import pytest

from distdoctor import launch
from distdoctor.crosscheck import jobreport
from distdoctor.nccltest import store
from distdoctor.nccltest.rendezvous import endpoint, identity
from distdoctor.parsers.slurm import parse_env_dump
from tests.conftest import data_path

PAIRS = ("sbatch", "salloc")


def captured(how: str, rank: int) -> dict[str, str]:
    with open(data_path("launch", f"mpirun_in_slurm_{how}_rank{rank}.env")) as fh:
        return parse_env_dump(fh.read()).values


@pytest.mark.parametrize("how", PAIRS)
def test_the_captures_are_the_case_in_question(how):
    zero, one = captured(how, 0), captured(how, 1)
    assert zero["SLURMD_NODENAME"] == "node1" and one["SLURMD_NODENAME"] == "node2"
    assert zero["OMPI_MCA_ess_base_jobid"] == one["OMPI_MCA_ess_base_jobid"]
    if how == "sbatch":  # Slurm's view of the two ranks differs: that is what must not matter
        assert "SLURM_STEP_ID" not in zero and one["SLURM_STEP_ID"] == "0"
        assert one["SLURM_STEP_NODELIST"] == "node2"


@pytest.mark.parametrize("how", PAIRS)
def test_every_rank_derives_the_same_job(how):
    jobs = [launch.job(captured(how, rank)) for rank in (0, 1)]
    assert jobs[0] == jobs[1]
    assert jobs[0].seed == f"ompi:{captured(how, 0)['OMPI_MCA_ess_base_jobid']}"
    assert jobs[0].rank0_host == "node1"  # where rank 0 ran, by its own environment
    assert jobs[0].nodes == ("node1", "node2")


@pytest.mark.parametrize("how", PAIRS)
def test_nccl_test_ranks_meet_on_one_endpoint_with_one_token(how):
    envs = [captured(how, rank) for rank in (0, 1)]
    ends = [endpoint(env, identity(env)) for env in envs]
    assert (ends[0].addr, ends[0].port) == (ends[1].addr, ends[1].port)
    assert ends[0].addr == "node1"
    assert "Open MPI job id" in ends[0].port_why
    tokens = [store.job_token(env, end.addr, end.port)[0] for env, end in zip(envs, ends)]
    assert tokens[0] == tokens[1]


@pytest.mark.parametrize("how", PAIRS)
def test_job_report_ranks_meet_where_rank_0_listens(how):
    envs = [captured(how, rank) for rank in (0, 1)]
    plans = [jobreport.plan(launch.detect_context(env), env, "vm") for env in envs]
    assert [p.role for p in plans] == ["gatherer", "leader"]
    assert plans[0].address == plans[1].address == "node1"
    assert (plans[0].port, plans[0].seed) == (plans[1].port, plans[1].seed)
    assert plans[0].expected == ("node1", "node2")


def test_a_port_derived_for_nccl_test_and_the_job_report_never_collide():
    env = captured("sbatch", 0)
    nccl = endpoint(env, identity(env)).port
    gather = jobreport.plan(launch.detect_context(env), env, "vm").port
    assert nccl != gather


def test_slurm_step_seeds_a_plain_srun_job_and_two_steps_differ():
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
           "SLURM_STEP_NODELIST": "gpu[01-02]", "SLURM_JOB_NODELIST": "gpu[01-04]"}
    one = launch.job(env)
    assert (one.seed, one.rank0_host, one.nodes) == ("slurm:7.0", "gpu01", ("gpu01", "gpu02"))
    assert launch.job(dict(env, SLURM_STEP_ID="1")).seed != one.seed


def test_master_addr_names_rank_0_whatever_the_launcher():
    env = dict(captured("sbatch", 1), MASTER_ADDR="10.9.9.9")
    assert launch.job(env).rank0_host == "10.9.9.9"
    assert "MASTER_ADDR" in launch.job(env).rank0_why


def test_open_mpi_outside_slurm_meets_on_mpiruns_host():
    env = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
           "OMPI_MCA_ess_base_jobid": "123", "OMPI_MCA_orte_hnp_uri": "123.0;tcp://10.0.0.5,10.0.1.5:4242"}
    job = launch.job(env)
    assert (job.seed, job.rank0_host, job.nodes) == ("ompi:123", "10.0.0.5", ())


def test_torchrun_seed_and_nothing_known():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
           "TORCHELASTIC_RUN_ID": "run7", "MASTER_ADDR": "n1", "MASTER_PORT": "29400"}
    assert launch.job(env).seed == "torchrun:run7:n1:29400"
    assert launch.job({}) == launch.Job()


def test_an_unreadable_node_list_is_no_node_list():
    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "gpu[01-", "SLURM_PROCID": "0",
           "SLURM_NTASKS": "2"}
    job = launch.job(env)
    assert job.nodes == () and job.rank0_host == "" and job.seed == "slurm:7.0"


def test_derived_port_stays_in_its_range():
    ports = {launch.derived_port(f"slurm:{n}.0", 20000, 10000) for n in range(200)}
    assert all(20000 <= p < 30000 for p in ports) and len(ports) > 150
