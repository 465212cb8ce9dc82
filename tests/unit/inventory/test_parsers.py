"""The parsers the inventory's rows read through, over real captures (tests/data/*/INDEX.md)."""

from distdoctor.parsers.cpuinfo import parse_cpu_flags, parse_cpu_model, parse_mem_total_kib
from distdoctor.parsers.os_release import parse_os_release
from distdoctor.parsers.proc_cgroup import CgroupMembership, parse_proc_cgroup
from distdoctor.parsers.tool_version import parse_nvcc_version, parse_version_banner
from distdoctor.parsers.version_header import parse_cudnn_version_h, parse_miopen_version_h
from tests.conftest import data_path


def read(*parts):
    with open(data_path(*parts)) as fh:
        return fh.read()


def test_os_release_of_debian_12():
    release = parse_os_release(read("os_release", "debian12_bookworm.txt"))
    assert (release.name, release.version_id, release.pretty_name) == (
        "Debian GNU/Linux", "12", "Debian GNU/Linux 12 (bookworm)")
    assert parse_os_release("# only a comment\n\nNAME=x\n").version_id is None


def test_cpuinfo_model_and_flags():
    text = read("cpuinfo", "amd_epyc_vm_first_processor.txt")
    assert parse_cpu_model(text) == "AMD EPYC"
    flags = parse_cpu_flags(text)
    assert {"avx2", "fma", "sse4_2"} <= set(flags) and "processor" not in flags
    assert parse_cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n") is None  # arm64 names no model
    assert parse_cpu_flags("Features\t: fp asimd evtstrm\n") == ["fp", "asimd", "evtstrm"]
    assert parse_mem_total_kib("MemTotal:       24589952 kB\nMemFree: 1 kB\n") == 24589952
    assert parse_mem_total_kib("MemFree: 1 kB\n") is None


def test_proc_cgroup_hybrid_is_version_1_at_the_cpu_controller():
    assert parse_proc_cgroup(read("proc_cgroup", "hybrid_v1_with_unified_root_debian12_vm.txt")) == \
        CgroupMembership(1, "/")
    assert parse_proc_cgroup("0::/system.slice/slurmstepd.scope/job_42\n") == \
        CgroupMembership(2, "/system.slice/slurmstepd.scope/job_42")
    assert parse_proc_cgroup("") is None


def test_tool_versions():
    assert parse_version_banner(read("tool_version", "gcc_12.2.0_debian12.txt")) == "12.2.0"
    assert parse_version_banner(read("tool_version", "cmake_3.25.1_debian12.txt")) == "3.25.1"
    nvcc = read("tool_version", "nvcc_13.0.88.txt")
    assert parse_nvcc_version(nvcc) == "13.0"  # the release line, not V13.0.88 or the build line
    assert parse_version_banner("no version here") is None and parse_nvcc_version("") is None


def test_version_headers():
    cudnn = "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n"
    assert parse_cudnn_version_h(cudnn) == "9.1.0"
    assert parse_miopen_version_h("#define MIOPEN_VERSION_MAJOR 3\n") == "3.0.0"
    assert parse_cudnn_version_h("/* nothing */") is None
