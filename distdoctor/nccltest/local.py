"""`--local N`: this process becomes rank 0 and starts ranks 1..N-1 on this machine.

Rank 0 runs in the calling process (one interpreter and one `import torch` fewer than a
separate launcher), the children share one process group that is killed at the end or at the
deadline, and each child also dies with its parent (PR_SET_PDEATHSIG), so nothing is left
behind even if the parent is killed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping

# Launcher variables of an enclosing job would make the children think they are in it.
_STRIP_PREFIXES = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "MPI_LOCAL", "TORCHELASTIC_", "GROUP_RANK", "ROLE_")
_STRIP = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_WORLD_SIZE"}
PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chosen_port(flag: int, env: Mapping[str, str]) -> int:
    """--port, else MASTER_PORT when it is a port number (a site that opens one port for the
    rendezvous sets it), else a free port."""
    if flag:
        return flag
    value = (env.get("MASTER_PORT") or "").strip()
    if value.isdigit() and 0 < int(value) < 65536:
        return int(value)
    return free_port()


def child_env(env: Mapping[str, str], rank: int, world: int, port: int) -> dict[str, str]:
    out = {k: v for k, v in env.items() if k not in _STRIP and not k.startswith(_STRIP_PREFIXES)}
    out.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DISTDOCTOR_NCCL_TEST_LOCAL="1")
    return out


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class Children:
    def __init__(self, argv: list[str], env: Mapping[str, str], world: int, port: int):
        self.procs: list[subprocess.Popen] = []
        self.pgid = 0
        for rank in range(1, world):
            proc = subprocess.Popen(
                [sys.executable, "-m", "distdoctor", *argv], env=child_env(env, rank, world, port),
                stdin=subprocess.DEVNULL, process_group=self.pgid, preexec_fn=_die_with_parent)
            if not self.pgid:
                self.pgid = proc.pid
            self.procs.append(proc)

    def wait(self, deadline: float) -> list[int | None]:
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes

    def kill(self) -> None:
        if self.pgid:
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in self.procs:
            try:
                proc.kill()
                proc.wait(1)
            except (ProcessLookupError, subprocess.TimeoutExpired, OSError):
                pass


def honest_endpoint(where, given: Mapping[str, str], flag: int = 0):
    """Rank 0's rendezvous as --local chose it, not as the children's environment spells it:
    MASTER_ADDR and MASTER_PORT were chosen here, whatever the caller's environment said."""
    import dataclasses

    addr = (given.get("MASTER_ADDR") or "").strip()
    port = (given.get("MASTER_PORT") or "").strip()
    return dataclasses.replace(
        where,
        addr_why="chosen by --local: every rank runs on this host" + (
            f" (MASTER_ADDR={addr} from the environment is ignored)" if addr else " (MASTER_ADDR unset)"),
        port_why="--port" if flag else "MASTER_PORT from the environment" if port.isdigit() and 0 < int(port) < 65536
        else "chosen by --local: a free port" + (f" (MASTER_PORT={port[:40]!r} is not a port)" if port else
                                                 " (MASTER_PORT unset)"))


def forwarded_argv(args) -> list[str]:
    """The nccl-test options the children need (output options stay with rank 0)."""
    argv = ["nccl-test", "--timeout", repr(args.timeout)]
    if args.backend:
        argv += ["--backend", args.backend]
    if args.mesh is not None:
        argv += ["--mesh", args.mesh] if args.mesh else ["--no-mesh"]
    if args.bench:
        argv += ["--bench", "-b", str(args.minbytes), "-e", str(args.maxbytes), "-f", str(args.stepfactor),
                 "--iters", str(args.iters)]
    if args.verbose:
        argv.append("-v")
    return argv
