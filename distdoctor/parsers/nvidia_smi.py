"""nvidia-smi: the topology matrix (`topo -m`), the default table, `-L`, and `--query-gpu` CSV.

Every driver generation prints these a little differently (see tests/data/nvidia_smi*/INDEX.md):
the oldest say SOC for SYS, NIC columns are named by device (mlx5_0) before R470 and NICk with a
legend after, rows are space-aligned or tab-separated, and users paste the matrix indented
inside other output. The parsers accept all of these and raise ParseError for shapes they
cannot read, naming the line.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

from distdoctor.parsers import ParseError
from distdoctor.text import strip_ansi

TOOL = "nvidia-smi"

# Fastest to slowest; anything else is an unknown word (newer drivers may add some).
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")
_NV = re.compile(r"^NV(\d+)$")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_NIC_LABEL = re.compile(r"^NIC(\d+)$")
_DEVICE_LABEL = re.compile(r"^[A-Za-z][\w.:-]*$")
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def normalize_link(word: str) -> str:
    """The link word as current drivers print it: the oldest drivers' SOC is today's SYS."""
    return "SYS" if word == "SOC" else word


def link_rank(word: str) -> int:
    """0 for NVLink, up to 5 for SYS; 6 for words this parser does not know."""
    word = normalize_link(word)
    if _NV.match(word):
        return 0
    try:
        return LINK_ORDER.index(word)
    except ValueError:
        return len(LINK_ORDER)


def is_known_link(word: str) -> bool:
    return word == "X" or link_rank(word) < len(LINK_ORDER)


MAX_CPUS = 65536  # more than Linux's NR_CPUS allows: a longer list is not a CPU list


def parse_cpu_list(text: str | None) -> tuple[int, ...]:
    """'0-47,96-143' -> the CPUs; () for N/A or anything unreadable."""
    if not text:
        return ()
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"([0-9]{1,7})(?:-([0-9]{1,7}))?", part)
        if not match:
            return ()
        lo = int(match.group(1))
        hi = int(match.group(2) or lo)
        if hi - lo + 1 + len(cpus) > MAX_CPUS:
            return ()
        cpus.extend(range(lo, hi + 1))
    return tuple(cpus)


@dataclass(frozen=True)
class TopoDevice:
    label: str  # as in the header: GPU0, NIC3, mlx5_0
    kind: str  # "gpu" or "nic"
    name: str  # the NIC's device name (mlx5_0) when known, else the label
    index: int | None = None  # GPU index
    cpu_affinity: str | None = None  # raw cell; None when the column is absent or empty
    numa_affinity: str | None = None
    gpu_numa_id: str | None = None

    @property
    def cpus(self) -> tuple[int, ...]:
        return parse_cpu_list(self.cpu_affinity)

    @property
    def numa_node(self) -> int | None:
        value = (self.numa_affinity or "").strip()
        return int(value) if value.isdigit() else None


@dataclass(frozen=True)
class TopoMatrix:
    devices: tuple[TopoDevice, ...]
    links: dict[tuple[str, str], str]  # (label, label) -> link word, SOC normalised to SYS
    legend: dict[str, str] = field(default_factory=dict)  # word -> meaning, as printed
    nic_legend: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0
    columns: tuple[str, ...] = ()  # the affinity columns present
    unknown_words: tuple[str, ...] = ()  # link words not in the legend below
    notes: tuple[str, ...] = ()  # things read but worth saying (legacy SOC, truncated NIC rows...)

    @property
    def gpus(self) -> tuple[TopoDevice, ...]:
        return tuple(d for d in self.devices if d.kind == "gpu")

    @property
    def nics(self) -> tuple[TopoDevice, ...]:
        return tuple(d for d in self.devices if d.kind == "nic")

    def device(self, label: str) -> TopoDevice | None:
        return next((d for d in self.devices if d.label == label), None)

    def link(self, a: str, b: str) -> str | None:
        return self.links.get((a, b)) or self.links.get((b, a))


def _header_candidates(lines: list[str]) -> list[int]:
    return [number for number, line in enumerate(lines)
            if (tokens := line.split()) and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1] != "X")]


def _split_header(line: str, number: int) -> tuple[list[str], list[str]]:
    tokens = line.split()
    labels: list[str] = []
    rest: list[str] = []
    for i, token in enumerate(tokens):
        if token in ("CPU", "NUMA") or (token == "GPU" and i + 1 < len(tokens) and tokens[i + 1] == "NUMA"):
            rest = tokens[i:]
            break
        if not _DEVICE_LABEL.match(token):
            raise ParseError(TOOL, f"unexpected header cell {token!r}", number + 1, line)
        labels.append(token)
    text = " ".join(rest)
    columns: list[str] = []
    while text:
        for name in _AFFINITY_COLUMNS:
            if text.startswith(name):
                columns.append(name)
                text = text[len(name):].strip()
                break
        else:
            raise ParseError(TOOL, f"unknown header column {text!r}", number + 1, line)
    if len(set(labels)) != len(labels):
        raise ParseError(TOOL, "a device appears twice in the header", number + 1, line)
    return labels, columns


def _parse_legends(lines: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    legend: dict[str, str] = {}
    nic_legend: dict[str, str] = {}
    section = ""
    for line in lines:
        stripped = line.strip()
        if stripped == "Legend:":
            section = "legend"
            continue
        if stripped == "NIC Legend:":
            section = "nic"
            continue
        if not stripped:
            continue
        if section == "legend":
            match = re.match(r"^(\S+)\s*=\s*(.+)$", stripped)
            if match:
                legend[match.group(1)] = match.group(2).strip()
            else:
                section = ""
        elif section == "nic":
            match = re.match(r"^(NIC\d+)\s*:\s*(\S+)$", stripped)
            if match:
                nic_legend[match.group(1)] = match.group(2)
            else:
                section = ""
    return legend, nic_legend


def parse_topo_matrix(text: str) -> TopoMatrix:
    """`nvidia-smi topo -m` (or `--matrix`), alone or embedded in other output: the first line
    that starts with GPU0 and reads as a matrix header is taken, so prose above it that happens
    to start with GPU0 does not hide the matrix. Driver 580 underlines the header line with terminal
    escapes even when writing to a pipe; they are dropped first."""
    lines = strip_ansi(text).splitlines()
    candidates = _header_candidates(lines)
    if not candidates:
        raise ParseError(TOOL, "no topology matrix found (no header line starting with GPU0)")
    first_error: ParseError | None = None
    for start in candidates:
        try:
            return _parse_matrix(lines, start)
        except ParseError as exc:
            first_error = first_error or exc
    raise first_error


def _parse_matrix(lines: list[str], start: int) -> TopoMatrix:
    labels, columns = _split_header(lines[start], start)
    if not labels:
        raise ParseError(TOOL, "the header names no devices", start + 1, lines[start])
    n = len(labels)
    legend, nic_legend = _parse_legends(lines[start + 1:])
    links: dict[tuple[str, str], str] = {}
    affinity: dict[str, dict[str, str]] = {}
    seen_rows: list[str] = []
    unknown: list[str] = []
    notes: list[str] = []
    number = start + 1
    for label in labels:
        if number >= len(lines):
            break
        line = lines[number]
        tokens = line.split()
        if not tokens or tokens[0] != label:
            break
        cells = tokens[1:1 + n]
        if len(cells) < n:
            raise ParseError(TOOL, f"row {label} has {len(cells)} link cells, the header has {n} devices "
                                   "(truncated or ragged output)", number + 1, line)
        for j, cell in enumerate(cells):
            if (j == labels.index(label)) != (cell == "X"):
                raise ParseError(TOOL, f"row {label}, column {labels[j]}: {cell!r} where the matrix's "
                                       "diagonal should be (columns misaligned?)", number + 1, line)
            if cell == "X":
                continue
            if not is_known_link(cell) and cell not in unknown:
                unknown.append(cell)
            links[(label, labels[j])] = normalize_link(cell)
        extra = tokens[1 + n:]
        if len(extra) > len(columns):
            # Affinity values never contain spaces, so more cells than columns is a shape we
            # do not know rather than something to guess at.
            raise ParseError(TOOL, f"row {label} has {len(extra)} affinity cells, the header has "
                                   f"{len(columns)}", number + 1, line)
        affinity[label] = dict(zip(columns, extra))
        seen_rows.append(label)
        number += 1

    gpu_labels = [l for l in labels if _GPU_LABEL.match(l)]
    missing = [l for l in labels if l not in seen_rows]
    missing_gpus = [l for l in missing if l in gpu_labels]
    if missing_gpus:
        at = number + 1 if number < len(lines) else None
        raise ParseError(TOOL, f"the matrix stops before the rows of {', '.join(missing_gpus)} "
                               f"(truncated output?)", at, lines[number] if at else "")
    if missing:
        # GPU rows already hold every GPU-NIC link; only NIC-NIC links are lost.
        notes.append(f"rows of {', '.join(missing)} are missing (truncated output?); GPU-NIC links were read "
                     "from the GPU rows")
    if "SOC" in " ".join(lines[start:number]).split():
        notes.append("legacy driver: SOC is printed for what newer drivers call SYS")

    devices: list[TopoDevice] = []
    for label in labels:
        gpu = _GPU_LABEL.match(label)
        cells = affinity.get(label, {})

        def cell(name: str) -> str | None:
            value = cells.get(name, "").strip()
            return value or None

        if gpu:
            devices.append(TopoDevice(label, "gpu", label, int(gpu.group(1)), cell("CPU Affinity"),
                                      cell("NUMA Affinity"), cell("GPU NUMA ID")))
        else:
            name = nic_legend.get(label, label)
            devices.append(TopoDevice(label, "nic", name))
    unseen = [k for k in nic_legend if k not in labels]
    if unseen:
        notes.append(f"the NIC Legend lists {', '.join(f'{k} ({nic_legend[k]})' for k in unseen)} "
                     "that the matrix has no column for; their paths are unknown")
        for key in unseen:
            devices.append(TopoDevice(key, "nic", nic_legend[key]))
    nic_labels = [l for l in labels if not _GPU_LABEL.match(l)]
    if any(_NIC_LABEL.match(l) for l in nic_labels) and not nic_legend:
        notes.append("NIC columns are numbered but no NIC Legend was printed: device names unknown")
    unknown_words = tuple(w for w in unknown if w not in legend)
    return TopoMatrix(tuple(devices), links, legend, nic_legend, tuple(columns), unknown_words, tuple(notes))


# --- the default table ----------------------------------------------------------------------


@dataclass(frozen=True)
class TableGpu:
    index: int
    name: str  # as printed: long names are cut and end in '...'
    persistence_mode: bool | None
    bus_id: str
    ecc_uncorrected: str  # the cell as printed: '0', 'N/A', 'On', 'Off'
    memory_used_mib: int | None
    memory_total_mib: int | None
    mig_mode: str | None  # 'Enabled', 'Disabled', 'N/A'; None on drivers without the row
    unreadable: tuple[str, ...] = ()  # readings printed as ERR! (fan, power draw, ...): the driver could not take them


@dataclass(frozen=True)
class TableMigDevice:
    gpu: int
    gpu_instance: int
    compute_instance: int
    mig_device: int


@dataclass(frozen=True)
class SmiTable:
    smi_version: str
    driver_version: str
    cuda_version: str | None  # None when the field is N/A or absent
    cuda_field: str  # 'present', 'N/A' or 'absent' (drivers before R410 print none)
    gpus: tuple[TableGpu, ...]
    mig_devices: tuple[TableMigDevice, ...] = ()
    cut: bool = False  # the text ends inside the GPU list: more GPUs may follow
    fragment: bool = False  # GPU boxes without the header (a paste's excerpt): no driver or CUDA shown


_HEADER = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s+(\S+)(?:\s+CUDA Version:\s+(\S+))?")
_GPU_FIRST = re.compile(r"^\s*(\d+)\s+(.+?)\s+(On|Off)\s*$")
_MEMORY = re.compile(r"(?<!\d)(\d+)MiB\s*/\s*(\d+)MiB")
# the readings of a GPU box's second row, in order (the power cap follows the '/')
_ROW2_READINGS = ("fan", "temperature", "performance state", "power draw")


def _unreadable(group: list[list[str]]) -> tuple[str, ...]:
    """The readings a GPU box prints as ERR!, named."""
    names = []
    for row, cells in enumerate(group):
        for col, cell in enumerate(cells):
            if "ERR!" not in cell:
                continue
            if row == 1 and col == 0:
                words = [w for w in cell.split() if w != "/"]
                names += [(_ROW2_READINGS[k] if k < len(_ROW2_READINGS) else "power cap")
                          for k, w in enumerate(words) if w.startswith("ERR!")]
            else:
                names.append({(0, 1): "bus/display", (0, 2): "ECC errors", (1, 1): "memory",
                              (1, 2): "utilisation/compute mode", (2, 2): "MIG mode"}.get((row, col), "a reading"))
    return tuple(names)


def parse_table(text: str, fragment: bool = False) -> SmiTable:
    """The table plain `nvidia-smi` prints: driver and CUDA versions, GPUs, MIG devices. With
    fragment, GPU boxes without the header (what a paste may quote of the table) are read too."""
    lines = text.splitlines()
    header = None
    number = -1
    for number, line in enumerate(lines):
        header = _HEADER.search(line)
        if header:
            break
    if header is None and not fragment:
        raise ParseError(TOOL, "no 'NVIDIA-SMI ... Driver Version:' header line")
    if header is None:
        number = -1
    cuda = header.group(3) if header else None
    cuda_field = "absent" if cuda is None else ("N/A" if cuda == "N/A" else "present")
    gpus: list[TableGpu] = []
    migs: list[TableMigDevice] = []
    section = "gpus"
    group: list[list[str]] = []

    def close_group() -> None:
        if not group:
            return
        first = _GPU_FIRST.match(group[0][0]) if len(group[0]) >= 3 else None
        if first is None:
            raise ParseError(TOOL, f"unreadable GPU row {'|'.join(group[0])!r}")
        memory = _MEMORY.search(group[1][1]) if len(group) > 1 and len(group[1]) >= 2 else None
        mig = group[2][2].strip() if len(group) > 2 and len(group[2]) >= 3 else None
        bus_disp = group[0][1].split()
        gpus.append(TableGpu(int(first.group(1)), first.group(2).strip(), first.group(3) == "On",
                             bus_disp[0] if bus_disp else "", group[0][2].strip(),
                             int(memory.group(1)) if memory else None, int(memory.group(2)) if memory else None,
                             mig or None, _unreadable(group)))
        group.clear()

    seen_rule = header is None  # a fragment starts inside the GPU list
    start = number
    for number in range(number + 1, len(lines)):
        line = lines[number].rstrip()
        stripped = line.strip()
        if "Processes:" in stripped:
            close_group()
            section = "processes"
            continue
        if "MIG devices:" in stripped:
            close_group()
            section = "mig"
            continue
        if stripped.startswith("|=") or stripped.startswith("+="):
            seen_rule = True
            continue
        if section == "gpus":
            if not seen_rule:
                continue
            if stripped.startswith("+-") or not stripped:
                close_group()
                if not stripped:
                    section = "after"
                continue
            cells = stripped.strip("|").split("|")
            group.append(cells)
        elif section == "mig" and stripped.startswith("|"):
            match = re.match(r"^\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|", stripped)
            if match:
                migs.append(TableMigDevice(*(int(g) for g in match.groups())))
    # Text that stops inside the GPU list (a paste cut off, an excerpt): the GPU being printed is
    # not read and more may follow; a list ending on a whole closing rule is taken as complete.
    last = next((lines[k].strip() for k in range(len(lines) - 1, start, -1) if lines[k].strip()), "")
    cut = section == "gpus" and (bool(group) or not (last.startswith("+") and last.endswith("+")))
    if group and cut:
        try:
            close_group()
        except ParseError:
            group.clear()
    close_group()
    return SmiTable(header.group(1) if header else "", header.group(2) if header else "",
                    cuda if cuda_field == "present" else None, cuda_field, tuple(gpus), tuple(migs), cut,
                    header is None)


# --- nvidia-smi -L ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MigDevice:
    profile: str  # 1g.5gb
    index: int  # the device number within its GPU
    uuid: str


@dataclass(frozen=True)
class ListedGpu:
    index: int
    name: str
    uuid: str
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True)
class GpuList:
    gpus: tuple[ListedGpu, ...]
    errors: tuple[str, ...] = ()  # lines nvidia-smi printed instead of a GPU (a GPU it cannot reach)


_LIST_GPU = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9A-Za-z-]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[\w/-]+)\)\s*$")


def parse_list_gpus(text: str) -> GpuList:
    """`nvidia-smi -L` / `--list-gpus`."""
    gpus: list[ListedGpu] = []
    errors: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        gpu = _LIST_GPU.match(line)
        if gpu:
            gpus.append(ListedGpu(int(gpu.group(1)), gpu.group(2), gpu.group(3)))
            continue
        mig = _LIST_MIG.match(line)
        if mig:
            if not gpus:
                raise ParseError(TOOL, "a MIG device line before any GPU line", number, line)
            parent = gpus[-1]
            gpus[-1] = ListedGpu(parent.index, parent.name, parent.uuid,
                                 parent.mig_devices + (MigDevice(mig.group(1), int(mig.group(2)), mig.group(3)),))
            continue
        errors.append(line.strip())
    if not gpus and not errors:
        raise ParseError(TOOL, "empty output from nvidia-smi -L")
    return GpuList(tuple(gpus), tuple(errors))


# --- --query-gpu ... --format=csv,noheader,nounits ----------------------------------------------


QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "memory.total", "persistence_mode",
                "mig.mode.current", "ecc.errors.uncorrected.volatile.total", "clocks_throttle_reasons.active")
# Drivers that lack a field refuse the whole query; this subset every driver since R3xx knows.
BASIC_QUERY_FIELDS = QUERY_FIELDS[:6]


@dataclass(frozen=True)
class Gpu:
    """One GPU as distdoctor judges it, whichever source (NVML or nvidia-smi) described it."""

    index: int
    name: str
    uuid: str | None = None
    bus_id: str | None = None
    memory_total_mib: int | None = None
    persistence_mode: bool | None = None
    mig_mode: bool | None = None  # None: not supported / unknown
    ecc_uncorrected: int | None = None  # volatile count since the last driver load
    throttle_reasons: int | None = None  # NVML bitmask of active clock-event reasons
    mig_devices: tuple[MigDevice, ...] = ()


def _absent(value: str) -> bool:
    return value in ("", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]", "[GPU is lost]")


def _int_or_none(value: str, name: str, number: int, line: str) -> int | None:
    if _absent(value):
        return None
    try:
        return int(value, 16) if value.lower().startswith("0x") else int(float(value))
    except (ValueError, OverflowError):  # nan, inf, 1e400
        raise ParseError(TOOL, f"{name} is {value!r}, not a number", number, line) from None


def _flag(value: str) -> bool | None:
    low = value.lower()
    if low in ("enabled", "on"):
        return True
    if low in ("disabled", "off"):
        return False
    return None


def parse_query_gpu(text: str, fields: tuple[str, ...] = QUERY_FIELDS) -> tuple[Gpu, ...]:
    """CSV rows of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`."""
    gpus: list[Gpu] = []
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = [c.strip() for c in next(csv.reader([line], skipinitialspace=True))]
        except csv.Error as exc:  # a field over csv's 128 KB limit, a NUL
            raise ParseError(TOOL, f"not CSV: {exc}", number, line[:200]) from None
        if len(row) != len(fields):
            raise ParseError(TOOL, f"{len(row)} values where {len(fields)} were asked for", number, line)
        value = dict(zip(fields, row))
        index = _int_or_none(value["index"], "index", number, line)
        if index is None:
            raise ParseError(TOOL, "a row without a GPU index", number, line)
        gpus.append(Gpu(
            index=index, name=value["name"],
            uuid=None if _absent(value.get("uuid", "")) else value["uuid"],
            bus_id=None if _absent(value.get("pci.bus_id", "")) else value["pci.bus_id"],
            memory_total_mib=_int_or_none(value.get("memory.total", ""), "memory.total", number, line),
            persistence_mode=_flag(value.get("persistence_mode", "")),
            mig_mode=_flag(value.get("mig.mode.current", "")),
            ecc_uncorrected=_int_or_none(value.get("ecc.errors.uncorrected.volatile.total", ""),
                                         "ecc.errors.uncorrected.volatile.total", number, line),
            throttle_reasons=_int_or_none(value.get("clocks_throttle_reasons.active", ""),
                                          "clocks_throttle_reasons.active", number, line),
        ))
    if not gpus:
        raise ParseError(TOOL, "empty output from nvidia-smi --query-gpu")
    return tuple(gpus)
