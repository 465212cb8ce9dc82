"""nccl-test's rendezvous store: torch's TCPStore against distdoctor's bounded store
(nccltest/store_server.py, reached through store_torch.BoundedStore), on the loopback.

Two measures, each alternating the two stores so that drift in the machine's load hits both:
  1. time for W gloo ranks (threads of one process) to initialise a process group on the store
     and run one all_reduce: what nccl-test's init phase pays for the store;
  2. the server process's resident memory after a stranger appends 1 GiB to a key (without
     the job's token): what a stranger can make rank 0 hold.

    python3 bench/store_bench.py [--world 4] [--pairs 7]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOKEN = "bench-token"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gloo_round(kind: str, world: int) -> float:
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import ProcessGroupGloo

    from distdoctor.nccltest import store_server, store_wire
    from distdoctor.nccltest.store import listen
    from distdoctor.nccltest.store_torch import BoundedStore

    port = free_port()
    server = None
    stores: list = []
    if kind == "tcpstore":
        master = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
        stores = [master] + [dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=30),
                                           wait_for_workers=False) for _ in range(world - 1)]
    else:
        server = store_server.Server(listen("127.0.0.1", port), TOKEN, store_server.Limits.for_world(world)).start()
        stores = [BoundedStore(store_wire.Connection("127.0.0.1", port, TOKEN, {"rank": r}, 30), "pg", 30)
                  for r in range(world)]
    errors: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            pg = ProcessGroupGloo(dist.PrefixStore("pg", stores[r]), r, world, datetime.timedelta(seconds=30))
            tensor = torch.ones(4)
            pg.allreduce([tensor]).wait()
            assert tensor[0].item() == world
        except BaseException as exc:  # reported below
            errors.append(exc)

    start = time.perf_counter()
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.perf_counter() - start
    if server is not None:
        server.close()
    if errors:
        raise errors[0]
    return elapsed


SERVE = """
import datetime, sys, time
kind, port = sys.argv[1], int(sys.argv[2])
if kind == "tcpstore":
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
else:
    sys.path.insert(0, sys.argv[3])
    from distdoctor.nccltest import store_server
    from distdoctor.nccltest.store import listen
    store_server.Server(listen("127.0.0.1", port), "bench-token").start()
print("ready", flush=True)
time.sleep(120)
"""

APPEND = """
import datetime, socket, struct, sys
port = int(sys.argv[1])
try:
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=30), wait_for_workers=False)
    chunk = b"x" * (7 << 20)  # TCPStore's libuv server takes at most 8 MiB a message
    for _ in range(147):
        store.append("roll", chunk)
    print("appended 1 GiB")
except Exception as exc:
    print("refused:", type(exc).__name__)
"""


def rss_after_append(kind: str) -> tuple[int, int, str]:
    import psutil

    port = free_port()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    server = subprocess.Popen([sys.executable, "-c", SERVE, kind, str(port), root], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        before = psutil.Process(server.pid).memory_info().rss
        out = subprocess.run([sys.executable, "-c", APPEND, str(port)], capture_output=True, text=True, timeout=300)
        time.sleep(0.5)
        after = psutil.Process(server.pid).memory_info().rss
        return before, after, out.stdout.strip() or out.stderr.strip()[-200:]
    finally:
        server.kill()
        server.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=7)
    args = parser.parse_args()
    print(f"load: {os.getloadavg()}")
    gloo_round("tcpstore", args.world), gloo_round("bounded", args.world)  # warm: imports, first sockets
    tcp, bounded, ratios = [], [], []
    for _ in range(args.pairs):
        a = gloo_round("tcpstore", args.world)
        b = gloo_round("bounded", args.world)
        tcp.append(a), bounded.append(b), ratios.append(b / a)
    print(f"gloo init + all_reduce, {args.world} ranks: TCPStore median {statistics.median(tcp) * 1000:.1f} ms, "
          f"bounded store {statistics.median(bounded) * 1000:.1f} ms, median ratio {statistics.median(ratios):.2f}")
    for kind in ("tcpstore", "bounded"):
        before, after, said = rss_after_append(kind)
        print(f"{kind}: server RSS {before >> 20} MiB -> {after >> 20} MiB after a stranger's 1 GiB append ({said})")
    print(f"load: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
