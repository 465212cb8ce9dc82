"""Pure parsers of Slurm notations and outputs, over every capture in tests/data."""

import json

import pytest

from distdoctor.parsers import ParseError
from distdoctor.parsers import slurm as parse
from tests.conftest import data_path

with open(data_path("hostlist", "hostlist_cases.json")) as fh:
    TASK_CASES = [c for c in json.load(fh)["cases"] if c["kind"] == "tasks_per_node"]


def _read(*parts):
    with open(data_path(*parts)) as fh:
        return fh.read()


@pytest.mark.parametrize("case", TASK_CASES, ids=[c["input"] for c in TASK_CASES])
def test_recorded_tasks_per_node(case):
    assert parse.parse_counts(case["input"]) == case["expected"]


@pytest.mark.parametrize("text, counts", [
    ("2(x3),1", [2, 2, 2, 1]),
    ("3,1(x3)", [3, 1, 1, 1]),
    ("32(x2)", [32, 32]),
    (" 4 ", [4]),
])
def test_counts(text, counts):
    assert parse.parse_counts(text) == counts


@pytest.mark.parametrize("text", ["2(x)", "(x3)", "abc", "", "2(x0)", "2,,1", "2(x3", "-1", "2(y3)"])
def test_malformed_counts_name_the_variable_and_value(text):
    with pytest.raises(ParseError) as exc:
        parse.parse_counts(text, "SLURM_TASKS_PER_NODE")
    assert str(exc.value).startswith("SLURM_TASKS_PER_NODE:")
    if text.strip():
        assert repr(text.strip()) in str(exc.value)


def test_id_list_rejects_gaps():
    assert parse.parse_id_list("0,1", "CUDA_VISIBLE_DEVICES") == ["0", "1"]
    assert parse.parse_id_list("GPU-ab,MIG-cd", "CUDA_VISIBLE_DEVICES") == ["GPU-ab", "MIG-cd"]
    assert parse.parse_id_list("", "CUDA_VISIBLE_DEVICES") == []
    with pytest.raises(ParseError):
        parse.parse_id_list("0,,1", "CUDA_VISIBLE_DEVICES")


def test_env_dump_keeps_program_output_aside_and_reports_conflicts():
    dump = parse.parse_env_dump("$ env | grep SLURM\nSLURM_NTASKS=4\nSLURM_NTASKS=4\nSLURM_PROCID=0\n"
                                "SLURM_PROCID=1\nrank 0 of 4\n")
    assert dump.values == {"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}
    assert dump.skipped == ("$ env | grep SLURM", "rank 0 of 4")
    assert dump.conflicts == {"SLURM_PROCID": ("0", "1")}


def test_hostnames():
    assert parse.parse_hostnames("node1\nnode2\n") == ["node1", "node2"]
    with pytest.raises(ParseError):
        parse.parse_hostnames("Invalid hostlist: n[1-2]]\n")
    with pytest.raises(ParseError):
        parse.parse_hostnames("scontrol: error: _parse_single_range: Invalid range: `5-3'\n")


def test_version_captures():
    assert parse.parse_version(_read("slurm", "sinfo_version.txt")) == "22.05.8"
    assert parse.parse_version("slurm 23.11.4\n") == "23.11.4"
    with pytest.raises(ParseError):
        parse.parse_version("sinfo: command not found\n")


def test_ping_captures():
    up = parse.parse_ping(_read("slurm", "scontrol_ping_up.txt"))
    assert [(c.name, c.role, c.up) for c in up] == [("vm", "primary", True)]
    down = parse.parse_ping(_read("slurm", "scontrol_ping_down.txt"))
    assert [(c.name, c.role, c.up) for c in down] == [("vm", "primary", False)]
    two = parse.parse_ping("Slurmctld(primary) at ctl1 is UP\nSlurmctld(backup1) at ctl2 is DOWN\n")
    assert [c.up for c in two] == [True, False]
    with pytest.raises(ParseError):
        parse.parse_ping("scontrol: error: Unable to contact slurm controller\n")


def test_partitions_capture_and_gres_shapes():
    [debug] = parse.parse_partitions(_read("slurm", "sinfo_partitions_gres.txt"))
    assert (debug.name, debug.default, debug.available, debug.nodes, debug.gres, debug.gpus_per_node) == \
        ("debug", True, "up", 2, ("gpu:2",), 2)
    rows = parse.parse_partitions("cpu*|up|10|(null)\ngpu|up|4|gpu:a100:4(S:0-1),nvme:1\ngpu|up|2|gpu:h100:8\n")
    assert [(r.name, r.gpus_per_node) for r in rows] == [("cpu", 0), ("gpu", 4), ("gpu", 8)]
    with pytest.raises(ParseError):
        parse.parse_partitions("PARTITION AVAIL TIMELIMIT\n")




@pytest.mark.parametrize("stdout, gpus, error", [
    ("GPU 0: NVIDIA H100 (UUID: GPU-aaa)\nGPU 1: NVIDIA H100 (UUID: GPU-bbb)\n", ("GPU-aaa", "GPU-bbb"), ""),
    ("GPU 0: A100 (UUID: GPU-ccc)\n  MIG 3g.20gb     Device  0: (UUID: MIG-ddd)\n", ("GPU-ccc",), ""),
    ("", (), ""),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", None, "NVIDIA-SMI has failed"),
])
def test_node_gpus_counts_whole_gpus_through_the_gpu_parser(stdout, gpus, error):
    from distdoctor.facts import Facts
    from distdoctor.testing import FakeHost

    node = Facts(FakeHost(commands={("nvidia-smi", "-L"): stdout})).node_gpus
    assert node.gpus == gpus
    assert error in (node.error or "")


def test_a_hung_nvidia_smi_is_asked_once_for_slurm_and_gpu_areas_together():
    from distdoctor.facts import Facts
    from distdoctor.host import CommandResult
    from distdoctor.testing import FakeHost

    hung = CommandResult(("nvidia-smi", "-L"), None, duration=8.0, timed_out=True)
    host = FakeHost(commands={"nvidia-smi": hung})
    facts = Facts(host)
    assert facts.node_gpus.gpus is None and "did not finish" in facts.node_gpus.error
    assert facts.gpu_driver.problem.state == "hung"
    assert [c for c in host.calls if c[0] == "nvidia-smi"] == [("nvidia-smi", "-L")]
