"""`nvidia-smi -q` (text) and `nvidia-smi -q -x` (XML): the per-GPU health fields.

Both forms are read into one record per GPU: ECC (volatile and aggregate uncorrectable), retired
pages, row remapping, clock-event (throttle) reasons, the PCIe link's current and maximum
generation and width, persistence and MIG mode, the NVLink fabric state (Hopper and newer), and
the driver's own reset/drain recommendation. Field names changed across drivers ("Clocks Throttle
Reasons" before R535, "Clocks Event Reasons" after; "Double Bit" ECC counters before Ampere,
"DRAM/SRAM Uncorrectable" after; see tests/data/nvidia_smi_q/INDEX.md); each is read under every
name it has had. "N/A" and "Not Supported" read as unknown (None), never as zero.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from distdoctor.parsers import ParseError

TOOL = "nvidia-smi -q"


@dataclass(frozen=True)
class QueryGpu:
    index: int  # order in the output, which is nvidia-smi's (PCI bus) order
    bus_id: str  # 00000000:3B:00.0
    name: str = ""
    uuid: str = ""
    persistence_mode: bool | None = None
    mig_mode: bool | None = None
    ecc_enabled: bool | None = None
    ecc_volatile_uncorrectable: int | None = None
    ecc_aggregate_uncorrectable: int | None = None
    retired_sbe: int | None = None
    retired_dbe: int | None = None
    retired_pending: bool | None = None
    remap_correctable: int | None = None
    remap_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    clock_reasons: tuple[str, ...] = ()  # active clock-event reasons, as snake_case words (hw_slowdown)
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None  # what the GPU and host both support (nvidia-smi's "Max")
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    performance_state: str = ""  # P0..P12
    utilization: int | None = None  # percent
    fabric_state: str = ""  # "Completed", "In Progress", "Not Started", "" when N/A
    fabric_status: str = ""  # "Success" or an error
    fabric_clique: str = ""
    fabric_cluster_uuid: str = ""
    fabric_health: str = ""  # the fabric's Health Summary (Healthy, Unhealthy, Limited Capacity), "" when N/A
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    recovery_action: str = ""  # the driver's "GPU Recovery Action" (None, Reset, Reboot, ...), "" when not shown


@dataclass(frozen=True)
class QueryReport:
    driver_version: str
    cuda_version: str
    gpus: tuple[QueryGpu, ...]
    form: str  # "text" or "xml"
    notes: tuple[str, ...] = field(default_factory=tuple)


_ABSENT = {"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown", "[unknown error]",
           "requested functionality has been deprecated", "[gpu is lost]", "none",
           "not found"}  # a vGPU host driver's "CUDA Version : Not Found" (R535, tests/data/nvidia_smi_q)


def _num(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if text.lower() in _ABSENT:
        return None
    m = re.match(r"^(\d+)", text)
    return int(m.group(1)) if m else None


def _yes(value: str | None) -> bool | None:
    if value is None:
        return None
    low = value.strip().lower()
    if low in ("yes", "enabled", "on", "active"):
        return True
    if low in ("no", "disabled", "off", "not active"):
        return False
    return None


def _word(value: str | None) -> str:
    if value is None or value.strip().lower() in _ABSENT:
        return ""
    return value.strip()


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


# --- text -------------------------------------------------------------------------------------

Node = dict  # lower-case name -> str | Node; a repeated name keeps the first


def _tree(lines: list[str], start: int, end: int) -> Node:
    """An indentation tree of `Name : value` lines and section headers."""
    root: Node = {}
    stack: list[tuple[int, Node]] = [(-1, root)]
    for line in lines[start:end]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" \t"))
        text = line.strip()
        while stack and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1] if stack else root
        # Names are kept in lower case: drivers have printed "ECC Errors" and "Ecc Errors".
        if " : " in text or text.endswith(" :"):
            name, _, value = text.partition(" :")
            parent.setdefault(name.strip().lower(), value.strip())
        elif ":" in text and not text.startswith("GPU "):
            name, _, value = text.partition(":")
            parent.setdefault(name.strip().lower(), value.strip())
        else:
            node: Node = {}
            if text.lower() not in parent:
                parent[text.lower()] = node
            stack.append((indent, node))
    return root


def _get(node, *path: str):
    for name in path:
        if not isinstance(node, dict):
            return None
        node = node.get(name) if name in node else node.get(name.lower())
    return node


def _first(node, *paths: tuple[str, ...]):
    for path in paths:
        value = _get(node, *path)
        if value is not None:
            return value
    return None


def _sum_uncorrectable(section) -> int | None:
    """Uncorrectable counts of one ECC section (Volatile or Aggregate), whatever the driver calls them."""
    if not isinstance(section, dict):
        return None
    total: int | None = None
    for name, value in section.items():
        low = name.lower()
        if isinstance(value, dict):
            if "double bit" in low:  # pre-Ampere: Double Bit -> Total
                count = _num(value.get("total") or value.get("Total"))
                if count is not None:
                    total = (total or 0) + count
            continue
        if "uncorrectable" in low or low in ("dram_uncorrectable", "sram_uncorrectable"):
            count = _num(value)
            if count is not None:
                total = (total or 0) + count
    return total


def _reasons(section) -> tuple[str, ...]:
    active: list[str] = []

    def walk(node) -> None:
        for name, value in node.items():
            if isinstance(value, dict):
                walk(value)
            elif _yes(value):
                word = _snake(name)
                for prefix in ("clocks_event_reason_", "clocks_throttle_reason_", "clocks_event_reasons_"):
                    word = word.removeprefix(prefix)
                active.append({"gpu_idle": "idle"}.get(word, word))

    if isinstance(section, dict):
        walk(section)
    return tuple(active)


def _text_gpu(index: int, bus_id: str, node: Node) -> QueryGpu:
    link = _first(node, ("PCI", "GPU Link Info"), ("PCI",)) or {}
    gen = _get(link, "PCIe Generation") or {}
    width = _get(link, "Link Width") or {}
    ecc = _get(node, "ECC Errors") or {}
    ecc = ecc if isinstance(ecc, dict) else {}
    retired = _get(node, "Retired Pages") or {}
    remap = _get(node, "Remapped Rows")
    fabric = _get(node, "Fabric") or {}
    reset = _get(node, "GPU Reset Status") or {}
    mig = _get(node, "MIG Mode")
    util = _get(node, "Utilization") or {}
    pending = _first(retired, ("Pending Page Blacklist",), ("Pending",), ("Pending Page Retirement",))
    sbe = _first(retired, ("Single Bit ECC",), ("Multiple Single Bit Retirement", "Retired Count"))
    dbe = _first(retired, ("Double Bit ECC",), ("Double Bit Retirement", "Retired Count"))
    return QueryGpu(
        index=index, bus_id=bus_id, name=_word(_get(node, "Product Name")), uuid=_word(_get(node, "GPU UUID")),
        persistence_mode=_yes(_get(node, "Persistence Mode")),
        mig_mode=_yes(_get(mig, "Current")) if isinstance(mig, dict) else None,
        ecc_enabled=_yes(_get(node, "ECC Mode", "Current")),
        ecc_volatile_uncorrectable=_sum_uncorrectable(ecc.get("volatile")),
        ecc_aggregate_uncorrectable=_sum_uncorrectable(ecc.get("aggregate")),
        retired_sbe=_num(sbe if isinstance(sbe, str) else None), retired_dbe=_num(dbe if isinstance(dbe, str) else None),
        retired_pending=_yes(pending if isinstance(pending, str) else None),
        remap_correctable=_num(_get(remap, "Correctable Error")) if isinstance(remap, dict) else None,
        remap_uncorrectable=_num(_get(remap, "Uncorrectable Error")) if isinstance(remap, dict) else None,
        remap_pending=_yes(_get(remap, "Pending")) if isinstance(remap, dict) else None,
        remap_failure=_yes(_get(remap, "Remapping Failure Occurred")) if isinstance(remap, dict) else None,
        clock_reasons=_reasons(_first(node, ("Clocks Event Reasons",), ("Clocks Throttle Reasons",))),
        pcie_gen_current=_num(_get(gen, "Current")), pcie_gen_max=_num(_get(gen, "Max")),
        pcie_width_current=_num(_get(width, "Current")), pcie_width_max=_num(_get(width, "Max")),
        performance_state=_word(_get(node, "Performance State")), utilization=_num(_get(util, "Gpu")),
        fabric_state=_word(_get(fabric, "State")), fabric_status=_word(_get(fabric, "Status")),
        fabric_clique=_word(_get(fabric, "CliqueId")), fabric_cluster_uuid=_word(_get(fabric, "ClusterUUID")),
        fabric_health=_word(_get(fabric, "Health", "Summary")),
        reset_required=_yes(_get(reset, "Reset Required")),
        drain_and_reset_recommended=_yes(_get(reset, "Drain and Reset Recommended")),
        recovery_action=_word(_get(node, "GPU Recovery Action")),
    )


_GPU_HEADER = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def parse_query_text(text: str) -> QueryReport:
    lines = text.splitlines()
    starts = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _GPU_HEADER.match(line.strip()))]
    if not starts:
        raise ParseError(TOOL, "no 'GPU 00000000:xx:00.0' section (not `nvidia-smi -q` output?)")
    head = _tree(lines, 0, starts[0][0])
    gpus = []
    for n, (at, bus_id) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        gpus.append(_text_gpu(n, bus_id, _tree(lines, at + 1, end)))
    return QueryReport(_word(head.get("driver version")), _word(head.get("cuda version")), tuple(gpus), "text")


# --- XML --------------------------------------------------------------------------------------


def _xml_node(element: ET.Element) -> Node | str:
    children = list(element)
    if not children:
        return (element.text or "").strip()
    node: Node = {}
    for child in children:
        node.setdefault(child.tag, _xml_node(child))
    return node


def _xml_gpu(index: int, element: ET.Element) -> QueryGpu:
    node = _xml_node(element)
    if not isinstance(node, dict):
        node = {}
    link = _get(node, "pci", "pci_gpu_link_info") or {}
    ecc = _get(node, "ecc_errors") or {}
    retired = _get(node, "retired_pages") or {}
    remap = _get(node, "remapped_rows")
    fabric = _get(node, "fabric") or {}
    reset = _get(node, "gpu_reset_status") or {}
    return QueryGpu(
        index=index, bus_id=element.get("id", ""), name=_word(_get(node, "product_name")),
        uuid=_word(_get(node, "uuid")), persistence_mode=_yes(_get(node, "persistence_mode")),
        mig_mode=_yes(_get(node, "mig_mode", "current_mig")),
        ecc_enabled=_yes(_get(node, "ecc_mode", "current_ecc")),
        ecc_volatile_uncorrectable=_sum_uncorrectable(ecc.get("volatile") if isinstance(ecc, dict) else None),
        ecc_aggregate_uncorrectable=_sum_uncorrectable(ecc.get("aggregate") if isinstance(ecc, dict) else None),
        retired_sbe=_num(_get(retired, "multiple_single_bit_retirement", "retired_count")),
        retired_dbe=_num(_get(retired, "double_bit_retirement", "retired_count")),
        retired_pending=_yes(_first(retired, ("pending_retirement",), ("pending_blacklist",))),
        remap_correctable=_num(_get(remap, "remapped_row_corr")) if isinstance(remap, dict) else None,
        remap_uncorrectable=_num(_get(remap, "remapped_row_unc")) if isinstance(remap, dict) else None,
        remap_pending=_yes(_get(remap, "remapped_row_pending")) if isinstance(remap, dict) else None,
        remap_failure=_yes(_get(remap, "remapped_row_failure")) if isinstance(remap, dict) else None,
        clock_reasons=_reasons(_first(node, ("clocks_event_reasons",), ("clocks_throttle_reasons",))),
        pcie_gen_current=_num(_get(link, "pcie_gen", "current_link_gen")),
        pcie_gen_max=_num(_get(link, "pcie_gen", "max_link_gen")),
        pcie_width_current=_num(_get(link, "link_widths", "current_link_width")),
        pcie_width_max=_num(_get(link, "link_widths", "max_link_width")),
        performance_state=_word(_get(node, "performance_state")), utilization=_num(_get(node, "utilization", "gpu_util")),
        fabric_state=_word(_get(fabric, "state")), fabric_status=_word(_get(fabric, "status")),
        fabric_clique=_word(_first(fabric, ("cliqueId",), ("clique_id",))),
        fabric_cluster_uuid=_word(_first(fabric, ("clusterUuid",), ("cluster_uuid",))),
        fabric_health=_word(_first(fabric, ("health", "summary"), ("health_summary",))),
        reset_required=_yes(_get(reset, "reset_required")),
        drain_and_reset_recommended=_yes(_get(reset, "drain_and_reset_recommended")),
        recovery_action=_word(_get(node, "gpu_recovery_action")),
    )


def parse_query_xml(text: str) -> QueryReport:
    if "<!ENTITY" in text:
        # nvidia-smi never declares entities; a document that does is not its output, and
        # expanding them is how an XML bomb works.
        raise ParseError(TOOL, "XML declares entities: not nvidia-smi output")
    try:
        root = ET.fromstring(text.strip())
    except (ET.ParseError, ValueError) as exc:  # ValueError: text that cannot be encoded (lone surrogates)
        raise ParseError(TOOL, f"not XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(TOOL, f"the XML's root is <{root.tag}>, not <nvidia_smi_log>")
    gpus = tuple(_xml_gpu(i, g) for i, g in enumerate(root.findall("gpu")))
    return QueryReport((root.findtext("driver_version") or "").strip(), _word(root.findtext("cuda_version")),
                       gpus, "xml")


def parse_query(text: str) -> QueryReport:
    """Either form, told apart by its first non-blank character."""
    return parse_query_xml(text) if text.lstrip().startswith("<") else parse_query_text(text)


_FABRIC_LINE = re.compile(r"^(?P<indent>\s*)Fabric\s*$")


def parse_fabric_excerpt(text: str) -> tuple[QueryGpu, ...]:
    """The Fabric sections of a pasted `nvidia-smi -q | grep -A6 Fabric` (no GPU headers, `--`
    between matches): one QueryGpu per section, in order, with the fabric fields only."""
    lines = text.splitlines()
    gpus: list[QueryGpu] = []
    for i, line in enumerate(lines):
        m = _FABRIC_LINE.match(line)
        if not m:
            continue
        depth = len(m.group("indent"))
        end = i + 1
        while end < len(lines) and lines[end].strip() and len(lines[end]) - len(lines[end].lstrip()) > depth:
            end += 1
        fabric = _get(_tree(lines, i, end), "Fabric") or {}
        if not isinstance(fabric, dict) or _get(fabric, "State") is None:
            continue
        gpus.append(QueryGpu(index=len(gpus), bus_id="", fabric_state=_word(_get(fabric, "State")),
                             fabric_status=_word(_get(fabric, "Status")), fabric_clique=_word(_get(fabric, "CliqueId")),
                             fabric_cluster_uuid=_word(_get(fabric, "ClusterUUID")),
                             fabric_health=_word(_get(fabric, "Health", "Summary"))))
    if not gpus:
        raise ParseError(TOOL, "no 'Fabric' section with a State line", 1 if text else None, text)
    return tuple(gpus)
