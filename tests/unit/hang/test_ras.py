"""NCCL RAS over captured reports (NCCL's own issues, ray-project/ray#64928): parsed, version
gated, queried twice through the host, the lagging group named (not the smallest one)."""

import pytest

from distdoctor.hang import collect, ras, verdict
from distdoctor.model import Status
from distdoctor.testing import fixture_text
from tests.conftest import data_path
from tests.unit.hang.fakeproc import proc_host


def capture(name: str) -> str:
    return fixture_text(data_path("nccl_ras", name))


def test_text_mismatch_keeps_both_groups_and_the_listed_minority():
    (comm,) = ras.parse(capture("text_2.26.2_mismatch_nccl1911.txt"))["comms"]
    (m,) = comm["mismatch"]
    assert (m["op"], [(g["count"], g["size"]) for g in m["groups"]]) == ("AllGather", [(640, 30), (641, 2)])
    assert [(e["rank"], e["pid"], e["gpu"]) for e in m["listed"]] == [(12, 323032, "4"), (13, 323033, "5")]


def test_text_incomplete_names_the_missing_rank_and_process():
    doc = ras.parse(capture("text_2.27.3_incomplete_nccl1762.txt"))
    assert doc["version"] == "2.27.3"
    assert doc["processes_missing"] == [{"pid": 60004, "host": "10.4.109.13", "gpu": "0"}]
    assert [(m["rank"], m["pid"]) for m in doc["comms"][0]["missing"]] == [(1, 60004)]


def test_json_with_nccl_2_28_9s_missing_comma_is_repaired():
    (comm,) = ras.parse(capture("json_2.28.9_dead_rank_ray64928.json"))["comms"]
    assert comm["missing"] == [{"rank": 1, "host": "10.0.77.184", "pid": 10017, "gpu": 1, "unresponsive": True,
                                "dead": False}]


def test_json_counts_give_the_mismatch():
    comms = ras.parse(capture("json_2.28.9_multicomm_ray64928.json"))["comms"]
    assert [c["mismatch"] for c in comms][1:] == [[], []]
    assert comms[0]["mismatch"] == [{"op": "AllReduce", "groups": [{"count": 3, "size": 1, "ranks": [1]},
                                                                   {"count": 10, "size": 1, "ranks": [0]}]}]


@pytest.mark.parametrize("text", ["", "HTTP/1.1 400 Bad Request\r\n", "{\"x\": 1}", "{not json"])
def test_garbage_is_not_ras(text):
    with pytest.raises(ras.NotRas):
        ras.parse(text)


@pytest.mark.parametrize("version, allowed", [("2.23.4", False), ("2.24.3", True), ("2.26.2", False),
                                              ("2.27.7", False), ("2.28.9", True), ("2.29.7", False),
                                              ("2.30.7", True), ("", False)])
def test_version_gate(version, allowed):
    assert ras.gate(version)[0] is allowed


MAPS = ("7f00-7f10 r-xp 00000000 08:01 1 /usr/lib/python3/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
        "7f20-7f30 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
SITE = "/usr/lib/python3/site-packages"


def ras_host(version_dir: str, answers, env=None):
    procs = {1000 + r: {"env": {"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "n1", "MASTER_PORT": "1",
                                **(env or {})}} for r in range(2)}
    files = {f"/proc/{p}/maps": MAPS for p in procs}
    files[f"{SITE}/{version_dir}/METADATA"] = "Name: nvidia-nccl-cu12\n"
    calls = []

    def serve(lines):
        calls.append(lines)
        return answers[min(len(calls), len(answers)) - 1]

    host = proc_host(procs, files=files, conversations={("localhost", 28028): serve}, hostname="n1")
    host.dirs[SITE] = [version_dir, "torch"]
    return host, calls


def reply(report: str) -> list[str]:
    return ["SERVER PROTOCOL 2\n", "OK\n", "OK\n", report]


def ras_run(host):
    runs = {r.id: r for r in verdict.runs([collect.snapshot(host)], "n1")}
    return runs["hang.nccl-ras"]


def test_the_lagging_rank_is_named_when_nothing_moved_between_two_queries():
    multi = capture("json_2.28.9_multicomm_ray64928.json")
    host, calls = ras_host("nvidia_nccl_cu12-2.28.9.dist-info", [reply(multi), reply(multi)])
    run = ras_run(host)
    assert calls == [["CLIENT PROTOCOL 2", "TIMEOUT 1", "SET FORMAT json", "STATUS"]] * 2
    assert host.slept >= 3.0
    assert run.status == Status.FAIL
    assert run.findings[0].summary == ("communicator 0x4e0104c2022fa2f9: rank 1 (pid 10207 on 10.0.77.184, GPU 3) "
                                       "launched AllReduce up to #3, 1 rank up to #10: the first lag; no rank "
                                       "launched a collective in 3 s")


def test_the_text_form_names_the_group_behind_not_the_listed_minority():
    text = capture("text_2.26.2_mismatch_nccl1911.txt")
    host, calls = ras_host("nvidia_nccl_cu12-2.24.3.dist-info", [reply(text)[:1] + ["OK\n", text]] * 2)
    run = ras_run(host)
    assert calls[0] == ["CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"]  # no JSON before 2.28.7
    assert run.findings[0].summary.startswith(
        "communicator fa93daea854b060b: 30 ranks that RAS does not list (it lists the 2 ahead: ranks 12-13) "
        "launched AllGather up to #640, 2 ranks up to #641: the first lag")


def test_a_missing_rank_is_named():
    dead = capture("json_2.28.9_dead_rank_ray64928.json")
    host, _calls = ras_host("nvidia_nccl_cu12-2.28.9.dist-info", [reply(dead)])
    assert ras_run(host).findings[0].summary == ("communicator 0xa1349768e9517ed7: rank 1 (pid 10017 on 10.0.77.184, "
                                                 "GPU 1) is missing (unresponsive)")


def test_healthy_is_ok_and_says_what_ras_cannot_see():
    healthy = capture("json_2.28.9_healthy_ray64928.json")
    host, _calls = ras_host("nvidia_nccl_cu12-2.28.9.dist-info", [reply(healthy)])
    run = ras_run(host)
    assert run.status == Status.OK and "NVIDIA/nccl#1730" in run.findings[0].explanation


def test_unsafe_versions_are_never_queried():
    host, calls = ras_host("nvidia_nccl_cu12-2.27.3.dist-info", [reply("")])
    run = ras_run(host)
    assert calls == [] and run.status == Status.SKIP
    assert "not queried: NCCL 2.27.3: querying RAS has crashed jobs" in run.findings[0].summary


def test_disabled_closed_and_garbage_ports():
    host, calls = ras_host("nvidia_nccl_cu12-2.28.9.dist-info", [reply("")], env={"NCCL_RAS_ENABLE": "0"})
    assert ras_run(host).status == Status.SKIP and calls == []
    host, _ = ras_host("nvidia_nccl_cu12-2.28.9.dist-info", [reply("")])
    host.conversations[("localhost", 28028)] = "refused"
    assert ras_run(host).findings[0].summary == "NCCL RAS at localhost:28028 (NCCL 2.28.9): refused"
    host, _ = ras_host("nvidia_nccl_cu12-2.28.9.dist-info", [["HTTP/1.1 400 Bad Request\r\n", "", "", ""]])
    assert "not NCCL RAS" in ras_run(host).findings[0].summary


def test_no_nccl_loaded_means_no_ras_run():
    host, _ = ras_host("nvidia_nccl_cu12-2.28.9.dist-info", [reply("")])
    for pid in (1000, 1001):
        host.files[f"/proc/{pid}/maps"] = "7f20-7f30 r-xp 00000000 08:01 2 /usr/lib/libc.so.6\n"
    assert "hang.nccl-ras" not in {r.id for r in verdict.runs([collect.snapshot(host)], "n1")}


def test_address_from_the_job():
    assert ras.address({"NCCL_RAS_ADDR": "10.0.0.5:29000"}, 28028) == ("10.0.0.5", 29000)
    assert ras.address({"NCCL_RAS_ADDR": "[::1]:29000"}, 28028) == ("::1", 29000)
    assert ras.address({}, 28028) == ("localhost", 28028)
    assert ras.address({"NCCL_RAS_ADDR": "junk:x"}, 28028) == ("localhost", 28028)


def test_ranks_that_did_not_move_while_others_did_are_named():
    import json

    first = capture("json_2.28.9_healthy_ray64928.json")
    doc = json.loads(first)
    doc["communicators"][0]["ranks"][0]["collective_counts"]["AllReduce"] = 3  # rank 0 launched one more
    host, _calls = ras_host("nvidia_nccl_cu12-2.28.9.dist-info", [reply(first), reply(json.dumps(doc))])
    run = ras_run(host)
    said = [f.summary for f in run.findings]
    assert ("communicator 0x514e98cf4e44862b: rank 1 (pid 8814 on 10.0.77.184, GPU 1) launched no collective in 3 s "
            "while 1 other rank did") in said
    assert any(s.startswith("communicator 0x514e98cf4e44862b: rank 1 (pid 8814") and "up to #2" in s for s in said)
