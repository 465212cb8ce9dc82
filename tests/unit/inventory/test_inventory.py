"""The node inventory over captured outputs (FakeHost), and through the real command line."""

import glob
import json
import os
import re
import subprocess
import time

import pytest

from distdoctor import inventory
from distdoctor.facts import Facts
from distdoctor.host import CommandResult, Distribution
from distdoctor.parsers.nvidia_smi import QUERY_FIELDS
from distdoctor.testing import FakeHost
from tests.conftest import REPO, data_path, distdoctor_argv, load_report
from tests.harness.labhost import lab_host

H100_TABLE = data_path("nvidia_smi", "nvidia-smi_565_8xH100SXM_cuda12.7.txt")
QUERY = ("nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits")
TORCH_SITE = "/venv/lib/python3.11/site-packages"
VERSION_PY = ("__version__ = '2.5.1+cu124'\ndebug = False\ncuda: Optional[str] = '12.4'\n"
              "git_version = 'a8d6afb511a69687bbb2b7e88a3cf67917e1697e'\nhip: Optional[str] = None\n")


def csv_rows(n=8):
    return "".join(f"{i}, NVIDIA H100 80GB HBM3, GPU-{i:08x}-1111-2222-3333-444444444444, 00000000:{0x18 + i:02X}:00.0, "
                   f"81559, Enabled, Disabled, 0, 0x0000000000000000\n" for i in range(n))


def gpu_node(env=None, **overrides):
    """The lab's GPU-node namespace (real `ip -d -j link`, psutil and sysfs captures), the real
    nvidia-smi table of an 8xH100 node, IB ports, torch and NCCL packages."""
    files = {
        "/etc/os-release": 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n',
        "/proc/sys/kernel/random/boot_id": "4f3c2a9e-5b1d-4c8e-9a7f-0e6d2b1c3a44\n",
        "/etc/machine-id": "0123456789abcdef0123456789abcdef\n",
        "/proc/cpuinfo": "processor\t: 0\nmodel name\t: AMD EPYC 9454 48-Core Processor\n\nprocessor\t: 1\n",
        "/proc/self/cgroup": "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n",
        f"{TORCH_SITE}/torch/version.py": VERSION_PY,
        "/usr/include/cudnn_version.h": "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n",
        "/etc/nccl.conf": "NCCL_IB_HCA=mlx5_0\nNCCL_SOCKET_IFNAME=enp1s0f0\n",
    }
    for hca, state in (("mlx5_0", "4: ACTIVE"), ("mlx5_1", "1: DOWN")):
        base = f"/sys/class/infiniband/{hca}/ports/1"
        files.update({f"{base}/state": state + "\n", f"{base}/phys_state": "5: LinkUp\n",
                      f"{base}/rate": "400 Gb/sec (4X NDR)\n", f"{base}/link_layer": "InfiniBand\n"})
    commands = {("nvidia-smi",): open(H100_TABLE).read(), QUERY: csv_rows(),
                ("gcc", "--version"): "gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\nCopyright (C) 2021\n",
                ("nvcc", "--version"): "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, "
                                       "release 12.4, V12.4.131\n",
                "mpirun": "mpirun (Open MPI) 4.1.5\n\nReport bugs to http://www.open-mpi.org/community/help/\n"}
    distributions = {"torch": Distribution("torch", "2.5.1+cu124", TORCH_SITE),
                     "numpy": Distribution("numpy", "1.26.4", TORCH_SITE),
                     "nvidia-nccl-cu12": Distribution("nvidia-nccl-cu12", "2.21.5", TORCH_SITE),
                     "nvidia-cuda-runtime-cu12": Distribution("nvidia-cuda-runtime-cu12", "12.4.127", TORCH_SITE),
                     "requests": Distribution("requests", "2.31.0", TORCH_SITE)}
    host = lab_host(env=env or {}, files=files, commands=commands, hostname="gpu-a01")
    host._distributions = distributions
    host.rlimits = {"memlock": (-1, -1)}
    host.disk = {"/dev/shm": (64 * 2**20, 0, 64 * 2**20)}
    host._platform = {"release": "5.15.0-105-generic", "machine": "x86_64", "libc": "glibc-2.35",
                      "platform": "Linux-5.15.0-105-generic-x86_64-with-glibc2.35"}
    for key, value in overrides.items():
        setattr(host, key, value)
    return host


def collect(host, **kw):
    return inventory.collect(Facts(host), **kw)


def test_gpu_node_inventory_from_captures():
    inv = collect(gpu_node({"NCCL_DEBUG": "WARN", "NCCL_HOSTID": "", "CUDA_MODULE_LOADING": "LAZY"}))
    assert inv["os.name"] == "Ubuntu" and inv["os.version"] == "22.04" and inv["os.pretty"] == "Ubuntu 22.04.4 LTS"
    assert inv["kernel"] == "5.15.0-105-generic" and inv["libc"] == "glibc-2.35"
    # nvidia-smi's header (NVML is unavailable in the fake) and the --query-gpu rows
    assert inv["gpu.driver"] == "565.57.01" and inv["cuda.driver"] == "12.7"
    assert inv["gpu.count"] == 8 and inv["gpu.model"] == "NVIDIA H100 80GB HBM3" and inv["gpu.memory_mib"] == 81559
    assert len(inv["gpu.uuids"]) == 8 and inv["gpu.uuids"][0] == "GPU-00000000-1111-2222-3333-444444444444"
    assert inv["torch.version"] == "2.5.1+cu124" and inv["torch.cuda"] == "12.4" and inv["torch.debug"] is False
    assert inv["torch.build"] == "cuda" and inv["cuda.available"] is True
    assert inv["cuda.toolkit"] == "12.4" and inv["cuda.runtime"] == "12.4.127" and inv["cudnn"] == "9.1.0"
    assert inv["gcc"] == "11.4.0" and "clang" in inv and inv["clang"] is None
    assert inv["mpi.impl"] == "Open MPI" and inv["mpi.version"] == "4.1.5"
    assert inv["pip.torch"] == "2.5.1+cu124" and inv["pip.nvidia_nccl_cu12"] == "2.21.5"
    assert "pip.requests" not in inv  # only the packages that matter to training
    assert inv["limits.memlock"] == "unlimited" and inv["shm.size"] == 64 * 2**20
    assert inv["cpu.model"] == "AMD EPYC 9454 48-Core Processor" and inv["cpu.count"] == 8
    assert inv["cgroup.version"] == 2 and inv["cgroup"].endswith("/task_0")
    assert inv["host.name"] == "gpu-a01" and inv["host.boot_id"] == "4f3c2a9e-5b1d-4c8e-9a7f-0e6d2b1c3a44"
    assert inv["host.machine_id"] and "0123456789abcdef" not in inv["host.machine_id"]
    # NCCL_HOSTID set but empty still replaces the hostname + boot id string in NCCL
    assert inv["nccl.host_hash"] == inventory.nccl_host_hash("gpu-a01", None, "")
    assert inv["env.NCCL_DEBUG"] == "WARN" and "nccl.conf.NCCL_DEBUG" not in inv
    # /etc/nccl.conf's settings, unless the environment overrides them
    assert inv["nccl.conf.NCCL_SOCKET_IFNAME"] == "enp1s0f0" and inv["nccl.conf.NCCL_IB_HCA"] == "mlx5_0"
    assert inv["env.CUDA_MODULE_LOADING"] == "LAZY"
    # the lab namespace: docker0 bridge, veth, tap without carrier, admin-down enp2s0f1
    assert inv["net.if.docker0.kind"] == "bridge" and inv["net.if.docker0.address"] == "172.17.0.1/16"
    assert inv["net.if.enp2s0f1.state"] == "down" and inv["net.if.tap0.state"] == "no-carrier"
    assert not any(k.startswith("net.if.lo.") for k in inv)
    assert inv["ib.mlx5_0.1.state"] == "ACTIVE" and inv["ib.mlx5_1.1.state"] == "DOWN"
    assert inv["ib.mlx5_0.1.rate"] == "400 Gb/sec (4X NDR)" and inv["ib.mlx5_0.1.link_layer"] == "InfiniBand"
    assert "inventory.incomplete" not in inv
    # flat and JSON-safe: scalars or short lists of scalars, every name documented
    for name, value in inv.items():
        assert isinstance(value, (str, int, float, bool, type(None), list)), name
        assert not isinstance(value, list) or all(isinstance(v, (str, int, float, bool)) for v in value), name
        assert inventory.field_for(name) is not None, f"{name} is not in inventory.FIELDS"
    json.dumps(inv)


def test_bare_machine_gives_absent_facts_not_errors():
    inv = collect(FakeHost(hostname="login1"))
    assert inv["host.name"] == "login1" and inv["gpu.count"] == 0
    assert inv["host.boot_id"] is None and "nccl.host_hash" not in inv  # NCCL's string would differ
    assert "torch.version" not in inv and "mpi.impl" not in inv and "cuda.available" not in inv
    assert inv["os.name"] is None and "inventory.incomplete" not in inv


def test_unreadable_files_cost_only_their_facts():
    host = gpu_node()
    host.files["/proc/cpuinfo"] = PermissionError(13, "Permission denied")
    host.files["/proc/self/cgroup"] = OSError(5, "Input/output error")
    host.commands[QUERY] = "garbage, not, a, gpu\n"
    inv = collect(host)
    assert inv["cpu.model"] is None and "cgroup" not in inv
    assert inv["gpu.driver"] == "565.57.01" and "gpu.count" not in inv  # the rows are unreadable: unknown
    assert inv["torch.version"] == "2.5.1+cu124"


def test_a_row_that_fails_costs_only_itself_and_says_why():
    host = gpu_node()
    host._platform = None  # platform_info() now fails (TypeError); os-release still reads
    inv = collect(host)
    assert inv["os.name"] == "Ubuntu" and "kernel" not in inv and "arch" not in inv
    errors = inv["inventory.errors"]
    # the rows read from uname and the platform, each named with the error
    assert sorted(e.split(":")[0] for e in errors) == ["arch", "kernel", "libc", "python.platform"]
    assert all("Error: " in e for e in errors)
    assert inv["torch.version"] == "2.5.1+cu124"  # the other rows were read


def test_secret_looking_nccl_settings_are_redacted():
    inv = collect(gpu_node({"NCCL_NET_PLUGIN_TOKEN": "hunter2", "NCCL_DEBUG": "INFO", "RANK": "3"}))
    assert inv["env.NCCL_NET_PLUGIN_TOKEN"] == "<redacted>" and inv["env.NCCL_DEBUG"] == "INFO"
    assert "env.RANK" not in inv
    assert "hunter2" not in json.dumps(inv)


def test_a_hung_tool_cuts_the_inventory_at_its_bound():
    def hang(argv):
        time.sleep(3)
        return CommandResult(tuple(argv), 0, "")

    host = gpu_node()
    host.commands[("nvidia-smi",)] = hang
    start = time.monotonic()
    inv = collect(host, timeout=0.5)
    assert time.monotonic() - start < 1.5
    assert "gpu.count" in inv["inventory.incomplete"] and inv["host.name"] == "gpu-a01"
    assert inv["torch.version"] == "2.5.1+cu124"  # quick rows are read before the slow ones
    assert "gpu.count" not in inv


def test_nccl_host_hash_matches_djb2a_over_signed_chars():
    # 5381*33 ^ ord('a') = 177573 ^ 97
    assert inventory.nccl_host_hash("a", None) == f"{177573 ^ 97:x}"
    # the boot id's first word follows the hostname; NCCL_HOSTID replaces both
    assert inventory.nccl_host_hash("n1", "abc\n") == inventory.nccl_host_hash("n1abc", None)
    assert inventory.nccl_host_hash("n1", "abc", hostid="xyz") == inventory.nccl_host_hash("xyz", None)
    assert inventory.nccl_host_hash("n1", "b1") != inventory.nccl_host_hash("n1", "b2")


def test_nccl_host_hash_agrees_with_nccls_c_code(tmp_path):
    """The same function compiled as C (NCCL's getHash and getHostHash body, including the
    sign extension of char and 64-bit wraparound), over names with non-ASCII bytes."""
    gcc = subprocess.run(["sh", "-c", "command -v gcc"], capture_output=True, text=True, timeout=10).stdout.strip()
    if not gcc:
        pytest.skip("no C compiler")
    src = tmp_path / "hash.c"
    src.write_text(r'''
#include <stdio.h>
#include <stdint.h>
#include <string.h>
static uint64_t getHash(const char* string, int n) {
  uint64_t result = 5381;
  for (int c = 0; c < n; c++) result = ((result << 5) + result) ^ string[c];
  return result;
}
int main(int argc, char** argv) {
  char buf[1024];
  snprintf(buf, sizeof(buf), "%s%s", argv[1], argv[2]);
  printf("%lx\n", getHash(buf, strlen(buf)));
  return 0;
}
''')
    exe = tmp_path / "hash"
    subprocess.run([gcc, "-O0", "-o", str(exe), str(src)], check=True, timeout=60)
    for name, boot in (("node01", "4f3c2a9e-5b1d-4c8e-9a7f-0e6d2b1c3a44"), ("gpu-ä01", "x"),
                       ("a-very-long-hostname-" * 5, "ffffffff-ffff-ffff-ffff-ffffffffffff")):
        c = subprocess.run([str(exe), name, boot], capture_output=True, text=True, timeout=10).stdout.strip()
        assert inventory.nccl_host_hash(name, boot) == c, name


def test_every_collect_env_field_has_an_inventory_name():
    """Real `python -m torch.utils.collect_env` outputs: each label it prints is answered."""
    files = glob.glob(data_path("collect_env", "*.txt"))
    assert files
    top = {"CPU", "Versions of relevant libraries"}
    seen = set()
    for path in files:
        for line in open(path, encoding="utf-8", errors="replace"):
            m = re.match(r"^([A-Za-z][A-Za-z_ ()]+?):( |$)", line)
            # lscpu's lines under CPU: and `GPU 0: ...` lines belong to their sections
            if m and not line.startswith(("GPU ", "Vulnerability", "Collecting")) and (
                    m.group(1) in inventory.COLLECT_ENV or " version" in m.group(1) or m.group(1).startswith("Is ")):
                seen.add(m.group(1))
    seen |= top
    missing = sorted(label for label in seen if label not in inventory.COLLECT_ENV)
    assert not missing, f"collect_env prints {missing} and the inventory does not say where it answers them"
    names = {row.name for row in inventory.FIELDS}
    for label, name in inventory.COLLECT_ENV.items():
        assert name is None or name in names, label


def test_snapshot_leaves_out_identity_addresses_and_the_environment():
    inv = collect(gpu_node({"NCCL_DEBUG": "INFO"}))
    chosen = inventory.snapshot_names(inv)
    assert "gpu.count" in chosen and "gpu.driver" in chosen and "limits.memlock" in chosen
    assert not any(n.startswith(("host.", "net.if.", "env.")) or n in ("nccl.host_hash", "gpu.uuids", "cgroup")
                   for n in chosen)
    assert "nccl.conf.NCCL_IB_HCA" in chosen  # /etc/nccl.conf is the node's own
    text = inventory.snapshot_toml(inv, "gpu-a01")
    import tomllib

    table = tomllib.loads(text)["expect"]
    assert table["gpu.count"] == 8 and table["limits.memlock"] == "unlimited"


def test_docs_inventory_is_generated_from_the_table():
    committed = open(os.path.join(REPO, "docs", "inventory.md")).read()
    from distdoctor.docgen import inventory_markdown

    assert committed == inventory_markdown(), \
        "docs/inventory.md is stale: run `python -m distdoctor.docgen inventory > docs/inventory.md`"


def test_check_json_carries_the_inventory_and_console_does_not():
    proc = subprocess.run([*distdoctor_argv(), "check", "--only", "host", "--format", "json"],
                          capture_output=True, text=True, timeout=120)
    doc = load_report(proc.stdout)
    inv = doc["inventory"]
    assert inv["host.name"] == doc["host"] and inv["python.version"].count(".") == 2
    console = subprocess.run([*distdoctor_argv(), "check", "--only", "host", "-v"],
                             capture_output=True, text=True, timeout=120)
    assert "host.boot_id" not in console.stdout and "python.executable" not in console.stdout


def _interface(key: str) -> str | None:
    # net.if.<name>.<field>; a VLAN's name has a dot of its own (eth0.100)
    return key[len("net.if."):key.rfind(".")] if key.startswith("net.if.") and key.count(".") >= 3 else None


def _interfaces(table) -> set[str]:
    return {name for name in map(_interface, table) if name is not None}


def test_inventory_command_prints_lines_and_json():
    text = subprocess.run([*distdoctor_argv(), "inventory"], capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    lines = dict(line.split(" = ", 1) for line in text.stdout.splitlines())
    doc = subprocess.run([*distdoctor_argv(), "inventory", "--format", "json"], capture_output=True, text=True,
                         timeout=120)
    data = json.loads(doc.stdout)
    assert json.loads(lines["host.name"]) == data["host.name"]
    # Other tests of a parallel suite add and remove veths in this namespace between the runs.
    came_or_went = _interfaces(lines) ^ _interfaces(data)
    lines = {k: v for k, v in lines.items() if _interface(k) not in came_or_went}
    data = {k: v for k, v in data.items() if _interface(k) not in came_or_went}
    if "inventory.incomplete" in lines or "inventory.incomplete" in data:
        # A loaded machine cut one run at its bound: the rows read must still be a prefix of
        # the same table, named the same in both formats.
        shorter, longer = sorted((set(lines), set(data)), key=len)
        assert shorter - {"inventory.incomplete"} <= longer, shorter ^ longer
    else:
        assert set(lines) == set(data), set(lines) ^ set(data)


SITE = "/venv/lib/python3.11/site-packages"
PIP_LIB = f"{SITE}/nvidia/nccl/lib/libnccl.so.2"


def test_nccl_version_is_what_the_loader_loads_and_every_version_found_is_listed():
    from tests.harness.buildhost import build_host, nccl_package, nccl_probe

    host = build_host(python=nccl_probe({"/opt/nccl/lib/libnccl.so.2": 21805, PIP_LIB: 22602,
                                         "libnccl.so.2": (21805, "/opt/nccl/lib/libnccl.so.2")}),
                      env={"LD_LIBRARY_PATH": "/opt/nccl/lib"},
                      dirs={"/opt/nccl/lib": ["libnccl.so.2", "libnccl.so.2.18.5"]},
                      links={"/opt/nccl/lib/libnccl.so.2": "/opt/nccl/lib/libnccl.so.2.18.5"},
                      distributions={"nvidia-nccl-cu12": nccl_package("nvidia-nccl-cu12", "2.26.2", SITE)})
    inv = collect(host)
    assert inv["nccl.version"] == "2.18.5"  # LD_LIBRARY_PATH wins over the pip package for dlopen
    assert sorted(inv["nccl.versions"]) == ["2.18.5", "2.26.2"]
    assert inv["pip.nvidia_nccl_cu12"] == "2.26.2"


def test_a_single_nccl_needs_no_versions_list():
    from tests.harness.buildhost import build_host, nccl_package, nccl_probe

    host = build_host(python=nccl_probe({PIP_LIB: 23007, "libnccl.so.2": "cannot load: not found"}),
                      distributions={"nvidia-nccl-cu13": nccl_package("nvidia-nccl-cu13", "2.30.7", SITE)})
    inv = collect(host)
    assert inv["nccl.version"] == "2.30.7" and "nccl.versions" not in inv
