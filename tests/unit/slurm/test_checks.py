"""The slurm checks over FakeHosts built from real environment captures (public dumps and our
own cluster's), including the variants this machine cannot reproduce: old variable names,
redacted values, odd step ids, malformed values."""

import glob
import json
import os

import pytest

from distdoctor.checks import slurm as S
from distdoctor.checks import slurm_wiring as W
from distdoctor.facts import Facts
from distdoctor.host import CommandResult
from distdoctor.launch import detect_context
from distdoctor.model import Status
from distdoctor.parsers.slurm import parse_env_dump
from distdoctor.testing import FakeHost, run_check
from tests.conftest import data_path

NV4 = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d}-0000-0000-0000-000000000000)\n" for i in range(4))
NV2 = "".join(NV4.splitlines(keepends=True)[:2])


def capture(*parts) -> dict:
    with open(data_path(*parts)) as fh:
        return parse_env_dump(fh.read()).values


def host(env, *, gpus: str | None = None, scontrol=None, affinity=None, resolve=None, **kw) -> FakeHost:
    commands = dict(kw.pop("commands", {}))
    if gpus is not None:
        commands[("nvidia-smi", "-L")] = gpus
    if scontrol is not None:
        commands["scontrol"] = scontrol
    return FakeHost(env=env, commands=commands, cpu_affinity=affinity,
                    resolve=resolve or {"node1": ["10.0.0.11"], "node2": ["10.0.0.12"]}, **kw)


def findings(check, h):
    return run_check(check, h)


def statuses(check, h):
    return [f.status for f in findings(check, h)]


# --- every public capture ------------------------------------------------------------------

DUMPS = sorted(glob.glob(data_path("slurm_env", "*.txt")))


@pytest.mark.parametrize("path", DUMPS, ids=os.path.basename)
def test_public_capture(path):
    expected = json.load(open(path.replace(".txt", ".expected.json")))
    env = capture("slurm_env", os.path.basename(path))
    h = host(env, affinity=range(32))  # the talapas dump says its task may use 32 CPUs
    facts = Facts(h)
    se = facts.slurm_env
    assert se.job_id == expected["job_id"]
    assert se.step_kind == expected["step_kind"]
    assert se.ntasks == expected["ntasks"]
    assert se.nnodes == expected["nnodes"]
    assert list(se.tasks_per_node) == expected["tasks_per_node"]
    assert list(se.nodelist) == expected["nodelist"]
    assert [se.int("SLURM_PROCID"), se.int("SLURM_LOCALID"), se.int("SLURM_NODEID")] == \
        [expected["procid"], expected["localid"], expected["nodeid"]]
    assert [p.name for p in se.problems] == expected["problems"]
    assert se.hostlist_tool == "ClusterShell"  # no scontrol on this fake host
    by_id = {c.id: c for c in S.CHECKS}
    for check_id, status in expected["statuses"].items():
        assert {f.status.value for f in findings(by_id[check_id], h)} == {status}, check_id


def test_no_check_errors_on_any_capture():
    for path in DUMPS + sorted(glob.glob(data_path("slurm", "env_*.txt"))):
        h = host(capture(os.path.dirname(path).rsplit("/", 1)[1], os.path.basename(path)), gpus=NV2)
        for check in S.CHECKS:
            assert Status.ERROR not in statuses(check, h), (path, check.id)


# --- our own cluster's captures ------------------------------------------------------------

def test_batch_step_capture_warns_only_one_task_runs():
    env = capture("slurm", "env_sbatch_batch_step_N2_n3_gres2.txt")
    h = host(env, gpus=NV2)
    [f] = findings(S.batch_step, h)
    assert f.status is Status.WARN
    assert "only this one process runs" in f.summary and "3 task(s) on 2 node(s)" in f.summary
    assert f.fix.startswith("srun ")
    assert detect_context(env).kind == "slurm-batch"
    assert statuses(S.task_counts, h) == [Status.OK]
    assert statuses(W.torch_wiring, h) == [Status.SKIP]


def test_batch_step_with_an_unreadable_task_count_does_not_claim_one_task():
    env = capture("slurm", "env_sbatch_batch_step_N2_n3_gres2.txt")
    for name in ("SLURM_NTASKS", "SLURM_NPROCS", "SLURM_TASKS_PER_NODE", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        env.pop(name, None)
    env["SLURM_NTASKS"] = "abc"
    [f] = findings(S.batch_step, host(env, gpus=NV2))
    assert f.status is Status.SKIP and "one task" not in f.summary
    assert "SLURM_NTASKS cannot be read" in f.summary
    del env["SLURM_NTASKS"]
    [f] = findings(S.batch_step, host(env, gpus=NV2))
    assert f.status is Status.OK and "one task" in f.summary


def test_step_on_one_node_of_a_two_node_job_is_consistent():
    # SLURM_NODELIST is still the job's node[1-2] while SLURM_NNODES=1: not a mismatch
    env = capture("slurm", "env_srun_step_inside_sbatch_N1_n1.txt")
    h = host(env, gpus=NV2)
    assert statuses(S.task_counts, h) == [Status.OK]
    [g] = findings(S.gpus, h)
    assert g.status is Status.OK and "one task drives all of them" in g.summary


def test_one_task_per_gpu_capture():
    env = capture("slurm", "env_srun_N2_ntasks_per_node2_gres2_rank3.txt")
    h = host(env, gpus=NV2)
    [f] = findings(S.task_counts, h)
    assert f.status is Status.OK and "this is task 3 (local 1 on node 1 node2)" in f.summary
    [g] = findings(S.gpus, h)
    assert g.status is Status.OK and "one task per GPU" in g.summary


# --- bad input: a finding naming the variable and its value, never a traceback -------------

STEP = capture("slurm", "env_srun_N2_ntasks_per_node2_gres2_rank3.txt")


@pytest.mark.parametrize("name, value, words", [
    ("SLURM_STEP_TASKS_PER_NODE", "2(x)", "not N or N(xM)"),
    ("SLURM_STEP_TASKS_PER_NODE", "(x3)", "not N or N(xM)"),
    ("SLURM_TASKS_PER_NODE", "abc", "not N or N(xM)"),
    ("SLURM_JOB_CPUS_PER_NODE", "", "set but empty"),
    ("SLURM_STEP_NODELIST", "node[1-2", "unbalanced '['"),
    ("SLURM_JOB_NODELIST", "node1-2]", "unbalanced ']'"),
    ("SLURM_NODELIST", "node[2-1]", "reversed range"),
    ("SLURM_PROCID", "three", "not a non-negative integer"),
    ("SLURM_NTASKS", "-4", "not a non-negative integer"),
    ("SLURM_LOCALID", "", "set but empty"),
    ("SLURM_STEP_ID", "step0", "not a step id"),
    ("CUDA_VISIBLE_DEVICES", "0,,1", "empty element"),
])
def test_malformed_variable_fails_naming_it(name, value, words):
    env = dict(STEP, **{name: value})
    h = host(env, gpus=NV2)
    bad = [f for f in findings(S.environment, h) if f.status is Status.FAIL]
    assert len(bad) == 1
    assert bad[0].subject == name
    assert name in bad[0].summary and repr(value) in bad[0].summary and words in bad[0].summary
    assert f"unset {name}" in bad[0].fix
    for check in S.CHECKS:
        assert Status.ERROR not in statuses(check, h), check.id


def test_nodelist_scontrol_rejects():
    # the library accepts it, but the site's scontrol (the authority) does not
    env = dict(STEP, SLURM_STEP_NODELIST="node[1,2]")

    def scontrol(argv):
        if argv[-1] == "node[1,2]":
            return CommandResult(argv, 0, "Invalid hostlist: node[1,2]\n")
        return CommandResult(argv, 0, "node1\nnode2\n")

    [f] = [f for f in findings(S.environment, host(env, scontrol=scontrol)) if f.status is Status.FAIL]
    assert f.subject == "SLURM_STEP_NODELIST" and "scontrol show hostnames rejects it" in f.summary


def test_nodelists_expanded_by_scontrol_when_it_runs():
    calls = []

    def scontrol(argv):
        calls.append(argv)
        return CommandResult(argv, 0, "node1\nnode2\n")

    h = host(dict(STEP), scontrol=scontrol)
    se = Facts(h).slurm_env
    assert se.hostlist_tool == "scontrol"
    assert se.nodelist == ("node1", "node2")
    assert calls == [("scontrol", "show", "hostnames", "node[1-2]")]  # one call per distinct expression


def test_scontrol_that_cannot_run_falls_back_to_the_library():
    broken = CommandResult(("scontrol",), 1, "", "scontrol: fatal: Could not establish a configuration source\n")
    se = Facts(host(dict(STEP), scontrol=broken)).slurm_env
    assert se.hostlist_tool == "ClusterShell" and se.nodelist == ("node1", "node2")


def test_hung_scontrol_is_asked_once_then_the_library_answers():
    calls = []

    def hung(argv):
        calls.append(argv)
        return CommandResult(argv, None, duration=3.0, timed_out=True)

    h = host(dict(STEP, SLURM_JOB_NODELIST="node[1-2],node3", SLURM_NODELIST="node[1-2],node3"), scontrol=hung)
    se = Facts(h).slurm_env
    assert len(calls) == 1
    assert se.hostlist_tool == "ClusterShell" and se.nodelists["SLURM_JOB_NODELIST"] == ("node1", "node2", "node3")


# --- variants not reproducible here ---------------------------------------------------------

@pytest.mark.parametrize("step, kind, context", [
    ("4294967291", "batch", "slurm-batch"),      # SLURM_BATCH_SCRIPT since 20.11
    ("4294967294", "batch", "slurm-batch"),      # before 20.11
    ("4294967292", "extern", "slurm-allocation"),
    ("extern", "extern", "slurm-allocation"),
    ("interactive", "interactive", "slurm-allocation"),
    ("3+1", "normal", "slurm-step"),             # a heterogeneous step
    ("0", "normal", "slurm-step"),
])
def test_odd_step_ids(step, kind, context):
    env = dict(STEP, SLURM_STEP_ID=step, SLURM_STEPID=step)
    h = host(env, gpus=NV2)
    assert Facts(h).slurm_env.step_kind == kind
    assert detect_context(env).kind == context
    assert Status.FAIL not in statuses(S.environment, h)


def test_redacted_values_are_not_judged():
    env = dict(STEP, SLURM_JOB_ID="<redacted>", SLURM_STEP_NODELIST="<redacted>", SLURM_NTASKS="<redacted>")
    h = host(env, gpus=NV2)
    envf = findings(S.environment, h)
    assert [f.status for f in envf] == [Status.OK, Status.OK]
    assert "SLURM_JOB_ID" in envf[0].summary and "SLURM_STEP_NODELIST" in envf[0].summary
    assert statuses(S.task_counts, h) == [Status.OK]  # JOB_ID vs JOBID not compared with a redacted side


def test_old_names_only():
    env = capture("slurm_env", "slurm_env_srun_A_2007_plain_comma_nodelist_empty_values.txt")
    se = Facts(host(env)).slurm_env
    assert (se.ntasks_var, se.nnodes_var, se.nodelist_var) == ("SLURM_NPROCS", "SLURM_NNODES", "SLURM_NODELIST")


# --- counts -------------------------------------------------------------------------------

@pytest.mark.parametrize("change, subject, words", [
    ({"SLURM_STEP_NUM_TASKS": "5", "SLURM_NTASKS": "5", "SLURM_NPROCS": "5"}, "SLURM_STEP_NUM_TASKS",
     "SLURM_STEP_NUM_TASKS=5 but SLURM_STEP_TASKS_PER_NODE=2(x2) adds up to 4"),
    ({"SLURM_STEP_NUM_NODES": "3", "SLURM_NNODES": "3"}, "SLURM_STEP_NUM_NODES", "has 2 node(s)"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x2),1", "SLURM_STEP_NUM_TASKS": "5", "SLURM_NTASKS": "5",
      "SLURM_NPROCS": "5"}, "SLURM_STEP_TASKS_PER_NODE", "covers 3 node(s)"),
    ({"SLURM_PROCID": "4"}, "SLURM_PROCID", "SLURM_PROCID=4 is not below SLURM_STEP_NUM_TASKS=4"),
    ({"SLURM_NODEID": "2"}, "SLURM_NODEID", "SLURM_NODEID=2 is not below"),
    ({"SLURM_LOCALID": "2"}, "SLURM_LOCALID", "SLURM_LOCALID=2 is not below the 2 task(s)"),
    ({"SLURM_JOBID": "3"}, "SLURM_JOB_ID", "SLURM_JOB_ID=2 but SLURM_JOBID=3"),
    ({"SLURM_NTASKS": "8", "SLURM_NPROCS": "8"}, "SLURM_NTASKS", "SLURM_NTASKS=8 but SLURM_STEP_NUM_TASKS=4"),
    ({"SLURMD_NODENAME": "node1"}, "SLURM_NODEID", "SLURM_NODEID=1 names node2"),
    ({"SLURM_STEP_NODELIST": "node[2-3]"}, "SLURM_STEP_NODELIST", "outside SLURM_JOB_NODELIST: node3"),
    ({"SLURM_JOB_NUM_NODES": "3"}, "SLURM_JOB_NUM_NODES", "SLURM_JOB_NUM_NODES=3"),
    ({"SLURM_JOB_CPUS_PER_NODE": "2"}, "SLURM_JOB_CPUS_PER_NODE", "covers 1 node(s)"),
    ({"SLURM_NODELIST": "node[1-3]"}, "SLURM_NODELIST", "but SLURM_JOB_NODELIST=node[1-2]"),
])
def test_count_mismatch_fails_with_a_fix(change, subject, words):
    h = host(dict(STEP, **change))
    fails = [f for f in findings(S.task_counts, h) if f.status is Status.FAIL]
    assert any(f.subject == subject and words in f.summary for f in fails), [f.summary for f in fails]
    assert all("unset" in f.fix for f in fails)


# --- GPUs ---------------------------------------------------------------------------------

def _gpu_env(tasks_per_node: int, gres: int, **extra):
    env = dict(STEP, SLURM_STEP_TASKS_PER_NODE=f"{tasks_per_node}(x2)", SLURM_TASKS_PER_NODE=f"{tasks_per_node}(x2)",
               SLURM_STEP_NUM_TASKS=str(2 * tasks_per_node), SLURM_NTASKS=str(2 * tasks_per_node),
               SLURM_NPROCS=str(2 * tasks_per_node), SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0",
               SLURMD_NODENAME="node1", SLURM_GPUS_ON_NODE=str(gres), SLURM_STEP_GPUS=",".join(map(str, range(gres))),
               CUDA_VISIBLE_DEVICES=",".join(map(str, range(gres))))
    env.update(extra)
    return env


def test_more_tasks_than_gpus_fails_with_ntasks_per_node_fix():
    [f] = findings(S.gpus, host(_gpu_env(4, 2), gpus=NV2))
    assert f.status is Status.FAIL and f.summary == "4 tasks on node1 share 2 GPU(s)"
    assert "#SBATCH --ntasks-per-node=2" in f.fix and "srun --ntasks-per-node=2 --gres=gpu:2" in f.fix


def test_fewer_tasks_than_gpus_warns_idle():
    [f] = findings(S.gpus, host(_gpu_env(2, 4), gpus=NV4))
    assert f.status is Status.WARN and "2 GPU(s) idle" in f.summary


def test_cuda_visible_devices_beyond_allocation_fails():
    [f] = findings(S.gpus, host(_gpu_env(2, 2, CUDA_VISIBLE_DEVICES="0,1,2,3"), gpus=NV4))
    assert f.status is Status.FAIL and "lists 4 GPU(s) but Slurm allocated 2" in f.summary
    assert "unset CUDA_VISIBLE_DEVICES" in f.fix


def test_one_gpu_per_rank_warns_about_cuda_ipc():
    [f] = findings(S.gpus, host(_gpu_env(2, 2, CUDA_VISIBLE_DEVICES="1"), gpus=NV2))
    assert f.status is Status.WARN and "nccl#129" in f.explanation


def test_empty_cuda_visible_devices_fails():
    [f] = findings(S.gpus, host(_gpu_env(2, 2, CUDA_VISIBLE_DEVICES=""), gpus=NV2))
    assert f.status is Status.FAIL and "empty" in f.summary


def test_node_shows_fewer_gpus_than_allocated_fails_with_drain_fix():
    [f] = findings(S.gpus, host(_gpu_env(4, 4), gpus=NV2))
    assert f.status is Status.FAIL and "the node shows 2" in f.summary
    assert "scontrol update nodename=node1 state=drain" in f.fix


def test_gpus_without_nvidia_smi_warns_cannot_verify():
    [f] = findings(S.gpus, host(_gpu_env(2, 2)))
    assert f.status is Status.WARN and "nvidia-smi is not installed" in f.summary


def test_cuda_visible_devices_without_allocation_warns():
    env = dict(STEP, CUDA_VISIBLE_DEVICES="0,1")
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS"):
        env.pop(name)
    [f] = findings(S.gpus, host(env, gpus=NV2))
    assert f.status is Status.WARN and "#SBATCH --gres=gpu:N" in f.fix


def test_no_gpu_anywhere_skips():
    env = {k: v for k, v in STEP.items() if "GPU" not in k and k != "CUDA_VISIBLE_DEVICES"}
    assert statuses(S.gpus, host(env)) == [Status.SKIP]


# --- CPUs ---------------------------------------------------------------------------------

def test_cpus_per_task_not_inherited_by_srun():
    env = dict(STEP, SLURM_CPUS_PER_TASK="4", SLURM_CPUS_ON_NODE="8")
    [f] = findings(S.cpus, host(env, affinity=[3]))
    assert f.status is Status.FAIL and "only 1 core(s)" in f.summary
    assert f.fix.startswith("export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK")


def test_cpus_oversubscribed_node_and_omp():
    env = dict(STEP, SLURM_CPUS_PER_TASK="2", SLURM_CPUS_ON_NODE="2", OMP_NUM_THREADS="16")
    found = findings(S.cpus, host(env, affinity=[0, 1]))
    assert [f.status for f in found] == [Status.FAIL, Status.WARN]
    assert "exceed the 2 CPUs" in found[0].summary and "OMP_NUM_THREADS=16" in found[1].summary


def test_cpus_bound_exactly():
    env = dict(STEP, SLURM_CPUS_PER_TASK="2", SLURM_CPUS_ON_NODE="4")
    [f] = findings(S.cpus, host(env, affinity=[2, 3]))
    assert f.status is Status.OK and "bound to exactly these" in f.summary


# --- torch wiring -------------------------------------------------------------------------

GOOD = dict(STEP, WORLD_SIZE="4", RANK="3", LOCAL_RANK="1", MASTER_ADDR="node1", MASTER_PORT="29500")
EPHEMERAL = {"/proc/sys/net/ipv4/ip_local_port_range": "32768\t60999\n"}


def test_torch_wiring_ok():
    [f] = findings(W.torch_wiring, host(GOOD, files=EPHEMERAL))
    assert f.status is Status.OK


def test_master_addr_may_be_an_address_of_the_first_node():
    [f] = findings(W.torch_wiring, host(dict(GOOD, MASTER_ADDR="10.0.0.11"), files=EPHEMERAL,
                                        resolve={"node1": ["10.0.0.11"], "10.0.0.11": ["10.0.0.11"]}))
    assert f.status is Status.OK


V6 = {"lo": [{"family": "inet", "address": "127.0.0.1", "netmask": "255.0.0.0"}],
      "eth0": [{"family": "inet", "address": "10.0.0.11", "netmask": "255.255.255.0"},
               {"family": "inet6", "address": "fd43::11", "netmask": "ffff:ffff:ffff:ffff::"}]}


@pytest.mark.parametrize("me, status", [("node1", Status.OK), ("node2", None)])
def test_an_ipv6_master_addr_of_the_first_node_is_not_called_another_node(me, status):
    """Live (the two-node Slurm cluster, eth0 with fd43::11): MASTER_ADDR=fd43:0::11 was 'not the
    first node of the step (node1)' on every node, node1 resolving only to its IPv4 address. The
    first node knows its own addresses (written either way); another node cannot tell, and leaves
    it to the first node's run of the check instead of a false FAIL."""
    env = dict(GOOD, MASTER_ADDR="fd43:0::11", SLURMD_NODENAME=me)
    found = findings(W.torch_wiring, host(env, files=EPHEMERAL, hostname=me, if_addrs=V6 if me == "node1" else None,
                                          resolve={"node1": ["10.0.0.11"], "fd43:0::11": ["fd43::11"]}))
    assert not [f for f in found if f.status is Status.FAIL], [f.summary for f in found]
    if status is not None:
        assert [f.status for f in found] == [status]


def test_an_ipv6_master_addr_that_is_not_the_first_nodes_is_still_named_there():
    env = dict(GOOD, MASTER_ADDR="fd43::99", SLURMD_NODENAME="node1")
    found = findings(W.torch_wiring, host(env, files=EPHEMERAL, if_addrs=V6,
                                          resolve={"node1": ["10.0.0.11"], "fd43::99": ["fd43::99"]}))
    assert [f.status for f in found] == [Status.FAIL] and "not the first node" in found[0].summary


@pytest.mark.parametrize("change, status, words", [
    ({"WORLD_SIZE": "8"}, Status.FAIL, "WORLD_SIZE=8 but SLURM_STEP_NUM_TASKS=4"),
    ({"RANK": "0"}, Status.FAIL, "RANK=0 but SLURM_PROCID=3"),
    ({"LOCAL_RANK": "3"}, Status.FAIL, "LOCAL_RANK=3 but SLURM_LOCALID=1"),
    ({"MASTER_ADDR": "node[1-2]"}, Status.FAIL, "MASTER_ADDR='node[1-2]' is not one host (first node is node1)"),
    ({"MASTER_ADDR": "linux[1"}, Status.FAIL, "is not one host"),
    ({"MASTER_ADDR": "node2"}, Status.FAIL, "MASTER_ADDR=node2 is not the first node of the step (node1)"),
    ({"MASTER_ADDR": "login01"}, Status.FAIL, "MASTER_ADDR=login01 does not resolve"),
    ({"MASTER_PORT": "40000"}, Status.WARN, "inside the ephemeral port range 32768-60999"),
    ({"MASTER_PORT": "80"}, Status.WARN, "privileged"),
    ({"MASTER_PORT": "70000"}, Status.FAIL, "is not a TCP port"),
    ({"MASTER_PORT": "http"}, Status.FAIL, "is not a TCP port"),
])
def test_torch_wiring_mismatch(change, status, words):
    found = findings(W.torch_wiring, host(dict(GOOD, **change), files=EPHEMERAL))
    assert [f.status for f in found] == [status], [f.summary for f in found]
    assert words in found[0].summary
    [name] = change
    assert found[0].subject == name and found[0].fix == S.WIRING_FIXES[name]


def test_master_addr_fix_for_a_step_that_skips_the_jobs_first_node():
    env = dict(GOOD, SLURM_JOB_NODELIST="node[0-2]", SLURM_NODELIST="node[0-2]", SLURM_JOB_NUM_NODES="3",
               SLURM_JOB_CPUS_PER_NODE="2(x3)", MASTER_ADDR="node0")
    [f] = findings(W.torch_wiring, host(env, files=EPHEMERAL, resolve={"node0": ["10.0.0.10"],
                                                                       "node1": ["10.0.0.11"]}))
    assert f.status is Status.FAIL and "not the first node of the step (node1)" in f.summary
    assert f.fix == S.STEP_MASTER_ADDR_FIX and '"$SLURM_STEP_NODELIST"' in f.fix


def test_torch_wiring_partial_warns_missing():
    env = {k: v for k, v in GOOD.items() if k not in ("MASTER_PORT", "WORLD_SIZE")}
    found = findings(W.torch_wiring, host(env, files=EPHEMERAL))
    assert sorted(f.subject for f in found) == ["MASTER_PORT", "WORLD_SIZE"]
    assert all(f.status is Status.WARN for f in found)


def test_torch_wiring_unset_skips_with_the_wiring_as_fix():
    [f] = findings(W.torch_wiring, host(dict(STEP)))
    assert f.status is Status.SKIP and f.fix == S.TORCH_WIRING_FIX


def test_torch_wiring_outside_a_step_defers_to_batch_step():
    env = dict(capture("slurm", "env_sbatch_batch_step_N2_n3_gres2.txt"), RANK="0", WORLD_SIZE="3")
    [f] = findings(W.torch_wiring, host(env))
    assert f.status is Status.SKIP and "batch step" in f.summary


# --- torchrun under srun ------------------------------------------------------------------

def _torchrun(**change):
    env = dict(STEP, SLURM_STEP_TASKS_PER_NODE="1(x2)", SLURM_TASKS_PER_NODE="1(x2)", SLURM_STEP_NUM_TASKS="2",
               SLURM_NTASKS="2", SLURM_NPROCS="2", SLURM_PROCID="1", SLURM_LOCALID="0", SLURM_GPUS_ON_NODE="4",
               SLURM_STEP_GPUS="0,1,2,3", CUDA_VISIBLE_DEVICES="0,1,2,3", TORCHELASTIC_RUN_ID="none",
               LOCAL_WORLD_SIZE="4", WORLD_SIZE="8", RANK="5", LOCAL_RANK="1", GROUP_RANK="1")
    env.update(change)
    return env


def test_torchrun_ok():
    h = host(_torchrun(), gpus=NV4)
    [f] = findings(S.torchrun_nproc, h)
    assert f.status is Status.OK and "4 per node x 2 node(s) = WORLD_SIZE 8" in f.summary
    assert statuses(W.torch_wiring, h) == [Status.SKIP]
    assert statuses(S.gpus, h) == [Status.OK]


@pytest.mark.parametrize("change, status, words", [
    ({"LOCAL_WORLD_SIZE": "8", "WORLD_SIZE": "16"}, Status.FAIL, "--nproc-per-node=8 but node2 has 4 GPU(s)"),
    ({"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "4"}, Status.WARN, "2 idle"),
    ({"WORLD_SIZE": "4"}, Status.FAIL, "WORLD_SIZE=4 but 2 node(s) x --nproc-per-node=4 = 8"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_STEP_NUM_TASKS": "4", "SLURM_NTASKS": "4", "SLURM_NPROCS": "4"},
     Status.FAIL, "srun started 2 torchrun agents on node2"),
])
def test_torchrun_mismatch(change, status, words):
    found = findings(S.torchrun_nproc, host(_torchrun(**change), gpus=NV4))
    assert [f.status for f in found] == [status], [f.summary for f in found]
    assert words in found[0].summary and "--ntasks-per-node=1" in found[0].fix


# --- login node ---------------------------------------------------------------------------

def _read(*parts):
    with open(data_path(*parts)) as fh:
        return fh.read()


def _login(ping: str, rc: int = 0, partitions: str | None = None):
    return FakeHost(env={}, commands={
        ("sinfo", "--version"): _read("slurm", "sinfo_version.txt"),
        ("scontrol", "ping"): CommandResult(("scontrol", "ping"), rc, ping),
        ("sinfo", "-h", "-o", "%P|%a|%D|%G"): partitions if partitions is not None
        else _read("slurm", "sinfo_partitions_gres.txt"),
        "srun": "", "sbatch": "", "squeue": "",
    })


def test_login_node_summary():
    found = findings(S.installation, _login(_read("slurm", "scontrol_ping_up.txt")))
    assert [f.status for f in found] == [Status.OK] * 3
    assert found[0].summary == "Slurm 22.05.8 (sinfo, srun, sbatch, scontrol, squeue)"
    assert found[1].summary == "slurmctld answers: vm (primary) UP"
    assert found[2].summary == "partitions with GPUs: debug: 2 nodes x 2 GPU"
    assert detect_context({}, slurm_installed=True).kind == "login"
    for check in S.CHECKS:
        if check is not S.installation:
            assert statuses(check, _login("")) == [Status.SKIP], check.id


def test_login_node_controller_down():
    found = findings(S.installation, _login(_read("slurm", "scontrol_ping_down.txt"), rc=1))
    assert [f.status for f in found] == [Status.OK, Status.FAIL, Status.OK]
    assert "vm (primary) DOWN" in found[1].summary and "slurmctld" in found[1].fix


def test_login_node_controller_unreachable():
    found = findings(S.installation, _login("", rc=1, partitions="debug*|up|2|(null)\n"))
    assert found[1].status is Status.FAIL and "exited with status 1" in found[1].summary
    assert found[2].summary == "no partition declares GPUs (partitions: debug)"


def test_installed_but_unconfigured_is_one_warning():
    # what Debian's slurm-client prints with no slurm.conf and no DNS SRV record (this machine)
    said = ("sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
            "sinfo: error: fetch_config: DNS SRV lookup failed\n"
            "sinfo: error: _establish_config_source: failed to fetch config\n"
            "sinfo: fatal: Could not establish a configuration source\n")
    h = FakeHost(env={}, commands={("sinfo", "--version"): CommandResult(("sinfo", "--version"), 1, "", said),
                                   "srun": "", "scontrol": ""})
    [f] = findings(S.installation, h)
    assert f.status is Status.WARN and f.summary == \
        "Slurm's tools are installed (sinfo, srun, scontrol) but find no configuration"
    assert "SLURM_CONF" in f.fix and "export SLURM_CONF=/etc" not in f.fix  # never a path that may not exist
    assert f.explanation.startswith("sinfo: fatal: Could not establish a configuration source.")
    assert h.calls == [("sinfo", "--version")]


def test_no_slurm_skips_with_reason():
    [f] = findings(S.installation, FakeHost(env={}))
    assert f.status is Status.SKIP and "not installed" in f.summary
    assert detect_context({}, slurm_installed=False).kind == "none"
