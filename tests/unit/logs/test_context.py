"""Reasoning over what surrounds a failure: the step before a collective timeout, two machines
with one host name in NCCL's transport lines, interfaces judged by their address, and fixes
chosen for the launcher, library and message the log shows."""

import pytest

from distdoctor.logs import signatures
from distdoctor.logs.analysis import analyse
from distdoctor.logs.nccl_setup import kind_by_name
from distdoctor.model import Status
from tests.conftest import data_path

WATCHDOG = ("[rank1]:[E501 10:20:03.100000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=9001, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600012 milliseconds before timing out.\n")


def _diagnosis(tmp_path, text, name="job.log"):
    path = tmp_path / name
    path.write_text(text)
    runs, _ok = analyse([str(path)], use_grep=False)
    return next(r for r in runs if r.id == "log.diagnosis")


@pytest.mark.parametrize("step", ["Saving checkpoint to /ckpt/step1200 ...", "Running evaluation on 50000 samples",
                                  "Loading dataset shards (1024 files)"])
def test_a_long_step_before_the_timeout_reads_as_the_step(tmp_path, step):
    text = f"[2024-05-01 10:00:01,000] step 1200 loss 2.31\n[2024-05-01 10:00:02,000] [rank0] {step}\n" + WATCHDOG
    lead = _diagnosis(tmp_path, text).findings[0]
    assert "after a step outside collectives ran 20 min" in lead.summary
    assert "timedelta(minutes=" in lead.fix and "raising the timeout only hides it" not in lead.fix
    assert lead.evidence["step_before"]["rank"] == 0 and round(lead.evidence["step_before"]["seconds"]) == 1201


@pytest.mark.parametrize("before", [
    "[2024-05-01 10:19:58,000] [rank0] step 1201 loss 2.30",      # the step was short: the peer is the question
    "[2024-05-01 10:00:02,000] [rank0] step 1201 loss 2.30",      # 20 min of silence, but not a step: a hang
])
def test_without_a_long_step_the_timeout_points_at_the_peer(tmp_path, before):
    lead = _diagnosis(tmp_path, before + "\n" + WATCHDOG).findings[0]
    assert "after a step" not in lead.summary and "a longer timeout only hides a dead or hung peer" in lead.fix


def test_two_machines_with_one_host_name_lead_over_the_nccl_error_they_cause():
    runs, _ok = analyse([data_path("logs", "corpus", "nccl-187-hostname-prefix-collision.log")], use_grep=False)
    findings = next(r for r in runs if r.id == "log.diagnosis").findings
    assert findings[0].subject == "duplicate-hostnames" and findings[0].status == Status.FAIL
    assert findings[0].evidence["ranks"] == "2,10"
    assert findings[1].subject == "nccl.unhandled-cuda-error"


def test_one_host_name_with_distinct_gpus_is_no_collision(tmp_path):
    text = "".join(f"gpu1:{r}:{r} [{r}] NCCL INFO Channel 00/0 : {r}[{r}] -> {r + 1}[{r + 1}] via P2P/IPC\n"
                   for r in range(3))
    assert not any(f.subject == "duplicate-hostnames" for f in _diagnosis(tmp_path, text).findings)


@pytest.mark.parametrize("name, address, kind", [
    ("veth9f3a", "2600:1f18:1234::5", ""),          # routable global address: usable whatever the name
    ("veth9f3a", "10.244.1.7", "veth"),             # private address on a veth: container-internal
    ("docker0", "172.17.0.1", "bridge"),
    ("eth0", "fe80::1%eth0", "link-local address"),
    ("ens5", "127.0.0.1", "loopback address"),
    ("ib0", "10.1.1.1", ""),
])
def test_interfaces_are_judged_by_address_first(name, address, kind):
    assert kind_by_name(name, address) == kind


@pytest.mark.parametrize("sig, line, context, present, absent", [
    ("torch.address-in-use", "RuntimeError: The server socket has failed to listen on any local network address. "
     "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use.", set(),
     "torchrun --standalone", "SLURM_JOB_ID"),
    ("torch.address-in-use", "RuntimeError: The server socket has failed to listen on any local network address. "
     "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use.", {"slurm"},
     "SLURM_JOB_ID", "--standalone"),
    ("cuda.peer-access-unsupported", "RuntimeError: CUDA error: peer access is not supported between these two "
     "devices", {"vllm"}, "--disable-custom-all-reduce", "NCCL_P2P_DISABLE=1"),
    ("cuda.peer-access-unsupported", "RuntimeError: CUDA error: peer access is not supported between these two "
     "devices", set(), "NCCL_P2P_DISABLE=1", "--disable-custom-all-reduce"),
    ("nccl.shm-segment-failed", "misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment "
     "/dev/shm/nccl-x (size 9637888): Permission denied", set(), "ls -ld /dev/shm", "df -h"),
    ("nccl.shm-segment-failed", "misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment "
     "/dev/shm/nccl-x (size 9637888)", set(), "df -h /dev/shm", "ls -ld"),
    # the fifth round: vLLM's own all-reduce beside NCCL (vllm#3688), Slurm commands only where the
    # log shows Slurm, and a watchdog whose step is not in the log named both ways
    ("nccl.unhandled-cuda-error", "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1333, "
     "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1", {"vllm", "ray"},
     "--disable-custom-all-reduce", "srun"),
    ("nccl.unhandled-cuda-error", "NCCL error in: ProcessGroupNCCL.cpp:1333, unhandled cuda error", set(),
     "nvidia-smi -q", "--disable-custom-all-reduce"),
    ("nccl.bootstrap-message-truncated", "bootstrap.cc:77 NCCL WARN Message truncated : received 256 bytes instead of 4",
     set(), "on every node: python3 -c", "srun"),
    ("nccl.bootstrap-message-truncated", "bootstrap.cc:77 NCCL WARN Message truncated : received 256 bytes instead of 4",
     {"slurm"}, "srun -l python3", "# on every node: python3"),
    ("cuda.ecc-uncorrectable", "RuntimeError: CUDA error: uncorrectable ECC error encountered", set(),
     "out of your scheduler's pool", "scontrol"),
    ("torch.watchdog-timeout", "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=266392, "
     "OpType=ALLGATHER, Timeout(ms)=1800000) ran for 1803169 milliseconds before timing out.", set(),
     "dist.barrier()", "raising the timeout only hides it"),
])
def test_fixes_fit_the_launcher_library_and_message(sig, line, context, present, absent):
    fix = "\n".join(signatures.by_id()[sig].fix_for("gpu1", 0, line, frozenset(context)))
    assert present in fix and absent not in fix


def test_the_log_tells_its_launcher(tmp_path):
    text = ("srun: error: gpu1: task 0: Exited with exit code 1\nRuntimeError: The server socket has failed to "
            "listen on any local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, "
            "message: address already in use.\n")
    lead = _diagnosis(tmp_path, text).findings[0]
    assert lead.subject == "torch.address-in-use" and "SLURM_JOB_ID" in lead.fix


def test_an_unknown_condition_is_refused():
    assert "unknown condition" in signatures.fix_problem("[kubernetes] export X=1")


def test_a_veth_with_a_routable_address_is_kept_and_a_link_local_tunnel_is_not(tmp_path):
    # NVIDIA/nccl#529: NCCL listed a link-local ip6tnl0 and a veth0 holding a global IPv6 address
    pre = "NvYt-dcf441d17e21:97:221 [0] NCCL INFO "
    text = (f"{pre}NET/Socket : Using [0]ip6tnl0:fe80::e866:19ff:fe1e:a688%ip6tnl0<0> "
            f"[1]veth0:2a02:6b8:fc1d:3606:0:4457:edef:600a<0>\n{pre}NCCL version 2.5.6+cuda10.0\n")
    path = tmp_path / "job.log"
    path.write_text(text)
    runs, _ok = analyse([str(path)], use_grep=False)
    setup = next(r for r in runs if r.id == "log.nccl-setup")
    flagged = [f for f in setup.findings if f.subject == "nccl.socket"]
    assert [f.summary for f in flagged] == ["NCCL's socket on rank NvYt-dcf441d17e21:97 uses ip6tnl0 (link-local address)"]
    assert "NCCL_SOCKET_IFNAME='=veth0'" in flagged[0].fix
