"""Pasted output of launchers, GPU listings and environment dumps: `mpirun --version`,
`horovodrun --check-build`, `nvidia-smi -L`, an `nvidia-smi` table, `env | grep SLURM`,
`ibstatus`, `perfquery` and `ibqueryerrors` (judged by the thresholds of the sysfs counters),
`dcgmi diag` (table or `-j` JSON) and `dcgmi health -c`, the Fabric sections of `nvidia-smi -q`
(grep'd out alone) and `nvidia-imex-ctl -N`, and interface listings that show no addresses
(`ip -o link`, `ifconfig -s`).

Each is recognised (detect), read by the parser `check` uses, stated back ("what the paste
shows": GPUs, driver, versions, interfaces, variables) and, where a check reads the same facts,
judged by that check on a FakeHost holding only the paste. What a paste cannot show stays
unknown: a listing without addresses never fails for lack of an address, a GPU listing says
nothing of the driver's CUDA. pasted.py finds the sections and calls in here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from distdoctor.model import CheckRun, Finding, Status, worst
from distdoctor.text import plural

KINDS = ("mpirun_version", "horovod_build", "smi_list", "ibstatus", "link_names", "node_show", "ld_cache",
         "dcgmi_diag", "dcgmi_health", "perfquery", "ibqueryerrors", "fabric", "imex")
_OMPI_BANNER = re.compile(r"^(?:mpirun|mpiexec|orterun|prterun) \(Open MPI\) \d")
_INTEL_BANNER = re.compile(r"^Intel\(R\) MPI Library for \S+ OS, Version \d")
_HYDRA_BANNER = re.compile(r"^HYDRA build details:\s*$")
_HOROVOD = re.compile(r"^Horovod v?\d+\.\d+\S*:\s*$")
_SMI_LIST = re.compile(r"^GPU \d+: .+\(UUID: GPU-[0-9a-fA-F-]+\)\s*$")
_SMI_UNREACHABLE = re.compile(r"^Unable to (?:determine|detect) the device handle for (?:GPU|gpu)\s*\S+: .+")
_IBSTATUS = re.compile(r"^\s*Infiniband device '(?P<hca>[^']+)' port (?P<port>\d+) status:\s*$")
_IFCONFIG_SHORT = re.compile(r"^Iface\s+MTU\s+(?:Met\s+)?RX-OK\s+RX-ERR\b")  # also netstat -i
_IP_LINK_ONELINE = re.compile(r"^\d+:\s+(?P<name>[^:\s]+?)(?:@\S+)?:\s+<(?P<flags>[^>]*)>.*\bstate (?P<state>\S+)"
                              r"(?!.*\binet6?\s)")
# a paste through inline code can flatten the fields' indentation (azhpc-diagnostics#59)
_IBSTATUS_FIELD = re.compile(r"^\s*(?P<key>default gid|base lid|sm lid|state|phys state|rate|link_layer):\s*(?P<value>.*)$")
_SLURM_VAR = re.compile(r"^SLURM_\w+$")
_NODE_SHOW = re.compile(r"^NodeName=\S+ ")
_LD_CACHE = re.compile(r"^\d+ libs found in cache\b")
_LD_ENTRY = re.compile(r"^\s+lib\S+ \([^)]*\)(?: => \S+)?\s*$")
# the libraries a distributed job's failure turns on
# dcgmi diag: its banner, the table's header, a category bar, or a test row with DCGM's result words
_DCGMI_DIAG = re.compile(r"^(?:Successfully ran diagnostic for group\.|\|\s*Diagnostic\s+\|\s*Result\s*\||"
                         r"[|+]-----\s+(?:Metadata|Deployment|Integration|Hardware|Stress)\s+-+\+|"
                         r"\|[^|]{2,40}\|\s*(?:Pass|Fail|Skip|Warn)\s+-\s+(?:All|GPUs?:[\d,\s]+)\s*\|)")
_DCGMI_JSON = re.compile(r'^\{?\s*"DCGM (?:GPU )?Diagnostic"\s*:')  # DCGM 4 dropped "GPU"
# its banner, or its first row where a paste starts below the banner (NVSentinel PR #1481)
_DCGMI_HEALTH = re.compile(r"^\|?\s*Health Monitor Report\b|^\|\s*Overall Health\s*\|\s*(?:Healthy|Warning|Failure)\b")
_TABLE_LINE = re.compile(r"^\s*[|+]")
_PERFQUERY = re.compile(r"^#\s*Port (?:extended )?counters:\s*Lid\s+\d+", re.I)
_PERFQUERY_FIELD = re.compile(r"^\s*[A-Za-z][A-Za-z0-9]*:\.+(?:0x[0-9a-fA-F]+|\d+)\s*$")
_FABRIC_FIELD = re.compile(r"^\s+(?:State|Status|CliqueId|ClusterUUID|Health|Summary|Bandwidth|Route [\w ]+|"
                           r"Access Timeout Recovery|Incorrect Configuration)\s*(?::|$)")
_IMEX = re.compile(r"^(?:Connectivity Table Legend:|Nodes:|Domain State:\s*\w+)\s*$")
_IMEX_LINE = re.compile(r"^\s*(?:[A-Z!]{1,3} - |\d+/\d+/\d+ \d|Nodes:|Node #\d+|Nodes From|\d+\s+[A-Z!]|"
                        r"Domain State:|Connectivity Table|READY|keepGoing|Finishing)")
_IBQUERYERRORS = re.compile(r'^(?:Errors for (?:0x[0-9a-fA-F]+\s+)?"|##\s*Summary:\s*\d+ nodes checked)')
_IBQUERYERRORS_LINE = re.compile(r'^\s*(?:Errors for |GUID 0x[0-9a-fA-F]+ port |##)')
_LD_WATCHED = re.compile(r"^lib(?:nccl|cuda|cudart|ibverbs|mlx5|mpi|ucp|ucs|fabric)\b")


def detect(lines: list[str], i: int) -> tuple[str, int] | None:
    """(kind, end) when a section of one of these tools starts at lines[i]."""
    body = lines[i].strip()
    if _OMPI_BANNER.match(body) or _INTEL_BANNER.match(body):
        return "mpirun_version", i + 1
    if _HYDRA_BANNER.match(body):
        end = i + 1
        while end < len(lines) and lines[end].startswith((" ", "\t")) and end - i < 60:
            end += 1
        return "mpirun_version", end
    if _HOROVOD.match(body):
        end = i + 1
        while end < len(lines) and end - i < 30 and (not lines[end].strip() or lines[end].startswith((" ", "\t"))
                                                      or lines[end].rstrip().endswith(":")):
            end += 1
        return "horovod_build", end
    if _SMI_LIST.match(body) or _SMI_UNREACHABLE.match(body):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if _SMI_LIST.match(body) and following[:1].isspace() and not following.strip().startswith(("MIG ", "Link ")):
            return None  # a GPU header of another listing (nvidia-smi nvlink -info, -c ...): not -L
        end = i + 1
        while end < len(lines) and end - i < 300 and (
                _SMI_LIST.match(lines[end].strip()) or _SMI_UNREACHABLE.match(lines[end].strip())
                or lines[end].strip().startswith("MIG ")):
            end += 1
        return "smi_list", end
    if _IBSTATUS.match(body):
        end = i + 1
        while end < len(lines) and end - i < 400 and (
                _IBSTATUS.match(lines[end].strip()) or _IBSTATUS_FIELD.match(lines[end]) or not lines[end].strip()):
            end += 1
        return "ibstatus", end
    if _IFCONFIG_SHORT.match(body):
        end = i + 1
        while end < len(lines) and lines[end].strip() and end - i < 300:
            end += 1
        return "link_names", end
    if _NODE_SHOW.match(body):
        end = i + 1
        # Slurm prints a whitespace-only line before Reason=: the record goes on past it
        while end < len(lines) and lines[end].startswith((" ", "\t")) and end - i < 60 and (
                lines[end].strip() or end + 1 < len(lines) and lines[end + 1].startswith((" ", "\t"))
                and lines[end + 1].strip()):
            end += 1
        return "node_show", end
    if _LD_CACHE.match(body) or (_LD_ENTRY.match(lines[i]) and i + 1 < len(lines) and _LD_ENTRY.match(lines[i + 1])):
        end = i + 1
        while end < len(lines) and _LD_ENTRY.match(lines[end]) and end - i < 20000:
            end += 1
        return "ld_cache", end
    if _DCGMI_DIAG.match(body) or _DCGMI_HEALTH.match(body):
        end = i + 1
        while end < len(lines) and end - i < 4000 and _TABLE_LINE.match(lines[end]):
            end += 1
        return ("dcgmi_health" if _DCGMI_HEALTH.match(body) else "dcgmi_diag"), end
    if body == "Fabric" and i + 1 < len(lines) and _FABRIC_FIELD.match(lines[i + 1]):
        end = i + 1
        while end < len(lines) and end - i < 20000 and (
                _FABRIC_FIELD.match(lines[end]) or lines[end].strip() in ("Fabric", "--")):
            end += 1
        return "fabric", end
    if _IMEX.match(body) and (body != "Nodes:" or i + 1 < len(lines) and lines[i + 1].startswith("Node #")):
        end = i + 1
        while end < len(lines) and end - i < 5000 and (lines[end].strip() == "" and end + 1 < len(lines)
                                                       and lines[end + 1].strip() or _IMEX_LINE.match(lines[end])):
            end += 1
        return "imex", end
    if _PERFQUERY.match(body):
        end = i + 1
        while end < len(lines) and end - i < 20000 and (
                _PERFQUERY.match(lines[end].strip()) or _PERFQUERY_FIELD.match(lines[end])
                or (not lines[end].strip() and end + 1 < len(lines) and _PERFQUERY.match(lines[end + 1].strip()))):
            end += 1
        return "perfquery", end
    if _IBQUERYERRORS.match(body):
        end = i + 1
        while end < len(lines) and end - i < 20000 and (
                _IBQUERYERRORS_LINE.match(lines[end]) or (not lines[end].strip() and end + 1 < len(lines)
                                                          and _IBQUERYERRORS_LINE.match(lines[end + 1]))):
            end += 1
        return "ibqueryerrors", end
    if _DCGMI_JSON.match(body) or (body == "{" and i + 1 < len(lines) and _DCGMI_JSON.match(lines[i + 1].strip())):
        return "dcgmi_diag", _json_end(lines, i)
    if _IP_LINK_ONELINE.match(body) and "link/" in body:
        end = i + 1
        while end < len(lines) and _IP_LINK_ONELINE.match(lines[end].strip()) and end - i < 300:
            end += 1
        return "link_names", end
    return None


def _json_end(lines: list[str], start: int) -> int:
    """The line after the one closing the JSON object opened at lines[start] (braces in strings are
    rare in DCGM's messages; a miscount only shortens the section, which then reads as unreadable)."""
    depth = 0
    for k in range(start, min(len(lines), start + 20000)):
        depth += lines[k].count("{") - lines[k].count("}")
        if depth <= 0 and k > start:
            return k + 1
    return min(len(lines), start + 20000)


def _note(where: str, status: Status, summary: str, title: str, evidence: dict, **kw) -> CheckRun:
    finding = Finding(status, summary, subject=where, evidence=evidence, **kw)
    return CheckRun("log.pasted-output", title, ("log", "pasted"), status, (finding,), 0.0, f"pasted at {where}")


def runs(kind: str, text: str, where: str, env: dict[str, str]) -> list[CheckRun]:
    """The statement of what the paste shows, and the checks that can judge it."""
    from distdoctor.parsers import ParseError

    try:
        if kind == "mpirun_version":
            return _mpirun(text, where)
        if kind == "horovod_build":
            return _horovod(text, where)
        if kind == "smi_list":
            return _smi_list(text, where)
        if kind == "ibstatus":
            return _ibstatus(text, where)
        if kind == "link_names":
            return _link_names(text, where)
        if kind == "node_show":
            return _node_show(text, where)
        if kind == "ld_cache":
            return _ld_cache(text, where)
        if kind == "dcgmi_diag":
            return _dcgmi_diag(text, where)
        if kind == "dcgmi_health":
            return _dcgmi_health(text, where)
        if kind in ("perfquery", "ibqueryerrors"):
            return _ib_counters(kind, text, where)
        if kind == "fabric":
            return _fabric(text, where)
        if kind == "imex":
            return _imex(text, where)
    except ParseError as exc:
        return [_note(where, Status.WARN, f"pasted {kind} output at {where} could not be read: {exc}",
                      "Tool output pasted into the log", {})]
    except (ValueError, OverflowError, RecursionError) as exc:  # a value no parser can hold (5,000 digits)
        return [_note(where, Status.WARN, f"pasted {kind} output at {where} could not be read: a value too large "
                                          f"or malformed to read ({str(exc)[:120]})", "Tool output pasted into the log",
                      {})]
    return []


def _mpirun(text: str, where: str) -> list[CheckRun]:
    from distdoctor.parsers.mpirun import parse_mpirun_version

    mpi = parse_mpirun_version(text)
    extra = ""
    device = mpi.details.get("Configure options", "")
    if device:
        m = re.search(r"--with-device=(\S+)", device)
        extra = f", device {m.group(1)}" if m else ""
    return [_note(where, Status.OK, f"pasted `mpirun --version`: {mpi.label}{extra}", f"MPI version (pasted at {where})",
                  {"implementation": mpi.implementation, "version": mpi.version, "program": mpi.program},
                  explanation="Only the launcher's version: whether the program was built against the same MPI "
                              "(build.mpi-implementation, build.mpi4py-mpi) needs the node itself.")]


def _horovod(text: str, where: str) -> list[CheckRun]:
    from distdoctor.parsers.horovod import parse_check_build
    from distdoctor.testing import FakeHost

    build = parse_check_build(text)
    shown = {k: [n for n, on in v.items() if on] for k, v in
             (("frameworks", build.frameworks), ("controllers", build.controllers), ("operations", build.operations))}
    lists = [f"{k} {', '.join(shown[k]) or 'none'}" for k in ("frameworks", "controllers", "operations")
             if not build.cut or getattr(build, k)]
    if build.cut and lists:
        # the list the paste stops in: its last name may be cut, and more may follow
        last = [k for k in ("frameworks", "controllers", "operations") if getattr(build, k)][-1]
        named = list(getattr(build, last).items())[:-1]
        lists[-1] = f"{last} " + (", ".join(f"{n} {'built' if on else 'not built'}" for n, on in named) or "") + " ..."
    out = [_note(where, Status.OK, f"pasted `horovodrun --check-build`: Horovod {build.version}; " + "; ".join(lists)
                 + ("; the paste is cut off inside the lists (the rest not shown)" if build.cut else ""),
                 f"Horovod build (pasted at {where})", {"version": build.version, **shown},
                 explanation="Which frameworks are installed and whether the node has GPUs is not in the paste: "
                             "a missing framework or NCCL is judged against those on the node itself.")]
    if build.cut:
        # the lists after the cut are not shown: "no controller" would be invented
        return [replace(out[0], findings=(replace(out[0].findings[0], explanation=(
            "The paste ends inside the lists (the last name may be cut too): what follows is not shown, so "
            "the controllers and operations are not judged."), evidence={**out[0].findings[0].evidence,
                                                                         "cut": True}),))]
    host = FakeHost(commands={("/usr/bin/horovodrun", "--check-build"): text}, hostname="pasted")
    # only the verdicts the paste alone supports: no controller at all
    for r in _checks(("build.horovod",), host, where, "horovodrun --check-build"):
        if r.status in (Status.FAIL, Status.WARN):
            out.append(r)
    return out


def _smi_list(text: str, where: str) -> list[CheckRun]:
    from distdoctor.parsers.nvidia_smi import parse_list_gpus

    listed = parse_list_gpus(text)
    names: dict[str, int] = {}
    for gpu in listed.gpus:
        names[gpu.name] = names.get(gpu.name, 0) + 1
    migs = sum(len(g.mig_devices) for g in listed.gpus)
    shown = ", ".join(f"{n}x {name}" for name, n in names.items()) or "no GPU"
    evidence = {"gpus": len(listed.gpus), "models": names, "mig_devices": migs, "errors": list(listed.errors)[:16]}
    summary = f"pasted `nvidia-smi -L`: {len(listed.gpus)} GPU(s): {shown}" + (f"; {migs} MIG device(s)" if migs else "")
    title = f"GPUs listed (pasted at {where})"
    unreachable = [e for e in listed.errors if _SMI_UNREACHABLE.match(e)]
    if unreachable:
        head = f"{summary}; and " if listed.gpus else "pasted `nvidia-smi`: "
        return [_note(where, Status.FAIL, f"{head}{len(unreachable)} GPU(s) the driver cannot reach: "
                                          f"{unreachable[0][:160]}", title, evidence,
                      explanation="nvidia-smi could not get a handle for a GPU the driver enumerated: the GPU fell off "
                                  "the bus or is in an error state (the kernel log shows an Xid, often 79 or 48). "
                                  "Jobs on this node fail or hang until the GPU is reset or the node rebooted.",
                      fix="# on that node: the Xid that took the GPU down, then drain it for a GPU reset or reboot:\n"
                          "# dmesg -T | grep -i -E 'NVRM: Xid|fallen off the bus'")]
    return [_note(where, Status.OK, summary, title, evidence,
                  explanation="A GPU listing shows the models and UUIDs only: not the driver, its CUDA version, "
                              "health or topology.")]


def _ibstatus(text: str, where: str) -> list[CheckRun]:
    ports: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _IBSTATUS.match(line)
        if m:
            current = {"hca": m.group("hca"), "port": int(m.group("port"))}
            ports.append(current)
            continue
        f = _IBSTATUS_FIELD.match(line)
        if f and current is not None:
            current[f.group("key").replace(" ", "_")] = f.group("value").strip()
    if not ports:
        return []
    # a port whose state the paste cut off is unknown, not "not ACTIVE"
    down = [p for p in ports if p.get("state") and "ACTIVE" not in p["state"].upper()]
    shown = "; ".join(f"{p['hca']}/{p['port']} {p.get('state', 'state not shown').split(': ')[-1]} "
                      f"{p.get('rate', '')}".rstrip() for p in ports[:8])
    evidence = {"ports": ports[:32]}
    title = f"InfiniBand ports (pasted ibstatus at {where})"
    if down and len(down) < len(ports):
        return [_note(where, Status.WARN, f"pasted `ibstatus`: {len(down)} of {len(ports)} port(s) not ACTIVE: {shown}",
                      title, evidence,
                      explanation="A rank whose NCCL picks a port that is not ACTIVE hangs or fails at connect; "
                                  "exclude it or bring the link up.",
                      fix="# exclude the ports that are down, e.g. export NCCL_IB_HCA=^" + down[0]["hca"]
                          + f":{down[0]['port']}   (on the nodes where it is down)")]
    status = Status.WARN if down else Status.OK
    return [_note(where, status, f"pasted `ibstatus`: {len(ports)} port(s): {shown}", title, evidence)]


_TABLE_ROW = re.compile(r"^(?P<name>[A-Za-z][\w.:@-]*)\s+\d+\s+\d+\s")


def _link_names(text: str, where: str) -> list[CheckRun]:
    names = []
    for line in text.splitlines():
        m = _IP_LINK_ONELINE.match(line.strip())
        if m:
            names.append((m.group("name"), m.group("state")))
        elif (row := _TABLE_ROW.match(line)) is not None:
            names.append((row.group("name"), "?"))
    if not names:
        return []
    shown = ", ".join(f"{n} ({s})" if s != "?" else n for n, s in names[:16])
    return [_note(where, Status.OK, f"pasted interface list without addresses: {shown}",
                  f"Interfaces (pasted at {where})", {"interfaces": [n for n, _ in names]},
                  explanation="`ip link`, `ip -o link`, `ifconfig -s` and `netstat -i` show no IP addresses: which "
                              "interface NCCL or Gloo would use cannot be told from this output (unknown, not "
                              "failed). Paste `ip -br addr` or `ip addr` for that.")]


def _node_show(text: str, where: str) -> list[CheckRun]:
    from distdoctor.parsers.slurm import parse_node_show

    node = parse_node_show(text)
    title = f"Slurm node (pasted scontrol show node at {where})"
    evidence = {"node": node.name, "state": node.state, "reason": node.reason}
    if node.drained or {"DOWN", "FAIL", "NOT_RESPONDING"} & node.flags:
        return [_note(where, Status.WARN, f"pasted `scontrol show node`: {node.name} is {node.state}"
                                          + (f" ({node.reason})" if node.reason else ""), title, evidence,
                      explanation="Slurm will not start jobs on a drained or down node; the reason is what an "
                                  "admin or a health check recorded when taking it out.",
                      fix="# once the cause is fixed, an admin returns it to service:\n"
                          f"# scontrol update nodename={node.name} state=resume")]
    return [_note(where, Status.OK, f"pasted `scontrol show node`: {node.name} is {node.state}", title, evidence)]


def _ld_cache(text: str, where: str) -> list[CheckRun]:
    from distdoctor.parsers.ldconfig import parse_ldconfig_cache

    entries = parse_ldconfig_cache(text)
    watched: dict[str, list[str]] = {}
    for e in entries:
        if _LD_WATCHED.match(e.name):
            watched.setdefault(e.name.split(".so")[0], []).append(e.path or e.name)
    shown = "; ".join(f"{lib}: {', '.join(sorted(set(paths))[:3])}" for lib, paths in sorted(watched.items())[:8])
    nccl = sorted({p for lib, paths in watched.items() if lib == "libnccl" for p in paths})
    title = f"Shared libraries (pasted ldconfig -p at {where})"
    evidence = {"libraries": {k: sorted(set(v)) for k, v in watched.items()}, "entries": len(entries)}
    summary = f"pasted `ldconfig -p`: {len(entries)} entries" + (f"; {shown}" if shown else
                                                                 "; no NCCL, CUDA, verbs or MPI library listed")
    explanation = ("Which libraries the loader's cache lists, not which one a process loads (LD_LIBRARY_PATH and "
                   "a Python wheel's own copy come first).")
    if len({p.rsplit('/', 1)[0] for p in nccl}) > 1:
        explanation += (" NCCL is listed from more than one directory: a program may load another NCCL than the "
                        "one it was built with (build.nccl-libraries on the node tells which one loads).")
    return [_note(where, Status.OK, summary, title, evidence, explanation=explanation)]


def _dcgmi_diag(text: str, where: str) -> list[CheckRun]:
    """A pasted `dcgmi diag`: each failed test judged as hardware/dcgm.py judges it (the actions of
    dcgm.toml, the same as the live gpu.dcgm-health check's)."""
    from distdoctor.hardware.dcgm import judge_diag
    from distdoctor.parsers.dcgmi import parse_diag

    findings = tuple(replace(f, subject=f"{f.subject} (pasted at {where})" if f.subject else where)
                     for f in judge_diag(parse_diag(text), where))
    return [CheckRun("log.pasted-output", f"DCGM diagnostic (pasted dcgmi diag at {where})", ("log", "pasted", "gpu"),
                     worst(f.status for f in findings), findings, 0.0, f"pasted dcgmi diag at {where}")]


def _dcgmi_health(text: str, where: str) -> list[CheckRun]:
    """A pasted `dcgmi health -c`, judged by the live check gpu.dcgm-health on a FakeHost whose dcgmi
    prints the paste."""
    from distdoctor.parsers.dcgmi import parse_health
    from distdoctor.testing import FakeHost

    parse_health(text)  # a paste this parser cannot read is said so, not judged as "no report"
    host = FakeHost(commands={("dcgmi", "health", "-c"): text}, hostname="pasted")
    return _checks(("gpu.dcgm-health",), host, where, "dcgmi health -c")


def _ib_counters(kind: str, text: str, where: str) -> list[CheckRun]:
    """Pasted `perfquery` or `ibqueryerrors`, judged by hardware/ibcounters.judge_counters with the
    thresholds of ib.port-counters. A paste has no uptime, so no rate: since-boot counts and
    saturated counters are looked at (WARN), and two readings of one port in one paste are the
    check's two readings (a rise is a FAIL)."""
    from distdoctor.hardware.ibcounters import judge_counters
    from distdoctor.hardware.thresholds import load as thresholds
    from distdoctor.parsers.perfquery import parse_ibqueryerrors, parse_perfquery

    limits = thresholds()["ib"]["counters"]
    readings: dict[str, list[tuple[dict[str, int], str]]] = {}
    if kind == "perfquery":
        for block in parse_perfquery(text):
            port = "all ports" if block.port is None else f"port {block.port}"
            fix = (f"perfquery -x {block.lid} {block.port if block.port is not None else 255}   # again in a minute: "
                   "a counter still rising is a live fault; then reseat or replace the cable")
            readings.setdefault(f"lid {block.lid} {port}", []).append((block.counters, fix))
    else:
        report = parse_ibqueryerrors(text)
        for p in report.ports:
            if p.port is None:
                continue  # "port ALL" is the sum of the ports listed beside it
            fix = (f"perfquery -x -G {p.guid} {p.port}   # again in a minute: a counter still rising is a live "
                   "fault; then reseat or replace the cable (ibdiagnet names the far end)")
            readings.setdefault(f"{p.node or p.guid} port {p.port}", []).append((p.counters, fix))
    findings = []
    for subject, taken in readings.items():
        first, fix = taken[0]
        second = taken[-1][0] if len(taken) > 1 else None
        verdicts = judge_counters(first, second, 0, None, limits)
        if not verdicts:
            continue
        status = Status.FAIL if any(v[1] == "fail" for v in verdicts) else Status.WARN
        findings.append(Finding(status, f"pasted {kind}: {subject}: " + "; ".join(f"{n} {why}" for n, _s, _a, why in verdicts),
                                subject=subject, action=verdicts[0][2], fix=fix,
                                evidence={"counters": first, "second": second,
                                          "sources": {n: limits[n].get("source", "") for n, *_ in verdicts}},
                                explanation="Judged by the thresholds of ib.port-counters (thresholds.toml). A paste "
                                            "is one reading without the node's uptime: a count past a since-boot "
                                            "limit or a saturated counter is worth a look (the cable, optic or port), "
                                            "a rise between two pasted readings is a live fault."))
    title = f"InfiniBand port counters (pasted {kind} at {where})"
    if not findings:
        findings.append(Finding(Status.OK, f"pasted {kind}: {plural(len(readings), 'port')}: error counters within "
                                           "thresholds", subject=where, evidence={"ports": sorted(readings)[:64]}))
    return [CheckRun("log.pasted-output", title, ("log", "pasted", "ib"), worst(f.status for f in findings),
                     tuple(findings), 0.0, f"pasted {kind} at {where}")]


def nvml_from_gpus(gpus, driver: str = "", source: str = "pasted") -> dict:
    """GPUs read from a paste (QueryGpu records) as the NVML snapshot the GPU facts read
    (host/nvml_health.py's fields), so the live checks judge them."""
    from dataclasses import asdict

    return {"status": "ok", "driver_version": driver, "cuda_version": None, "source": source,
            "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid, "bus_id": g.bus_id,
                      "persistence_mode": g.persistence_mode, "mig_mode": g.mig_mode,
                      "ecc_uncorrected": g.ecc_volatile_uncorrectable, "health": asdict(g)} for g in gpus]}


def _fabric(text: str, where: str) -> list[CheckRun]:
    """Fabric sections of `nvidia-smi -q` pasted alone, judged by gpu.fabric (the GPUs' fabric
    state, status and health; the services a paste cannot show are not asked about)."""
    from distdoctor.parsers.nvidia_smi_query import parse_fabric_excerpt
    from distdoctor.testing import FakeHost

    gpus = parse_fabric_excerpt(text)
    host = FakeHost(nvml=nvml_from_gpus(gpus, source="pasted nvidia-smi -q Fabric"), hostname="pasted")
    runs_ = _checks(("gpu.fabric",), host, where, "nvidia-smi -q Fabric")
    domains = sorted({(g.fabric_cluster_uuid, g.fabric_clique) for g in gpus})
    shown = "; ".join(f"ClusterUUID {u or '-'} clique {c or '-'}" for u, c in domains[:4])
    return [_note(where, Status.OK, f"pasted nvidia-smi -q Fabric: {plural(len(gpus), 'GPU')}, {shown}",
                  f"NVLink domain (pasted at {where})", {"domains": [list(d) for d in domains]})] + runs_


def _imex(text: str, where: str) -> list[CheckRun]:
    from distdoctor.parsers.nvidia_imex import parse_imex_nodes
    from distdoctor.hardware.imex import judge_imex

    findings = tuple(judge_imex(parse_imex_nodes(text)))
    return [CheckRun("log.pasted-output", f"IMEX domain (pasted nvidia-imex-ctl -N at {where})", ("log", "pasted", "gpu"),
                     worst(f.status for f in findings), findings, 0.0, f"pasted nvidia-imex-ctl -N at {where}")]


def slurm_env_run(env: dict[str, str], where: str) -> CheckRun | None:
    """What a pasted `env | grep SLURM` shows, and whether its counts agree (slurm.task-counts,
    on a FakeHost whose environment is the paste)."""
    slurm = {k: v for k, v in env.items() if _SLURM_VAR.match(k)}
    if len(slurm) < 2:
        return None
    job = slurm.get("SLURM_JOB_ID") or slurm.get("SLURM_JOBID") or "?"
    ntasks = slurm.get("SLURM_NTASKS") or slurm.get("SLURM_NPROCS") or "?"
    nodes = slurm.get("SLURM_JOB_NODELIST") or slurm.get("SLURM_NODELIST") or slurm.get("SLURM_STEP_NODELIST") or "?"
    per_node = slurm.get("SLURM_TASKS_PER_NODE") or slurm.get("SLURM_STEP_TASKS_PER_NODE") or "?"
    summary = (f"pasted Slurm environment: job {job}, {ntasks} task(s), nodes {nodes}, tasks per node {per_node}"
               + (f", this task rank {slurm['SLURM_PROCID']}" if "SLURM_PROCID" in slurm else ""))
    return _note(where, Status.OK, summary, f"Slurm environment (pasted at {where})", {"variables": slurm})


def slurm_env_checks(env: dict[str, str], where: str) -> list[CheckRun]:
    from distdoctor.testing import FakeHost

    slurm = {k: v for k, v in env.items() if _SLURM_VAR.match(k)}
    host = FakeHost(env=slurm, hostname=slurm.get("SLURMD_NODENAME") or "pasted")
    # the paste cannot show which node it was printed on: drop verdicts about "this node"
    out = []
    for r in _checks(("slurm.task-counts",), host, where, "env | grep SLURM"):
        kept = tuple(f for f in r.findings if "this node" not in f.summary and f.status != Status.SKIP)
        if kept:
            out.append(CheckRun(r.id, r.title, r.tags, worst(f.status for f in kept), kept, r.duration, r.source))
    return out


def run_checks(ids, host, params: dict | None = None) -> list[CheckRun]:
    """The built-in checks `ids`, run by the engine on a FakeHost holding a paste; params
    override a check's own ({check id: {param: value}})."""
    from distdoctor import checks as builtin  # type: ignore[attr-defined]  # installed from checks/ (package-dir)
    from distdoctor.api import Context
    from distdoctor.engine import run_checks as run
    from distdoctor.facts import Facts

    infos = [c for c in builtin.CHECKS if c.id in ids]
    facts = Facts(host)
    extra = params or {}
    return run(infos, lambda info: Context(facts, {**info.params, **extra.get(info.id, {})}), jobs=1,
               total_timeout=20)


def _checks(ids, host, where: str, what: str) -> list[CheckRun]:
    return [CheckRun(r.id, f"{r.title} (pasted {what} at {where})", r.tags + ("pasted",), r.status, r.findings,
                     r.duration, f"pasted {what} at {where}") for r in run_checks(ids, host)]
