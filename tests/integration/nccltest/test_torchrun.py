"""torchrun (torch.distributed.run) launching nccl-test: the agent already serves a store on
MASTER_PORT, and every rank must join it rather than serve a second one."""

import subprocess
import sys


from tests.harness.ranks import clean_env, free_port, report, require_torch, statuses



def test_torchrun_two_ranks_share_the_agent_store():
    require_torch()
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-port", str(port), "-m", "distdoctor", "nccl-test", "--timeout", "30", "--json"],
                          env=clean_env(), capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = report(proc.stdout)
    assert doc["context"]["kind"] == "torchrun"
    assert doc["nccl_test"]["rendezvous"]["master_port"] == port
    assert statuses(doc)["nccl-test.all-reduce"] == "ok"
    assert [fp["local_rank"] for fp in doc["nccl_test"]["fingerprints"]] == [0, 1]
