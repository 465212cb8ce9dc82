"""One rank of a small torch.distributed NCCL job, faulted on purpose: run by gpu_truth.sh on a GPU machine.

    python3 nccl_faults.py SCENARIO

The launcher (gpu_truth.sh) sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT and whatever NCCL_*
variable the scenario is about; this file only does what a training script would do, so the logs and stacks it
leaves are the ones a real job leaves. Scenarios:

    ok        init, all_reduce, barrier, destroy: a clean run's log
    hang      a GPU kernel that never ends before the all_reduce, then wait for the result: the watchdog times out
    oom       ask for more GPU memory than the card has
    ordinal   set_device to a GPU that does not exist (LOCAL_RANK beyond the count)
    wait      init only: run with WORLD_SIZE=2 and no second rank, rank 0 waits for it at the store
"""
from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def _init(timeout_s: float) -> torch.device:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=timeout_s), device_id=device)
    return device


def ok() -> None:
    device = _init(60)
    t = torch.ones(1 << 20, device=device) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {dist.get_rank()} sum {t[0].item()}", flush=True)
    dist.destroy_process_group()


def hang() -> None:
    device = _init(float(os.environ.get("FAULT_TIMEOUT_S", "20")))
    t = torch.ones(1024, device=device)
    # A spinning kernel on the compute stream: the collective, queued behind it, can never start, as when one
    # GPU is wedged. The watchdog then reports the all_reduce that ran past its timeout and ends the process.
    torch.cuda._sleep(int(2e9) * 600)
    dist.all_reduce(t)
    print("waiting for the all_reduce", flush=True)
    print(t[0].item(), flush=True)


def oom() -> None:
    device = _init(60)
    free, total = torch.cuda.mem_get_info(device)
    print(f"free {free} total {total}", flush=True)
    torch.empty(int(total * 1.5) // 4, dtype=torch.float32, device=device)


def ordinal() -> None:
    os.environ["LOCAL_RANK"] = str(torch.cuda.device_count() + 3)
    _init(60)


def wait() -> None:
    _init(float(os.environ.get("FAULT_TIMEOUT_S", "20")))


def main() -> int:
    scenario = sys.argv[1]
    started = time.monotonic()
    print(f"scenario {scenario} rank {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')} torch {torch.__version__} "
          f"cuda {torch.version.cuda} nccl {'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
    {"ok": ok, "hang": hang, "oom": oom, "ordinal": ordinal, "wait": wait}[scenario]()
    print(f"scenario {scenario} ended after {time.monotonic() - started:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
