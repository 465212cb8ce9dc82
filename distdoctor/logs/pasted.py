"""Tool output pasted into a log or an issue, recognised and judged by the same checks `check`
runs on a live node.

Each recognised section (`ip addr` in any of its forms or `ifconfig`, `nvidia-smi topo -m`,
`ibstat`/`ibv_devinfo`, an environment dump or NCCL's "NCCL_X set by environment to Y" lines,
`collect_env`) is parsed by the parser `check` uses, turned into a FakeHost (the same test
double check packs are tested with), and the checks that read those facts run on it through
the engine. What the paste does not show stays unknown rather than guessed, with one
exception said here: a paste shows interface names and addresses but not what the kernel
says each interface is, so bridges, veths, overlays and loopback are recognised by name.

Only small inputs are searched for pastes (see scan.py: the whole text of a one-block input,
up to WHOLE_BUDGET bytes of them).
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass

from distdoctor.logs import (pasted_builds, pasted_driver, pasted_host, pasted_rdma, pasted_slurm, pasted_tools,
                             pasted_topo, pasted_unread)
from distdoctor.logs.nccl_setup import kind_by_name
from distdoctor.model import CheckRun, Finding, Status
from distdoctor.parsers import ParseError
from distdoctor.text import strip_ansi

_QUOTE = re.compile(r"^(?:[ \t]*>[ \t]?)+")
# one backtick opening or closing inline code around a pasted block (`ens5f0: flags=...`), not a fence
_TICK = re.compile(r"^(?=[ \t]*`(?!`))([ \t]*)`|(?<![`\s])`[ \t]*$")
_IP_FULL = re.compile(r"^\d+:\s+[^:\s]+(?:@\S+)?:\s+<[^>]*>")
_IP_ONELINE = re.compile(r"^\d+:\s+[^:\s]+(?:@\S+)?\s+inet6?\s+\S+/\d+")
_IFCONFIG = re.compile(r"^[^\s:]+(?::\d+)?:?\s+(?:flags=\d+<|Link encap:)")
# Each address is its own whitespace-separated word: with the separator optional, `1/11/1...`
# could be split into addresses in exponentially many ways (84 bytes took 160 s to refuse).
_IP_BRIEF = re.compile(r"^(?!\d+:)[A-Za-z][\w.@-]*\s+(?:UP|DOWN|UNKNOWN|LOWERLAYERDOWN)(?:\s+\S+/\d+)*\s*$")
# the header row of a topology matrix: GPU0 followed by GPU1, a NIC or the affinity columns
_TOPO = re.compile(r"\bGPU0\s+(?:GPU1|NIC0|mlx\w*|CPU Affinity)\b")
_IB = re.compile(r"^\s*(?:CA '[^']+'|hca_id:\s*\S+)")
_ENV = re.compile(r"^\s*(?:export\s+|declare -x\s+)?(?P<k>(?:NCCL|GLOO|TORCH|OMPI_MCA|UCX|SLURM|PMIX)_\w+|MASTER_ADDR|"
                  r"MASTER_PORT|WORLD_SIZE|RANK|LOCAL_RANK|CUDA_VISIBLE_DEVICES)=(?P<v>.*?)\s*$")
_NCCL_ENV = re.compile(r"NCCL INFO (?P<k>NCCL_\w+) set by environment to (?P<v>\S+)")
_OMPI_PARSABLE = re.compile(r"^(?:mca|ompi|opal|orte|pmix|options|path|compiler|config|package|version):[\w.-]*:\S")
_OMPI_HUMAN = re.compile(r"^\s*(?:Package: Open MPI|Open MPI: \d|MPI extensions: |MCA [\w ]+: (?:informational|parameter) \")")
_SMI = re.compile(r"NVIDIA-SMI \d+[\d.]*\s+Driver Version:")
# nvidia-smi -q (its banner, or its first GPU section) and -q -x
_SMI_Q = re.compile(r"^(?:=+NVSMI LOG=+|GPU [0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_SMI_X = re.compile(r"^\s*<nvidia_smi_log>")
_SMI_Q_HEAD = re.compile(r"^(?:Timestamp|Driver Version|CUDA Version|Attached GPUs|=+NVSMI LOG=+|GPU [0-9A-Fa-f]{8}:)")
# kernel-log lines the hardware checks judge, wherever they are in the input
_RDMA_LINK = re.compile(r"mlx5_core \S+ \S+: (?:Port: \d+ )?Link |[Ll]ost carrier")
_MLX5_LINE = re.compile(r"mlx5_core(?: \S+)?: ")  # the adapter's own lines (not lspci's "in use: mlx5_core")
_KERNEL = re.compile(r"NVRM: Xid|SXid \(|fallen off the bus|NVRM: The NVIDIA GPU|AER: |(?:RmInitAdapter|rm_init_adapter) failed|"
                     r"GSP Timeout|" + _RDMA_LINK.pattern + "|" + _MLX5_LINE.pattern)
# vLLM's collect_env aligns its values: "PyTorch version              : 2.8.0+cu128"
# collect_env's supersets (vLLM's, ScaleLLM's) print `nvidia-smi topo -m` as one of their fields
_EMBEDDED_TOPO = re.compile(r"^GPU [Tt]opology:\s*")
_COLLECT_ENV = re.compile(r"^(PyTorch version|Is debug build|CUDA used to build PyTorch|Nvidia driver version) *: ")
# An IPv6 address is at most 39 characters: the bound keeps a search linear on a long run of
# `a:a:a:...` (unbounded, every start scanned to the end of the run: quadratic).
_ADDRESS_WORD = re.compile(r"\binet6?\b|\binet addr:|\b\d{1,3}(?:\.\d{1,3}){3}/\d{1,2}\b|"
                           r"\b[0-9a-fA-F]{1,4}:[0-9a-fA-F:]{0,38}/\d{1,3}\b")
_PHYSICAL_TYPES = {"ether": "1", "infiniband": "32", "loopback": "772", "none": "65534"}


@dataclass
class Section:
    kind: str  # interfaces, topo, ib, collect_env
    source: str
    line: int
    text: str
    cut: str = ""  # where a paste cut it off, when it shows that (topo: the row; interfaces: the last one)


def _clean(line: str) -> str:
    # A capture written by `tool > file` can keep the tool's terminal escapes (nvidia-smi 580
    # underlines topo -m's header even into a pipe): "\x1b[4mGPU0" has no word boundary before GPU0.
    return _TICK.sub(r"\1", _QUOTE.sub("", strip_ansi(line.rstrip("\r"))))


def find(source: str, text: str) -> tuple[list[Section], dict[str, str]]:
    """The pasted sections of one input, and the environment variables it shows."""
    lines = [_clean(raw) for raw in text.split("\n")]
    sections: list[Section] = []
    env: dict[str, str] = {}
    kernel: list[str] = []
    kernel_at = 0
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        stripped = line.strip()
        if _KERNEL.search(line):
            kernel_at = kernel_at or i + 1
            kernel.append(line)
        elif kernel and "NVRM:" in line and len(kernel) < 4096:
            kernel.append(line)  # the continuation lines of a three-line "fallen off the bus"
        if (m := _ENV.match(line)) and "NCCL INFO" not in line:
            env.setdefault(m.group("k"), m.group("v").strip("'\""))
        elif (m := _NCCL_ENV.search(line)):
            env.setdefault(m.group("k"), m.group("v"))
        if not stripped:
            i += 1
            continue
        body = line.lstrip()
        kind = end = None
        if (tool := pasted_tools.detect(lines, i)) is not None and tool[0] == "link_names":
            kind, end = tool
        elif _IP_FULL.match(body) or _IFCONFIG.match(body):
            kind, end = "interfaces", _block(lines, i, lambda s: bool(_IP_FULL.match(s) or _IFCONFIG.match(s)))
        elif _IP_ONELINE.match(body):
            kind, end = "interfaces", _run(lines, i, lambda s: bool(_IP_ONELINE.match(s) or _IP_FULL.match(s)))
        elif _IP_BRIEF.match(body) and "/" in body and i + 1 < n and _IP_BRIEF.match(lines[i + 1].lstrip()):
            kind, end = "interfaces", _run(lines, i, lambda s: bool(_IP_BRIEF.match(s)))
        elif _TOPO.search(line):
            kind, end = "topo", _topo_end(lines, i)
        elif (flat := pasted_rdma.flat_ibstat_end(lines, i)) is not None:
            kind, end = "ib", flat
        elif _IB.match(line):
            kind, end = "ib", _block(lines, i, lambda s: bool(_IB.match(s)), allow_blank=True)
        elif _COLLECT_ENV.match(body):
            kind, end = "collect_env", _collect_env_end(lines, i)
        elif _SMI.search(line):
            kind, end = "smi", _smi_end(lines, i)
        elif _SMI_Q.match(body):
            kind, end = "smi_q", _smi_q_end(lines, i)
        elif _SMI_X.match(body):
            kind, end = "smi_q", next((k + 1 for k in range(i, n) if "</nvidia_smi_log>" in lines[k]), n)
        elif (tool := pasted_driver.detect(lines, i) or pasted_tools.detect(lines, i)
              or pasted_host.detect(lines, i) or pasted_rdma.detect(lines, i) or pasted_slurm.detect(lines, i)
              or pasted_topo.detect(lines, i) or pasted_unread.detect(lines, i)) is not None:
            kind, end = tool
        elif _OMPI_PARSABLE.match(body):
            kind, end = "ompi_info", _run(lines, i, lambda s: bool(_OMPI_PARSABLE.match(s)))
        elif _OMPI_HUMAN.match(body):
            # to the end of the paragraph: long values wrap onto lines without a key
            kind, end = "ompi_info", _run(lines, i, lambda s: not s.startswith("```"))
        if kind:
            chunk = textwrap.dedent("\n".join(lines[i:end]))
            cut = ""
            if kind == "ib":
                chunk = pasted_rdma.indent_ibstat(chunk)
            elif kind == "topo":
                chunk, cut = pasted_topo.complete_rows(chunk)
            elif kind == "interfaces":
                cut = pasted_host.listing_cut(lines, i, end)
            sections.append(Section(kind, source, i + 1, chunk, cut))
            if kind == "collect_env" and (at := next((k for k in range(i, end - 1) if _EMBEDDED_TOPO.match(
                    lines[k].lstrip()) and _TOPO.search(lines[k] + " " + lines[k + 1])), None)) is not None:
                # the matrix on the field's own line (ScaleLLM) or from the next one (vLLM)
                at += not _TOPO.search(lines[at])
                matrix = [_EMBEDDED_TOPO.sub("", lines[at].lstrip())] + lines[at + 1:_topo_end(lines, at)]
                topo, cut = pasted_topo.complete_rows("\n".join(matrix) + "\n")
                sections.append(Section("topo", source, at + 1, topo, cut))
            i = max(end, i + 1)
            continue
        i += 1
    if kernel:
        sections.append(Section("kernel", source, kernel_at, "\n".join(kernel) + "\n"))
    if not sections and (dump := pasted_host.env_section(lines)) is not None:
        sections.append(Section("env", source, dump[0] + 1, dump[1]))  # an environment dump pasted on its own
    return sections, env


def _smi_q_end(lines: list[str], start: int) -> int:
    """nvidia-smi -q: its header lines, GPU sections and everything indented under them."""
    i = start + 1
    while i < len(lines) and i - start < 50000:
        s = lines[i]
        if s.strip() and not s[:1].isspace() and not _SMI_Q_HEAD.match(s):
            break
        i += 1
    return i


def _block(lines: list[str], start: int, is_header, allow_blank: bool = False) -> int:
    """Header lines and the indented lines under them (blank lines between blocks allowed)."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    i = start + 1
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            nxt = next((k for k in range(i + 1, min(i + 3, len(lines))) if lines[k].strip()), None)
            if nxt is not None and (is_header(lines[nxt].lstrip()) or allow_blank and
                                    len(lines[nxt]) - len(lines[nxt].lstrip()) > indent):
                i = nxt
                continue
            break
        own = len(line) - len(line.lstrip())
        if own > indent or is_header(line.lstrip()):
            i += 1
            continue
        break
    return i


def _run(lines: list[str], start: int, ok) -> int:
    i = start
    while i < len(lines) and lines[i].strip() and ok(lines[i].lstrip()):
        i += 1
    return i


def _topo_end(lines: list[str], start: int) -> int:
    i = start + 1
    in_legend = False
    while i < len(lines) and i - start < 400:
        s = lines[i].strip()
        if s.startswith("Legend"):
            in_legend = True
        elif not s:
            nxt = next((k for k in range(i + 1, min(i + 3, len(lines))) if lines[k].strip()), None)
            if nxt is None:
                break
            following = lines[nxt].strip()
            if not (following.startswith(("Legend", "X ", "X  ", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#", "NIC",
                                          "SOC", "PCIe"))) and not in_legend:
                break
            if in_legend and not re.match(r"^(X|SYS|SOC|NODE|PHB|PXB|PIX|NV#|NIC\s*Legend|NIC\d+|PCIe)", following):
                break
        i += 1
    return i


def _smi_end(lines: list[str], start: int) -> int:
    """nvidia-smi's table: from the header's line to the last line of the box, the processes
    box included."""
    i = start
    last = start
    while i < len(lines) and i - start < 200:
        s = lines[i].strip()
        if s.startswith(("+", "|")):
            last = i
        elif s:
            break
        i += 1
    return last + 1


def _collect_env_end(lines: list[str], start: int) -> int:
    i = start
    blanks = 0
    while i < len(lines) and i - start < 400:
        body = lines[i].lstrip()
        if i > start and (body.startswith(("+-", "|")) or _SMI.search(body)
                          or _TOPO.search(lines[i]) and not _EMBEDDED_TOPO.match(body)
                          and not _EMBEDDED_TOPO.fullmatch(lines[i - 1].strip())
                          or _IB.match(lines[i]) or _IP_FULL.match(body) or _IFCONFIG.match(body)):
            break  # another tool's output pasted right after it
        if not lines[i].strip():
            blanks += 1
            if blanks >= 2:
                break
        else:
            blanks = 0
        i += 1
    return i


# --- facts for a FakeHost --------------------------------------------------------------------

def _link_kind(name: str, link_type: str) -> tuple[str, str]:
    """(ip's linkinfo info_kind, link_type) as the kernel would report them, from the name."""
    kind = kind_by_name(name)
    if kind == "loopback" or link_type == "loopback" or name == "lo":
        return "", "loopback"
    info = {"bridge": "bridge", "veth": "veth", "virtual": "vxlan"}.get(kind, "")
    if name.startswith(("tun", "wg", "tailscale")):
        info = "tun"
    if link_type == "infiniband" or name.startswith("ib"):
        return info, "infiniband"
    return info, link_type or "ether"


def interface_host_data(links) -> dict:
    """FakeHost keyword arguments for parsed `ip addr` / `ifconfig` links."""
    if_addrs: dict[str, list[dict]] = {}
    if_stats: dict[str, dict] = {}
    files: dict[str, str] = {}
    symlinks: dict[str, str] = {}
    ip_json = []
    for k, link in enumerate(links, 1):
        info_kind, link_type = _link_kind(link.name, link.link_type)
        flags = [f.upper() for f in link.flags]
        up = "UP" in flags or link.state.upper() in ("UP", "UNKNOWN") or (not flags and not link.state)
        running = "LOWER_UP" in flags or "RUNNING" in flags or link.state.upper() in ("UP", "UNKNOWN") or \
            (not flags and not link.state)
        if running and "LOWER_UP" not in flags:
            flags.append("LOWER_UP")
        if up and "UP" not in flags:
            flags.append("UP")
        addrs = []
        for family, cidr, scope in link.addresses:
            ip, _sep, plen = cidr.partition("/")
            if family == "inet6" and scope == "link" and "%" not in ip:
                ip = f"{ip}%{link.name}"
            addrs.append({"family": family, "address": ip, "netmask": plen or None})
        if_addrs[link.name] = addrs
        if_stats[link.name] = {"isup": up, "flags": ",".join(f.lower() for f in flags if f != "LOWER_UP")
                               + (",running" if running else ""), "mtu": link.mtu, "speed": 0}
        base = f"/sys/class/net/{link.name}"
        files[f"{base}/type"] = _PHYSICAL_TYPES.get(link_type, "1")
        files[f"{base}/operstate"] = "up" if running else "down"
        if link.mtu:
            files[f"{base}/mtu"] = str(link.mtu)
        if not info_kind and link_type != "loopback":
            symlinks[f"{base}/device"] = f"../../../0000:00:{k:02x}.0"
        item = {"ifindex": link.ifindex or k, "ifname": link.name, "flags": flags, "mtu": link.mtu,
                "operstate": "UP" if running else "DOWN", "link_type": link_type}
        if info_kind:
            item["linkinfo"] = {"info_kind": info_kind}
        if link.master:
            item["master"] = link.master
        ip_json.append(item)
    return {"if_addrs": if_addrs, "if_stats": if_stats, "files": files, "links": symlinks,
            "commands": {("ip", "-d", "-j", "link", "show"): json.dumps(ip_json)}}


def ib_host_data(ports) -> dict:
    files: dict[str, str] = {}
    dirs: dict[str, list[str]] = {"/sys/class/infiniband": sorted({p.hca for p in ports})}
    codes = {"ACTIVE": 4, "DOWN": 1, "INIT": 2, "ARMED": 3}
    phys_codes = {"LinkUp": 5, "Polling": 2, "Disabled": 3, "Sleep": 1}
    for p in ports:
        base = f"/sys/class/infiniband/{p.hca}/ports/{p.port}"
        dirs.setdefault(f"/sys/class/infiniband/{p.hca}/ports", []).append(str(p.port))
        if p.state:
            files[f"{base}/state"] = f"{codes.get(p.state, 0)}: {p.state}"
        phys = p.phys_state or ("LinkUp" if p.state == "ACTIVE" else "")
        if phys:
            files[f"{base}/phys_state"] = f"{phys_codes.get(phys, 0)}: {phys}"
        if p.rate:
            files[f"{base}/rate"] = p.rate if "Gb/sec" in p.rate else f"{p.rate} Gb/sec"
        if p.link_layer:
            files[f"{base}/link_layer"] = p.link_layer
    return {"files": files, "dirs": dirs}


# --- running the checks ------------------------------------------------------------------------

CHECKS_FOR = {
    "interfaces": ("net.nccl-socket-interface", "net.gloo-socket-interface"),
    "topo": ("gpu.p2p-topology", "gpu.nic-affinity"),
    "ib": ("net.infiniband", "ib.port-state"),
    # gpu.throttle is left out: a paste is one reading, and one reading is not a throttled GPU.
    "smi_q": ("gpu.memory-errors", "gpu.pcie-link", "gpu.mig-consistency", "gpu.fabric"),
    "kernel": ("gpu.xid", "gpu.pcie-link"),
}
# A pasted log has no "now": every event in it counts.
PASTE_PARAMS = {"gpu.xid": {"window_hours": 1e9}, "gpu.pcie-link": {"window_hours": 1e9},
                "ib.link-flaps": {"window_hours": 1e9}, "ib.hca-health": {"window_hours": 1e9}}


def _nvml_from_query(report) -> dict:
    """A pasted nvidia-smi -q as the NVML snapshot the GPU facts read."""
    return pasted_tools.nvml_from_gpus(report.gpus, report.driver_version,
                                       f"pasted nvidia-smi -q{' -x' if report.form == 'xml' else ''}")


def _parse(section: Section):
    """The section's parse. A pasted section is anyone's text: a value no parser can hold (a
    GPU index of 5,000 digits exceeds Python's int() limit) is a ParseError like any other
    shape the parser does not know, never an error of the whole check."""
    try:
        return _parse_kind(section)
    except ParseError:
        raise
    except (ValueError, OverflowError, RecursionError) as exc:
        raise ParseError(section.kind, f"a value too large or malformed to read ({str(exc)[:120]})",
                         section.line) from None


def _parse_kind(section: Section):
    if section.kind == "interfaces":
        from distdoctor.parsers.ip import parse_ip_addr

        return parse_ip_addr(section.text)
    if section.kind == "ib":
        from distdoctor.parsers.ibstat import parse_ibstat

        return parse_ibstat(section.text)
    if section.kind == "topo":
        from distdoctor.parsers.nvidia_smi import parse_topo_matrix

        return parse_topo_matrix(section.text)
    if section.kind == "collect_env":
        from distdoctor.parsers.collect_env import parse_collect_env

        return parse_collect_env(section.text)
    if section.kind == "smi":
        from distdoctor.parsers.nvidia_smi import parse_table

        return parse_table(section.text)
    if section.kind == "ompi_info":
        from distdoctor.parsers.ompi_info import parse_ompi_info

        return parse_ompi_info(section.text)
    if section.kind == "smi_q":
        from distdoctor.parsers.nvidia_smi_query import parse_query

        return parse_query(section.text)
    if section.kind == "kernel":
        return section.text
    return None


class Collector:
    """Pastes found while the input streams by: only the sections are kept (not the texts), and
    at most MAX_KEPT bytes of them, so a folder of thousands of small logs stays bounded."""

    MAX_KEPT = 32 * 1024 * 1024

    def __init__(self):
        self.found: list[tuple[str, list[Section], dict[str, str]]] = []
        self.notes: list[CheckRun] = []
        self.kept = 0

    def add(self, source: str, text: str) -> None:
        try:
            sections, env = find(source, text)
        except Exception as exc:  # noqa: BLE001 -- a paste detector must never sink the report
            self.notes.append(_note(source, Status.WARN, f"could not look for pasted tool output: {exc}"))
            return
        if not sections and not any(k.startswith("SLURM_") for k in env):
            return
        size = sum(len(sec.text) for sec in sections)
        if self.kept + size > self.MAX_KEPT:
            if self.kept <= self.MAX_KEPT:
                self.notes.append(_note(source, Status.WARN, f"pasted tool output past the first "
                                                             f"{self.MAX_KEPT // 2**20} MiB was not judged"))
            self.kept = self.MAX_KEPT + 1
            return
        self.kept += size
        self.found.append((source, sections, env))

    def runs(self) -> list[CheckRun]:
        out = list(self.notes)
        for source, sections, env in self.found:
            out.extend(_judge_all(sections, env, source))
        return out


def runs(texts: list[tuple[str, str]]) -> list[CheckRun]:
    collector = Collector()
    for source, text in texts:
        collector.add(source, text)
    return collector.runs()


def _judge_all(sections: list[Section], env: dict[str, str], source: str = "") -> list[CheckRun]:
    # nvidia-smi's header is the authority on the driver's CUDA where the paste has one;
    # the GPUs any section shows tell whether a CUDA-aware MPI matters
    smi = None
    gpus = 0
    query = None
    kernel = next((sec.text for sec in sections if sec.kind == "kernel"), None)
    for section in sections:
        if section.kind == "smi_q" and query is None:
            try:
                query = _parse(section)
            except ParseError:
                pass
        if section.kind in ("smi", "topo", "collect_env"):
            try:
                parsed = _parse(section)
            except ParseError:
                continue
            if section.kind == "smi":
                smi = parsed
            gpus = max(gpus, len(parsed.gpus))
    out: list[CheckRun] = []
    for section in sections:
        out.extend(_judge(section, env, smi, gpus, query, kernel))
    slurm = pasted_tools.slurm_env_run(env, source) if source else None
    if slurm is not None:
        out.append(slurm)
        out.extend(pasted_tools.slurm_env_checks(env, source))
    return out


def _note(source: str, status: Status, message: str, evidence: dict | None = None) -> CheckRun:
    return CheckRun("log.pasted-output", "Tool output pasted into the log", ("log", "pasted"), status,
                    (Finding(status, message, subject=source, evidence=evidence or {}),), 0.0, "log")


def _judge(section: Section, env: dict[str, str], smi=None, gpus: int = 0, query=None, kernel=None) -> list[CheckRun]:
    where = f"{section.source}:{section.line}"
    for module in (pasted_tools, pasted_driver, pasted_host, pasted_rdma, pasted_slurm, pasted_topo, pasted_unread):
        if section.kind in module.KINDS:
            return module.runs(section.kind, section.text, where, env)
    if section.kind == "interfaces" and not _ADDRESS_WORD.search(section.text):
        # `ip link` shows names and states, never addresses: unknown, not "nothing has an address"
        return pasted_tools.runs("link_names", section.text, where, env)
    if section.kind == "interfaces" and pasted_host.MASKED.search(section.text):
        return pasted_host.masked_interfaces(section.text, where)
    try:
        parsed = _parse(section)
    except ParseError as exc:
        return [_note(where, Status.WARN, f"pasted {section.kind} output at {where} could not be read: {exc}")]
    if section.kind == "smi":
        return pasted_driver.table_runs(parsed, where) if parsed else []
    if not parsed:
        return []
    if section.kind == "collect_env":
        return pasted_builds.collect_env_run(parsed, where, smi)
    if section.kind == "ompi_info":
        return pasted_builds.ompi_info_run(parsed, section.text, where, gpus)
    from distdoctor.testing import FakeHost

    data: dict = {"env": dict(env), "hostname": "pasted"}
    if section.kind == "interfaces":
        data.update(interface_host_data(parsed))
    elif section.kind == "ib":
        data.update(ib_host_data(parsed))
    elif section.kind == "topo":
        data["commands"] = {("nvidia-smi", "topo", "-m"): section.text}
        data["nvml"] = {"status": "ok", "driver_version": "", "cuda_version": None}
    elif section.kind == "smi_q":
        data["nvml"] = _nvml_from_query(parsed)
        if kernel is not None:  # the pasted kernel lines' AER errors are judged with the GPUs' links
            data["files"] = {"/dev/kmsg": kernel}
    elif section.kind == "kernel":
        # the GPUs of a pasted nvidia-smi -q name the Xids' PCI addresses
        data["nvml"] = _nvml_from_query(query) if query is not None else {"status": "ok", "driver_version": "",
                                                                             "cuda_version": None, "gpus": []}
        data["files"] = {"/dev/kmsg": parsed}
    ids = CHECKS_FOR[section.kind]
    if section.kind == "kernel" and (_RDMA_LINK.search(section.text) or _MLX5_LINE.search(section.text)):
        # the paste's own mlx5 lines show the node has RDMA adapters: their flaps and health are judged too
        data["dirs"] = {"/sys/class/infiniband": ["mlx5_pasted"]}
        ids += ("ib.link-flaps", "ib.hca-health")
    host = FakeHost(**data)
    if section.kind == "kernel" and query is not None:
        ids = tuple(i for i in ids if i != "gpu.pcie-link")  # judged once, with the pasted nvidia-smi -q
    if "GLOO_SOCKET_IFNAME" not in env:
        # without the setting, gloo's choice hangs on the hostname's address, which a paste cannot show
        ids = tuple(i for i in ids if i != "net.gloo-socket-interface")
    runs_ = _run_checks(ids, host)
    if section.kind == "interfaces" and section.cut and not pasted_host.names_shown(env, parsed):
        # "NCCL will use X" among a list cut short is not its choice on the node; a warning about an
        # interface shown (one NCCL takes beside the others) stands
        runs_ = [r for r in runs_ if r.status != Status.OK]
    stated = (pasted_driver.ib_statement(parsed, where, section.text) if section.kind == "ib" else
              pasted_driver.kernel_statement(section.text, where) if section.kind == "kernel" else
              pasted_driver.query_statement(parsed, where) if section.kind == "smi_q" else
              pasted_topo.cut_note(section.cut, where) if section.kind == "topo" and section.cut else
              pasted_host.cut_listing_note(parsed, section.cut, where) if section.cut else None)
    return ([stated] if stated else []) + [
        CheckRun(r.id, f"{r.title} (pasted {section.kind} at {where})", r.tags + ("pasted",), r.status, r.findings,
                 r.duration, f"pasted {section.kind} at {where}") for r in runs_]


def _run_checks(ids, host) -> list[CheckRun]:
    return pasted_tools.run_checks(ids, host, PASTE_PARAMS)

