"""Real torchrun, real gloo: a worker killed by SIGKILL mid-job (what the OOM killer does) says
nothing itself; `distdoctor log` on the job's output must still name it, from torchrun's own
report, with the command to confirm it on its node."""

import os
import socket
import subprocess
import sys
import textwrap


from distdoctor.logs import signatures
from distdoctor.logs.analysis import analyse
from distdoctor.model import Status
from tests.harness.ranks import clean_env, free_port, require_torch


WORKER = textwrap.dedent("""\
    import os, signal, time
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones(4)
    dist.all_reduce(x)
    print(f"rank {rank} step 0 ok", flush=True)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(1)
    dist.all_reduce(x)
    print(f"rank {rank} step 1 ok", flush=True)
""")


def test_a_sigkilled_worker_is_named_from_torchruns_report(tmp_path):
    require_torch()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script)],
                              env=clean_env(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1"), stdout=out,
                              stderr=subprocess.STDOUT, timeout=120, check=False)
    assert proc.returncode != 0
    text = log.read_text(errors="replace")
    assert "Root Cause (first observed failure)" in text, text[-3000:]
    runs, _ok = analyse([str(log)])
    first = next(r for r in runs if r.id == "log.diagnosis").findings[0]
    assert first.status == Status.FAIL
    assert first.evidence["rank"] == 1, first.summary
    assert first.evidence["host"] == socket.getfqdn()  # what torchrun reports as the host
    assert "SIGKILL" in first.summary or "-9" in first.summary, first.summary
    if signatures.addressable(socket.getfqdn()):
        assert f"ssh {socket.getfqdn()} dmesg -T" in first.fix
    else:  # torchrun says localhost here: the command must not ssh to the operator's own machine
        assert "# dmesg -T" in first.fix and "ssh " not in first.fix
    assert os.path.getsize(log) > 0
