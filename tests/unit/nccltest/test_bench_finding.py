"""The bench summary (nccltest/results.bench_finding). One rank's all_reduce moves nothing between
ranks, so its bus bandwidth is 0 by definition: an H100 run printed "peak busbw 0.000 GB/s at 1K"."""

from distdoctor.model import Status
from distdoctor.nccltest.bench import bus_bandwidth
from distdoctor.nccltest.results import bench_finding


def _rows(world):
    rows = []
    for count, seconds in ((256, 23.1e-6), (1 << 20, 21.5e-6), (1 << 24, 18.9e-6)):
        algbw = count * 4 / seconds / 1e9
        rows.append({"bytes": count * 4, "count": count, "time_us": round(seconds * 1e6, 2), "algbw_gbs": algbw,
                     "busbw_gbs": bus_bandwidth(algbw, world), "ok": True})
    return rows


def test_one_rank_says_there_is_no_bandwidth_between_ranks():
    finding, _ = bench_finding(_rows(1), {0: {"bench": []}})
    assert finding.status is Status.OK
    assert "one rank, so no bandwidth between ranks to measure" in finding.summary and "busbw 0.000" not in finding.summary


def test_several_ranks_report_the_peak():
    finding, _ = bench_finding(_rows(2), {0: {"bench": []}, 1: {"bench": []}})
    assert finding.summary.startswith("3 sizes, all correct; peak busbw") and "at 64M" in finding.summary
