"""DCGM's verdicts: `dcgmi diag` (table, -j JSON) and `dcgmi health -c` over the real captures in
tests/data/dcgmi, the verdict each must get (its INDEX.md label), the gpu.dcgm-health check on a
FakeHost (no dcgmi, a hung one, no host engine, watches off), and the same findings from a paste."""

import pytest

from distdoctor import checks as builtin
from distdoctor.hardware.dcgm import judge_diag, judge_health
from distdoctor.host.results import CommandResult
from distdoctor.logs import pasted
from distdoctor.model import Status
from distdoctor.parsers import ParseError
from distdoctor.parsers.dcgmi import parse_diag, parse_diag_json, parse_health, status_word
from distdoctor.testing import FakeHost, fixture_text, run_check
from tests.conftest import data_path

CHECK = next(c for c in builtin.CHECKS if c.id == "gpu.dcgm-health")

# capture -> (worst status, the actions of its findings, the GPUs named in the subjects)
DIAG = {
    "diag_r3_338_8xH100_cuda_init_fail_no_fabricmanager_nccltests264.txt": (Status.FAIL, {"fix-config"}, "GPUs"),
    "diag_r4_persistence_mode_fail_memtest_pass_rtx2060.txt": (Status.FAIL, {"fix-config"}, "GPUs"),
    "diag_r2_gpu0_memory_fail_thermal_mlengineering_EXCERPT.txt": (Status.FAIL, {"replace-hardware"}, "GPU0"),
    "diag_row_remap_pending_gpu3_mlengineering_EXCERPT.txt": (Status.FAIL, {"reset-gpu"}, "GPU3"),
    "diag_r3_339_2xL40S_pass_and_skips_slurm_on_aws.txt": (Status.OK, {""}, ""),
    "diag_r3_400_4gpu_all_pass_dcgm_user_guide.txt": (Status.OK, {""}, ""),
    "diag_j_310_8gpu_all_pass_dcgm_jsonresult_test.json": (Status.OK, {""}, ""),
    "diag_r2_331_gpu0_memory_fail_cuda_busy_godcgm52_EXCERPT.txt": (Status.FAIL, {"reset-gpu"}, "GPU0"),
    "diag_r_423_dcgm4_4gpu_pod_preamble_dcgm253_EXCERPT.txt": (Status.OK, {""}, ""),
    # second first-sight round: DCGM 4.2/4.5 -j documents (a persistence-mode setting, never a drain)
    # and a PCIe test DCGM 2.4 failed only for NVLink links of GPUs that have none (relayed: a WARN)
    "diag_j_423_gb10_software_persistence_fail_glimmer.json": (Status.FAIL, {"fix-config"}, "GPU0"),
    "diag_j_452_gb10_persistence_fail_memory_pcie_pass_glimmer.json": (Status.FAIL, {"fix-config"}, "GPU0"),
    "diag_j_452_gb10_persistence_fail_plugins_skipped_glimmer.json": (Status.FAIL, {"fix-config"}, "GPU0"),
    "diag_r2_246_A100_pcie_fail_nvlink_down_no_nvlink_dcgm49_EXCERPT.txt": (Status.WARN, {"none"}, "GPUs"),
}
HEALTH = {
    "health_c_461_L4_power_violation_warning.txt": (Status.WARN, {"none"}, "GPU0"),
    "health_c_pcie_replay_inforom_warning_dcgm_user_guide.txt": (Status.WARN, {"none"}, "GPU0"),
    "health_c_A100PCIe_nvlink_down_no_bridge_nvsentinel1481_EXCERPT.txt": (Status.WARN, {"none"}, "GPU0"),
}


def text(name):
    return fixture_text(data_path("dcgmi", name))


@pytest.mark.parametrize("name", sorted(DIAG))
def test_diag_capture_verdict(name):
    status, actions, subject = DIAG[name]
    findings = judge_diag(parse_diag(text(name)))
    assert max(f.status.severity for f in findings) == status.severity
    assert {f.action for f in findings} == actions
    assert findings[0].subject == subject


@pytest.mark.parametrize("name", sorted(HEALTH))
def test_health_capture_verdict_through_the_check(name):
    status, actions, subject = HEALTH[name]
    host = FakeHost(commands={("dcgmi", "health", "-c"): text(name)})
    findings = run_check(CHECK, host)
    assert max(f.status.severity for f in findings) == status.severity
    assert {f.action for f in findings} == actions and findings[0].subject == subject
    assert findings == judge_health(parse_health(text(name)))


def test_diag_messages_joined_where_dcgm_cut_words():
    diag = parse_diag(text("diag_r4_persistence_mode_fail_memtest_pass_rtx2060.txt"))
    persistence = next(t for t in diag.tests if t.name == "Persistence Mode")
    assert persistence.messages[0].text.startswith("Persistence mode for GPU 0 is currently disabled. The DCGM")
    assert "by running \"nvidia-smi -i <gpuId> -pm 1 \" as root." in persistence.messages[0].text


def test_diag_dcgm4_per_gpu_lines_replace_the_overall_word():
    diag = parse_diag(text("diag_r3_400_4gpu_all_pass_dcgm_user_guide.txt"))
    memory = next(t for t in diag.tests if t.name == "memory")
    assert memory.results == ((0, "pass"), (1, "pass"), (2, "pass"), (3, "pass"))


def test_unknown_result_word_is_never_a_pass():
    assert status_word("Incomplete") == "unknown" and status_word("PASS") == "pass"
    table = ("| Diagnostic                | Result                                         |\n"
             "| GPU Memory                | Incomplete                                     |\n")
    (finding,) = judge_diag(parse_diag(table))
    assert finding.status is Status.WARN and finding.action == "none"


@pytest.mark.parametrize("bad", ["", "hello\nworld\n", "+-----+\n", "{\"DCGM GPU Diagnostic\": {}}", "{not json"])
def test_diag_garbage_is_a_parse_error(bad):
    with pytest.raises(ParseError):
        parse_diag(bad)


def test_diag_json_text_before_the_document_and_nulls():
    doc = "WARNING: something printed first\n" + text("diag_j_310_8gpu_all_pass_dcgm_jsonresult_test.json")
    diag = parse_diag_json(doc)
    assert diag.version == "3.1.0" and len(diag.tests) == 10
    assert next(t for t in diag.tests if t.name == "software").results[7] == (7, "pass")


def test_health_garbage_is_a_parse_error():
    with pytest.raises(ParseError):
        parse_health("Error: unable to establish a connection to the specified host: localhost\n")


def test_no_dcgmi_is_one_skip_and_nothing_run():
    host = FakeHost()
    (finding,) = run_check(CHECK, host)
    assert finding.status is Status.SKIP and not host.calls


def test_hung_dcgmi_is_a_finding():
    hung = CommandResult(("dcgmi", "health", "-c"), None, duration=10.0, timed_out=True)
    (finding,) = run_check(CHECK, FakeHost(commands={("dcgmi", "health", "-c"): hung}))
    assert finding.status is Status.WARN and "did not answer within 10 s" in finding.summary


def test_no_host_engine_and_watches_off_are_skips_with_a_fix():
    refused = CommandResult(("dcgmi", "health", "-c"), 255,
                            "Error: unable to establish a connection to the specified host: localhost\n")
    (finding,) = run_check(CHECK, FakeHost(commands={("dcgmi", "health", "-c"): refused}))
    assert finding.status is Status.SKIP and "nvidia-dcgm" in finding.fix
    off = CommandResult(("dcgmi", "health", "-c"), 0, "Health watches not enabled.\nPlease enable watches.\n")
    (finding,) = run_check(CHECK, FakeHost(commands={("dcgmi", "health", "-c"): off}))
    assert finding.status is Status.SKIP and finding.fix.startswith("dcgmi health -s a")


def test_paste_gets_the_live_checks_actions():
    paste = ("the node said:\n$ dcgmi diag -r 3\n" + text("diag_r3_338_8xH100_cuda_init_fail_no_fabricmanager_nccltests264.txt")
             + "\nand\n$ dcgmi health -c\n" + text("health_c_pcie_replay_inforom_warning_dcgm_user_guide.txt") + "\nthanks\n")
    runs = pasted.runs([("issue.txt", paste)])
    diag = next(r for r in runs if r.title.startswith("DCGM diagnostic"))
    assert diag.status is Status.FAIL and diag.findings[0].action == "fix-config"
    assert "nvidia-fabricmanager" in diag.findings[0].fix
    health = next(r for r in runs if r.id == "gpu.dcgm-health")
    live = judge_health(parse_health(text("health_c_pcie_replay_inforom_warning_dcgm_user_guide.txt")))
    assert [(f.summary, f.action) for f in health.findings] == [(f.summary, f.action) for f in live]


def test_paste_of_a_diag_excerpt_and_json():
    paste = ("x\n" + text("diag_r2_gpu0_memory_fail_thermal_mlengineering_EXCERPT.txt") + "\n\nthe json:\n"
             + text("diag_j_310_8gpu_all_pass_dcgm_jsonresult_test.json") + "done\n")
    runs = [r for r in pasted.runs([("issue.txt", paste)]) if r.title.startswith("DCGM diagnostic")]
    assert [r.status for r in runs] == [Status.FAIL, Status.OK]
    assert runs[0].findings[0].action == "replace-hardware" and "GPU0" in runs[0].findings[0].subject


def test_dcgm4_json_reads_entities_metadata_and_skips():
    """DCGM 4.x -j (real GB10 captures): root "DCGM Diagnostic", entity results, "metadata"."""
    d = parse_diag_json(text("diag_j_452_gb10_persistence_fail_plugins_skipped_glimmer.json"))
    assert (d.version, d.driver) == ("4.5.2", "580.82.09")
    assert [(t.category, t.name, t.status, t.results) for t in d.tests] == [
        ("Deployment", "software", "fail", ((0, "fail"),)), ("Hardware", "memory", "skip", ((0, "skip"),)),
        ("Integration", "pcie", "skip", ((0, "skip"),))]
    assert d.tests[0].messages[0].text.startswith("Persistence Mode: Persistence mode for GPU 0 is disabled")
    other = text("diag_j_423_gb10_software_persistence_fail_glimmer.json").replace('"entity_group": "GPU"',
                                                                                  '"entity_group": "CPU"')
    assert parse_diag_json(other).tests[0].results == ((None, "fail"),)  # a CPU's id is no GPU index


def test_relayed_nvlink_down_stays_a_failure_when_another_message_is_not_of_it():
    """Only a failure that consists of NVLink-down messages defers to gpu.nvlink; a PCIe test that also
    failed for something else keeps its drain."""
    name = "diag_r2_246_A100_pcie_fail_nvlink_down_no_nvlink_dcgm49_EXCERPT.txt"
    extra = text(name) + "| Error                     | PCIe bandwidth too low on GPU 0                |\n"
    (f,) = judge_diag(parse_diag(extra))
    assert (f.status, f.action) == (Status.FAIL, "replace-hardware")
    # another system's incident in the same report keeps its own verdict (constructed: the capture's
    # tree with a Memory incident added in DCGM 4's layout)
    health = text("health_c_A100PCIe_nvlink_down_no_bridge_nvsentinel1481_EXCERPT.txt") + (
        "|    -> Memory system       | Failure                                       |\n"
        "|                           | GPU 0 had uncorrectable memory errors         |\n")
    nvlink, memory = judge_health(parse_health(health))
    assert (nvlink.status, nvlink.action, nvlink.evidence["judged_by"]) == (Status.WARN, "none", "gpu.nvlink")
    assert nvlink.evidence["action_if_failure"] == "reset-gpu"  # "NVLINK system" found case-blind in dcgm.toml
    assert (memory.status, memory.action) == (Status.FAIL, "reset-gpu")


def test_health_paste_quoted_below_its_banner_and_dcgm4_json_paste():
    """NVSentinel PR #1481 quotes `dcgmi health -c` from its "Overall Health" row; a DCGM 4 -j paste
    starts with "DCGM Diagnostic". Both are read in a paste, with the live judge's verdicts."""
    nvs = "health_c_A100PCIe_nvlink_down_no_bridge_nvsentinel1481_EXCERPT.txt"
    runs = pasted.runs([("pr.md", "on the node:\n" + text(nvs) + "\nwhich is wrong\n")])
    (f,) = next(r for r in runs if r.id == "gpu.dcgm-health").findings
    assert (f.status, f.action, f.evidence["judged_by"]) == (Status.WARN, "none", "gpu.nvlink")
    glimmer = "diag_j_452_gb10_persistence_fail_memory_pcie_pass_glimmer.json"
    runs = pasted.runs([("burnin.log", "level 2:\n" + text(glimmer) + "\ndone\n")])
    diag = next(r for r in runs if r.title.startswith("DCGM diagnostic"))
    assert [(g.status, g.action) for g in diag.findings] == [(Status.FAIL, "fix-config")]


@pytest.mark.parametrize("system", ["NVLINK system", "IMEX system"])
def test_imex_not_ready_is_gpu_fabrics_to_judge(system):
    """DCGM's "IMEX daemon status is -3 (not READY)" (its message as NVIDIA/NVSentinel#1471 quotes it from a
    p5.48xlarge, where no IMEX is meant to run) in DCGM 4's health tree, under the NVLink watch of older
    servers or the IMEX watch of DCGM 4.7 (constructed: the layout of the NVSentinel PR #1481 capture)."""
    report = ("| Overall Health            | Failure                                       |\n"
              "| -> 0                      | Failure                                       |\n"
              f"|    -> {system:<19} | Failure                                       |\n"
              "|                           | IMEX daemon status is -3 (not READY)          |\n")
    (f,) = judge_health(parse_health(report))
    assert (f.status, f.action, f.evidence["judged_by"]) == (Status.WARN, "none", "gpu.fabric")
    other = report.replace("IMEX daemon status is -3 (not READY)  ", "IMEX domain state is DEGRADED        ")
    (g,) = judge_health(parse_health(other))
    assert (g.status, g.action) == (Status.FAIL, "fix-config")  # a service, never a GPU reset
