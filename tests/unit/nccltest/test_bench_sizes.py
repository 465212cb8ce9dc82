import pytest

from distdoctor.nccltest.bench import bench_table, bus_bandwidth, human_size, parse_size, sizes


def test_parse_size_like_nccl_tests():
    assert [parse_size(s) for s in ("8", "1K", "64M", "1G", "2kb")] == [8, 1024, 64 << 20, 1 << 30, 2048]
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_sweep_sizes_and_bus_bandwidth():
    assert sizes(1024, 16 << 20, 4) == [1024 * 4 ** i for i in range(8)]
    with pytest.raises(ValueError):
        sizes(1024, 8, 2)
    assert bus_bandwidth(10.0, 8) == pytest.approx(17.5)
    assert bus_bandwidth(10.0, 1) == 0.0
    assert human_size(4 << 20) == "4M" and human_size(1000) == "1000"


def test_bench_table_marks_wrong_and_skipped_rows():
    rows = [{"bytes": 1024, "count": 256, "time_us": 10.0, "algbw_gbs": 0.1, "busbw_gbs": 0.1, "wrong": 0, "ok": True},
            {"bytes": 4096, "count": 1024, "time_us": 20.0, "algbw_gbs": 0.2, "busbw_gbs": 0.2, "wrong": 3, "ok": False},
            {"bytes": 16384, "skipped": "not run"}]
    table = bench_table(rows)
    assert [r[-1] for r in table["rows"]] == ["ok", "WRONG (3 elements)", "not run"]
