from distdoctor.hang import discovery
from tests.unit.hang.fakeproc import proc_host

TORCHRUN = ["/usr/bin/python3", "/usr/local/bin/torchrun", "--nproc_per_node=2", "train.py"]
RANK_ENV = {"WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "abc", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


def test_torchrun_under_srun_with_a_dataloader_worker():
    slurm = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    procs = {
        100: {"env": slurm, "cmdline": ["/bin/bash", "run.sh"]},                       # srun's task: a wrapper
        101: {"env": slurm, "ppid": 100, "cmdline": TORCHRUN},                          # torchrun: a launcher
        110: {"env": {**slurm, **RANK_ENV, "RANK": "0", "LOCAL_RANK": "0"}, "ppid": 101},
        111: {"env": {**slurm, **RANK_ENV, "RANK": "1", "LOCAL_RANK": "1"}, "ppid": 101},
        120: {"env": {**slurm, **RANK_ENV, "RANK": "1", "LOCAL_RANK": "1"}, "ppid": 111},  # rank 1's worker
        130: {"env": {"HOME": "/root"}, "cmdline": ["/usr/sbin/sshd"]},                  # not a rank
    }
    found = discovery.discover(proc_host(procs))
    assert [(r.pid, r.rank, r.local_rank, r.world_size) for r in found.ranks] == [(110, 0, 0, 2), (111, 1, 1, 2)]
    assert {r.job for r in found.ranks} == {"slurm 42.0"}
    assert found.ranks[0].python and found.ranks[0].env["MASTER_PORT"] == "29500"
    assert "SLURM_PROCID" not in found.ranks[0].env  # only what later stages need is kept


def test_this_process_and_its_ancestors_are_never_ranks():
    slurm = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0"}
    procs = {50: {"env": slurm, "cmdline": ["/usr/bin/timeout", "20"]},
             60: {"env": {**slurm, "RANK": "0", "WORLD_SIZE": "1"}}}
    found = discovery.discover(proc_host(procs, me_ppid=50))
    assert [r.pid for r in found.ranks] == [60]


def test_job_filter_and_wrapped_mpi_rank():
    procs = {200: {"env": {"SLURM_JOB_ID": "9", "SLURM_PROCID": "3", "SLURM_NTASKS": "8"},
                   "cmdline": ["/bin/sh", "-c", "python3 x.py"]},
             201: {"env": {"SLURM_JOB_ID": "9", "SLURM_PROCID": "3", "SLURM_NTASKS": "8"}, "ppid": 200},
             300: {"env": {"SLURM_JOB_ID": "10", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"},
                   "cmdline": ["./a.out"]}}
    host = proc_host(procs)
    assert [(r.pid, r.rank, r.world_size) for r in discovery.discover(host, job="9").ranks] == [(201, 3, 8)]
    c_rank = discovery.discover(host, job="10").ranks[0]
    assert (c_rank.rank, c_rank.python) == (0, False)


def test_pids_given_are_read_even_without_rank_variables_and_gone_ones_named():
    procs = {70: {"env": {"HOME": "/root"}}}
    found = discovery.discover(proc_host(procs), pids=[70, 71])
    assert [(r.pid, r.rank) for r in found.ranks] == [(70, None)]
    assert found.problems == ["pid 71: no such process"]


def test_unreadable_environments_are_counted_not_raised():
    procs = {80: {"env": {"RANK": "0"}}}
    host = proc_host(procs, files={"/proc/80/environ": PermissionError(13, "Permission denied")})
    found = discovery.discover(host)
    assert (found.ranks, found.unreadable) == ([], 1)
    # named by pid, it is still read: its stack dump will say why it cannot be read
    (named,) = discovery.discover(host, pids=[80]).ranks
    assert (named.pid, named.rank, named.python) == (80, None, True)


def test_gpu_from_visible_devices_and_local_rank():
    assert discovery.gpu_of({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 1) == "5"
    assert discovery.gpu_of({"CUDA_VISIBLE_DEVICES": "3"}, 1) == "3"
    assert discovery.gpu_of({}, 2) == "2"
    assert discovery.gpu_of({}, 2, node_has_gpus=False) == ""
    assert discovery.gpu_of({"CUDA_VISIBLE_DEVICES": ""}, 0) == ""
    assert discovery.gpu_of({"CUDA_VISIBLE_DEVICES": "GPU-8e1f,GPU-aa02"}, 0) == "GPU-8e1f"


def test_environ_parsing_keeps_values_with_equals_and_skips_garbage():
    env = discovery.parse_environ(b"A=1\0B=x=y\0junk\0\0=nokey\0C=\xff\0")
    assert env == {"A": "1", "B": "x=y", "C": "\ufffd"}


def test_two_torchrun_jobs_with_the_default_run_id_are_two_jobs():
    """torchrun without --rdzv-id exports TORCHELASTIC_RUN_ID=none: two jobs sharing a node must
    not be judged as one wave (the other job's ranks would read as this job's outliers)."""
    from distdoctor.hang.discovery import job_key

    one = {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    two = dict(one, MASTER_PORT="29501")
    assert job_key(one) != job_key(two)
    assert job_key(one) == job_key(dict(one, RANK="3"))
    assert job_key({"TORCHELASTIC_RUN_ID": "abc"}) == "torchrun abc"
