"""Multi-node NVLink (GB200 NVL72): the Fabric sections real nodes printed (tests/data/
nvidia_smi_fabric) judged by gpu.fabric, the cross-node agreement of ClusterUUID/CliqueId
(crosscheck/rules.py) over the same captures, and `nvidia-imex-ctl -N` (tests/data/imex)."""

import pytest

from distdoctor.crosscheck.engine import compare
from distdoctor.crosscheck.rules import NODE_RULES
from distdoctor.hardware.imex import judge_imex
from distdoctor.logs import pasted
from distdoctor.model import Status
from distdoctor.parsers import ParseError
from distdoctor.parsers.nvidia_imex import parse_imex_nodes
from distdoctor.parsers.nvidia_smi_query import parse_fabric_excerpt
from distdoctor.testing import fixture_text
from tests.conftest import data_path

ZERO_CLIQUE = "fabric_gb200_insufficient_resources_clique0_azhpc_images506.txt"
UNHEALTHY = "fabric_gb200_clique2_health_unhealthy_dra_driver626.txt"
IMEX18 = "imex_ctl_N_18x_gb200_all_ready_up_aws_parallelcluster.txt"


def fabric(name):
    return fixture_text(data_path("nvidia_smi_fabric", name))


def imex(name):
    return fixture_text(data_path("imex", name))


def runs_of(text):
    return pasted.runs([("issue.txt", "what the node printed:\n" + text + "\nthanks\n")])


@pytest.mark.parametrize("name,summary", [(ZERO_CLIQUE, "fabric state Completed, status Insufficient Resources"),
                                          (UNHEALTHY, "fabric health is Unhealthy")])
def test_pasted_fabric_judged_by_gpu_fabric(name, summary):
    (run,) = [r for r in runs_of(fabric(name)) if r.id == "gpu.fabric"]
    (finding,) = run.findings
    assert run.status is Status.FAIL and finding.action == "reset-gpu" and summary in finding.summary


def node(name):
    (gpu,) = parse_fabric_excerpt(fabric(name))
    return {"gpu.fabric.cluster_uuid": gpu.fabric_cluster_uuid, "gpu.fabric.clique": gpu.fabric_clique}


def test_a_node_outside_the_jobs_nvlink_domain_is_named():
    # two nodes of the rack whose GPUs joined domain dc6e40c4 (clique 2), one that did not join
    members = {"gb-01": node(UNHEALTHY), "gb-02": node(UNHEALTHY), "gb-03": node(ZERO_CLIQUE)}
    diffs = {d.key: d for d in compare(members, NODE_RULES)}
    uuid, clique = diffs["gpu.fabric.cluster_uuid"], diffs["gpu.fabric.clique"]
    assert uuid.reference == "dc6e40c4-d722-4357-9ba6-5291dd461278" and uuid.outliers == ("gb-03",)
    assert clique.reference == "2" and clique.outliers == ("gb-03",) and uuid.status is Status.WARN
    assert not [d for d in compare({"gb-01": node(UNHEALTHY), "gb-02": node(UNHEALTHY)}, NODE_RULES)
                if d.key.startswith("gpu.fabric")]


@pytest.mark.parametrize("name,nodes", [(IMEX18, 18), ("imex_ctl_N_1node_ready_up_dra_driver_repro.txt", 1)])
def test_imex_captures_up(name, nodes):
    domain = parse_imex_nodes(imex(name))
    assert domain.state == "UP" and len(domain.nodes) == nodes and len(domain.links) == nodes * nodes
    (finding,) = judge_imex(domain)
    assert finding.status is Status.OK
    (run,) = [r for r in runs_of(imex(name)) if r.title.startswith("IMEX domain")]
    assert run.status is Status.OK


def test_imex_degraded_names_nodes_and_pairs():
    # constructed from the 18-node capture: node #5 unavailable, its row and column never connected
    text = imex(IMEX18).replace("172.31.50.44    - READY     ", "172.31.50.44    - UNAVAILABLE")
    lines = text.splitlines()
    out = []
    for line in lines:
        cells = line.split()
        if cells and cells[0].isdigit() and len(cells) == 19:
            cells = [cells[0]] + ["N" if (int(cells[0]) == 5 or i == 5) else c for i, c in enumerate(cells[1:])]
            line = f"{cells[0]:>8}        " + "   ".join(cells[1:])
        out.append(line)
    domain = parse_imex_nodes("\n".join(out).replace("Domain State: UP", "Domain State: DEGRADED"))
    findings = judge_imex(domain)
    assert [f.status for f in findings] == [Status.FAIL, Status.FAIL]
    assert "#5 172.31.50.44 UNAVAILABLE" in findings[0].summary
    assert "35 node pairs not connected (never connected)" in findings[1].summary


@pytest.mark.parametrize("parse", [parse_imex_nodes, parse_fabric_excerpt])
@pytest.mark.parametrize("bad", ["", "Nodes:\n", "hello\n", "Fabric\n    Bandwidth : Full\n"])
def test_garbage_is_a_parse_error(parse, bad):
    with pytest.raises(ParseError):
        parse(bad)


def gb200_node(imex_answer):
    """A node whose GPU reports the real Fabric section of dra-driver#626 (through NVML, as the
    live check reads it), with nvidia-fabricmanager and nvidia-imex active."""
    from distdoctor.host import CommandResult
    from distdoctor.logs.pasted_tools import nvml_from_gpus
    from distdoctor.testing import FakeHost

    # no nvidia-fabricmanager on a rack's compute node: it runs in the switch trays
    commands = {("systemctl", "is-active", "nvidia-fabricmanager"): CommandResult(("systemctl",), 3, "inactive\n"),
                ("systemctl", "is-active", "nvidia-imex"): "active\n"}
    if imex_answer is not None:
        commands[("nvidia-imex-ctl", "-N")] = imex_answer
    return FakeHost(nvml=nvml_from_gpus(parse_fabric_excerpt(fabric(UNHEALTHY)), "570.172"), commands=commands)


def fabric_findings(host):
    from distdoctor.checks import gpufabric
    from distdoctor.testing import run_check

    return [(f.status, f.subject, f.action) for f in run_check(gpufabric.fabric, host)]


def test_live_imex_domain_read_where_the_daemon_runs():
    from distdoctor.host import CommandResult

    unhealthy = (Status.FAIL, "GPU0", "reset-gpu")
    assert fabric_findings(gb200_node(imex(IMEX18))) == [unhealthy]  # all READY and connected: nothing more
    assert fabric_findings(gb200_node(None)) == [unhealthy]  # no nvidia-imex-ctl: nothing asked
    degraded = imex(IMEX18).replace("172.31.50.44    - READY     ", "172.31.50.44    - UNAVAILABLE")
    assert fabric_findings(gb200_node(degraded)) == [unhealthy, (Status.FAIL, "172.31.50.44", "fix-config")]
    hung = CommandResult(("nvidia-imex-ctl", "-N"), None, duration=6.0, timed_out=True)
    assert fabric_findings(gb200_node(hung)) == [unhealthy, (Status.WARN, "nvidia-imex", "none")]
