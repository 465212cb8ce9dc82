"""The build checks over FakeHosts built from captured outputs."""

import os
import pytest

from distdoctor import facts as facts_mod
from distdoctor.checks import build
from distdoctor.facts.build import nccl_version_string
from distdoctor.host import CommandResult
from distdoctor.model import Status
from distdoctor.testing import fixture_text, run_check
from tests.harness.buildhost import (GPU_DIRS, INTEL_VERSION, MPICH_VERSION, OMPI_MPIEXEC, OMPI_VERSION, build_host,
                              nccl_package, nccl_probe, torch_package)
from tests.conftest import data_path

OMPI_LINKS = {"/usr/bin/mpirun": "/usr/bin/orterun", "/usr/bin/mpiexec": "/usr/bin/orterun",
              "/usr/bin/mpiexec.mpich": "/usr/bin/mpiexec.hydra"}
OMPI_ALL_FALSE = ("ompi:version:full:4.1.4\noptions:mpi_ext:affinity, cuda, pcollreq\n"
                  "mca:opal:base:param:opal_built_with_cuda_support:value:false\n"
                  "mca:mpi:base:param:mpi_built_with_cuda_support:value:false\n")


def statuses(findings):
    return [f.status for f in findings]


# --- MPI --------------------------------------------------------------------------------------

def test_debian_openmpi_with_mpich_alongside():
    host = build_host({"mpirun": OMPI_VERSION, "mpiexec": OMPI_MPIEXEC, "mpiexec.mpich": MPICH_VERSION},
                      links=OMPI_LINKS)
    findings = run_check(build.mpi_implementation, host)
    assert statuses(findings) == [Status.OK, Status.OK]
    assert "Open MPI 4.1.4" in findings[0].summary and "/usr/bin/orterun" in findings[0].summary
    assert findings[1].summary.startswith("MPICH 4.0.2 is installed alongside")


def test_mpirun_and_mpiexec_from_different_mpis_warn():
    host = build_host({"mpirun": OMPI_VERSION, "mpiexec": INTEL_VERSION},
                      links={"/usr/bin/mpiexec": "/opt/intel/oneapi/mpi/2021.8/bin/mpiexec"})
    findings = run_check(build.mpi_implementation, host)
    assert statuses(findings) == [Status.WARN]
    assert "Open MPI 4.1.4" in findings[0].summary and "Intel MPI 2021.8" in findings[0].summary
    assert "update-alternatives" in findings[0].fix


def test_no_mpi_is_a_skip():
    assert statuses(run_check(build.mpi_implementation, build_host())) == [Status.SKIP]


@pytest.mark.parametrize("answer, words", [
    (CommandResult(("mpirun",), None, "", "", 5.0, True), "did not finish"),
    (CommandResult(("mpirun",), 0, "Welcome to SuperMPI 9\n"), "unrecognised"),
    (CommandResult(("mpirun",), 139, "", ""), "exited with status 139"),
])
def test_launcher_that_hangs_or_prints_garbage_is_a_finding(answer, words):
    findings = run_check(build.mpi_implementation, build_host({"mpirun": answer}))
    assert statuses(findings) == [Status.WARN]
    assert words in findings[0].summary


def test_openmpi_without_cuda_on_cpu_node_is_ok_and_named():
    host = build_host({"mpirun": OMPI_VERSION, ("ompi_info", "--parsable", "--all"): OMPI_ALL_FALSE})
    host.commands["ompi_info"] = OMPI_ALL_FALSE
    findings = run_check(build.mpi_cuda_aware, host)
    assert statuses(findings) == [Status.OK]
    assert "Open MPI 4.1.4 is built without CUDA support" in findings[0].summary
    assert findings[0].evidence["mpi_extensions"] == ["affinity", "cuda", "pcollreq"]


def test_openmpi_without_cuda_on_gpu_node_warns_with_configure_flag():
    host = build_host({"mpirun": OMPI_VERSION, "ompi_info": OMPI_ALL_FALSE}, dirs=GPU_DIRS)
    findings = run_check(build.mpi_cuda_aware, host)
    assert statuses(findings) == [Status.WARN]
    assert "2 GPU(s)" in findings[0].summary
    assert "--with-cuda" in findings[0].fix


def test_openmpi_with_cuda_is_ok():
    text = fixture_text(data_path("ompi_info", "ompi_info_parsable_grep_cuda_true.txt"))
    host = build_host({"mpirun": OMPI_VERSION, "ompi_info": text}, dirs=GPU_DIRS)
    findings = run_check(build.mpi_cuda_aware, host)
    assert statuses(findings) == [Status.OK] and "built with CUDA support" in findings[0].summary


def test_cuda_unknown_when_keys_missing_and_version_mismatch():
    text = fixture_text(data_path("ompi_info", "ompi_info_4.1.6_cuda_ucx_gcp_4xT4.txt"))
    host = build_host({"mpirun": OMPI_VERSION, "ompi_info": text})
    findings = run_check(build.mpi_cuda_aware, host)
    assert statuses(findings) == [Status.WARN, Status.WARN]
    assert "two Open MPI installs" in findings[0].summary
    assert "CUDA support unknown" in findings[1].summary


def test_ompi_info_hung_is_a_finding():
    host = build_host({"mpirun": OMPI_VERSION,
                       "ompi_info": CommandResult(("ompi_info",), None, "", "", 10.0, True)})
    findings = run_check(build.mpi_cuda_aware, host)
    assert statuses(findings) == [Status.WARN] and "did not finish" in findings[0].summary


def test_mpich_cuda_is_skipped_with_reason():
    findings = run_check(build.mpi_cuda_aware, build_host({"mpirun": MPICH_VERSION}))
    assert statuses(findings) == [Status.SKIP] and "MPICH 4.0.2" in findings[0].summary


def _mpi4py_host(library: str, mpirun: str = OMPI_VERSION):
    def python(argv):
        if "mpi4py" in argv[-1]:
            return CommandResult(tuple(argv), 0, '{"library": %s, "version": [3, 1], "config": {}}\n'
                                 % __import__("json").dumps(library))
        return CommandResult(tuple(argv), 0, "")
    from distdoctor.host import Distribution
    return build_host({"mpirun": mpirun}, python=python,
                      distributions={"mpi4py": Distribution("mpi4py", "4.0.1", "/venv", ())})


def test_mpi4py_against_other_mpi_fails():
    findings = run_check(build.mpi4py_mpi, _mpi4py_host("MPICH Version:\t4.0.2\nMPICH Release date: ...\n"))
    assert statuses(findings) == [Status.FAIL]
    assert "uses MPICH 4.0.2 but mpirun is Open MPI 4.1.4" in findings[0].summary


def test_mpi4py_matching_is_ok():
    findings = run_check(build.mpi4py_mpi, _mpi4py_host("Open MPI v4.1.4, package: Debian OpenMPI, ...\n"))
    assert statuses(findings) == [Status.OK] and "Open MPI 4.1.4" in findings[0].summary


def test_mpi4py_probe_crash_is_a_finding():
    from distdoctor.host import Distribution
    host = build_host(python=CommandResult(("python",), 1, "", "ImportError: libmpi.so.40: cannot open shared object"),
                      distributions={"mpi4py": Distribution("mpi4py", "4.0.1", "/venv", ())})
    findings = run_check(build.mpi4py_mpi, host)
    assert statuses(findings) == [Status.WARN] and "libmpi.so.40" in findings[0].summary


# --- NCCL -------------------------------------------------------------------------------------

SITE = "/venv/lib/python3.11/site-packages"
PIP_LIB = f"{SITE}/nvidia/nccl/lib/libnccl.so.2"


@pytest.mark.parametrize("code, text", [(23007, "2.30.7"), (22105, "2.21.5"), (2804, "2.8.4"), (2408, "2.4.8")])
def test_nccl_version_codes(code, text):
    assert nccl_version_string(code) == text


def test_single_pip_nccl_is_ok_with_table():
    host = build_host(python=nccl_probe({PIP_LIB: 23007, "libnccl.so.2": "cannot load: not found"}),
                      distributions={"nvidia-nccl-cu13": nccl_package("nvidia-nccl-cu13", "2.30.7", SITE)})
    findings = run_check(build.nccl_libraries, host)
    assert statuses(findings) == [Status.OK]
    assert findings[0].summary.startswith(f"NCCL 2.30.7 at {PIP_LIB} (pip nvidia-nccl-cu13)")
    assert findings[0].evidence["table"]["rows"] == [[PIP_LIB, "2.30.7", "pip nvidia-nccl-cu13",
                                                      "nvidia-nccl-cu13 2.30.7", "ok"]]


def test_two_pip_packages_overwriting_one_file():
    tdist, files = torch_package("2.7.1+cu126", "Requires-Dist: nvidia-nccl-cu12==2.26.2; platform_system == \"Linux\"\n",
                                 "USE_DISTRIBUTED;USE_C10D_GLOO;USE_C10D_NCCL", SITE)
    host = build_host(python=nccl_probe({PIP_LIB: 23007}), files=files,
                      distributions={"nvidia-nccl-cu12": nccl_package("nvidia-nccl-cu12", "2.26.2", SITE),
                                     "nvidia-nccl-cu13": nccl_package("nvidia-nccl-cu13", "2.30.7", SITE),
                                     "torch": tdist})
    findings = run_check(build.nccl_libraries, host)
    summaries = [f.summary for f in findings]
    assert statuses(findings) == [Status.WARN, Status.WARN, Status.OK], summaries
    assert "2 NCCL pip packages installed" in summaries[0]
    assert findings[0].fix == ("pip uninstall -y nvidia-nccl-cu13 && pip install --force-reinstall --no-deps "
                               "nvidia-nccl-cu12==2.26.2")
    # the file both packages claim is the cu13 one: pip's record of cu12 is stale
    assert "nvidia-nccl-cu12 2.26.2 is installed but its libnccl.so.2 is NCCL 2.30.7" in summaries[1]
    assert findings[1].fix == "pip install --force-reinstall --no-deps nvidia-nccl-cu12==2.26.2"
    assert findings[2].evidence["table"]["rows"][0][3] == "nvidia-nccl-cu12 2.26.2, nvidia-nccl-cu13 2.30.7"


def test_torch_pin_differs_from_installed_package():
    tdist, files = torch_package("2.7.1+cu126", "Requires-Dist: nvidia-nccl-cu12==2.26.2\n",
                                 "USE_DISTRIBUTED;USE_C10D_GLOO;USE_C10D_NCCL", SITE)
    host = build_host(python=nccl_probe({PIP_LIB: 22703}), files=files,
                      distributions={"nvidia-nccl-cu12": nccl_package("nvidia-nccl-cu12", "2.27.3", SITE),
                                     "torch": tdist})
    findings = run_check(build.nccl_libraries, host)
    assert statuses(findings) == [Status.WARN, Status.OK]
    assert "torch 2.7.1+cu126 was built against nvidia-nccl-cu12==2.26.2 but 2.27.3 is installed" in findings[0].summary
    assert findings[0].fix == "pip install nvidia-nccl-cu12==2.26.2"


def test_ld_library_path_shadowing_older_nccl_fails_with_fix():
    tdist, files = torch_package("2.7.1+cu126", "Requires-Dist: nvidia-nccl-cu12==2.26.2\n",
                                 "USE_DISTRIBUTED;USE_C10D_GLOO;USE_C10D_NCCL", SITE)
    host = build_host(python=nccl_probe({"/opt/nccl/lib/libnccl.so.2": 21805, PIP_LIB: 22602,
                                         "libnccl.so.2": (21805, "/opt/nccl/lib/libnccl.so.2")}),
                      env={"LD_LIBRARY_PATH": "/usr/local/cuda/lib64:/opt/nccl/lib"},
                      dirs={"/opt/nccl/lib": ["libnccl.so", "libnccl.so.2", "libnccl.so.2.18.5", "libnccl_static.a"],
                            "/usr/local/cuda/lib64": ["libcudart.so.12"]},
                      links={"/opt/nccl/lib/libnccl.so.2": "/opt/nccl/lib/libnccl.so.2.18.5"},
                      files=files,
                      distributions={"nvidia-nccl-cu12": nccl_package("nvidia-nccl-cu12", "2.26.2", SITE),
                                     "torch": tdist})
    findings = run_check(build.nccl_libraries, host)
    fails = [f for f in findings if f.status == Status.FAIL]
    assert len(fails) == 1
    assert "LD_LIBRARY_PATH puts NCCL 2.18.5 (/opt/nccl/lib/libnccl.so.2) ahead of pip's nvidia-nccl-cu12 2.26.2" \
        in fails[0].summary
    assert fails[0].fix == "export LD_LIBRARY_PATH=/usr/local/cuda/lib64"
    spread = [f for f in findings if "different NCCL versions" in f.summary]
    assert spread and "torch gets 2.18.5" in spread[0].explanation
    assert findings[-1].status == Status.OK and "2.18.5" in findings[-1].summary


def test_library_that_crashes_or_hangs_is_named_and_the_rest_still_probed():
    host = build_host(python=nccl_probe({"/bad/lib/libnccl.so.2": "crash", "/hung/lib/libnccl.so.2": "hang",
                                         "/good/lib/libnccl.so.2": 23007}),
                      env={"LD_LIBRARY_PATH": "/bad/lib:/hung/lib:/good/lib"},
                      dirs={"/bad/lib": ["libnccl.so.2"], "/hung/lib": ["libnccl.so.2"], "/good/lib": ["libnccl.so.2"]})
    findings = run_check(build.nccl_libraries, host)
    warns = {f.subject: f.summary for f in findings if f.status == Status.WARN}
    assert "crashed the process (exit status -11)" in warns["/bad/lib/libnccl.so.2"]
    assert "hung (killed after 20 s)" in warns["/hung/lib/libnccl.so.2"]
    assert findings[-1].status == Status.OK and "NCCL 2.30.7 at /good/lib/libnccl.so.2" in findings[-1].summary


def test_missing_symbol_and_ldconfig_cache():
    ldconfig = ("3 libs found in cache `/etc/ld.so.cache'\n"
                "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
                "\tlibnccl.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so\n"
                "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n")
    host = build_host({"ldconfig": ldconfig}, python=nccl_probe(
        {"/usr/lib/x86_64-linux-gnu/libnccl.so.2": "loads, but has no ncclGetVersion symbol (not an NCCL library, "
                                                   "or a stub)"}))
    findings = run_check(build.nccl_libraries, host)
    assert statuses(findings) == [Status.WARN]
    assert "ldconfig cache" in findings[0].summary and "no ncclGetVersion symbol" in findings[0].summary


def test_probe_that_cannot_start_is_reported():
    host = build_host(python=CommandResult(("python",), 126, "", "", error="permission denied"),
                      env={"LD_LIBRARY_PATH": "/good/lib"}, dirs={"/good/lib": ["libnccl.so.2"]})
    findings = run_check(build.nccl_libraries, host)
    assert any("NCCL probe could not run" in f.summary for f in findings)
    assert all(f.status != Status.OK or "NCCL 2" not in f.summary for f in findings)


def test_unreadable_ld_library_path_dir_is_reported():
    host = build_host(python=nccl_probe({}), env={"LD_LIBRARY_PATH": "/secret"})
    real_list_dir = host.list_dir

    def list_dir(path):
        if path == "/secret":
            raise PermissionError(13, "Permission denied")
        return real_list_dir(path)
    host.list_dir = list_dir
    findings = run_check(build.nccl_libraries, host)
    assert statuses(findings)[0] == Status.WARN and "/secret (LD_LIBRARY_PATH): Permission denied" in findings[0].summary


def test_no_nccl_but_torch_needs_it_fails():
    tdist, files = torch_package("2.7.1+cu126", "Requires-Dist: nvidia-nccl-cu12==2.26.2\n",
                                 "USE_DISTRIBUTED;USE_C10D_GLOO;USE_C10D_NCCL")
    host = build_host(python=nccl_probe({}), files=files, distributions={"torch": tdist})
    findings = run_check(build.nccl_libraries, host)
    assert statuses(findings) == [Status.FAIL] and findings[0].fix == "pip install nvidia-nccl-cu12==2.26.2"


def test_cuda_major_mismatch_uses_shared_torch_install_fact(monkeypatch):
    facts_mod.names()  # load the real providers first, then stand in for the GPU area's fact
    monkeypatch.setitem(facts_mod._PROVIDERS, "torch_install",
                        lambda facts: type("T", (), {"installed": True, "version": "2.7.1", "cuda": "12.6",
                                                     "location": SITE, "error": ""})())
    host = build_host(python=nccl_probe({PIP_LIB: 23007}),
                      distributions={"nvidia-nccl-cu13": nccl_package("nvidia-nccl-cu13", "2.30.7", SITE)})
    findings = run_check(build.nccl_libraries, host)
    assert statuses(findings) == [Status.WARN, Status.OK]
    assert "is for CUDA 13, but torch uses CUDA 12.6" in findings[0].summary
    assert findings[0].fix.startswith("pip uninstall -y nvidia-nccl-cu13")


# --- torch.distributed ------------------------------------------------------------------------

def test_cpu_torch_on_gpu_node_fails():
    tdist, files = torch_package("2.13.0+cpu")
    host = build_host(files=files, dirs=GPU_DIRS, distributions={"torch": tdist})
    findings = run_check(build.torch_distributed, host)
    assert statuses(findings) == [Status.FAIL]
    assert "backends: gloo (not built: nccl, mpi, ucc)" in findings[0].summary
    assert "download.pytorch.org/whl/cu" in findings[0].fix


def test_cuda_torch_backends_from_build_flags():
    tdist, files = torch_package("2.7.1+cu126", "", "USE_DISTRIBUTED;USE_C10D_GLOO;USE_C10D_NCCL;USE_C10D_UCC")
    findings = run_check(build.torch_distributed, build_host(files=files, dirs=GPU_DIRS, distributions={"torch": tdist}))
    assert statuses(findings) == [Status.OK]
    assert findings[0].evidence["backends"] == {"gloo": True, "nccl": True, "mpi": False, "ucc": True}


def test_torch_without_build_flags_asks_for_probe():
    tdist, files = torch_package("2.13.0", cmake_defines=None)
    findings = run_check(build.torch_distributed, build_host(files=files, distributions={"torch": tdist}))
    assert statuses(findings) == [Status.WARN] and "--probe-torch" in findings[0].fix


def test_torch_probe_reports_runtime_nccl_mismatch():
    tdist, files = torch_package("2.7.1+cu126", "Requires-Dist: nvidia-nccl-cu12==2.26.2\n",
                                 "USE_DISTRIBUTED;USE_C10D_GLOO;USE_C10D_NCCL")
    probe = ('@@dd-torch {"version": "2.7.1+cu126", "cuda": "12.6", "backends": {"gloo": true, "nccl": true, '
             '"mpi": false, "ucc": false}, "nccl": "2.18.5", "nccl_paths": ["/opt/nccl/lib/libnccl.so.2.18.5"]}\n')
    host = build_host(python=probe, files=files, dirs=GPU_DIRS, distributions={"torch": tdist})
    from distdoctor.api import Context
    from distdoctor.facts import Facts
    facts = Facts(host)
    facts.options = {"probe_torch": True}
    findings = list(build.torch_distributed.func(Context(facts, {})))
    assert statuses(findings) == [Status.OK, Status.WARN]
    assert findings[0].summary.endswith("from probe")
    assert "torch runs NCCL 2.18.5 but was built against nvidia-nccl-cu12==2.26.2" in findings[1].summary


def test_torch_absent_is_skip():
    assert statuses(run_check(build.torch_distributed, build_host())) == [Status.SKIP]


# --- Horovod ----------------------------------------------------------------------------------

def horovod_host(capture, gpus=False, frameworks=("torch",)):
    from distdoctor.host import Distribution
    text = capture if isinstance(capture, CommandResult) else fixture_text(data_path("horovod_check_build", capture))
    return build_host({"horovodrun": text}, dirs=GPU_DIRS if gpus else {},
                      distributions={name: Distribution(name, "1.0", "/venv", ()) for name in frameworks})


def test_horovod_nothing_built_fails_twice():
    findings = run_check(build.horovod, horovod_host("horovod-0.18.1_nothing_built.txt", gpus=True))
    assert statuses(findings) == [Status.FAIL, Status.FAIL, Status.WARN]
    assert "neither the MPI nor the Gloo controller" in findings[0].summary
    assert "PyTorch is installed but Horovod 0.18.1 was built without PyTorch support" in findings[1].summary
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in findings[2].fix and "horovod[pytorch]" in findings[2].fix


def test_horovod_pytorch_only_with_trailing_space_is_ok_on_gpu_node():
    findings = run_check(build.horovod, horovod_host("horovod-0.28.1_pytorch_only_trailing_space.txt", gpus=True))
    assert statuses(findings) == [Status.OK]
    assert findings[0].summary == ("Horovod 0.28.1: frameworks PyTorch; controllers MPI, Gloo; "
                                   "operations NCCL, MPI, Gloo")


def test_horovod_framework_in_use_not_built():
    findings = run_check(build.horovod, horovod_host("horovod-0.28.1_pytorch_only_trailing_space.txt",
                                                     frameworks=("torch", "tensorflow")))
    assert statuses(findings) == [Status.FAIL]
    assert "TensorFlow is installed but Horovod 0.28.1 was built without TensorFlow" in findings[0].summary
    assert findings[0].fix.startswith("HOROVOD_WITH_TENSORFLOW=1 ")


def test_horovod_check_build_hang_or_traceback():
    hung = run_check(build.horovod, horovod_host(CommandResult(("horovodrun",), None, "", "", 60.0, True)))
    assert statuses(hung) == [Status.WARN] and "did not finish" in hung[0].summary
    garbage = run_check(build.horovod, horovod_host(CommandResult(("horovodrun",), 0, "Segmentation fault\n")))
    assert statuses(garbage) == [Status.WARN] and "horovodrun" in garbage[0].summary


def test_horovod_absent_is_skip():
    assert statuses(run_check(build.horovod, build_host())) == [Status.SKIP]


def test_hung_launchers_are_asked_in_parallel():
    import time

    def hang(argv):
        time.sleep(1.0)
        return CommandResult(tuple(argv), None, "", "", 1.0, True)
    host = build_host({"mpirun": hang, "mpiexec": hang, "mpiexec.mpich": hang, "mpirun.openmpi": hang},
                      links={"/usr/bin/mpiexec.mpich": "/usr/bin/mpiexec.hydra"})
    start = time.monotonic()
    findings = run_check(build.mpi_implementation, host)
    assert time.monotonic() - start < 2.5  # four 1 s hangs, not one after the other
    assert [f.status for f in findings] == [Status.WARN] * 4
    assert all("did not finish" in f.summary for f in findings)


def test_no_nccl_anywhere_costs_no_probe_interpreter():
    from distdoctor.facts import Facts
    from distdoctor.testing import FakeHost

    host = FakeHost(env={"PATH": "/usr/bin"}, commands={("ldconfig", "-p"): "0 libs found in cache `/etc/ld.so.cache'\n"})
    libs = Facts(host).nccl_libraries
    assert libs.libraries == () and libs.default_path == ""
    assert "libnccl.so.2: cannot open shared object file" in libs.default_error
    assert not [c for c in host.calls if c[:2] == ("python", "-c")]
    # A libnccl in a directory the loader searches by default is still probed.
    host = FakeHost(env={"PATH": "/usr/bin"}, files={"/usr/lib/x86_64-linux-gnu/libnccl.so.2": "ELF"},
                    commands={("ldconfig", "-p"): "0 libs found in cache `/etc/ld.so.cache'\n"})
    _ = Facts(host).nccl_libraries
    assert [c for c in host.calls if c[:2] == ("python", "-c")]


# The GPU image of docs/gpu-truth.md: torch 2.11 from pip with its own NCCL 2.28.9, and a system
# libnccl 2.28.3 in the loader cache that a bare dlopen gets. The site directory is real (tmp_path):
# the fix names it, and a fix must name paths that exist (fixlint).
SYSTEM_LIB = "/lib/x86_64-linux-gnu/libnccl.so.2"


def _pip_torch_beside_system_nccl(site, env=None, bare="system"):
    tdist, files = torch_package("2.11.0+cu130", "Requires-Dist: nvidia-nccl-cu13==2.28.9\n",
                                 "USE_DISTRIBUTED;USE_C10D_GLOO;USE_C10D_NCCL", site)
    pip_lib = f"{site}/nvidia/nccl/lib/libnccl.so.2"
    versions = {pip_lib: 22809, SYSTEM_LIB: 22803}
    default = SYSTEM_LIB if bare == "system" else pip_lib
    ldconfig = f"1 libs found in cache `/etc/ld.so.cache'\n\tlibnccl.so.2 (libc6,x86-64) => {SYSTEM_LIB}\n"
    return build_host({"ldconfig": ldconfig}, python=nccl_probe({**versions, "libnccl.so.2": (versions[default], default)}),
                      env=env or {}, files=files,
                      dirs={os.path.dirname(pip_lib): ["libnccl.so.2"]},
                      distributions={"nvidia-nccl-cu13": nccl_package("nvidia-nccl-cu13", "2.28.9", site),
                                     "torch": tdist})


def test_a_bare_dlopen_getting_another_nccl_than_torch_is_named_with_a_fix_that_clears_it(tmp_path):
    site = str(tmp_path)
    lib_dir = tmp_path / "nvidia" / "nccl" / "lib"
    lib_dir.mkdir(parents=True)
    findings = run_check(build.nccl_libraries, _pip_torch_beside_system_nccl(site))
    (finding,) = [f for f in findings if f.status == Status.WARN]
    assert finding.summary == "torch loads NCCL 2.28.9, a plain dlopen of libnccl.so.2 gets 2.28.3"
    assert finding.fix.startswith(f"export LD_LIBRARY_PATH={lib_dir}   #")
    # applied: LD_LIBRARY_PATH names torch's directory, so the bare dlopen gets the same library
    after = run_check(build.nccl_libraries, _pip_torch_beside_system_nccl(
        site, env={"LD_LIBRARY_PATH": str(lib_dir)}, bare="pip"))
    assert [f.status for f in after] == [Status.OK, Status.OK], [f.summary for f in after]
    assert "torch and a plain dlopen both load NCCL 2.28.9; 1 other library on disk, loaded by neither" in after[0].summary
