"""gpu.cuda-compat and the torch_install fact: the driver's CUDA (from a stand-in nvidia-smi
printing real captures) against torch.version.cuda read from an installed torch's files.

A torch distribution with the chosen version.py is laid out on disk and put first on sys.path,
where importlib.metadata finds it the way it finds the real one; distdoctor never imports it."""

import os
import subprocess
import sys

import pytest

from distdoctor.checks import gpu as gpu_checks
from distdoctor.facts import Facts
from distdoctor.host import Host
from distdoctor.model import Status
from distdoctor.testing import run_check
from tests.conftest import data_path
from tests.harness.fake_nvidia_smi import StandIn


def install_torch(root, version, cuda=None, hip=None, version_py=True):
    site = root / "site"
    (site / "torch").mkdir(parents=True)
    info = site / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (info / "RECORD").write_text("torch/version.py,,\n")
    if version_py:
        (site / "torch" / "version.py").write_text(
            "from typing import Optional\n\n"
            f"__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip']\n__version__ = '{version}'\n"
            f"debug = False\ncuda: Optional[str] = {cuda!r}\ngit_version = 'abc'\nhip: Optional[str] = {hip!r}\n")
    return str(site)


@pytest.fixture
def smi(tmp_path):
    return StandIn(tmp_path)


def compat(smi, table, monkeypatch, tmp_path, version, cuda=None, hip=None):
    smi.answer("", stdout_file=data_path("nvidia_smi", table))
    monkeypatch.syspath_prepend(install_torch(tmp_path, version, cuda, hip))
    return run_check(gpu_checks.cuda_compat, Host(env=smi.env()))


def test_ok_when_driver_is_newer(smi, monkeypatch, tmp_path):
    findings = compat(smi, "nvidia-smi_575_4xRTX6000Ada_cuda12.9.txt", monkeypatch, tmp_path, "2.5.1+cu124", "12.4")
    assert [f.status for f in findings] == [Status.OK]
    assert findings[0].summary == "torch 2.5.1+cu124 (CUDA 12.4) runs on driver 575.51.03 (CUDA ≤ 12.9)"


def test_fail_when_driver_major_is_older(smi, monkeypatch, tmp_path):
    findings = compat(smi, "nvidia-smi_520_azure_ndv2_8xV100_domain_busids.txt", monkeypatch, tmp_path,
                      "2.5.1+cu124", "12.4")
    assert [f.status for f in findings] == [Status.FAIL]
    assert "CUDA driver version is insufficient for CUDA runtime version" in findings[0].summary
    assert "525.60.13" in findings[0].fix and "whl/cu118" in findings[0].fix


def test_warn_on_minor_version_compatibility(smi, monkeypatch, tmp_path):
    findings = compat(smi, "nvidia-smi_565_8xH100SXM_cuda12.7.txt", monkeypatch, tmp_path, "2.8.0+cu128", "12.8")
    assert [f.status for f in findings] == [Status.WARN]
    assert "minor-version compatibility" in findings[0].summary


def test_old_driver_without_cuda_field(smi, monkeypatch, tmp_path):
    findings = compat(smi, "nvidia-smi_384_7gpu_gtx1070_no_cuda_field.txt", monkeypatch, tmp_path,
                      "1.4.0", "10.0")
    assert [f.status for f in findings] == [Status.FAIL]
    assert "supports up to CUDA 8.0 (derived from the driver version" in findings[0].summary


def test_driver_cuda_na(smi, monkeypatch, tmp_path):
    findings = compat(smi, "nvidia-smi_510_A100PCIe_esxi_cudaNA_migdisabled.txt", monkeypatch, tmp_path,
                      "2.1.0+cu118", "11.8")
    assert [f.status for f in findings] == [Status.WARN] and "(N/A)" in findings[0].summary


def test_cpu_and_rocm_builds(smi, monkeypatch, tmp_path):
    cpu = compat(smi, "nvidia-smi_575_4xRTX6000Ada_cuda12.9.txt", monkeypatch, tmp_path / "a", "2.5.1+cpu")
    assert [f.status for f in cpu] == [Status.WARN] and "CPU-only" in cpu[0].summary
    assert "whl/cu129" in cpu[0].fix
    rocm = compat(smi, "nvidia-smi_575_4xRTX6000Ada_cuda12.9.txt", monkeypatch, tmp_path / "b", "2.5.1+rocm6.2",
                  None, "6.2.41133")
    assert [f.status for f in rocm] == [Status.SKIP]


def test_torch_install_fact_fields(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(install_torch(tmp_path, "2.5.1+cu124", "12.4"))
    fact = Facts(Host(env={})).torch_install
    assert (fact.installed, fact.version, fact.cuda, fact.hip, fact.error, fact.build) == \
        (True, "2.5.1+cu124", "12.4", None, "", "cuda")
    assert fact.location == os.path.join(str(tmp_path / "site"), "torch")


def test_torch_install_without_version_file(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(install_torch(tmp_path, "2.5.1", version_py=False))
    fact = Facts(Host(env={})).torch_install
    assert fact.installed and fact.version == "2.5.1" and fact.cuda is None
    assert "version.py is missing" in fact.error and fact.build == "unknown"
    findings = run_check(gpu_checks.cuda_compat, Host(env={}))
    assert [f.status for f in findings] == [Status.WARN] and "unreadable" in findings[0].summary


def test_torch_install_of_the_real_torch_without_importing_it():
    code = ("import sys; from distdoctor.facts import Facts; from distdoctor.host import Host; "
            "t = Facts(Host()).torch_install; print(t.version, t.cuda, t.installed); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    from importlib import metadata

    version_line, imported = out.stdout.splitlines()
    assert version_line.split()[0].split("+")[0] == metadata.version("torch").split("+")[0]  # local tag: see test_parsers
    assert imported == "False"
