"""A stand-in `nvidia-smi` for machines without a GPU: an executable the tests put first on PATH.

It answers each argument list from a JSON spec written beside it: print a capture, exit with a
chosen status, print to stderr, or sleep forever (what nvidia-smi does when a GPU fell off the
bus). distdoctor runs it through its real subprocess path, timeouts and process-group kill
included.

    smi = StandIn(tmp_path)
    smi.answer("topo -m", stdout=open(capture).read())
    smi.answer("", exit=9, stdout="NVIDIA-SMI has failed because it couldn't communicate ...")
    smi.answer("*", hang=True)           # anything not answered above
    env = smi.env()                       # PATH with the stand-in first, NVML off

The same for another GPU tool: StandIn(tmp_path, "dcgmi") (each tool its own spec and call log).
"""

from __future__ import annotations

import json
import os
import sys

_SCRIPT = """#!{python}
import json, os, sys, time
here, name = os.path.split(os.path.abspath(__file__))
spec = json.load(open(os.path.join(here, name + ".spec.json")))
key = " ".join(sys.argv[1:])
with open(os.path.join(here, name + ".calls.log"), "a") as log:
    log.write(key + "\\n")
answer = spec.get(key, spec.get("*"))
if answer is None:
    sys.stderr.write("stand-in %s: no answer for %r\\n" % (name, key))
    sys.exit(2)
if answer.get("hang"):
    while True:
        time.sleep(3600)
if answer.get("stdout_file"):
    sys.stdout.buffer.write(open(answer["stdout_file"], "rb").read())
sys.stdout.buffer.write(answer.get("stdout", "").encode("latin-1"))
sys.stderr.write(answer.get("stderr", ""))
sys.stdout.flush()
sys.exit(answer.get("exit", 0))
"""


class StandIn:
    def __init__(self, directory, name: str = "nvidia-smi"):
        self.dir = os.path.join(str(directory), "standin-bin")
        self.name = name
        os.makedirs(self.dir, exist_ok=True)
        self.spec: dict[str, dict] = {}
        path = os.path.join(self.dir, name)
        with open(path, "w") as fh:
            fh.write(_SCRIPT.format(python=sys.executable))
        os.chmod(path, 0o755)
        self._write()

    def answer(self, args: str, *, stdout: str | bytes = "", stdout_file: str = "", stderr: str = "",
               exit: int = 0, hang: bool = False) -> "StandIn":
        """args: the arguments joined by spaces ('' for plain nvidia-smi, '*' for any other).
        Bytes in stdout are written as they are (latin-1 round trip), to test undecodable output."""
        if isinstance(stdout, bytes):
            stdout = stdout.decode("latin-1")
        else:
            stdout = stdout.encode("utf-8").decode("latin-1")
        self.spec[args] = {"stdout": stdout, "stdout_file": stdout_file, "stderr": stderr, "exit": exit,
                           "hang": hang}
        self._write()
        return self

    def _write(self) -> None:
        with open(os.path.join(self.dir, self.name + ".spec.json"), "w") as fh:
            json.dump(self.spec, fh)

    def calls(self) -> list[str]:
        try:
            with open(os.path.join(self.dir, self.name + ".calls.log")) as fh:
                return fh.read().splitlines()
        except FileNotFoundError:
            return []

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        for name in list(env):  # the tests decide the job context, not the shell they run in
            if name.startswith(("SLURM_", "OMPI_", "PMI_", "NCCL_")) or name in (
                    "CUDA_VISIBLE_DEVICES", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                    "TORCHELASTIC_RUN_ID", "GROUP_RANK"):
                del env[name]
        env["PATH"] = self.dir + os.pathsep + env.get("PATH", os.defpath)
        env["DISTDOCTOR_NVML"] = "0"  # on a machine with a driver NVML would answer instead
        env["HOME"] = os.path.dirname(self.dir)
        env.update(extra)
        return env
