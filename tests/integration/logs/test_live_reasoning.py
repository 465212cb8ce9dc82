"""Real torchrun, real gloo on CPU: failures the catalogue does not know, read from what the job
really printed. A rank that raises an exception nobody catalogued must be named with its error,
never read as clean; a collective that times out because another rank spent longer than the
timeout in a step outside collectives must be read as that step, with the fix that gives it
room, not as a dead peer."""

import subprocess
import sys
import textwrap

from distdoctor.logs.analysis import analyse
from distdoctor.model import Status
from tests.harness.ranks import clean_env, free_port, require_torch

UNKNOWN_ERROR = textwrap.dedent("""\
    import sys, time
    import torch
    import torch.distributed as dist

    class ShardIndexError(Exception):
        pass

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones(4)
    dist.all_reduce(x)
    if rank == 1:
        raise ShardIndexError("shard 7 of /data/train is missing its index")
    time.sleep(30)
""")

LONG_STEP = textwrap.dedent("""\
    import datetime, logging, sys, time
    import torch
    import torch.distributed as dist
    logging.basicConfig(format="[%(asctime)s] %(message)s", level=logging.INFO, stream=sys.stdout)
    log = logging.getLogger()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=4))
    rank = dist.get_rank()
    x = torch.ones(4)
    dist.all_reduce(x)
    if rank == 0:
        log.info("Saving checkpoint to ckpt/step-100 ...")
        time.sleep(9)
    try:
        dist.all_reduce(x)
    except Exception as exc:
        log.error("%s: %s", type(exc).__name__, exc)
        sys.exit(1)
""")


def _run(tmp_path, worker: str) -> str:
    require_torch()
    script = tmp_path / "worker.py"
    script.write_text(worker)
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                               "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(script)],
                              env=clean_env(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1"), stdout=out,
                              stderr=subprocess.STDOUT, timeout=120, check=False)
    assert proc.returncode != 0
    return str(log)


def _diagnosis(path: str):
    runs, _ok = analyse([path])
    return next(r for r in runs if r.id == "log.diagnosis").findings


def test_an_uncatalogued_exception_names_its_rank_and_error(tmp_path):
    findings = _diagnosis(_run(tmp_path, UNKNOWN_ERROR))
    lead = findings[0]
    assert lead.status == Status.FAIL, lead.summary
    assert lead.evidence["rank"] == 1, lead.summary
    assert "ShardIndexError: shard 7 of /data/train is missing its index" in lead.summary


def test_a_step_longer_than_the_timeout_is_read_as_the_step(tmp_path):
    path = _run(tmp_path, LONG_STEP)
    text = open(path, errors="replace").read()
    assert "Timed out waiting 4000ms" in text, text[-3000:]
    findings = _diagnosis(path)
    lead = findings[0]
    assert lead.status == Status.FAIL and lead.subject == "gloo.collective-timeout", lead.summary
    assert "after a step outside collectives ran" in lead.summary and "Saving checkpoint" in lead.summary
    assert "timedelta(minutes=" in lead.fix and "raising the timeout only hides it" not in lead.fix
    # torchrun's report of the exit the timeout caused follows, it does not lead
    assert any(f.subject == "torch.elastic-child-failed" and f.status == Status.WARN for f in findings[1:])
