"""`distdoctor log` end to end through the console script: exit codes, JSON that validates
against the published schema, stdin, and bad input that must become findings, never a
traceback, in bounded time and memory."""

import gzip
import os
import subprocess
import sys

import pytest

from tests.conftest import data_path, distdoctor_argv, load_report

FAILING = data_path("nccl_debug", "nccl_socketPollConnect_no_route_to_host_sglang_EXCERPT.txt")
with open(FAILING, "rb") as _fh:
    FAILING_BYTES = _fh.read()
CLEAN = data_path("nccl_debug", "nccl-2.11.4_ib_mlx4_oob_ib0_4nodes_EXCERPT.txt")


def _log(*args, stdin=None, timeout=120):
    proc = subprocess.run(distdoctor_argv() + ["log", *args], input=stdin, capture_output=True,
                          timeout=timeout, check=False)
    assert b"Traceback" not in proc.stderr + proc.stdout, proc.stderr.decode(errors="replace")
    return proc


def _checks(doc):
    return {c["id"]: c for c in doc["checks"]}


def test_failure_exits_1_and_json_validates():
    proc = _log("--json", FAILING)
    assert proc.returncode == 1
    doc = load_report(proc.stdout.decode())
    assert doc["command"] == "log"
    first = _checks(doc)["log.diagnosis"]["findings"][0]
    assert first["status"] == "fail" and first["evidence"]["host"] == "node5"
    assert first["fix"].splitlines()[1] == "ssh node5 ip route get 10.0.0.4"


def test_clean_log_exits_0_and_fail_on_warn():
    assert _log(CLEAN).returncode == 0
    flannel = data_path("nccl_debug", "nccl-2.4.2_k8s_flannel_in_socket_list_34_roce_hcas_empty_oob_tag-output_EXCERPT.txt")
    assert _log(flannel).returncode == 0
    assert _log("--fail-on", "warn", flannel).returncode == 1


def test_stdin_and_gzip(tmp_path):
    raw = FAILING_BYTES
    assert _log("--json", "-", stdin=raw).returncode == 1
    gz = tmp_path / "slurm-1.out.gz"
    gz.write_bytes(gzip.compress(raw))
    doc = load_report(_log("--json", str(gz)).stdout.decode())
    assert _checks(doc)["log.diagnosis"]["status"] == "fail"


def test_prometheus_and_output_file(tmp_path):
    out = tmp_path / "report.prom"
    assert _log("--format", "prometheus", "-o", str(out), FAILING).returncode == 1
    assert 'check="log.diagnosis"' in out.read_text()


def test_nothing_readable_exits_2(tmp_path):
    proc = _log("--json", str(tmp_path / "missing.log"))
    assert proc.returncode == 2
    doc = load_report(proc.stdout.decode())
    assert "No such file" in _checks(doc)["log.input"]["findings"][0]["summary"]


def test_bad_inputs_are_findings(tmp_path):
    (tmp_path / "core.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + os.urandom(4096))
    (tmp_path / "latin1.log").write_bytes(b"caf\xe9 \xff\xfe\n" + FAILING_BYTES)
    (tmp_path / "empty.log").write_bytes(b"")
    doc = load_report(_log("--json", str(tmp_path)).stdout.decode())
    summaries = [f["summary"] for f in _checks(doc)["log.input"]["findings"]]
    assert any("core.bin is not text" in s for s in summaries)
    assert any("empty.log is empty" in s for s in summaries)
    # invalid UTF-8 is read (replaced), and the failure after it still found
    assert _checks(doc)["log.diagnosis"]["findings"][0]["evidence"]["host"] == "node5"


def test_a_100_mb_line_is_truncated_in_bounded_memory(tmp_path):
    path = tmp_path / "oneline.log"
    with open(path, "wb") as fh:
        fh.write(b"0: start\n")
        chunk = b"x" * (1 << 20)
        fh.writelines(chunk for _ in range(100))
        fh.write(b"\n" + FAILING_BYTES)
    # A child forked from this (large, late in the suite) test process starts with its pages in
    # its RSS; a small interpreter in between forks distdoctor from itself and reports the peak.
    peak = tmp_path / "maxrss"
    wrapper = ("import os, subprocess, sys\n"
               "p = subprocess.Popen(sys.argv[2:])\n"
               "_, status, usage = os.wait4(p.pid, 0)\n"
               "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
               "sys.exit(os.waitstatus_to_exitcode(status))\n")
    proc = subprocess.run([sys.executable, "-c", wrapper, str(peak), *distdoctor_argv(), "log", "--json", str(path)],
                          stdout=subprocess.PIPE, timeout=300)
    doc = load_report(proc.stdout.decode())
    maxrss_kib = int(peak.read_text())
    assert any("longer than 64 KiB" in f["summary"] for f in _checks(doc)["log.input"]["findings"])
    assert _checks(doc)["log.diagnosis"]["findings"][0]["evidence"]["host"] == "node5"
    assert maxrss_kib < 150 * 1024  # the 100 MB line is never held whole


def test_a_sparse_10_gib_file_is_skipped_quickly(tmp_path):
    path = tmp_path / "sparse.log"
    with open(path, "wb") as fh:
        fh.truncate(10 * 2**30)  # all NUL bytes, no disk used: a log of a node that lost power
    doc = load_report(_log("--json", str(path), timeout=60).stdout.decode())
    findings = _checks(doc)["log.input"]["findings"]
    assert "is not text" in findings[0]["summary"]
    assert findings[-1]["evidence"]["bytes"] == 0  # one sniffed block, nothing read as text


def test_a_large_text_file_is_read_head_and_tail(tmp_path):
    path = tmp_path / "big.log"
    with open(path, "wb") as fh:
        fh.write(b"0: hello\n" * 200_000)
        fh.write(FAILING_BYTES)
    doc = load_report(_log("--json", "--max-bytes", "256K", str(path)).stdout.decode())
    assert any("skipped" in f["summary"] for f in _checks(doc)["log.input"]["findings"])
    assert _checks(doc)["log.diagnosis"]["findings"][0]["evidence"]["host"] == "node5"


def test_a_directory_of_5000_files(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    for i in range(5000):
        (folder / f"slurm-{i:05d}.out").write_bytes(b"%d: step ok\n" % i)
    doc = load_report(_log("--json", str(folder)).stdout.decode())
    summaries = [f["summary"] for f in _checks(doc)["log.input"]["findings"]]
    assert any("more than 2000 files" in s for s in summaries)
    assert any(s.startswith("read 2000 lines") and "from 2000 files" in s for s in summaries)


@pytest.mark.parametrize("args", [["--max-bytes", "lots", CLEAN], ["-", "-"]])
def test_usage_errors(args):
    assert _log(*args, stdin=b"").returncode == 64


def test_duplicate_gpu_names_the_rank_its_node_and_the_fix():
    """Ranks 2 and 3 share gpu002's GPU; rank 3 says so first, ranks 0-1 time out later
    (tests/data/logs/composed/INDEX.md)."""
    proc = _log("--json", data_path("logs", "composed", "duplicate-gpu-rank3.log"))
    assert proc.returncode == 1
    diag = _checks(load_report(proc.stdout.decode()))["log.diagnosis"]
    first = diag["findings"][0]
    assert first["subject"] == "nccl.duplicate-gpu"
    assert (first["evidence"]["rank"], first["evidence"]["host"]) == (3, "gpu002")
    assert "srun -N1 -w gpu002 bash -c 'echo $CUDA_VISIBLE_DEVICES; nvidia-smi -L'" in first["fix"].splitlines()
    assert set(first["evidence"]["consequences"]) == {"nccl.invalid-usage", "torch.watchdog-timeout"}
    assert first["evidence"]["consequences"]["torch.watchdog-timeout"]["ranks"] == "0-1"
    assert len([f for f in diag["findings"] if f["status"] in ("fail", "warn")]) == 1


def test_heartbeat_aborts_after_a_socket_error_point_at_the_socket_error():
    proc = _log("--json", data_path("logs", "composed", "heartbeat-after-socket-error.log"))
    assert proc.returncode == 1
    first = _checks(load_report(proc.stdout.decode()))["log.diagnosis"]["findings"][0]
    assert first["subject"] == "nccl.socket-no-route"
    assert (first["evidence"]["rank"], first["evidence"]["host"]) == (2, "gpu002")
    assert "(the peer 10.0.0.1 is rank 0 on gpu001)" in first["summary"]
    assert first["evidence"]["consequences"]["torch.heartbeat-monitor-timeout"]["ranks"] == "0-1,3"
