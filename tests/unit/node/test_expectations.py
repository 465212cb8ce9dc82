"""The [expect] table: config parsing, version-aware comparisons, the node.expectations check
over captured data, and the snapshot -> config -> check round trip through the real CLI."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib

import pytest

from distdoctor import config as config_mod
from distdoctor.api import Context
from distdoctor.checks import node
from distdoctor.crosscheck.engine import matches_expectation
from distdoctor.engine import run_checks
from distdoctor.facts import Facts
from distdoctor.model import Status
from tests.conftest import distdoctor_argv, load_report
from tests.unit.inventory.test_inventory import gpu_node


@pytest.mark.parametrize("value, wanted, result", [
    ("2.21.5", ">= 2.18", True), ("2.17.1", ">= 2.18", False), ("12.4", "< 12.10", True),
    ("2.5.1+cu124", ">= 2.5", True), ("550.127.05", "550.127.05", True), ("550.127.05", "!= 550.127.05", False),
    (8, ">= 8", True), (8, 8, True), (4, "8", False), ("unlimited", "unlimited", True), (65536, "unlimited", False),
    ("unlimited", ">= 1048576", True), (None, ">= 2.18", False), ("9.1.0", ">= 9", True), ("8.9.7", ">= 9", False),
    ("10", ">= 9", True),
])
def test_expectations_compare_versions_part_by_part(value, wanted, result):
    assert matches_expectation(value, wanted) is result


def load(text: str) -> config_mod.Config:
    return config_mod.load([("site.toml", text)])


def test_expect_table_is_read_with_where_each_key_came_from():
    cfg = load('[run]\ntimeout = 30\n\n[expect]\n"gpu.count" = 8\n"nccl.version" = ">= 2.18"\n')
    assert cfg.expect == {"gpu.count": 8, "nccl.version": ">= 2.18"}
    assert cfg.expect_sources["nccl.version"] == "site.toml:6" and not cfg.problems


def test_a_table_as_an_expected_value_is_a_config_error():
    with pytest.raises(config_mod.ConfigError, match=r"site.toml:2: expect.\"gpu\" must be a value"):
        load('[expect]\n"gpu" = {count = 8}\n')


def run(host, expect: dict):
    cfg = load("")
    cfg.expect = dict(expect)
    cfg.expect_sources = {k: f"site.toml:{i + 2}" for i, k in enumerate(expect)}
    facts = Facts(host, cfg)
    [result] = run_checks([node.expectations], lambda info: Context(facts, info.params), jobs=1, total_timeout=30)
    return result


def test_matching_node_passes():
    result = run(gpu_node(), {"gpu.count": 8, "gpu.driver": "565.57.01", "limits.memlock": "unlimited",
                              "torch.version": ">= 2.5", "cudnn": ">= 9"})
    assert result.status is Status.OK and result.findings[0].summary == "all 5 expected facts match"


def test_each_mismatch_fails_naming_the_fact_with_its_fix():
    result = run(gpu_node(), {"gpu.count": 8, "shm.size": ">= 1073741824", "gpu.driver": "550.127.05",
                              "nccl.version": ">= 2.18", "gpu.cuont": 8})
    by = {f.subject: f for f in result.findings}
    assert result.status is Status.FAIL
    shm = by["shm.size"]
    assert shm.status is Status.FAIL and shm.summary == "shm.size = 67108864, expected >= 1073741824"
    assert shm.fix.startswith("# as root on gpu-a01: ")
    assert shm.fix.splitlines()[1] == "mount -o remount,size=1073741824 /dev/shm"
    assert shm.evidence["source"] == "site.toml:3"
    driver = by["gpu.driver"]
    assert driver.summary == "gpu.driver = 565.57.01, expected 550.127.05" and "550.127.05" in driver.fix
    nccl = by["nccl.version"]  # no NCCL library in this capture: absent is not a match
    assert nccl.summary == "nccl.version = (absent), expected >= 2.18"
    assert nccl.fix == "pip install 'nvidia-nccl-cu12>=2.18'   # on gpu-a01, in the job's environment"
    assert by["gpu.cuont"].status is Status.WARN and "not an inventory fact" in by["gpu.cuont"].summary
    assert by[""].status is Status.OK and "1 other expected facts match" in by[""].summary


def test_without_an_expect_table_the_check_skips_and_says_how_to_make_one():
    result = run(gpu_node(), {})
    assert result.status is Status.SKIP and result.findings[0].fix.startswith("distdoctor inventory --snapshot")


def test_snapshot_round_trip_through_the_real_cli(tmp_path):
    snap = subprocess.run([*distdoctor_argv(), "inventory", "--snapshot"], capture_output=True, text=True,
                          timeout=120)
    assert snap.returncode == 0, snap.stderr
    table = tomllib.loads(snap.stdout)["expect"]
    assert "host.name" not in table and "host.boot_id" not in table and not any(k.startswith("net.if.")
                                                                                 for k in table)
    cfg = tmp_path / "site.toml"
    cfg.write_text(snap.stdout)
    env_home = {"XDG_CONFIG_HOME": str(tmp_path)}
    argv = [*distdoctor_argv(), "check", "--only", "node.expectations", "--config", str(cfg), "--format", "json"]
    good = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, **env_home})
    doc = load_report(good.stdout)
    assert good.returncode == 0 and doc["checks"][0]["status"] == "ok", doc["checks"][0]["findings"]
    # one fact changed: the check fails naming it, and only it
    count = table["cpu.count"]
    cfg.write_text(re.sub(r'^"cpu.count" = \d+$', f'"cpu.count" = {count + 1}', snap.stdout, flags=re.M))
    bad = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, **env_home})
    doc = load_report(bad.stdout)
    fails = [f for f in doc["checks"][0]["findings"] if f["status"] == "fail"]
    assert bad.returncode == 1 and [f["subject"] for f in fails] == ["cpu.count"]
    assert fails[0]["summary"] == f"cpu.count = {count}, expected {count + 1}"


def test_one_cause_is_one_finding_and_fixes_name_the_judged_node():
    # A snapshot taken where torch 2.5.1 was installed, judged by an interpreter without torch:
    # torch.version, torch.build, torch.debug, torch.git_version and pip.torch are absent for one reason.
    wanted = {"torch.version": "2.5.1+cu124", "torch.build": "cuda", "torch.debug": False,
              "torch.git_version": "a8d6afb511a69687bbb2b7e88a3cf67917e1697e", "pip.torch": "2.5.1+cu124",
              "shm.size": ">= 1073741824"}
    host = gpu_node()
    host._distributions = {k: v for k, v in host._distributions.items() if k != "torch"}
    host.files = {k: v for k, v in host.files.items() if not k.endswith("torch/version.py")}
    result = run(host, wanted)
    fails = {f.subject: f for f in result.findings if f.status is Status.FAIL}
    assert set(fails) == {"torch", "shm.size"}
    torch = fails["torch"]
    assert torch.summary.startswith("torch: 5 expected facts absent (torch.version = (absent), expected 2.5.1+cu124")
    assert torch.fix == "pip install torch==2.5.1+cu124   # on gpu-a01, in the job's environment"
    assert sorted(torch.evidence["facts"]) == sorted(k for k in wanted if k != "shm.size")
    assert node.family("pip.torch") == node.family("torch.git_version") == "torch"
    assert node.family("pip.nvidia_nccl_cu12") == "nvidia" and node.family("gpu.count") == "gpu"
    # health judges the node by its Slurm name: the fix is for that node, not the local hostname
    cfg = load("")
    cfg.expect = {"shm.size": ">= 1073741824"}
    facts = Facts(gpu_node(), cfg, options={"node": "nwcnode1"})
    [judged] = run_checks([node.expectations], lambda info: Context(facts, info.params), jobs=1, total_timeout=30)
    assert "on nwcnode1" in judged.findings[0].fix and "gpu-a01" not in judged.findings[0].fix
