"""Record real failing job logs on this machine, for `distdoctor log`'s tests.

Every failure is produced for real: a two-node Slurm cluster in network namespaces
(tests/harness/slurm.py), torch gloo ranks launched by `srun --label`, nftables inside a node's
namespace, torchrun, and Open MPI. Each case writes <name>.log (the combined stdout and stderr
exactly as the launcher printed them) and <name>.expected.json (the cause we provoked: signature
id, rank, host) next to this file. Re-runnable; everything started is stopped, even on failure.

    sudo /work/venvs/<name>/bin/python tests/data/logs/lab/record.py [case ...]

Run by a person when the cases change, not by CI: the recorded logs are the test data. After a
re-recording, review each log and refresh <name>.diagnosis.json (tests/logs/test_fixtures.py's
expected `distdoctor log` verdict) by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
sys.path.insert(0, REPO)

from tests.harness import apt  # noqa: E402  (after the path is set: run as a script)
from tests.harness.slurm import SlurmCluster  # noqa: E402

PY = sys.executable
PORT = 36000  # this helper's fixed range is 36000-36999

# A gloo job: init, then DD_STEPS all_reduces DD_SLEEP seconds apart, printing progress.
WORKER = r'''
import datetime, os, time
import torch, torch.distributed as dist
rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
dist.init_process_group("gloo", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=int(os.environ.get("DD_TIMEOUT", "15"))))
for step in range(int(os.environ.get("DD_STEPS", "1"))):
    x = torch.ones(1 << 16)
    dist.all_reduce(x)
    print(f"rank {rank} step {step} ok", flush=True)
    time.sleep(float(os.environ.get("DD_SLEEP", "0")))
dist.destroy_process_group()
'''


def run(argv, env=None, timeout=120) -> tuple[int, str]:
    """argv with stdout and stderr merged in arrival order, as a job's output file has them."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as exc:  # a hang is a result too: keep what it printed
        out = exc.stdout or ""
        return 124, out if isinstance(out, str) else out.decode(errors="replace")
    return proc.returncode, proc.stdout


class Lab:
    def __init__(self, cluster: SlurmCluster, work: str):
        self.cluster = cluster
        self.work = work
        self.worker = os.path.join(work, "allreduce.py")
        with open(self.worker, "w") as fh:
            fh.write(WORKER)

    def srun_ranks(self, shell: str, nodes: int = 2, tasks: int = 2, extra=(), env=None, timeout=120):
        """`srun --label` of a bash snippet per task, with the usual torch wiring exported."""
        wiring = (f"export MASTER_ADDR={self.cluster.address('node1')} MASTER_PORT={PORT} "
                  "RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS; ")
        argv = ["srun", "--label", f"-N{nodes}", f"-n{tasks}", *extra, "bash", "-c", wiring + shell]
        merged = dict(self.cluster.env, **(env or {}))
        return run(argv, env=merged, timeout=timeout)


# --- the cases: each returns the log text; the expected cause is declared beside it ---------

def gloo_loopback(lab: Lab) -> str:
    """Each node's hostname maps to 127.0.1.1, as Debian's installer writes /etc/hosts; gloo
    advertises that address and the peer connects to its own loopback."""
    hosts = os.path.join(lab.work, "hosts-loopback")
    with open(hosts, "w") as fh:
        fh.write("127.0.0.1 localhost\n127.0.1.1 node1 node2\n")
    shell = (f'exec unshare --mount sh -c \'mount --bind {hosts} /etc/hosts && '
             f'exec {PY} {lab.worker}\'')
    return lab.srun_ranks(shell, env={"DD_TIMEOUT": "15"})[1]


def firewalled_rank(lab: Lab) -> str:
    """node1 (rank 0) lets in only slurmd and the store port (MASTER_PORT), as a site that opened
    29500 and nothing else would: rank 1 reaches the store but not rank 0's gloo listener."""
    ns = lab.cluster.netns("node1")
    rules = ("table inet qf_lab {\n  chain input {\n    type filter hook input priority 0; policy accept;\n"
             f"    tcp dport {{ {lab.cluster.slurmd_port}, {PORT} }} accept\n"
             "    ct state new meta l4proto tcp drop\n  }\n}\n")
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=rules, text=True, check=True,
                   capture_output=True, timeout=10)
    try:
        return lab.srun_ranks(f"exec {PY} {lab.worker}", env={"DD_TIMEOUT": "15"})[1]
    finally:
        subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "qf_lab"],
                       capture_output=True, timeout=10, check=False)


def missing_rank(lab: Lab) -> str:
    """WORLD_SIZE=2 but only rank 0 is launched: its store waits for a client that never comes."""
    shell = f"export WORLD_SIZE=2; exec {PY} {lab.worker}"
    return lab.srun_ranks(shell, nodes=1, tasks=1, extra=["-w", "node1"], env={"DD_TIMEOUT": "10"})[1]


def torchrun_port_in_use(lab: Lab) -> str:
    """Another process already listens on torchrun's --master-port on node1."""
    shell = (f"{PY} -c 'import socket, time; s = socket.socket(); s.bind((\"\", {PORT})); s.listen(); "
             f"time.sleep(60)' & holder=$!; sleep 1; "
             f"{PY} -m torch.distributed.run --nnodes=1 --nproc-per-node=2 --master-addr=node1 "
             f"--master-port={PORT} {lab.worker}; rc=$?; kill $holder; exit $rc")
    return lab.srun_ranks(shell, nodes=1, tasks=1, extra=["-w", "node1"], timeout=180)[1]


def slurm_too_many_nodes(lab: Lab) -> str:
    """A batch job on two nodes whose step asks for three: the step cannot be created."""
    return lab.cluster.sbatch("srun --label -N3 hostname\n", args=["-N2"], timeout=60)[1]


def slurm_invalid_partition(lab: Lab) -> str:
    return run(["srun", "--label", "-p", "nosuchpartition", "-N1", "hostname"], env=lab.cluster.env,
               timeout=30)[1]


def mpi_as_root(lab: Lab) -> str:
    apt.ensure("openmpi-bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_ALLOW_RUN_AS_ROOT")}
    return run(["mpirun", "-np", "2", "hostname"], env=env, timeout=60)[1]


def rank_killed(lab: Lab) -> str:
    """Rank 1 is SIGKILLed by the recorder while both ranks loop over all_reduce."""
    env = dict(lab.cluster.env, DD_STEPS="200", DD_SLEEP="0.05", DD_TIMEOUT="20")
    wiring = (f"export MASTER_ADDR={lab.cluster.address('node1')} MASTER_PORT={PORT} "
              "RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS; ")
    pidfile = os.path.join(lab.work, "rank1.pid")
    shell = wiring + f'[ "$SLURM_PROCID" = 1 ] && echo $$ > {pidfile}; exec {PY} {lab.worker}'
    proc = subprocess.Popen(["srun", "--label", "-N2", "-n2", "bash", "-c", shell], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    try:
        killed = False
        deadline = time.monotonic() + 90
        for line in proc.stdout:
            lines.append(line)
            if not killed and line.startswith("1: rank 1 step 5 ok"):
                with open(pidfile) as fh:
                    os.kill(int(fh.read()), signal.SIGKILL)
                killed = True
            if time.monotonic() > deadline:
                break
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    return "".join(lines)


# name -> (function, the cause it provokes: signature id, the rank at fault, the host at fault).
# None where the log cannot know: which gloo rank dials the other (and so reports the loopback
# address or the dropped connection) changes from run to run, and in gloo-loopback every node
# is misconfigured alike.
CASES = {
    "gloo-loopback": (gloo_loopback, {"id": "gloo.loopback-address", "rank": None, "host": None}),
    "firewalled-rank": (firewalled_rank, {"id": "gloo.connect-full-mesh-failed", "rank": None, "host": "node1"}),
    "missing-rank": (missing_rank, {"id": "torch.store-missing-workers", "rank": 0, "host": "node1"}),
    "torchrun-port-in-use": (torchrun_port_in_use, {"id": "torch.address-in-use", "rank": 0, "host": "node1"}),
    "slurm-too-many-nodes": (slurm_too_many_nodes, {"id": "slurm.step-more-nodes-than-allocated", "rank": None, "host": None}),
    "slurm-invalid-partition": (slurm_invalid_partition, {"id": "slurm.invalid-partition", "rank": None, "host": None}),
    "mpi-as-root": (mpi_as_root, {"id": "mpi.run-as-root", "rank": None, "host": None}),
    "rank-killed": (rank_killed, {"id": "slurm.task-signal", "rank": 1, "host": "node2"}),
}


def main(names: list[str]) -> int:
    if os.geteuid() != 0:
        print("record.py needs root (network namespaces, Slurm daemons)", file=sys.stderr)
        return 2
    unknown = set(names) - set(CASES)
    if unknown:
        print(f"unknown case(s): {', '.join(sorted(unknown))}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    apt.ensure("nftables", "openmpi-bin")
    work = tempfile.mkdtemp(prefix="qf-lab-")
    os.chmod(work, 0o755)
    try:
        with SlurmCluster(prefix="lab", nodes=2) as cluster:
            lab = Lab(cluster, work)
            for name in names or list(CASES):
                function, expected = CASES[name]
                started = time.monotonic()
                text = function(lab)
                with open(os.path.join(HERE, f"{name}.log"), "w") as fh:
                    fh.write(text)
                with open(os.path.join(HERE, f"{name}.expected.json"), "w") as fh:
                    json.dump(dict(expected, recorded_by="tests/data/logs/lab/record.py"), fh, indent=2)
                    fh.write("\n")
                print(f"{name}: {len(text.splitlines())} lines in {time.monotonic() - started:.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(30)
    sys.exit(main(sys.argv[1:]))
