import re

import pytest

from distdoctor.nccltest.rendezvous import (PORT_BASE, PORT_SPAN, RendezvousError, endpoint,
                                            expected_rank_hosts, identity)
from tests.conftest import data_path


def labelled_env(name: str, label: str) -> dict[str, str]:
    """One task's environment from a capture whose lines carry a launcher label."""
    env = {}
    with open(data_path("nccltest", name)) as fh:
        for line in fh:
            match = re.match(r"^" + re.escape(label) + r"\s*(\w+)=(.*)$", line.rstrip("\n"))
            if match:
                env[match.group(1)] = match.group(2)
    return env


def test_srun_task_identity_and_derived_endpoint():
    env = labelled_env("srun_N2_env_labelled.txt", "1:")
    ident = identity(env)
    assert (ident.rank, ident.world_size, ident.local_rank, ident.launcher) == (1, 2, 0, "srun")
    assert (ident.kind, ident.node_rank, ident.job_id, ident.step_id) == ("slurm-step", 1, "2", "0")
    where = endpoint(env, ident)
    assert where.addr == "node1" and "first host" in where.addr_why
    assert PORT_BASE <= where.port < PORT_BASE + PORT_SPAN
    assert "job 2 step 0" in where.port_why
    # another step of the same job must not collide
    other = endpoint(dict(env, SLURM_STEP_ID="1"), identity(dict(env, SLURM_STEP_ID="1")))
    assert other.port != where.port


def test_environment_wins_over_derivation():
    env = dict(labelled_env("srun_N2_env_labelled.txt", "0:"), MASTER_ADDR="10.1.2.3", MASTER_PORT="29511")
    where = endpoint(env, identity(env))
    assert (where.addr, where.port) == ("10.1.2.3", 29511)
    assert "environment" in where.addr_why and "environment" in where.port_why


def test_open_mpi_rank_uses_mpirun_host_and_job_id():
    env = labelled_env("mpirun_np2_env_tagged.txt", "[1,1]<stdout>:")
    ident = identity(env)
    assert (ident.rank, ident.world_size, ident.launcher) == (1, 2, "openmpi")
    where = endpoint(env, ident)
    # both ranks on one host (LOCAL_SIZE == SIZE): the loopback, port from the job id
    assert where.addr == "127.0.0.1"
    assert "Open MPI job id 858783745" in where.port_why
    spread = dict(env, OMPI_COMM_WORLD_LOCAL_SIZE="1")
    assert endpoint(spread, identity(spread)).addr == "192.0.2.2"


def test_mpich_rank_port_from_proxy_pid():
    env = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1"}
    ident = identity(env)
    assert (ident.rank, ident.launcher, ident.local_rank) == (1, "mpich", 1)
    assert endpoint(env, ident, parent_pid=4242).port == endpoint(env, ident, parent_pid=4242).port
    assert endpoint(env, ident, parent_pid=4242).port != endpoint(env, ident, parent_pid=4243).port
    many_hosts = dict(env, MPI_LOCALNRANKS="1")
    with pytest.raises(RendezvousError, match="export MASTER_ADDR"):
        endpoint(many_hosts, identity(many_hosts))


def test_torchrun_identity():
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "TORCHELASTIC_RUN_ID": "abc", "MASTER_ADDR": "n1", "MASTER_PORT": "29400"}
    ident = identity(env)
    assert (ident.rank, ident.local_rank, ident.world_size, ident.launcher) == (3, 1, 4, "torchrun")


@pytest.mark.parametrize("env, message", [
    ({}, "cannot tell this process's rank"),
    ({"SLURM_JOB_ID": "7", "ENVIRONMENT": "BATCH", "SLURM_STEP_ID": "batch"}, "srun -N"),
    ({"RANK": "5", "WORLD_SIZE": "2"}, "outside a world of size 2"),
])
def test_unusable_environments_are_usage_errors(env, message):
    with pytest.raises(RendezvousError, match=message):
        identity(env)


def test_bad_master_port():
    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "x", "MASTER_PORT": "http"}
    with pytest.raises(RendezvousError, match="not a TCP port"):
        endpoint(env, identity(env))


def test_rank_placement_from_slurm_step():
    env = labelled_env("slurm_env_egrep_hpmpi_srun_step_rank1.txt", "")
    assert expected_rank_hosts(env) == {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert expected_rank_hosts(dict(env, SLURM_DISTRIBUTION="cyclic")) == {}
    assert expected_rank_hosts(dict(env, SLURM_STEP_TASKS_PER_NODE="2(x")) == {}  # malformed: unknown


def test_a_rank_that_cannot_reach_the_rendezvous_says_so_once_before_the_bound():
    """A real connect to a loopback port nobody listens on: refused on every try; the early
    word comes once, after `early`, and the wait ends at the deadline with the same reason."""
    import socket
    import time

    from distdoctor.host import Host
    from distdoctor.nccltest.follow import wait_for_port

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    heard: list[tuple[float, str]] = []
    start = time.monotonic()
    why = wait_for_port(Host(), "127.0.0.1", port, start + 1.2, start + 0.4,
                        lambda w: heard.append((time.monotonic() - start, w)))
    assert why.startswith("connection refused")
    assert len(heard) == 1 and heard[0][1] == why and 0.4 <= heard[0][0] < 1.2
    assert time.monotonic() - start >= 1.2
