"""The real nvidia-ml-py on a machine without an NVIDIA driver: `nvmlInit()` fails inside
distdoctor's own NVML code (no stand-in for the library), and every GPU check falls back to
nvidia-smi, here a stand-in replaying real captures, with the findings a run that never tried
NVML gives: no traceback, no finding of its own."""

import json
import re
import subprocess
import sys

import pytest

from distdoctor.parsers.nvidia_smi import QUERY_FIELDS
from tests.conftest import data_path, load_report
from tests.harness.fake_nvidia_smi import StandIn

# importing pynvml first is what a node with the library loaded looks like to distdoctor: it then
# asks NVML instead of taking the missing /proc/driver/nvidia as the answer
PRELOADED = ("import sys, runpy, pynvml; sys.argv = ['distdoctor'] + sys.argv[1:]; "
             "runpy.run_module('distdoctor', run_name='__main__', alter_sys=True)")
IDS = "gpu.inventory,gpu.health,gpu.memory-errors,gpu.xid,gpu.nvlink,gpu.pcie-link,gpu.throttle,gpu.device-nodes," \
      "gpu.peermem,gpu.fabric,gpu.mig-consistency"


def real_nvml_fails():
    probe = ("import json, pynvml\nfrom distdoctor.host import Host\n"
             "print(json.dumps(Host(env={}).nvml_snapshot(timeout=4)))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout)


def test_real_nvml_init_failure_is_a_result():
    snap = real_nvml_fails()
    if snap["status"] == "ok":
        pytest.skip("this machine has an NVIDIA driver")
    assert snap["status"] == "unavailable" and "libnvidia-ml" in snap["error"], snap


def test_gpu_checks_fall_back_to_nvidia_smi_with_the_same_findings(tmp_path):
    if real_nvml_fails()["status"] == "ok":
        pytest.skip("this machine has an NVIDIA driver")
    smi = StandIn(tmp_path)
    smi.answer("", stdout_file=data_path("nvidia_smi", "nvidia-smi_575_4xRTX6000Ada_cuda12.9.txt"))
    xml = data_path("nvidia_smi_q", "qx_515_A10G_idle_x8_of_x16.xml")
    smi.answer("-q -x", stdout_file=xml).answer("-q -x -d PERFORMANCE", stdout_file=xml)
    smi.answer("nvlink -s", stdout="GPU 0: NVIDIA A10G (UUID: GPU-8a1b0d39-3b60-35bb-8a4a-b2d2c3a5d6f2)\n")
    smi.answer(f"--query-gpu={','.join(QUERY_FIELDS)} --format=csv,noheader,nounits",
               stdout="0, NVIDIA A10G, GPU-8a1b0d39-3b60-35bb-8a4a-b2d2c3a5d6f2, 00000000:00:1E.0, 23028, Enabled, "
                      "[N/A], 0, 0x0000000000000001\n")
    smi.answer("*", exit=2, stderr="stand-in: not answered\n")
    argv = ["check", "--only", IDS, "--format", "json"]
    env = smi.env()
    env.pop("DISTDOCTOR_NVML")
    tried = subprocess.run([sys.executable, "-c", PRELOADED, *argv], env=env, capture_output=True, text=True,
                           timeout=120)
    never = subprocess.run([sys.executable, "-m", "distdoctor", *argv], env=smi.env(), capture_output=True, text=True,
                           timeout=120)
    assert "Traceback" not in tried.stderr and "Traceback" not in never.stderr, tried.stderr + never.stderr
    with_nvml, without = load_report(tried.stdout), load_report(never.stdout)

    def seen(doc):
        # the kernel log grows between the two runs (other tests add veths): its line count is no finding
        return {r["id"]: [(f["status"], f.get("action", ""), re.sub(r"\d+ lines\)", "N lines)", f["summary"]))
                          for f in r["findings"]] for r in doc["checks"]}

    assert seen(with_nvml) == seen(without)
    assert seen(with_nvml)["gpu.pcie-link"][0][0] == "warn"  # the capture's x8 of x16 still found
    assert "error" not in {r["status"] for r in with_nvml["checks"]}
    inventory = next(r for r in with_nvml["checks"] if r["id"] == "gpu.inventory")["findings"][0]
    assert inventory["status"] == "ok" and inventory["evidence"]["source"] == "nvidia-smi"
    # the real library was asked and said why it could not answer
    assert "libnvidia-ml" in inventory["evidence"]["nvml"], inventory["evidence"]
    assert "DISTDOCTOR_NVML=0" in next(r for r in without["checks"] if r["id"] == "gpu.inventory")[
        "findings"][0]["evidence"]["nvml"]
