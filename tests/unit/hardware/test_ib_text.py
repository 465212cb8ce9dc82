"""InfiniBand counters pasted as `perfquery` / `ibqueryerrors` text (tests/data/perfquery), judged by
the same thresholds and the same function as the sysfs counters of ib.port-counters."""

import pytest

from distdoctor.hardware.ibcounters import judge_counters, sysfs_name
from distdoctor.hardware.thresholds import load as thresholds
from distdoctor.logs import pasted
from distdoctor.model import Status
from distdoctor.parsers import ParseError
from distdoctor.parsers.perfquery import parse_ibqueryerrors, parse_perfquery
from distdoctor.testing import fixture_text
from tests.conftest import data_path

LIMITS = thresholds()["ib"]["counters"]
# capture -> (status of the paste, subjects judged past a threshold)
LABELS = {
    "perfquery_x_rhel75_lid10_all_zero_ibdiags16.txt": (Status.OK, []),
    "perfquery_cx4_lid1_after_bandwidth_test_clean.txt": (Status.OK, []),
    "perfquery_old_names_lid936_tacc_stats.txt": (Status.OK, []),
    "perfquery_x_switch_lid2052_one_link_down_discards_infiniband_exporter.txt": (Status.OK, []),
    "ibqueryerrors_sx6036_symbol_saturated_link_downed_linux_rdma_2021.txt": (
        Status.WARN, [f"MF0;ys23ib4:SX6036/U1 port {n}" for n in (1, 2, 3, 4, 5, 6, 7, 8)]),
}


def text(name):
    return fixture_text(data_path("perfquery", name))


def pasted_run(body):
    runs = pasted.runs([("issue.txt", "the fabric:\n" + body + "\nthat is all\n")])
    (run,) = [r for r in runs if r.title.startswith("InfiniBand port counters")]
    return run


@pytest.mark.parametrize("name", sorted(LABELS))
def test_capture_verdict(name):
    status, subjects = LABELS[name]
    run = pasted_run(text(name))
    assert run.status is status
    if subjects:
        assert [f.subject for f in run.findings] == subjects
        assert {f.action for f in run.findings} == {"replace-hardware"}


def test_saturated_symbol_errors_named():
    run = pasted_run(text("ibqueryerrors_sx6036_symbol_saturated_link_downed_linux_rdma_2021.txt"))
    port5 = next(f for f in run.findings if f.subject.endswith("port 5"))
    assert "symbol_error 65535: the counter is saturated" in port5.summary
    assert "link_error_recovery 8 since boot" in port5.summary
    assert port5.fix.startswith("perfquery -x -G 0x2c903006e29b0 5")


def test_the_paste_and_sysfs_judge_alike():
    # the same numbers through the function ib.port-counters calls on sysfs counters
    errors = parse_ibqueryerrors(text("ibqueryerrors_sx6036_symbol_saturated_link_downed_linux_rdma_2021.txt"))
    port7 = next(p for p in errors.ports if p.port == 7)
    verdicts = judge_counters(port7.counters, None, 0, None, LIMITS)
    run = pasted_run(text("ibqueryerrors_sx6036_symbol_saturated_link_downed_linux_rdma_2021.txt"))
    finding = next(f for f in run.findings if f.subject.endswith("port 7"))
    assert finding.summary.endswith("; ".join(f"{n} {why}" for n, _s, _a, why in verdicts))
    # with an uptime, as on a node, the saturated count becomes a rate past NVSentinel's 120/h
    assert judge_counters(port7.counters, None, 0, 3600.0, LIMITS)[0][1] == "fail"


def test_two_readings_of_one_port_are_a_rise():
    first = text("perfquery_cx4_lid1_after_bandwidth_test_clean.txt")
    second = first.replace("LinkDownedCounter:...............0", "LinkDownedCounter:...............1")
    run = pasted_run(first + "\n" + second)
    (finding,) = run.findings
    assert run.status is Status.FAIL and "link_downed rose by 1 between the two readings" in finding.summary


def test_names_map_to_sysfs():
    assert sysfs_name("SymbolErrorCounter") == sysfs_name("SymbolErrors") == "symbol_error"
    assert sysfs_name("symbol_error_counter_extended") == "symbol_error"
    assert sysfs_name("link_downed_counter_extended") == "link_downed"
    assert sysfs_name("ExcBufOverrunErrors") == "excessive_buffer_overrun_errors"
    assert sysfs_name("SomethingNew") == "SomethingNew"


@pytest.mark.parametrize("bad", ["", "PortSelect:......1\n", "hello"])
def test_garbage_is_a_parse_error(bad):
    with pytest.raises(ParseError):
        parse_perfquery(bad)
    with pytest.raises(ParseError):
        parse_ibqueryerrors(bad)
