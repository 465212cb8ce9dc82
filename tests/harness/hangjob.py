"""A real torch job that hangs on purpose, for `distdoctor hang`: gloo ranks on CPU under
torchrun where one rank stays in a named function while the others wait in all_reduce, until
the test lets it go; the job then finishes, which shows that reading it did not harm it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.harness.procs import pids_with_environ
from tests.harness.ranks import clean_env, free_port

WORKER = textwrap.dedent("""\
    import os, sys, time
    import torch
    import torch.distributed as dist

    MODE = os.environ["HG_MODE"]
    FLAGS = os.environ["HG_FLAGS"]


    def flag(name):
        open(os.path.join(FLAGS, name), "w").close()


    def released():
        return os.path.exists(os.path.join(FLAGS, "release"))


    def load_batch():
        flag(f"stuck{rank}")
        while not released():
            time.sleep(0.05)


    def dump_flight_recorder():
        from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json
        prefix = os.environ["TORCH_FR_DUMP_TEMP_FILE"]
        data = _dump_fr_trace_json(includeCollectives=True) if os.environ.get("HG_FR_JSON") else \\
            _dump_fr_trace(includeCollectives=True)
        with open(f"{prefix}{rank}.tmp", "wb") as fh:
            fh.write(data)
        os.replace(f"{prefix}{rank}.tmp", f"{prefix}{rank}")


    if os.environ.get("HG_DUMP_ON") == "usr1":
        # the job's own dump handler: SIGUSR1 blocked in every thread, one thread waits for it
        import signal, threading
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])

        def on_usr1():
            while True:
                signal.sigwait([signal.SIGUSR1])
                dump_flight_recorder()
                flag(f"dumped{rank}")

        threading.Thread(target=on_usr1, daemon=True).start()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    odd = int(os.environ.get("HG_ODD", "2"))
    x = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(x)
    if MODE == "sleep":
        if rank == odd:
            load_batch()
        else:
            flag(f"waiting{rank}")
        dist.all_reduce(x)
    elif MODE in ("skip", "desync"):
        # one rank skips a collective (or runs a different one) that the others start; each
        # dumps its Flight Recorder as the job's own timeout handler would, then waits
        if rank == odd and MODE == "desync":
            work = dist.broadcast(x, 0, async_op=True)
        elif rank != odd:
            work = dist.all_reduce(x, async_op=True)
        time.sleep(1.0)
        if os.environ.get("HG_DUMP_ON") == "usr1":
            flag(f"ready{rank}")
        else:
            dump_flight_recorder()
            flag(f"dumped{rank}")
        while not released():
            time.sleep(0.05)
        os._exit(0)  # the unmatched collective never completes; leave without waiting for it
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()
""")


class HangJob:
    """torchrun --nproc-per-node N over WORKER; killed by process group on exit."""

    def __init__(self, tmp_path, mode: str = "sleep", nproc: int = 4, odd: int = 2, **env: str):
        self.flags = tmp_path / "flags"
        self.flags.mkdir()
        self.script = tmp_path / "job.py"
        self.script.write_text(WORKER)
        self.log = tmp_path / "job.log"
        self.nproc = nproc
        self.mode = mode
        self.env = clean_env(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", HG_MODE=mode, HG_ODD=str(odd),
                             HG_FLAGS=str(self.flags), **env)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "HangJob":
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(self.nproc),
                                      "--master-addr", "127.0.0.1", "--master-port", str(free_port()), str(self.script)],
                                     env=self.env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_for(self, names: list[str], timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all((self.flags / n).exists() for n in names):
                time.sleep(0.5)  # from the flag to the blocking call inside all_reduce
                return
            if self.proc.poll() is not None:
                pytest.fail(f"the job ended early ({self.proc.returncode}): {self.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)
        pytest.fail(f"the job did not reach {names} in {timeout} s: {self.log.read_text(errors='replace')[-3000:]}")

    def release(self, timeout: float = 60.0) -> int:
        (self.flags / "release").touch()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not finish after release: {self.log.read_text(errors='replace')[-3000:]}")

    def rank_pids(self) -> dict[int, int]:
        """rank -> pid, of torchrun's children."""
        out = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
                with open(f"/proc/{name}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if env.get(b"HG_FLAGS") == str(self.flags).encode() and b"RANK" in env and ppid == self.proc.pid:
                out[int(env[b"RANK"])] = int(name)
        return out

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
        # torchrun starts each rank in a session of its own: killing torchrun's group leaves them.
        for pid in pids_with_environ(f"HG_FLAGS={self.flags}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._out.close()


def pyspy_available() -> None:
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not (os.path.exists(beside) or any(os.path.exists(os.path.join(d, "py-spy"))
                                          for d in os.environ.get("PATH", "").split(os.pathsep))):
        pytest.skip("py-spy is not installed (pip install 'distdoctor[hang]')")
