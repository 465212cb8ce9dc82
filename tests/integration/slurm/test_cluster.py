"""distdoctor on the real two-node Slurm cluster: consistent launches are OK on every task,
each deliberately wrong wiring is caught with its fix, and the pasted fix makes it OK."""

from __future__ import annotations

import json
import os
import shlex

import pytest

from distdoctor.checks.slurm import TORCH_WIRING_FIX, WIRING_FIXES
from tests.conftest import load_report, distdoctor_argv


DD = " ".join(shlex.quote(a) for a in distdoctor_argv())


def reports(stdout: str) -> dict[int, dict]:
    """`srun -l` output of one JSON report per task -> {task: report}."""
    lines: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        label, sep, rest = line.partition(": ")
        if sep and label.strip().isdigit():
            lines.setdefault(int(label), []).append(rest)
    return {task: load_report("\n".join(text)) for task, text in lines.items()}


def findings(report: dict, check_id: str) -> list[dict]:
    [run] = [c for c in report["checks"] if c["id"] == check_id]
    return run["findings"]


def statuses(report: dict) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["checks"]}


def check_in_job(cluster, srun_args: list[str], only: str, env=None, timeout=90) -> dict[int, dict]:
    proc = cluster.srun(["-l", *srun_args, *distdoctor_argv(), "check", "--each-task", "--only", only, "--format", "json"],
                        env=env, timeout=timeout)
    got = reports(proc.stdout)
    assert got, f"no report: rc={proc.returncode}\n{proc.stderr}"
    return got


def batch(cluster, body: str, args=("-N2", "-n4")) -> dict[int, dict]:
    _job, out = cluster.sbatch("#!/bin/bash\n" + body, list(args), timeout=90)
    return reports(out)


def test_consistent_srun_is_ok_on_every_task_of_both_nodes(slurm_cluster):
    got = check_in_job(slurm_cluster, ["-N2", "-n4"], "slurm")
    assert sorted(got) == [0, 1, 2, 3]
    assert [got[t]["host"] for t in range(4)] == ["node1", "node1", "node2", "node2"]
    for task, report in got.items():
        assert report["context"]["kind"] == "slurm-step"
        assert report["context"]["rank"] == task and report["context"]["world_size"] == 4
        assert set(statuses(report).values()) <= {"ok", "skip"}, statuses(report)
        [counts] = findings(report, "slurm.task-counts")
        assert counts["status"] == "ok"
        assert counts["evidence"]["procid"] == task
        assert counts["evidence"]["nodelist"] == {"SLURM_STEP_NODELIST": ["node1", "node2"]}
        [env] = findings(report, "slurm.environment")
        assert env["evidence"]["hostlist_tool"] == "scontrol"
        assert statuses(report)["slurm.installation"] == "ok"
        assert statuses(report)["slurm.batch-step"] == "ok"


def test_correct_torch_wiring_from_the_documented_fix_is_ok(slurm_cluster):
    got = batch(slurm_cluster, TORCH_WIRING_FIX.replace("python train.py",
                                                         f"{DD} check --each-task --only slurm.torch-wiring --format json")
                .replace("srun bash", "srun -l bash"))
    assert sorted(got) == [0, 1, 2, 3]
    for task, report in got.items():
        [f] = findings(report, "slurm.torch-wiring")
        assert f["status"] == "ok", f
        assert f["evidence"]["set"]["RANK"] == str(task)
        assert f["evidence"]["set"]["MASTER_ADDR"] == "node1"


# Each wrong wiring as it appears in real job scripts: exported once in the batch script, where
# $SLURM_PROCID and friends are the batch step's values, not each task's.
WRONG = {
    "RANK": ("export RANK=$SLURM_PROCID", {t: f"RANK=0 but SLURM_PROCID={t}" for t in (1, 2, 3)}),
    "WORLD_SIZE": ("export WORLD_SIZE=$SLURM_JOB_NUM_NODES", {t: "WORLD_SIZE=2 but SLURM_STEP_NUM_TASKS=4"
                                                              for t in range(4)}),
    "LOCAL_RANK": ("export LOCAL_RANK=$SLURM_LOCALID", {1: "LOCAL_RANK=0 but SLURM_LOCALID=1",
                                                        3: "LOCAL_RANK=0 but SLURM_LOCALID=1"}),
    "MASTER_ADDR": ("export MASTER_ADDR=$SLURM_JOB_NODELIST", {t: "MASTER_ADDR='node[1-2]' is not one host"
                                                               for t in range(4)}),
}
BASE = {"RANK": "export RANK=$SLURM_PROCID", "WORLD_SIZE": "export WORLD_SIZE=$SLURM_NTASKS",
        "LOCAL_RANK": "export LOCAL_RANK=$SLURM_LOCALID",
        "MASTER_ADDR": 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "MASTER_PORT": "export MASTER_PORT=29400"}


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_torch_wiring_fails_and_the_pasted_fix_works(slurm_cluster, name):
    line, expected = WRONG[name]
    exports = dict(BASE, **{name: line})
    # the per-task values are right except for the one variable under test
    per_task = " ".join(f"{k}=$SLURM_{v}" for k, v in (("RANK", "PROCID"), ("LOCAL_RANK", "LOCALID"))
                        if k != name)
    cmd = f"{DD} check --each-task --only slurm.torch-wiring --format json"
    srun_line = f"srun -l bash -c 'export {per_task}; exec {cmd}'\n"
    got = batch(slurm_cluster, "\n".join(exports.values()) + "\n" + srun_line)
    assert sorted(got) == [0, 1, 2, 3]
    for task in range(4):
        found = findings(got[task], "slurm.torch-wiring")
        failed = [f for f in found if f["status"] == "fail"]
        if task in expected:
            assert [f["subject"] for f in failed] == [name], found
            assert expected[task] in failed[0]["summary"]
            assert failed[0]["fix"] == WIRING_FIXES[name]
            fix = failed[0]["fix"]
        else:
            assert [f["status"] for f in found] == ["ok"], found
    # paste the fix under the broken lines, as a user would: an export before the srun line, or
    # the srun line itself (with the user's program in place of train.py)
    fix = fix.replace("python train.py", cmd).replace("srun bash", "srun -l bash")
    fixed = batch(slurm_cluster, "\n".join(exports.values()) + "\n" + fix + "\n" +
                  ("" if "srun" in fix else srun_line))
    assert sorted(fixed) == [0, 1, 2, 3]
    for report in fixed.values():
        assert [f["status"] for f in findings(report, "slurm.torch-wiring")] == ["ok"]


def test_sbatch_without_srun_warns_and_srun_fixes_it(slurm_cluster):
    cmd = f"{DD} check --each-task --only slurm --format json"
    _job, out = slurm_cluster.sbatch(f"#!/bin/bash\n{cmd}\n", ["-N2", "-n2"], timeout=90)
    report = load_report(out)
    assert report["host"] == "node1" and report["context"]["kind"] == "slurm-batch"
    [f] = findings(report, "slurm.batch-step")
    assert f["status"] == "warn" and "2 task(s) on 2 node(s)" in f["summary"]
    assert f["fix"].startswith("srun python train.py")
    got = batch(slurm_cluster, "#!/bin/bash\n" + f["fix"].split("#")[0].replace("srun", "srun -l")
                .replace("python train.py", cmd) + "\n", args=("-N2", "-n2"))
    assert sorted(got) == [0, 1]
    assert {r["host"] for r in got.values()} == {"node1", "node2"}
    for report in got.values():
        assert [x["status"] for x in findings(report, "slurm.batch-step")] == ["ok"]


def test_malformed_variable_in_a_real_task_fails_naming_it(slurm_cluster):
    proc = slurm_cluster.srun(["-l", "-N2", "-n2", "bash", "-c",
                               f'export SLURM_TASKS_PER_NODE="2(x)" SLURM_STEP_NODELIST="node[1-2"; '
                               f"exec {DD} check --each-task --only slurm --format json"], timeout=90)
    got = reports(proc.stdout)
    assert sorted(got) == [0, 1], proc.stderr
    for report in got.values():
        failed = {f["subject"]: f["summary"] for f in findings(report, "slurm.environment") if f["status"] == "fail"}
        assert failed.keys() == {"SLURM_TASKS_PER_NODE", "SLURM_STEP_NODELIST"}
        assert "'2(x)'" in failed["SLURM_TASKS_PER_NODE"] and "unbalanced '['" in failed["SLURM_STEP_NODELIST"]
        assert "error" not in statuses(report).values()


def test_login_node_gives_the_installation_summary(slurm_cluster):
    import subprocess

    proc = subprocess.run([*distdoctor_argv(), "check", "--only", "slurm", "--format", "json"], capture_output=True,
                          text=True, timeout=60, env=slurm_cluster.env)
    report = load_report(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert report["context"]["kind"] == "login"
    summary = [f["summary"] for f in findings(report, "slurm.installation")]
    assert summary[0].startswith("Slurm 22.05") and "srun" in summary[0]
    assert summary[1].startswith("slurmctld answers: ") and summary[1].endswith("(primary) UP")
    assert summary[2] == "no partition declares GPUs (partitions: debug)"
    others = {k: v for k, v in statuses(report).items() if k != "slurm.installation"}
    assert set(others.values()) == {"skip"}


# --- GPUs: a separate cluster whose nodes declare Gres=gpu:2 with stand-in devices ----------

def gpu_env(cluster) -> dict[str, str]:
    return {"PATH": cluster.fake_bin + os.pathsep + os.environ.get("PATH", "")}


def test_one_task_per_gpu_is_ok(slurm_gpu_cluster):
    got = check_in_job(slurm_gpu_cluster, ["-N2", "--ntasks-per-node=2", "--gres=gpu:2"], "slurm.gpus",
                       env=gpu_env(slurm_gpu_cluster))
    assert sorted(got) == [0, 1, 2, 3]
    for report in got.values():
        [f] = findings(report, "slurm.gpus")
        assert f["status"] == "ok" and "one task per GPU" in f["summary"], f
        assert f["evidence"]["node_gpus"] and len(f["evidence"]["node_gpus"]) == 2


def test_ntasks_per_node_against_gres_fails_and_the_fix_works(slurm_gpu_cluster):
    env = gpu_env(slurm_gpu_cluster)
    got = check_in_job(slurm_gpu_cluster, ["-N2", "--ntasks-per-node=4", "--gres=gpu:2"],
                       "slurm.gpus", env=env)
    assert sorted(got) == list(range(8))
    for report in got.values():
        [f] = findings(report, "slurm.gpus")
        assert f["status"] == "fail" and f["summary"].startswith("4 tasks on node") and "share 2 GPU(s)" in f["summary"]
        assert "srun --ntasks-per-node=2 --gres=gpu:2" in f["fix"]
    fix_line = next(line for line in f["fix"].splitlines() if line.startswith("# or on the command line: srun "))
    args = fix_line.split("srun ", 1)[1].replace("...", "").split()
    fixed = check_in_job(slurm_gpu_cluster, ["-N2", *args], "slurm.gpus", env=env)
    assert sorted(fixed) == [0, 1, 2, 3]
    assert {findings(r, "slurm.gpus")[0]["status"] for r in fixed.values()} == {"ok"}


def test_gpu_login_summary_lists_gpu_partitions(slurm_gpu_cluster):
    import subprocess

    proc = subprocess.run([*distdoctor_argv(), "check", "--only", "slurm.installation", "--format", "json"],
                          capture_output=True, text=True, timeout=60, env=slurm_gpu_cluster.env)
    report = load_report(proc.stdout)
    assert findings(report, "slurm.installation")[2]["summary"] == "partitions with GPUs: debug: 2 nodes x 2 GPU"


# --- torchrun under srun: one agent per node, workers per GPU -------------------------------

def torchrun_reports(cluster, outdir: str) -> dict[int, dict]:
    got = {}
    for name in sorted(os.listdir(outdir)):
        with open(os.path.join(outdir, name)) as fh:
            got[int(name.split(".")[0])] = json.load(fh)
    return got


def _torchrun_worker(outdir: str) -> str:
    # Each worker writes its own report (several workers share one srun task's stdout) and exits
    # 0: torchrun stops the other workers as soon as one fails, and a FAIL finding exits 1.
    return f"--no-python bash -c '{DD} check --each-task --only slurm --format json > {outdir}/$RANK.json; exit 0'"


def test_torchrun_nproc_against_gpus_fails_and_the_pasted_fix_works(slurm_gpu_cluster):
    import sys

    cluster = slurm_gpu_cluster
    torchrun = f"{shlex.quote(sys.executable)} -m torch.distributed.run"
    wrong = os.path.join(cluster.base, "torchrun-wrong")
    os.makedirs(wrong)
    cmd = (f"exec {torchrun} --nnodes=2 --nproc-per-node=4 --node-rank=$SLURM_NODEID --master-addr=node1 "
           f"--master-port=29511 {_torchrun_worker(wrong)}")
    proc = cluster.srun(["-N2", "--ntasks-per-node=1", "--gres=gpu:2", "bash", "-c", cmd], env=gpu_env(cluster),
                        timeout=120)
    got = torchrun_reports(cluster, wrong)
    assert sorted(got) == list(range(8)), proc.stderr[-2000:]
    for report in got.values():
        assert report["context"]["kind"] == "torchrun"
        [f] = findings(report, "slurm.torchrun-nproc")
        assert f["status"] == "fail" and "--nproc-per-node=4 but node" in f["summary"] and "has 2 GPU(s)" in f["summary"]
        assert statuses(report)["slurm.torch-wiring"] == "skip"
    fix = f["fix"]
    srun_line = fix[fix.index("srun "):].replace("\\\n", " ")
    fixed = os.path.join(cluster.base, "torchrun-fixed")
    os.makedirs(fixed)
    script = srun_line.replace("torchrun", torchrun, 1).replace("train.py", _torchrun_worker(fixed))
    _job, out = cluster.sbatch("#!/bin/bash\n" + script + "\n", ["-N2", "--ntasks-per-node=1", "--gres=gpu:2"],
                               env=gpu_env(cluster), timeout=120)
    got = torchrun_reports(cluster, fixed)
    assert sorted(got) == [0, 1, 2, 3], out[-2000:]
    for report in got.values():
        assert statuses(report)["slurm.torchrun-nproc"] == "ok"
        assert statuses(report)["slurm.gpus"] == "ok"


def test_step_on_a_later_node_needs_the_steps_master_addr(slurm_cluster):
    # the job-level MASTER_ADDR names node1, but this step runs only on node2
    train = os.path.join(slurm_cluster.base, "train-wiring.sh")
    with open(train, "w") as fh:  # stands for the user's program: it reads the wiring it was given
        fh.write("export WORLD_SIZE=$SLURM_NTASKS RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID\n"
                 f"exec {DD} check --each-task --only slurm.torch-wiring --format json\n")
    step = "srun -w node2 -N1 -n2 -l"
    broken = (f"{BASE['MASTER_ADDR']}\n{BASE['MASTER_PORT']}\n{step} bash {train}\n")
    got = batch(slurm_cluster, broken, args=("-N2", "-n4"))
    assert sorted(got) == [0, 1] and {r["host"] for r in got.values()} == {"node2"}
    fix = None
    for report in got.values():
        [f] = findings(report, "slurm.torch-wiring")
        assert f["status"] == "fail" and "MASTER_ADDR=node1 is not the first node of the step (node2)" in f["summary"]
        fix = f["fix"]
    pasted = fix.replace("srun bash", f"{step} bash").replace("python train.py", f"bash {train}")
    fixed = batch(slurm_cluster, f"{BASE['MASTER_ADDR']}\n{BASE['MASTER_PORT']}\n{pasted}\n", args=("-N2", "-n4"))
    assert sorted(fixed) == [0, 1]
    for report in fixed.values():
        assert [f["status"] for f in findings(report, "slurm.torch-wiring")] == ["ok"]
