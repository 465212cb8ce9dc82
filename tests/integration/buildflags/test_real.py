"""The build facts and checks against real components: Debian's Open MPI and MPICH, the real
NCCL library from the pinned wheel (installed by pip for real, and through LD_LIBRARY_PATH),
broken libraries compiled here, and the installed torch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from distdoctor.facts import Facts
from distdoctor.facts import build as build_facts
from distdoctor.host import Host
from tests.conftest import load_report, distdoctor_argv
from tests.harness import apt
from tests.harness.nccl_lib import PACKAGE, VERSION, VERSION_CODE, libnccl



def debian_version(package: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True,
                         timeout=30).stdout
    return out.split(":")[-1].split("-")[0]  # 4.1.4-3+b1 -> 4.1.4


@pytest.fixture(scope="module")
def pip_nccl():
    """nvidia-nccl-cu13==2.30.7 installed by pip into a throwaway --target folder (a real
    install: dist-info with RECORD, nvidia/nccl/lib/libnccl.so.2)."""
    libnccl()  # fails early (skip) when the wheel cannot be had; also warms pip's cache
    target = tempfile.mkdtemp(prefix=f"dd-build-{os.getpid()}-")
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                               "--target", target, f"{PACKAGE}=={VERSION}"], capture_output=True, text=True,
                              timeout=600)
        if proc.returncode != 0:
            pytest.skip(f"pip cannot install {PACKAGE}=={VERSION}: {proc.stderr[-400:]}")
        yield target
    finally:
        shutil.rmtree(target, ignore_errors=True)


def run_cli(*args, env=None):
    proc = subprocess.run([*distdoctor_argv(), "check", *args, "--format", "json"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})
    assert proc.returncode in (0, 1), proc.stderr
    return {c["id"]: c for c in load_report(proc.stdout)["checks"]}


def test_done_when_openmpi_without_cuda_mpich_alongside_and_pip_nccl(pip_nccl):
    apt.ensure("openmpi-bin", "mpich")
    ompi, mpich = debian_version("openmpi-bin"), debian_version("mpich")
    checks = run_cli("--only", "build", env={"PYTHONPATH": pip_nccl})

    cuda = checks["build.mpi-cuda-aware"]["findings"]
    assert cuda[0]["summary"].startswith(f"Open MPI {ompi} is built without CUDA support")
    assert cuda[0]["evidence"]["cuda_flags"] == {"opal_built_with_cuda_support": False,
                                                "mpi_built_with_cuda_support": False}

    impl = [f["summary"] for f in checks["build.mpi-implementation"]["findings"]]
    assert impl[0].startswith(f"`mpirun` and `mpiexec` run Open MPI {ompi}")
    assert any(s.startswith(f"MPICH {mpich} is installed alongside") for s in impl), impl

    nccl = checks["build.nccl-libraries"]["findings"]
    lib = os.path.join(pip_nccl, "nvidia", "nccl", "lib", "libnccl.so.2")
    assert nccl[-1]["status"] == "ok" and nccl[-1]["summary"].startswith(f"NCCL {VERSION} at {lib}")
    assert [lib, VERSION, f"pip {PACKAGE}", f"{PACKAGE} {VERSION}", "ok"] in nccl[-1]["evidence"]["table"]["rows"]


def test_real_nccl_through_ld_library_path_is_what_dlopen_loads():
    lib = libnccl()
    facts = Facts(Host(env={**os.environ, "LD_LIBRARY_PATH": os.path.dirname(lib)}))
    found = facts.nccl_libraries
    mine = found.by_realpath(os.path.realpath(lib))
    assert mine is not None and mine.version_code == VERSION_CODE and mine.version == VERSION
    assert "LD_LIBRARY_PATH" in mine.sources and not mine.error
    assert found.default_path == os.path.realpath(lib)


STUB = {
    "crash": "#include <stdlib.h>\n__attribute__((constructor)) static void boom(void) { abort(); }\n",
    "hang": "#include <unistd.h>\nint ncclGetVersion(int *v) { for (;;) pause(); return 0; }\n",
    "nosym": "int somethingElse(void) { return 1; }\n",
    "old": "int ncclGetVersion(int *v) { *v = 21805; return 0; }\n",
    "prefix29": "int ncclGetVersion(int *v) { *v = 2804; return 0; }\n",
}


@pytest.fixture
def broken_libs():
    """Real shared objects named libnccl.so.2 that crash on load, hang in ncclGetVersion, lack
    the symbol, report an old version, or are not ELF at all; one directory each."""
    if not shutil.which("gcc"):
        apt.ensure("gcc", "libc6-dev")
    base = tempfile.mkdtemp(prefix=f"dd-build-libs-{os.getpid()}-")
    try:
        dirs = {}
        for name, source in STUB.items():
            d = os.path.join(base, name)
            os.makedirs(d)
            with open(os.path.join(d, "stub.c"), "w") as fh:
                fh.write(source)
            subprocess.run(["gcc", "-shared", "-fPIC", "-o", os.path.join(d, "libnccl.so.2"), os.path.join(d, "stub.c")],
                           check=True, timeout=60)
            dirs[name] = d
        dirs["garbage"] = os.path.join(base, "garbage")
        os.makedirs(dirs["garbage"])
        with open(os.path.join(dirs["garbage"], "libnccl.so.2"), "w") as fh:
            fh.write("this is not a shared library\n" * 20)
        yield dirs
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_crashing_hanging_and_broken_libraries_become_findings(broken_libs, monkeypatch):
    monkeypatch.setattr(build_facts, "NCCL_PROBE_TIMEOUT", 3.0)
    order = ["crash", "garbage", "hang", "nosym", "old", "prefix29"]
    path = ":".join(broken_libs[name] for name in order) + ":" + os.path.dirname(libnccl())
    found = Facts(Host(env={**os.environ, "LD_LIBRARY_PATH": path})).nccl_libraries
    by_name = {name: found.by_realpath(os.path.join(broken_libs[name], "libnccl.so.2")) for name in order}
    assert "crashed the process" in by_name["crash"].error
    assert "cannot load" in by_name["garbage"].error and "ELF" in by_name["garbage"].error
    assert "hung (killed after 3 s)" in by_name["hang"].error
    assert "no ncclGetVersion symbol" in by_name["nosym"].error
    assert by_name["old"].version == "2.18.5" and not by_name["old"].error
    assert by_name["prefix29"].version == "2.8.4"
    real = found.by_realpath(os.path.realpath(libnccl()))
    assert real.version == VERSION  # probed in a fresh interpreter after the crash and the hang


def test_older_nccl_on_ld_library_path_shadows_pip_nccl(broken_libs, pip_nccl, monkeypatch):
    from distdoctor.checks import build
    from distdoctor.model import Status
    from distdoctor.testing import run_check

    monkeypatch.syspath_prepend(pip_nccl)  # importlib.metadata now sees the pip install
    host = Host(env={**os.environ, "LD_LIBRARY_PATH": broken_libs["old"]})
    findings = run_check(build.nccl_libraries, host)
    fails = [f for f in findings if f.status == Status.FAIL]
    assert len(fails) == 1, [f.summary for f in findings]
    assert fails[0].summary.startswith(f"LD_LIBRARY_PATH puts NCCL 2.18.5 ({broken_libs['old']}/libnccl.so.2) "
                                       f"ahead of pip's {PACKAGE} {VERSION}")
    assert fails[0].fix == "export LD_LIBRARY_PATH=''"  # quoted like every value from the machine


def test_torch_backends_from_build_flags_match_a_real_import():
    pytest.importorskip("torch")
    from_files = Facts(Host()).torch_distributed
    probed_facts = Facts(Host())
    probed_facts.options = {"probe_torch": True}
    probed = probed_facts.torch_distributed
    assert from_files.source == "build flags" and probed.source == "probe", probed.error
    assert from_files.backends == probed.backends
    assert from_files.backends["gloo"] is True


MPI4PY = "mpi4py==4.1.2"  # a binary wheel that picks Open MPI or MPICH at import time


@pytest.fixture(scope="module")
def mpi4py_target():
    apt.ensure("openmpi-bin", "mpich")
    target = tempfile.mkdtemp(prefix=f"dd-build-mpi4py-{os.getpid()}-")
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:",
                               "--target", target, MPI4PY], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.skip(f"pip cannot install {MPI4PY}: {proc.stderr[-400:]}")
        yield target
    finally:
        shutil.rmtree(target, ignore_errors=True)


def mpi4py_findings(target, monkeypatch, **env):
    from distdoctor.checks import build
    from distdoctor.testing import run_check

    monkeypatch.syspath_prepend(target)  # distdoctor's own metadata lookup sees the install
    return run_check(build.mpi4py_mpi, Host(env={**os.environ, "PYTHONPATH": target, **env}))


def test_mpi4py_loading_open_mpi_like_mpirun_is_ok(mpi4py_target, monkeypatch):
    findings = mpi4py_findings(mpi4py_target, monkeypatch)
    assert [f.status.value for f in findings] == ["ok"]
    assert findings[0].summary == f"mpi4py 4.1.2 uses Open MPI {debian_version('openmpi-bin')}"


def test_mpi4py_loading_mpich_while_mpirun_is_open_mpi_fails(mpi4py_target, monkeypatch, tmp_path):
    # Debian's MPICH ships libmpich.so.12; the MPICH ABI soname mpi4py asks for is libmpi.so.12
    import glob

    libmpich = (glob.glob("/usr/lib/*/libmpich.so.12") + glob.glob("/usr/lib/libmpich.so.12"))[0]
    os.symlink(libmpich, tmp_path / "libmpi.so.12")
    findings = mpi4py_findings(mpi4py_target, monkeypatch, MPI4PY_MPIABI="mpich", LD_LIBRARY_PATH=str(tmp_path))
    assert [f.status.value for f in findings] == ["fail"]
    assert findings[0].summary == (f"mpi4py 4.1.2 uses MPICH {debian_version('mpich')} but mpirun is "
                                   f"Open MPI {debian_version('openmpi-bin')}")


def test_mpi4py_that_cannot_load_its_mpi_says_why(mpi4py_target, monkeypatch):
    findings = mpi4py_findings(mpi4py_target, monkeypatch, MPI4PY_MPIABI="mpich")
    assert [f.status.value for f in findings] == ["warn"]
    assert "libmpi.so.12: cannot open shared object file" in findings[0].summary
    assert "import json" not in findings[0].summary  # the probe's source is not the message
