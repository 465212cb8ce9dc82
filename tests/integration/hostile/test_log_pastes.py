"""`distdoctor log` on pastes of nvidia-smi and dcgmi whose sizes are hostile, built from real
captures (tests/data/nvidia_smi, tests/data/dcgmi): numbers of 5,000 digits (past Python's
int() limit) in a GPU index, a memory size, a version and a dcgmi GPU list; 20,000 GPU rows; a
10 MB table cell; negative, NaN and infinite sizes. Each: strict JSON, no traceback, no check
that errors (a value nobody can read is a WARN naming the paste), the documented exit code, a
bound on time and memory, nothing left running."""

from __future__ import annotations

import pytest

from tests.conftest import data_path
from tests.harness.hostile import dd, strict_json

MEMORY = 1 << 30
SMI = "nvidia-smi_565_8xH100SXM_cuda12.7.txt"
DCGMI = "diag_r3_400_4gpu_all_pass_dcgm_user_guide.txt"


def _read(*parts: str) -> str:
    with open(data_path(*parts), encoding="utf-8") as fh:
        return fh.read()


def _many_rows(smi: str, count: int) -> str:
    lines = smi.splitlines()
    head, block, tail = lines[:7], lines[7:11], lines[-12:]
    body = []
    for i in range(count):
        body += [block[0].replace("|   0  ", f"|{i:>4}  ", 1), *block[1:]]
    return "\n".join(head + body + tail)


def pastes() -> dict[str, str]:
    smi = _read("nvidia_smi", SMI)
    dcgmi = _read("dcgmi", DCGMI)
    digits = "9" * 5000
    return {
        "smi: a 5,000-digit GPU index": smi.replace("|   0  NVIDIA", f"|   {digits}  NVIDIA", 1),
        "smi: a 5,000-digit memory size": smi.replace("81559MiB", f"{digits}MiB", 1),
        "smi: 5,000-digit driver and CUDA versions": smi.replace("565.57.01", f"{digits}.1").replace("12.7", f"{digits}.7"),
        "smi: 20,000 GPU rows": _many_rows(smi, 20_000),
        "smi: a 10 MB cell": smi.replace("Default |", "Default " + "|x" * 5_000_000, 1),
        "smi: negative, NaN and infinite sizes": smi.replace("1MiB /  81559MiB", "-1MiB / nanMiB").replace(
            "100W /  700W", "infW / -0W"),
        "dcgmi: a 5,000-digit GPU": dcgmi + f"\n| GPU Memory                | Fail - GPU: {digits}  |\n",
        "dcgmi: a 10 MB warning": dcgmi + "\n| Warning                   | " + "w" * 10_000_000 + " |\n",
    }


@pytest.mark.parametrize("name", list(pastes()))
def test_a_paste_with_hostile_sizes_is_read_or_named_within_bounds(tmp_path, name):
    log = tmp_path / "job.log"
    log.write_text("job started\n" + pastes()[name] + "\nRuntimeError: NCCL error in: all_reduce\n", encoding="utf-8")
    result = dd("log", str(log), "--json", "--timeout", "30", timeout=60, memory=MEMORY)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.elapsed < 40, result.elapsed
    report = strict_json(result.stdout)
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert "error" not in statuses.values(), [c for c in report["checks"] if c["status"] == "error"]
    fails = any(s == "fail" for s in statuses.values())
    assert result.returncode == (1 if fails else 0), (result.returncode, statuses)
    assert len(result.stdout) < 2 << 20, len(result.stdout)
