"""Pasted RDMA output the other recognisers miss: verbs' own "No IB devices found" (with the
libibverbs warnings that say why), one `Port N:` of ibstat quoted without its `CA '...'` line,
and ibstat pasted with its indentation flattened (a paste through inline code or a chat keeps
the lines, not the tabs).

A port quoted without its CA line is judged by its own state, and which HCA it belongs to is said
unknown. pasted.py finds the sections and calls in here."""

from __future__ import annotations

import re

from distdoctor.model import CheckRun, Finding, Status

KINDS = ("verbs_none", "ib_port_fragment")

_NO_DEVICES = re.compile(r"^No IB devices found\s*$")
_VERBS_WARNING = re.compile(r"^libibverbs: Warning: (?P<what>.+?)\s*$")
_NO_PROVIDER = re.compile(r"no userspace device-specific driver found for (?P<path>\S+)")
_NO_CONFIG = re.compile(r"couldn.t open config directory '(?P<path>[^']+)'")
_PORT = re.compile(r"^Port (?P<port>\d+):\s*$")
_PORT_FIELD = re.compile(r"^(?P<key>State|Physical state|Rate|Base lid|LMC|SM lid|Capability mask|Port GUID|"
                         r"Link layer):\s*(?P<value>.*?)\s*$")
_CA = re.compile(r"^CA '[^']+'\s*$")
# the fields of a CA (one level in) and of a port (two levels in), as ibstat indents them
_CA_FIELD = re.compile(r"^(?:CA type|Number of ports|Firmware version|Hardware version|Node GUID|"
                       r"System image GUID):")
_WHERE = "# on the node the paste came from:\n"


def detect(lines: list[str], i: int) -> tuple[str, int] | None:
    """(kind, end) when one of these starts at lines[i]."""
    body = lines[i].strip()
    if _VERBS_WARNING.match(body) or _NO_DEVICES.match(body):
        end = i
        while end < len(lines) and end - i < 64 and _VERBS_WARNING.match(lines[end].strip()):
            end += 1
        if end < len(lines) and _NO_DEVICES.match(lines[end].strip()):
            return "verbs_none", end + 1
        return None
    if _PORT.match(body) and i + 1 < len(lines) and _PORT_FIELD.match(lines[i + 1].strip()):
        end = i + 1
        while end < len(lines) and end - i < 64 and _PORT_FIELD.match(lines[end].strip()):
            end += 1
        return "ib_port_fragment", end
    return None


def flat_ibstat_end(lines: list[str], i: int) -> int | None:
    """The end of an ibstat pasted without its indentation (`CA 'x'` then `CA type:` at the same
    column), or None when lines[i] does not start one."""
    if not (_CA.match(lines[i].strip()) and i + 1 < len(lines) and _CA_FIELD.match(lines[i + 1].strip())
            and _indent(lines[i + 1]) <= _indent(lines[i])):
        return None
    end = i + 1
    while end < len(lines) and end - i < 4000:
        s = lines[end].strip()
        if not (_CA.match(s) or _CA_FIELD.match(s) or _PORT.match(s) or _PORT_FIELD.match(s)):
            break
        end += 1
    return end


def indent_ibstat(text: str) -> str:
    """ibstat's own indentation given back to a flattened paste (tabs: the CA's fields one level
    in, `Port N:` one, the port's fields two); an indented ibstat is returned as it is."""
    lines = text.splitlines()
    if not any(_CA_FIELD.match(line) for line in lines):
        return text
    out = []
    for line in lines:
        s = line.strip()
        depth = 0 if _CA.match(s) else 2 if _PORT_FIELD.match(s) else 1 if s else 0
        out.append("\t" * depth + s)
    return "\n".join(out) + "\n"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _note(where: str, status: Status, summary: str, title: str, evidence: dict, **kw) -> CheckRun:
    return CheckRun("log.pasted-output", title, ("log", "pasted", "net"), status,
                    (Finding(status, summary, subject=where, evidence=evidence, **kw),), 0.0, f"pasted at {where}")


def runs(kind: str, text: str, where: str, _env: dict[str, str]) -> list[CheckRun]:
    if kind == "verbs_none":
        return [_verbs_none(text, where)]
    return [_port_fragment(text, where)]


def _verbs_none(text: str, where: str) -> CheckRun:
    providers = [m.group("path") for m in _NO_PROVIDER.finditer(text)]
    config = _NO_CONFIG.search(text)
    title = f"RDMA devices (pasted ibv_devinfo at {where})"
    if providers:
        why = (f"the kernel has the device(s) ({', '.join(providers[:4])}) but no user-space provider claims them: "
               "the provider library for this HCA (mlx5, efa, ...) is not installed, or is older than the kernel "
               "driver")
    elif config:
        why = (f"libibverbs found no provider configuration ({config.group('path')} is missing): no provider "
               "library is installed")
    else:
        why = ("verbs sees no device: the node has no RDMA adapter, or its kernel driver (mlx5_ib, efa, ...) is "
               "not loaded, or a container was started without /dev/infiniband")
    return _note(where, Status.WARN, f"pasted `ibv_devinfo`: no IB devices found: {why}", title,
                 {"providers_missing": providers[:16], "config_dir": config.group("path") if config else None},
                 explanation="With no verbs device, NCCL, UCX and Open MPI fall back to TCP sockets (NCCL: "
                             "\"NET/IB : No device found\"), or fail where NCCL_IB_HCA or an IB transport is "
                             "required. On a node without RDMA hardware this is expected.",
                 fix=_WHERE + "ls /sys/class/infiniband/ /dev/infiniband/ /etc/libibverbs.d/\n"
                              "# the providers come with rdma-core: Debian/Ubuntu `ibverbs-providers`, "
                              "RHEL/Rocky `libibverbs` (or MLNX_OFED/DOCA)")


def _port_fragment(text: str, where: str) -> CheckRun:
    port = None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if (m := _PORT.match(s)) and port is None:
            port = int(m.group("port"))
        elif (f := _PORT_FIELD.match(s)):
            fields.setdefault(f.group("key"), f.group("value"))
    state, phys = fields.get("State", "?"), fields.get("Physical state", "?")
    shown = f"port {port} {state} / {phys}" + (f", rate {fields['Rate']}" if fields.get("Rate") else "")
    title = f"InfiniBand port (pasted ibstat at {where})"
    evidence = {"port": port, "fields": fields}
    unknown = "which HCA (CA) it belongs to is not shown in the paste"
    if state.lower() == "active" or state == "?":
        return _note(where, Status.OK, f"pasted `ibstat` (one port, without its CA line): {shown}; {unknown}",
                     title, evidence)
    meaning = {"polling": "the port is trying to train but sees no partner: the cable is out or bad, or the "
                          "switch port is down",
               "disabled": "the port is administratively disabled (on the HCA or by the subnet manager)",
               "linkup": "the link is up but no subnet manager has brought the port to Active"}.get(phys.lower(), "")
    return _note(where, Status.WARN, f"pasted `ibstat` (one port, without its CA line): {shown}"
                                     + (f": {meaning}" if meaning else "") + f"; {unknown}",
                 title, evidence,
                 explanation="A rank whose NCCL uses a port that is not Active hangs or fails at connect.",
                 fix=_WHERE + "ibstat   # which CA's port is not Active; exclude it (NCCL_IB_HCA=^<ca>:<port>) "
                              "until its cable or switch port is fixed")
