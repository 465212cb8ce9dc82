"""Pasted GPU-driver output: nvidia-smi when it cannot reach the driver ("NVIDIA-SMI has failed",
"No devices were found"), GPU boxes of its table quoted without the header, readings it prints
as ERR!, a table cut off in the GPU list, the kernel's word that the driver did not bind to the
GPUs ("The NVIDIA probe routine was not called"), and what a pasted ibstat shows port by port
(with `ibpanic` lines, where ibstat could not read a device).

What the paste cannot show stays unknown: a table cut off inside its GPU list has at least the
GPUs it shows, never "0 GPUs"; a GPU box without the header says nothing of the driver.
pasted.py finds the sections and calls in here."""

from __future__ import annotations

import re

from distdoctor.model import CheckRun, Finding, Status
from distdoctor.text import plural

KINDS = ("smi_failed", "smi_nvml", "smi_no_devices", "smi_fragment", "driver_unbound", "ibpanic", "nvlink", "lspci",
         "ibdev2netdev", "remap_fragment", "reset_required")

# "couldn't" is pasted with typographic apostrophes too (couldn‘t, couldn’t)
_FAILED = re.compile(r"^NVIDIA-SMI has failed because it couldn.t communicate with the NVIDIA driver\b")
_NVML = re.compile(r"^Failed to initialize NVML: (?P<why>\S.*?)\s*$")
# the same failure met by the container runtime's hook (nvidia-container-cli, under docker or
# kubelet: "initialization error: nvml error: driver/library version mismatch: unknown")
_NVML_HOOK = re.compile(r"nvidia-container-cli: initialization error: nvml error: (?P<why>[^:]+?)(?:: unknown)?\s*$")
_NVML_LIBRARY = re.compile(r"^NVML library version: (?P<version>\S+)\s*$")
# what each reason NVML gives means, and what to do on the node it came from
_NVML_WHY = {
    "driver/library version mismatch": (
        "The NVIDIA kernel module that is loaded is not the version of the user-space driver: the driver was "
        "upgraded (by hand, or by unattended upgrades) under the running module. Nothing CUDA runs there until "
        "they match again.",
        "# on that node: the loaded module's version, against the library's\ncat /proc/driver/nvidia/version\n"
        "# then reboot it (or, with no GPU process left, unload and load the nvidia modules)"),
    "unknown error": (
        "NVML could not open the GPUs. In a container that had them, it lost access to the device nodes: systemd "
        "reloaded the container's cgroup (`systemctl daemon-reload`, also run by package upgrades; "
        "nvidia-docker#1730) and the container must be started again. On a host, see the kernel log for an Xid.",
        "# on the host: start the container again; then see nvidia-docker#1730 for the device-node workaround\n"
        "dmesg -T | grep -i -E 'NVRM|Xid' | tail -n 20"),
}
_NO_DEVICES = re.compile(r"^No devices were found\s*$")
_BOX_GPU_ROW = re.compile(r"^\|\s*\d+\s+\S.*?\s(?:On|Off)\s*\|\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d")
_BOX_LINE = re.compile(r"^[|+]")
_UNBOUND = re.compile(r"NVRM: (?:The NVIDIA probe routine was not called for (?P<count>\d+) device|"
                      r"No NVIDIA (?:graphics adapter|GPU) (?:probed|found))")
_NVRM = re.compile(r"NVRM:|nvidia-nvlink:")
_IBPANIC = re.compile(r"^ibpanic: (?:\[\d+\] )?\S+: (?P<what>.+)$")
# the UUID is sometimes elided in a paste: "(UUID: ...)"
# a health block of nvidia-smi -q quoted without its GPU (leptonai/gpud#80: Remapped Rows), and the
# driver's own word that a GPU must be reset (GSP: "Assertion failed: Reset required [NV_ERR_RESET_REQUIRED]")
_HEALTH_HEAD = re.compile(r"^(?P<head>Remapped Rows|Retired Pages|GPU Reset Status)\s*$")
# words a single space apart, then nvidia-smi's padding: no two parts can take the same spaces,
# so a line of 32 KiB of blanks is read in one pass (a lazy key before \s* was quadratic)
_HEALTH_FIELD = re.compile(r"^(?P<key>[A-Z]\w*(?: \w+)*) *:\s*(?P<value>\S(?:.*\S)?)\s*$")
# what is pending in each block, in the words of its own fields (R470-R580)
_PENDING = {"Pending": "a row remap is pending", "Pending Page Blacklist": "a page retirement is pending",
            "Pending Page Retirement": "a page retirement is pending", "Reset Required": "the driver requires a reset",
            "Drain and Reset Recommended": "the driver recommends draining and resetting it"}
_RESET_REQUIRED = re.compile(r"NVRM: .*(?:\[NV_ERR_RESET_REQUIRED\]|Reset required)")
_NVLINK_GPU = re.compile(r"^GPU \d+: .*\(UUID: ")
_NVLINK_LINE = re.compile(r"^(?:GPU \d+: |Link \d+: |\.{3,}$|…$|\[\.\.\.\]$)")
# boards whose every NVLink is wired (SXM/OAM on HGX and DGX baseboards, Grace superchips): an
# inactive link there is a fault, where on PCIe cards with bridges it is an unused port
_ALL_WIRED = re.compile(r"SXM|HBM3|\bB[23]00\b", re.I)
_PCI = re.compile(r"\b[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\b")
_WHERE_IT_RAN = "# on the node (or in the container) where nvidia-smi ran:\n"


def detect(lines: list[str], i: int) -> tuple[str, int] | None:
    """(kind, end) when one of these starts at lines[i]."""
    body = lines[i].strip()
    if _FAILED.match(body):
        end = i + 1
        # the sentence's end, wrapped onto the next line ("Make sure\n that the latest ...")
        while end < len(lines) and end - i < 3 and "installed and running" not in lines[end - 1]:
            end += 1
        return "smi_failed", end
    if _NVML_HOOK.search(body):
        return "smi_nvml", i + 1
    if _NVML.match(body):
        end = i + 1 + (i + 1 < len(lines) and bool(_NVML_LIBRARY.match(lines[i + 1].strip())))
        return "smi_nvml", end
    if _NO_DEVICES.match(body):
        return "smi_no_devices", i + 1
    if _BOX_GPU_ROW.match(body) or (body.startswith("+-") and i + 1 < len(lines)
                                    and _BOX_GPU_ROW.match(lines[i + 1].strip())):
        end = i + 1
        while end < len(lines) and end - i < 2000 and _BOX_LINE.match(lines[end].strip()):
            end += 1
        return "smi_fragment", end
    if _UNBOUND.search(body):
        end = i + 1
        while end < len(lines) and end - i < 40 and _NVRM.search(lines[end]):
            end += 1
        return "driver_unbound", end
    if _IBPANIC.match(body):
        return "ibpanic", i + 1
    if _HEALTH_HEAD.match(body) and i + 1 < len(lines) and _HEALTH_FIELD.match(lines[i + 1].strip()):
        # the block is what is indented under its head (Retired Pages nests a level more on old drivers)
        indent = len(lines[i]) - len(lines[i].lstrip())
        end = i + 1
        while end < len(lines) and end - i < 40 and lines[end].strip() and \
                len(lines[end]) - len(lines[end].lstrip()) > indent:
            end += 1
        return "remap_fragment", end
    if _RESET_REQUIRED.search(body) or (_NVRM.search(body) and i + 1 < len(lines)
                                        and _RESET_REQUIRED.search(lines[i + 1])):
        end = i + 1
        while end < len(lines) and end - i < 40 and _NVRM.search(lines[end]):
            end += 1
        return "reset_required", end
    from distdoctor.parsers.ibdev2netdev import is_ibdev2netdev_line
    from distdoctor.parsers.lspci import is_lspci_line

    for kind, is_line in (("lspci", is_lspci_line), ("ibdev2netdev", is_ibdev2netdev_line)):
        if is_line(body):
            end = i + 1
            while end < len(lines) and end - i < 5000 and is_line(lines[end].strip()):
                end += 1
            return kind, end
    if _NVLINK_GPU.match(body) and i + 1 < len(lines) and lines[i + 1].strip().startswith("Link "):
        end = i + 1
        while end < len(lines) and end - i < 5000 and _NVLINK_LINE.match(lines[end].strip()):
            end += 1
        return "nvlink", end
    return None


def _note(where: str, status: Status, summary: str, title: str, evidence: dict, **kw) -> CheckRun:
    return CheckRun("log.pasted-output", title, ("log", "pasted", "gpu"), status,
                    (Finding(status, summary, subject=where, evidence=evidence, **kw),), 0.0, f"pasted at {where}")


def runs(kind: str, text: str, where: str, _env: dict[str, str]) -> list[CheckRun]:
    if kind == "smi_failed":
        return [_note(where, Status.FAIL, "pasted `nvidia-smi`: it could not communicate with the NVIDIA driver "
                                          "where it ran", f"nvidia-smi (pasted at {where})", {"output": text[:400]},
                      explanation="The NVIDIA kernel module is not loaded or does not match the user-space "
                                  "driver (a kernel update without the module rebuilt, nouveau holding the GPUs), "
                                  "or, in a container, the container was started without the NVIDIA runtime or "
                                  "its image carries driver libraries of its own. No CUDA program can run there. "
                                  "The paste does not show which of these it is.",
                      fix=_WHERE_IT_RAN + "lsmod | grep -w nvidia\ndmesg -T | grep -i -E 'NVRM|nvidia' | tail -n 20\n"
                          "# a container: start it with the NVIDIA runtime (docker run --gpus all ...)")]
    if kind == "smi_nvml":
        first, _nl, rest = text.strip().partition("\n")
        why = _NVML.match(first.strip()) or _NVML_HOOK.search(first.strip())
        tool = "`nvidia-container-cli` (the container runtime's hook)" if _NVML_HOOK.search(first) else "`nvidia-smi`"
        reason = why["why"] if why else first.strip()
        library = _NVML_LIBRARY.match(rest.strip())
        explanation, fix = _NVML_WHY.get(reason.lower().rstrip("."), (
            "NVML, the library nvidia-smi and every GPU tool use, could not start, so no GPU is usable from where "
            "it ran; the reason is NVML's own.", _WHERE_IT_RAN + "nvidia-smi\ndmesg -T | grep -i NVRM | tail -n 20"))
        return [_note(where, Status.FAIL, f"pasted {tool}: Failed to initialize NVML: {reason[:120]}"
                      + (f" (NVML library version {library['version']})" if library else ""),
                      f"nvidia-smi (pasted at {where})", {"reason": reason[:200],
                                                          "library": library["version"] if library else None},
                      explanation=explanation, fix=fix)]
    if kind == "smi_no_devices":
        return [_note(where, Status.FAIL, "pasted `nvidia-smi`: No devices were found: the driver answered but "
                                          "lists no GPU where it ran", f"nvidia-smi (pasted at {where})", {},
                      explanation="The driver is loaded but enumerates no GPU: in a container, none was passed in "
                                  "(--gpus, NVIDIA_VISIBLE_DEVICES, the device plugin); on a host, the driver could "
                                  "not initialise the GPU (RmInitAdapter failed in the kernel log) or it fell off "
                                  "the bus. Jobs there see no GPU.",
                      fix=_WHERE_IT_RAN + "lspci -d 10de:\ndmesg -T | grep -i -E 'NVRM|Xid' | tail -n 20")]
    if kind == "smi_fragment":
        from distdoctor.parsers import ParseError
        from distdoctor.parsers.nvidia_smi import parse_table

        try:
            table = parse_table(text, fragment=True)
        except (ParseError, ValueError, OverflowError) as exc:
            return [_note(where, Status.WARN, f"pasted nvidia-smi GPU boxes at {where} could not be read: {exc}",
                          "Tool output pasted into the log", {})]
        return table_runs(table, where)
    if kind == "nvlink":
        return _nvlink(text, where)
    if kind == "remap_fragment":
        return _remap_fragment(text, where)
    if kind == "reset_required":
        gpus = sorted(set(_PCI.findall(text)))
        which = f"GPU {', '.join(gpus[:4])}" if gpus else "a GPU (which one the lines do not show)"
        summary = f'pasted kernel log: the driver reports "Reset required" (NV_ERR_RESET_REQUIRED) for {which}'
        return [_note(where, Status.FAIL, summary + ": it must be reset", f"NVIDIA driver (pasted at {where})",
                      {"gpus": gpus, "lines": text.splitlines()[:8]},
                      explanation="The GPU's firmware (GSP) refuses new work until the GPU is reset: CUDA programs "
                                  "on it fail with 'busy or unavailable' or hang at init, and NCCL jobs using it "
                                  "fail.",
                      fix="# on that node: which GPU, then reset it with no process on it, or reboot the node\n"
                          "dmesg -T | grep -i -E 'NVRM: (Xid|GPU )' | tail -n 20\n"
                          "# nvidia-smi -r -i <index>")]
    if kind == "lspci":
        return _lspci(text, where)
    if kind == "ibdev2netdev":
        return _ibdev2netdev(text, where)
    if kind == "driver_unbound":
        count = next((m["count"] for m in _UNBOUND.finditer(text) if m["count"]), None)
        return [_note(where, Status.FAIL, "pasted kernel log: the NVIDIA driver did not bind to "
                                          + (f"{plural(int(count[:6]), 'device')}" if count else "any GPU")
                                          + " (its probe routine was not called)", f"NVIDIA driver (pasted at {where})",
                      {"lines": text.splitlines()[:12]},
                      explanation="Another driver (nouveau, or a framebuffer driver) took the GPUs before the "
                                  "NVIDIA module loaded, or the module does not support them: nvidia-smi fails and "
                                  "no CUDA program runs on that node until the NVIDIA driver owns them.",
                      fix="# on that node: which driver holds the GPUs, then blacklist it and reboot:\n"
                          "lspci -nnk -d 10de:\nlsmod | grep -w -E 'nouveau|nvidia'")]
    if kind == "ibpanic":
        m = _IBPANIC.match(text.strip())
        return [_note(where, Status.WARN, f"pasted `ibstat`: it stopped: {m['what'][:160] if m else text[:160]}",
                      f"InfiniBand (pasted ibstat at {where})", {"line": text.strip()[:300]},
                      explanation="ibstat could not read a device it had listed: the HCA disappeared (a reset, a "
                                  "firmware fault) or its driver is stuck; the ports after it are not shown.",
                      fix="# on that node:\nibstat -l\ndmesg -T | grep -i mlx5 | tail -n 20")]
    return []


def table_runs(table, where: str) -> list[CheckRun]:
    """What a pasted nvidia-smi table (or GPU boxes of one) shows, and the readings it could not take."""
    names: dict[str, int] = {}
    for gpu in table.gpus:
        names[gpu.name] = names.get(gpu.name, 0) + 1
    shown = ", ".join(f"{n}x {name}" for name, n in names.items())
    if table.fragment:
        head = "pasted nvidia-smi GPU boxes (no header: driver and CUDA not shown)"
    else:
        cuda = table.cuda_version or ("N/A" if table.cuda_field == "N/A" else "not shown")
        head = f"pasted `nvidia-smi`: driver {table.driver_version}, CUDA {cuda}"
    if table.cut and not table.gpus:
        gpus = "the GPU rows are cut off: how many GPUs the node has is not shown"
    elif table.cut or table.fragment:
        gpus = (f"GPU(s) {', '.join(str(g.index) for g in table.gpus[:16])} shown: {shown}; the table is "
                + ("cut off after them, so the node may have more (not shown)" if table.cut else
                   "quoted in part, so the node's other GPUs are not shown"))
    else:
        gpus = f"{len(table.gpus)} GPU(s): {shown or 'no GPU'}"
    evidence = {"driver": table.driver_version, "cuda": table.cuda_version, "gpus": len(table.gpus), "models": names,
                "cut": table.cut}
    out = [_note(where, Status.OK, f"{head}, {gpus}"
                 + (f"; {len(table.mig_devices)} MIG device(s)" if table.mig_devices else ""),
                 f"nvidia-smi (pasted at {where})", evidence)]
    for gpu in table.gpus:
        if gpu.unreadable:
            out.append(_note(where, Status.WARN, f"pasted `nvidia-smi`: GPU {gpu.index} ({gpu.bus_id}) reads ERR! for "
                                                 f"its {', '.join(gpu.unreadable)}", f"GPU {gpu.index} (pasted at {where})",
                             {"gpu": gpu.index, "bus_id": gpu.bus_id, "unreadable": list(gpu.unreadable)},
                             explanation="nvidia-smi printed ERR! where the driver could not take the reading. Once it "
                                         "can be transient (a sensor read timing out); on a GPU that keeps it, or "
                                         "with an Xid in the kernel log, the GPU is in an error state and wants a "
                                         "reset. One paste cannot tell which.",
                             fix=f"# on that node: the GPU's own report, and the driver's log\n"
                                 f"nvidia-smi -q -i {gpu.index}\ndmesg -T | grep -i -E 'NVRM|Xid' | tail -n 20"))
    return out


def ib_statement(ports, where: str, text: str = "") -> CheckRun | None:
    """What a pasted ibstat/ibv_devinfo shows, port by port (the checks judge the ports)."""
    if not ports:
        return None
    tool = "ibv_devinfo" if "hca_id:" in text else "ibstat"
    shown = "; ".join(f"{p.hca}/{p.port} {p.state or '?'} {p.phys_state or ''} {p.rate or ''}".rstrip()
                      for p in ports[:12])
    more = f" (and {len(ports) - 12} more)" if len(ports) > 12 else ""
    return _note(where, Status.OK, f"pasted `{tool}`: {plural(len(ports), 'port')}: {shown}{more}",
                 f"InfiniBand ports (pasted ibstat at {where})",
                 {"ports": [{"hca": p.hca, "port": p.port, "state": p.state, "phys_state": p.phys_state,
                             "rate": p.rate} for p in ports[:32]]})


def kernel_statement(text: str, where: str) -> CheckRun:
    """The GPUs the pasted kernel lines name (gpu.xid judges the events)."""
    named = list(dict.fromkeys(m.group(0) for m in _PCI.finditer(text)))
    lines = text.count("\n")
    return _note(where, Status.OK, f"pasted kernel log: {plural(lines, 'line')} about GPUs or links"
                 + (f", naming {', '.join(named[:8])}" if named else ""),
                 f"Kernel log (pasted at {where})", {"pci": named[:32]})


def collect_env_runs(env, where: str) -> list[CheckRun]:
    """What a pasted collect_env says against running on GPUs: a CPU-only torch build, or a CUDA
    build that sees no GPU. A paste that does not show "Is CUDA available" is not judged."""
    title = f"torch's collect_env (pasted at {where})"
    version = env.torch_version or ""
    available = (env.get("Is CUDA available") or "").strip().lower()
    if version.endswith("+cpu"):
        return [_note(where, Status.WARN, f"pasted collect_env: torch {version} is a CPU-only build: no CUDA, no "
                                          "NCCL backend", title, {"torch": version},
                      explanation="torch.cuda.is_available() is False whatever the driver, and "
                                  "init_process_group('nccl') fails: install a CUDA build of torch (the +cuXXX "
                                  "wheels) matching the driver.",
                      fix="# on that node, in that environment:\npython -c 'import torch; print(torch.__version__, "
                          "torch.version.cuda)'")]
    if env.torch_cuda and available in ("false", "no"):
        driver = env.driver or "not found (collect_env could not collect it)"
        return [_note(where, Status.WARN, f"pasted collect_env: torch {version or '?'} is built with CUDA "
                                          f"{env.torch_cuda} but sees no GPU (Is CUDA available: False); driver "
                                          f"{driver}", title, {"torch": version, "cuda": env.torch_cuda,
                                                               "driver": env.driver},
                      explanation="torch found no usable GPU: the NVIDIA driver is missing, not loaded, or older "
                                  "than this build's CUDA needs, or CUDA_VISIBLE_DEVICES hides every GPU. Which "
                                  "one the paste does not show when the driver could not be collected.",
                      fix="# on that node:\nnvidia-smi\nprintenv CUDA_VISIBLE_DEVICES")]
    return []


def _nvlink(text: str, where: str) -> list[CheckRun]:
    """`nvidia-smi nvlink -s` stated GPU by GPU; a GPU header cut off before its links is said so."""
    from distdoctor.parsers import ParseError
    from distdoctor.parsers.nvlink import parse_nvlink_status

    try:
        gpus = parse_nvlink_status("\n".join(line.strip() for line in text.splitlines()))
    except (ParseError, ValueError) as exc:
        return [_note(where, Status.WARN, f"pasted nvidia-smi nvlink output at {where} could not be read: {exc}",
                      "Tool output pasted into the log", {})]
    parts = []
    for g in gpus:
        speeds = sorted({speed for speed in g.links.values() if speed})
        inactive = len(g.links) - len(g.active)
        state = (f"{len(g.active)} link(s) up ({', '.join(f'{x:g}' for x in speeds)} GB/s), {inactive} inactive"
                 if g.links else "its links are cut off (not shown)")
        if g.elided:
            state += " (the rest of its listing is elided in the paste: not shown)"
        parts.append(f"GPU {g.index} {g.name.split(' (UUID')[0]}: {state}")
    faulty = [g for g in gpus if g.inactive and g.active and _ALL_WIRED.search(g.name)]
    if faulty:
        names = "; ".join(f"GPU {g.index} {g.name.split(' (UUID')[0]}: link(s) {', '.join(map(str, g.inactive))} "
                          f"inactive beside {len(g.active)} up" for g in faulty[:8])
        return [_note(where, Status.WARN, f"pasted `nvidia-smi nvlink -s`: {names}",
                      f"NVLink (pasted nvidia-smi nvlink -s at {where})",
                      {"gpus": [{"index": g.index, "active": g.active, "inactive": g.inactive} for g in faulty[:32]]},
                      explanation="On an SXM board every NVLink is wired to a peer GPU or an NVSwitch: a link "
                                  "inactive beside active ones is a failed link (its traffic moves to the others, or "
                                  "to PCIe, and all-reduce slows). The other GPUs of the paste are "
                                  + ("elided (not shown)." if any(g.elided for g in gpus) or len(gpus) == 1
                                     else "as stated."),
                      fix=_WHERE_IT_RAN + "nvidia-smi nvlink -e   # the failed link's error counters; then drain "
                                          "the node for a GPU reset or a reboot, and report it if it persists")]
    return [_note(where, Status.OK, "pasted `nvidia-smi nvlink -s`: " + "; ".join(parts[:8]),
                  f"NVLink (pasted nvidia-smi nvlink -s at {where})",
                  {"gpus": [{"index": g.index, "active": g.active, "links": len(g.links)} for g in gpus[:32]]},
                  explanation="An inactive link is a port with no NVLink partner: normal where GPUs are bridged in "
                              "pairs (H100 NVL, PCIe boards with bridges), a fault on an SXM board whose links are "
                              "all wired. The paste does not show which board this is, so links are stated, not "
                              "judged (gpu.nvlink judges them on the node).")]


def _lspci(text: str, where: str) -> list[CheckRun]:
    """Pasted lspci lines: the NVIDIA devices stated; one answering `rev ff` no longer responds."""
    from distdoctor.parsers.lspci import parse_lspci

    devices = parse_lspci(text)
    nvidia = [d for d in devices if d.nvidia]
    shown = "; ".join(f"{d.slot} {d.cls}: {d.device}" for d in nvidia[:8]) or "no NVIDIA device among the lines shown"
    out = [_note(where, Status.OK, f"pasted `lspci`: {plural(len(devices), 'device')}, {len(nvidia)} NVIDIA: {shown}",
                 f"PCI devices (pasted lspci at {where})",
                 {"nvidia": [[d.slot, d.cls, d.device, d.rev] for d in nvidia[:32]]},
                 explanation="lspci shows what the PCI bus enumerates, not whether the driver took it: "
                             "nvidia-smi tells that.")]
    gone = [d for d in nvidia if (d.rev or "").lower() == "ff"]
    if gone:
        out.append(_note(where, Status.FAIL, f"pasted `lspci`: {', '.join(d.slot for d in gone[:8])} answer "
                                             "`rev ff`: the GPU no longer responds on the bus",
                         f"PCI devices (pasted lspci at {where})", {"slots": [d.slot for d in gone]},
                         explanation="All-ones config reads mean the device dropped off the PCIe bus (Xid 79 in the "
                                     "kernel log): only a reset of the slot or a reboot brings it back.",
                         fix="# on that node: the driver's word on it, then drain it for a reboot\n"
                             "dmesg -T | grep -i -E 'fallen off the bus|Xid' | tail -n 20"))
    return out


def _ibdev2netdev(text: str, where: str) -> list[CheckRun]:
    from distdoctor.parsers.ibdev2netdev import parse_ibdev2netdev

    maps = parse_ibdev2netdev(text)
    shown = "; ".join(f"{m.hca}/{m.port} => {m.netdev} ({m.state})" for m in maps[:16])
    return [_note(where, Status.OK, f"pasted `ibdev2netdev`: {plural(len(maps), 'port')}: {shown}",
                  f"RDMA devices (pasted ibdev2netdev at {where})",
                  {"ports": [[m.hca, m.port, m.netdev, m.state] for m in maps[:64]]},
                  explanation="(Up)/(Down) is the network interface's state (IPoIB, or the RoCE interface), not the "
                              "InfiniBand port's: a pure InfiniBand fabric without IPoIB shows (Down) on healthy "
                              "ports. The ports' own state is not shown here: ibstat shows it.")]


def query_statement(report, where: str) -> CheckRun:
    """What a pasted `nvidia-smi -q` shows of the driver and the GPUs, said before the checks'
    verdicts on it."""
    names: dict[str, int] = {}
    for gpu in report.gpus:
        names[gpu.name or "unnamed GPU"] = names.get(gpu.name or "unnamed GPU", 0) + 1
    shown = ", ".join(f"{n}x {name}" for name, n in names.items()) or "no GPU section"
    summary = (f"pasted `nvidia-smi -q`: driver {report.driver_version or 'not shown'}, CUDA "
               f"{report.cuda_version or 'not shown'}, {plural(len(report.gpus), 'GPU')}: {shown}")
    return _note(where, Status.OK, summary, f"GPUs (pasted nvidia-smi -q at {where})",
                 {"driver": report.driver_version, "cuda": report.cuda_version, "gpus": len(report.gpus)})


def _remap_fragment(text: str, where: str) -> list[CheckRun]:
    """A health block of `nvidia-smi -q` (Remapped Rows, Retired Pages, GPU Reset Status) quoted
    without its GPU: judged as gpu.memory-errors judges that GPU (a remap or retirement pending, or the
    driver asking for a reset: a reset; a failed remap: a replacement), the GPU said not shown."""
    head = text.strip().splitlines()[0].strip()
    fields = {m["key"]: m["value"] for line in text.splitlines()[1:] if (m := _HEALTH_FIELD.match(line.strip()))}
    yes = [k for k in fields if k in _PENDING and fields[k].lower() == "yes"]
    failed = fields.get("Remapping Failure Occurred", "").lower() == "yes"
    shown = ", ".join(f"{k} {v}" for k, v in list(fields.items())[:6])
    said = f"pasted `nvidia-smi -q` {head} ({shown}; which GPU is not shown)"
    title = f"GPU memory (pasted nvidia-smi -q at {where})"
    if failed:
        return [_note(where, Status.FAIL, f"{said}: row remapping failed, no spare rows left", title, fields,
                      explanation="The GPU's memory can no longer be repaired in the field: NVIDIA's guidance is to "
                                  "replace it.",
                      fix=_WHERE_IT_RAN + "nvidia-smi -q -d ROW_REMAPPER   # which GPU; keep the node drained")]
    if yes:
        return [_note(where, Status.FAIL, f"{said}: {_PENDING[yes[0]]}: the GPU needs a reset", title, fields,
                      explanation="Memory with uncorrectable errors is taken out of use, and a GPU the driver marked "
                                  "takes work again, only when the GPU is reset; until then jobs can hit the same "
                                  "fault (Xid 48/94/95).",
                      fix=_WHERE_IT_RAN + "nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT   # which GPU\n"
                                          "# then, with no process on it: nvidia-smi -r -i <index> (or reboot)")]
    return [_note(where, Status.OK, f"{said}: nothing pending", title, fields)]
