"""The cluster view's logic over synthetic node reports: which node is odd, in what, and the fix."""

import json

import pytest

from distdoctor.crosscheck import nodes as cluster
from distdoctor.model import Status
from distdoctor.render import json as json_render
from tests.harness.reports import fleet, node_report
from tests.conftest import load_report


def _runs(view):
    return {r.id: r for r in view.report.runs}


def _json(view):
    return load_report(json_render.render(view.report, view.to_dict()))


def test_healthy_fleet_has_no_outlier():
    view = cluster.build(fleet(16))
    assert view.outliers == [] and view.differences == []
    assert view.summary == "16 nodes, 0 outliers"
    assert all(r.status in (Status.OK, Status.SKIP) for r in view.report.runs)
    doc = _json(view)
    assert doc["cluster"]["outlier_count"] == 0 and len(doc["nodes"]) == 16


def test_gpu_count_outliers_named_folded_with_majority_and_fix():
    view = cluster.build(fleet(16, gpu007={"gpu.count": 7}, gpu012={"gpu.count": 7}))
    assert view.outliers == ["gpu007", "gpu012"]
    assert view.summary == "16 nodes, 2 outliers (gpu[007,012])"
    run = _runs(view)["cluster.facts-agree"]
    assert run.status is Status.FAIL
    (finding,) = run.findings
    assert finding.summary == "GPU count differs: 7 on gpu[007,012] (the other 14 nodes have 8)"
    assert finding.fix.startswith("clush -w 'gpu[007,012]' -- nvidia-smi -L\n# then drain gpu[007,012]")
    doc = _json(view)
    (diff,) = doc["cluster"]["differences"]
    assert diff["fact"] == "gpu.count" and diff["outliers"] == "gpu[007,012]" and diff["reference"] == 8
    assert doc["nodes"]["gpu007"]["outlier_in"] == ["gpu.count"] and doc["nodes"]["gpu001"]["outlier_in"] == []


def test_mtu_difference_fix_sets_the_interface_mtu_on_the_odd_node():
    view = cluster.build(fleet(4, gpu003={"net.if.eth0.mtu": 1500}))
    (finding,) = _runs(view)["cluster.facts-agree"].findings
    assert finding.summary.startswith("MTU of eth0 differs: 1500 on gpu003")
    assert finding.fix.splitlines()[0] == "ssh gpu003 ip link set dev eth0 mtu 9000"
    assert finding.fix.splitlines()[1].startswith("# lasts until a reboot")


@pytest.mark.parametrize("odd", [1500, 9216])
def test_two_nodes_with_different_mtus_lower_the_larger_the_change_that_cannot_make_it_worse(odd):
    """No majority: the fix is a command, not 'make it the same', and never raises an MTU (a
    path that carries less than the larger end sends is the black hole)."""
    view = cluster.build(fleet(2, gpu002={"net.if.eth0.mtu": odd}))
    reports = fleet(2)
    base = reports["gpu001"]["inventory"]["net.if.eth0.mtu"]
    (finding,) = _runs(view)["cluster.facts-agree"].findings
    low, high = sorted((base, odd))
    big, small = ("gpu002", "gpu001") if odd == high else ("gpu001", "gpu002")
    lines = finding.fix.splitlines()
    assert lines[0] == f"ssh {big} ip link set dev eth0 mtu {low}", finding.fix
    assert lines[1].startswith("# lasts until a reboot")
    assert lines[2].startswith(f"# or raise {small} to {high} instead, if every hop"), finding.fix


def test_an_interface_only_some_nodes_have_is_not_a_difference():
    view = cluster.build(fleet(4, gpu003={"net.if.docker0.mtu": 1500}))
    assert view.differences == []


def test_nodes_sharing_hostname_and_boot_id_are_one_host_to_nccl():
    reports = fleet(4)
    reports["gpu004"]["inventory"].update({"host.name": "gpu003", "host.boot_id": "boot-gpu003",
                                           "nccl.host_hash": "hash-gpu003"})
    view = cluster.build(reports)
    run = _runs(view)["cluster.host-identity"]
    assert run.status is Status.FAIL
    # One cause, one finding: the boot id and host hash the two share are said in the hostname's.
    [named] = run.findings
    assert named.summary == "gpu[003-004] share hostname gpu003 and one kernel (boot id boot-gpu003)"
    assert "NCCL takes them for one host" in named.explanation and "cannot be changed" in named.explanation
    assert named.evidence["folded"] == ["host.boot_id", "nccl.host_hash"]
    assert "# a boot id cannot be changed: the kernel draws it at each boot" in named.fix
    assert view.outliers == ["gpu003", "gpu004"]
    # The clone is the node whose job name is not the hostname it reports: only it is renamed.
    assert named.fix.splitlines()[0] == "ssh gpu004 hostnamectl set-hostname gpu004", named.fix
    assert "gpu003 hostnamectl" not in named.fix


def test_check_failing_on_a_minority_names_those_nodes_with_the_check_to_rerun():
    view = cluster.build(fleet(8, gpu005={"checks": {"net.link-speed-mtu": "fail"}}))
    (finding,) = _runs(view)["cluster.check-results"].findings
    assert finding.status is Status.FAIL
    assert finding.summary == "result of check net.link-speed-mtu: fail on gpu005 (ok on gpu[001-004,006-008])"
    assert finding.fix == "ssh gpu005 python3 -m distdoctor check --only net.link-speed-mtu -v"


def test_check_failing_on_most_nodes_still_names_the_failing_ones():
    odd = {f"gpu{i:03d}": {"checks": {"gpu.inventory": "warn"}} for i in range(1, 7)}
    view = cluster.build(fleet(8, **odd))
    (finding,) = _runs(view)["cluster.check-results"].findings
    assert finding.status is Status.WARN
    assert finding.evidence["outliers"] == "gpu[001-006]"


def test_skip_is_not_a_result_to_compare():
    view = cluster.build(fleet(4, gpu002={"checks": {"gpu.inventory": "skip"}}))
    assert view.differences == []


def test_expectation_wins_over_the_majority():
    view = cluster.build(fleet(6, gpu001={"gpu.driver": "535.54.03"}), expect={"gpu.driver": "535.54.03"})
    run = _runs(view)["cluster.expectations"]
    assert run.status is Status.FAIL
    assert view.outliers == [f"gpu{i:03d}" for i in range(2, 7)]
    assert "not the expected 535.54.03" in run.findings[0].summary


def test_expectation_with_operator_and_unlimited():
    view = cluster.build(fleet(3, gpu002={"limits.memlock": 65536}),
                         expect={"limits.memlock": "unlimited", "nccl.version": ">= 2.18"})
    assert view.outliers == ["gpu002"]
    assert [d.key for d in view.differences] == ["limits.memlock"]


def test_env_setting_on_some_nodes_only():
    view = cluster.build(fleet(4, gpu002={"env.NCCL_SOCKET_IFNAME": "eth1"}))
    (finding,) = _runs(view)["cluster.facts-agree"].findings
    assert finding.summary == "NCCL_SOCKET_IFNAME differs: eth1 on gpu002 (the other 3 nodes have (absent))"


def test_missing_and_garbage_nodes_are_named_and_the_rest_compared():
    reports = fleet(4, gpu002={"gpu.count": 4})
    reports["gpu004"] = {"hello": "world"}
    view = cluster.build(reports, missing=[cluster.Missing("gpu005", "gpu005: no answer within 30 s")])
    run = _runs(view)["cluster.reports"]
    assert run.status is Status.FAIL
    assert [f.summary for f in run.findings] == ["gpu005: no answer within 30 s",
                                                 "gpu004: output is not a distdoctor report"]
    assert view.summary == "5 nodes, 2 without a report (gpu[004-005]), 1 outlier (gpu002)"
    doc = _json(view)
    assert doc["nodes"]["gpu005"]["status"] == "missing" and doc["cluster"]["answered"] == 3


@pytest.mark.parametrize("doc, reason", [
    ([1, 2], "not a JSON object"),
    ({"tool": {"name": "other"}, "checks": []}, "output is not a distdoctor report"),
    (dict(node_report("a"), schema_version="2.0"), "report schema 2.0 is not one this distdoctor reads"),
    (dict(node_report("a"), command="fleet"), "a 'fleet' report, not a node's 'check' report"),
])
def test_not_a_node_report(doc, reason):
    with pytest.raises(cluster.NotAReport, match=reason.replace("(", r"\(").replace(".", r"\.")):
        cluster.node_facts(doc)


def test_parse_report_reports_broken_json():
    with pytest.raises(cluster.NotAReport, match="not JSON"):
        cluster.parse_report('{"schema_version": "1.0", ')
    with pytest.raises(cluster.NotAReport, match="empty"):
        cluster.parse_report("  \n")
    assert cluster.parse_report(json.dumps(node_report("a")))["host"] == "a"


def test_report_without_inventory_is_compared_on_check_results_only():
    reports = fleet(3, gpu003={"checks": {"gpu.inventory": "fail"}})
    del reports["gpu001"]["inventory"]
    view = cluster.build(reports)
    runs = _runs(view)
    assert runs["cluster.reports"].status is Status.WARN
    assert "gpu001: report has no inventory" in runs["cluster.reports"].findings[0].summary
    assert view.outliers == ["gpu003"]


def test_prometheus_has_one_series_per_odd_fact_with_a_node_label():
    from distdoctor.render import prometheus

    view = cluster.build(fleet(3, gpu002={"shm.size": 67108864}),
                         missing=[cluster.Missing("gpu004", "gpu004: no answer within 30 s")])
    text = prometheus.render_cluster(view)
    assert 'distdoctor_node_outlier{node="gpu002",fact="shm.size"} 1' in text
    assert 'distdoctor_node_up{node="gpu004"} 0' in text and 'distdoctor_node_up{node="gpu001"} 1' in text


def test_console_names_odd_nodes_once(tmp_path):
    from distdoctor.render import console

    view = cluster.build(fleet(12, gpu007={"net.if.eth0.mtu": 1500}))
    path = tmp_path / "out.txt"
    with open(path, "w") as fh:
        console.render_cluster(view, console.make_console(fh, width=100, color=False))
    text = path.read_text()
    assert text.startswith("12 nodes, 1 outlier (gpu007)")
    assert "  gpu007: net.if.eth0.mtu" in text and "gpu001:" not in text
    assert "$ ssh gpu007 ip link set dev eth0 mtu 9000" in text


def test_nodes_on_one_machine_share_boot_and_machine_id_harmlessly_while_nccl_tells_them_apart():
    reports = fleet(3)
    for doc in reports.values():
        doc["inventory"].update({"host.boot_id": "one-kernel", "host.machine_id": "one-image"})
    assert cluster.build(reports).differences == []
    reports["gpu003"]["inventory"].update({"host.name": "gpu002", "nccl.host_hash": "hash-gpu002"})
    view = cluster.build(reports)
    # the host hash gpu[002-003] share is the hostname's doing: said in its finding; the boot id
    # all three share is not theirs alone, so it stays a finding of its own
    assert {d.key for d in view.differences} == {"host.name", "host.boot_id", "host.machine_id"}
    findings = {f.subject: f for f in _runs(view)["cluster.host-identity"].findings}
    assert findings["host.name"].evidence["folded"] == ["nccl.host_hash"]
    assert "cannot be changed" in findings["host.boot_id"].fix and "gpu[001-003]" in findings["host.boot_id"].fix
    # a cloned machine id: a new one on all but the first, which keeps its own
    assert findings["host.machine_id"].fix.splitlines()[0] == \
        "clush -w 'gpu[002-003]' -- 'rm -f /etc/machine-id && systemd-machine-id-setup'", findings["host.machine_id"].fix
    assert "gpu001 keeps its own" in findings["host.machine_id"].fix


def test_nodes_that_share_a_kernel_are_named_in_the_ok_line():
    """Namespaces or containers on one machine (the test Slurm cluster's nodes): one boot id,
    distinct hostnames. Harmless to NCCL, so OK, but said, with the nodes named."""
    reports = fleet(3)
    for name in ("gpu001", "gpu002"):
        reports[name]["inventory"]["host.boot_id"] = "5c1f0a2e-77aa-4a43-9d7b-0123456789ab"
    view = cluster.build(reports)
    run = _runs(view)["cluster.host-identity"]
    assert run.status is Status.OK
    assert run.findings[0].summary.startswith("gpu[001-002] share one kernel (boot id 5c1f0a2e…): containers or "
                                              "namespaces on one machine"), run.findings[0].summary


def test_a_tie_has_no_reference_and_no_command_is_built_from_one():
    """Two nodes, two /dev/shm sizes: there is no majority to set, and `mount -o
    remount,size=(unset)` was once printed. The fix says what to make the same instead."""
    view = cluster.build({"gpu001": node_report("gpu001"),
                          "gpu002": node_report("gpu002", inventory={"shm.size": 1 << 30})})
    (finding,) = [f for f in view.findings if f.subject == "shm.size"]
    commands = [line for line in finding.fix.splitlines() if not line.startswith("#")]
    assert commands == [] and "(unset)" not in finding.fix, finding.fix
    assert finding.fix.startswith("# make /dev/shm size the same on gpu[001-002]")


def test_every_node_rule_command_runs_as_printed_on_its_node():
    """What ssh or clush hands a node's shell (each rule's `run=` command and the records its fix
    builds) lints clean there."""
    from distdoctor import fixlint
    from distdoctor.crosscheck import engine

    scripts = []
    for rule in cluster.NODE_RULES:
        key = rule.key.replace("*", "eth0")
        diff = engine.Difference(rule.for_key(key), (engine.Group(68719476736, ("gpu001", "gpu002")),
                                                     engine.Group(1024, ("gpu003",))),
                                 reference=68719476736, outliers=("gpu003",), total=3)
        scripts += [" && ".join(r.commands) for r in engine.fix_for(diff) if r.nodes and r.commands]
    assert len(scripts) >= 8
    for script in scripts:
        assert fixlint.lint(script, on_node=True) == [], script


def test_a_thousand_nodes_sharing_one_difference_are_one_host_list(tmp_path):
    from distdoctor.render import console

    odd = {f"gpu{i:03d}": {"net.if.eth0.mtu": 1500} for i in range(1001, 2001)}
    view = cluster.build(fleet(2500, **odd))
    assert len(view.outliers) == 1000
    path = tmp_path / "out.txt"
    with open(path, "w") as fh:
        console.render_cluster(view, console.make_console(fh, width=100, color=False))
    section = path.read_text().split("Odd nodes", 1)[1]
    lines = [line.strip() for line in section.strip().splitlines()]
    assert lines == ["gpu[1001-2000]: net.if.eth0.mtu"]


def test_no_majority_is_said_not_counted_as_outliers():
    view = cluster.build(fleet(2, gpu002={"gpu.count": 7}))
    assert view.summary == "2 nodes, no majority for GPU count"
    view = cluster.build(fleet(5, gpu002={"gpu.count": 7}, gpu004={"net.if.eth0.mtu": 1500},
                               gpu005={"net.if.eth0.mtu": 1500}))
    assert view.summary == "5 nodes, 3 outliers (gpu[002,004-005])", view.summary


@pytest.mark.parametrize("answered", [0, 1])
def test_fewer_than_two_reports_compare_nothing(answered):
    reports = fleet(answered) if answered else {}
    missing = [cluster.Missing(f"gpu{i:03d}", f"gpu{i:03d}: ssh: connect to host gpu{i:03d} port 22: Connection refused",
                               "# on gpu%03d: start sshd" % i) for i in range(2, 4)]
    view = cluster.build(reports, missing=missing)
    runs = _runs(view)
    for run_id in ("cluster.facts-agree", "cluster.host-identity", "cluster.check-results"):
        assert runs[run_id].status is Status.SKIP, runs[run_id]
    said = " ".join(f.summary for r in view.report.runs for f in r.findings)
    assert "agree" not in said and "0 nodes" not in said


def test_a_torch_local_build_is_installed_from_its_index_not_from_pypi():
    """2.13.0+cpu is not on PyPI: the command asks PyTorch's CPU index for 2.13.0."""
    view = cluster.build(fleet(3, gpu003={"torch.version": "2.12.1"}, gpu001={"torch.version": "2.13.0+cpu"},
                               gpu002={"torch.version": "2.13.0+cpu"}))
    [finding] = [f for r in view.report.runs for f in r.findings if f.subject == "torch.version"]
    lines = finding.fix.splitlines()
    assert lines[0] == "ssh gpu003 python3 -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert "PEP 668" in finding.fix and "+cpu" not in lines[0]


def test_a_pinned_package_is_installed_not_described():
    """[expect] pip.mypy = "2.4.1" and a node with another version: the fix installs it (no
    `# on vm: make pip.mypy 2.4.1`)."""
    view = cluster.build(fleet(2, gpu002={"pip.mypy": "2.3.0"}, gpu001={"pip.mypy": "2.3.0"}),
                         expect={"pip.mypy": "2.4.1"})
    [finding] = [f for r in view.report.runs for f in r.findings if f.subject == "pip.mypy"]
    assert finding.fix.splitlines()[0] == "clush -w 'gpu[001-002]' -- python3 -m pip install mypy==2.4.1", finding.fix
    assert "make pip.mypy" not in finding.fix


def test_a_slurm_jobs_memlock_fix_is_slurmds_unit_and_elsewhere_limits_conf():
    """One rule (crosscheck/rules.py) and two remedies: a Slurm job's tasks inherit slurmd's limit."""
    from distdoctor.model import RunContext

    reports = fleet(3, gpu002={"limits.memlock": 8388608})
    step = RunContext("slurm-step", "srun step 7.0", "srun", job_id="7", step_id="0")
    (in_job,) = [f for r in cluster.job_view(reports, "gpu001", context=step).report.runs
                 for f in r.findings if f.subject == "limits.memlock"]
    assert in_job.fix.startswith("ssh gpu002 'mkdir -p /etc/systemd/system/slurmd.service.d")
    assert "LimitMEMLOCK=infinity" in in_job.fix
    (plain,) = [f for r in cluster.build(reports).report.runs for f in r.findings if f.subject == "limits.memlock"]
    assert "memlock unlimited" in plain.fix and "LimitMEMLOCK=infinity" in plain.fix  # the note names slurmd
