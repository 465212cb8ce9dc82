"""How many of the labelled real captures the hardware checks judge right (docs/hardware.md).

Every capture in tests/data/{nvidia_smi_q,kernel_log,nvlink,fabric_manager,dcgmi,perfquery,
nvidia_smi_fabric,imex,ibstat,ibdiagnet}/INDEX.md and tests/data/ib_sysfs has a label: faulty (a fault a node should
be drained or inspected for), app (only the application's own errors), warning (worth a look, never
a drain) or healthy. Each is put on a FakeHost the way the checks read a live node (nvidia-smi
-q/-q -x answered from the capture, a kernel log as /dev/kmsg, a sysfs tree as files, dcgmi health
-c as dcgmi's answer) and the checks that read it run through the engine; the outputs distdoctor
reads only from a paste (dcgmi diag, perfquery, ibqueryerrors, a Fabric section, nvidia-imex-ctl)
go through `distdoctor log`'s paste reader (ibstat and ibdiagnet too). Printed: per capture the verdict, then faults named,
false drains of healthy or application-only nodes.

    python bench/hardware_accuracy.py

Kernel logs are judged by gpu.xid, gpu.pcie-link, ib.link-flaps and ib.hca-health (on a node with one HCA).
"""

from __future__ import annotations

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from distdoctor.checks import dcgm, gpufabric, gpuhealth, ib  # noqa: E402
from distdoctor.hardware.actions import needs_drain  # noqa: E402
from distdoctor.logs import pasted  # noqa: E402
from distdoctor.model import Status  # noqa: E402
from distdoctor.testing import FakeHost, fixture_text, run_check  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data")
TABLE = os.path.join(DATA, "nvidia_smi", "nvidia-smi_565_8xH100SXM_cuda12.7.txt")
H100 = os.path.join(DATA, "nvidia_smi_q", "q_535_8xH100_hw_slowdown_power_brake_fabric_completed.txt")
PASTED = ("perfquery", "nvidia_smi_fabric", "imex", "ibstat", "ibdiagnet")
GPU_CHECKS = [gpuhealth.memory_errors, gpuhealth.pcie_link, gpuhealth.throttle, gpufabric.mig_consistency,
              gpufabric.fabric]


def labels(folder: str) -> dict[str, str]:
    out = {}
    for line in open(os.path.join(DATA, folder, "INDEX.md")):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)]  # a `\|` inside a cell is text
        word = re.split(r"[:\s(]", cells[3], maxsplit=1)[0] if len(cells) > 4 else ""
        name = cells[1].strip("`") if len(cells) > 4 else ""
        # a row naming no file (an empty answer recorded in prose) has nothing to replay
        if word in ("faulty", "healthy", "app", "warning") and os.path.isfile(os.path.join(DATA, folder, name)):
            out[name] = word
    return out


def verdict(findings) -> str:
    if any(f.status is Status.FAIL and needs_drain(f.action) for f in findings):
        return "drain"
    if any(f.status in (Status.FAIL, Status.WARN) and f.action not in ("", "none", "app-error") for f in findings):
        return "inspect"
    if any(f.action == "app-error" for f in findings):
        return "app"
    return "ok"


def judge(folder: str, name: str) -> str:
    text = fixture_text(os.path.join(DATA, folder, name))
    base = {("nvidia-smi",): fixture_text(TABLE)}
    if folder == "nvidia_smi_q":
        key = ("nvidia-smi", "-q", "-x") if name.endswith(".xml") else ("nvidia-smi", "-q")
        host = FakeHost(commands={**base, key: text, (*key, "-d", "PERFORMANCE"): text})
        findings = [f for c in GPU_CHECKS for f in run_check(c, host, {"window_seconds": 0.05})]
    elif folder == "kernel_log":
        host = FakeHost(commands={**base, ("nvidia-smi", "-q"): fixture_text(H100)},
                        files={"/dev/kmsg": text, "/proc/uptime": "100000 0\n"})
        findings = [f for c in (gpuhealth.xid_errors, gpuhealth.pcie_link)
                    for f in run_check(c, host, {"window_hours": 1e9})]
        # the RDMA link changes, on a node with one HCA (link-flaps skips a node without)
        host = FakeHost(files={"/dev/kmsg": text, "/proc/uptime": "100000 0\n",
                               "/sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n"},
                        dirs={"/sys/class/infiniband": ["mlx5_0"], "/sys/class/infiniband/mlx5_0/ports": ["1"]})
        findings += run_check(ib.link_flaps, host, {"window_hours": 1e9})
        findings += run_check(ib.hca_health, host, {"window_hours": 1e9})
    elif folder == "fabric_manager":
        nvswitch = "nothing_to_do" not in name  # the cube-studio node has two PCIe GPUs, no NVSwitch
        query = fixture_text(H100 if nvswitch else os.path.join(DATA, "nvidia_smi_q", "q_535_8xRTX4090_idle_gen1_healthy.txt"))
        host = FakeHost(commands={**base, ("nvidia-smi", "-q"): query,
                                  ("systemctl", "is-active", "nvidia-fabricmanager"): "active\n",
                                  ("journalctl", "-u", "nvidia-fabricmanager", "-b", "--no-pager", "-q"): text})
        findings = run_check(gpufabric.fabric, host, {"window_hours": 1e9})
    elif folder == "dcgmi" and name.startswith("health_c"):
        findings = run_check(dcgm.dcgm_health, FakeHost(commands={("dcgmi", "health", "-c"): text}))
    elif folder in PASTED or folder == "dcgmi":
        runs = pasted.runs([(name, "pasted:\n" + text + "\n")])
        findings = [f for r in runs if not r.id.startswith("log.") or r.id == "log.pasted-output" for f in r.findings]
    else:  # nvlink -e: links from a status with every listed link active
        gpus = sorted({int(g) for g in re.findall(r"^GPU (\d+):", text, re.M)})
        status = "".join(f"GPU {g}: x (UUID: GPU-{g})\n" + "".join(f"\t Link {i}: 25 GB/s\n" for i in range(6))
                         for g in gpus)
        host = FakeHost(commands={**base, ("nvidia-smi", "-q"): fixture_text(H100),
                                  ("nvidia-smi", "nvlink", "-s"): status if "_e_" in name else text,
                                  ("nvidia-smi", "nvlink", "-e"): text if "_e_" in name else ""})
        findings = run_check(gpuhealth.nvlink, host)
    return verdict(findings)


def main() -> int:
    named = faults = false_drains = clean = 0
    warned = warnings = 0
    for folder in ("nvidia_smi_q", "kernel_log", "nvlink", "fabric_manager", "dcgmi", *PASTED):
        for name, label in sorted(labels(folder).items()):
            got = judge(folder, name)
            if label == "warning":  # looked at, never drained
                warnings += 1
                warned += got == "inspect" or got == "ok"
                print(f"{'ok ' if got != 'drain' else 'BAD'} {label:<8} {got:<8} {folder}/{name}")
                false_drains += got == "drain"
                continue
            right = (got in ("drain", "inspect")) if label == "faulty" else (got in ("ok", "app"))
            print(f"{'ok ' if right else 'BAD'} {label:<8} {got:<8} {folder}/{name}")
            if label == "faulty":
                faults += 1
                named += got in ("drain", "inspect")
            else:
                clean += 1
                false_drains += got == "drain"
    tree = os.path.join(DATA, "ib_sysfs", "h100_8hca_gpud")
    files = {"/proc/uptime": "100000 0\n"}
    for base, _d, names in os.walk(tree):
        for n in names:
            files["/sys/class/infiniband/" + os.path.relpath(os.path.join(base, n), tree)] = open(os.path.join(base, n)).read()
    got = verdict(run_check(ib.port_counters, FakeHost(files=files), {"sample_seconds": 0.01}))
    faults += 1
    named += got in ("drain", "inspect")
    print(f"{'ok ' if got != 'ok' else 'BAD'} faulty   {got:<8} ib_sysfs/h100_8hca_gpud")
    print(f"\nfaults named: {named} of {faults}; false drains: {false_drains} of {clean + warnings} healthy, "
          f"application-only or warning-only ({warnings} warning-only, none drained: {warned == warnings})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
