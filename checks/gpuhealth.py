"""GPU hardware health, what a node is drained for: memory errors and row remapping, Xid/SXid in
the kernel log, NVLink, the PCIe link and AER, clock-event (throttle) reasons sampled over a
window, device nodes, nvidia_peermem and the NVSwitch fabric (see docs/hardware.md).

Every finding that names something to do carries an action (distdoctor/hardware/actions.py);
`health` drains only for reset-gpu, reboot and replace-hardware.
"""

from __future__ import annotations

import shlex

import time
from collections import defaultdict

from distdoctor.api import Context, check, fail, ok, skip, warn
from distdoctor.facts.gpu import CHECK_TIMEOUT
from distdoctor.hardware import recovery
from distdoctor.hardware import xid as xid_catalogue
from distdoctor.hardware.actions import needs_drain, strongest
from distdoctor.hardware.nvlink import expected_links
from distdoctor.hardware.thresholds import load as thresholds
from distdoctor.host.nvml_health import clock_reason_names
from distdoctor.parsers import ParseError
from distdoctor.parsers.kernel_log import short_pci
from distdoctor.parsers.nvidia_smi_query import parse_query_text, parse_query_xml
from distdoctor.parsers.nvlink import COUNTER_MAX
from distdoctor.text import plural

_q = shlex.quote  # a value from the machine, as one shell word in a fix


def _health(ctx: Context):
    """(GpuHealth, None) or (None, the SKIP that says why nothing can be judged)."""
    health = ctx.facts.gpu_health
    if health.problem is not None:
        if health.problem.state == "absent":
            return None, skip(health.problem.summary)
        return None, skip(f"not judged: {health.problem.summary.split(' — ')[0]} (see gpu.inventory)",
                          evidence={"state": health.problem.state})
    if not health.gpus:
        return None, skip("no GPU answered")
    return health, None


def _gpu_name(g) -> str:
    return f"GPU{g.index} ({short_pci(g.bus_id)})" if g.bus_id else f"GPU{g.index}"


@check("gpu.memory-errors", title="GPU memory has no uncorrectable errors, pending row remaps or retirements",
       tags=("gpu", "health", "hardware"), timeout=CHECK_TIMEOUT, params={"max_retired_pages": 60})
def memory_errors(ctx: Context):
    """Row remapping (Ampere and newer) and page retirement (older) are how the driver takes bad
    memory out of use. A remap or retirement that is pending takes effect only after a GPU reset;
    a remapping failure means the GPU ran out of spare rows and must be replaced (NVIDIA, "GPU
    Memory Error Management"). Volatile uncorrectable ECC errors on a GPU with row remapping are
    recovered by it (the remap shows as pending); without it they need a reset. The driver's own
    "Drain and Reset Recommended" is followed as it says, and so is its successor on R570 and later
    drivers, the GPU Recovery Action (Reset, Reboot, Drain P2P ...: recovery.toml)."""
    health, none = _health(ctx)
    if none:
        yield none
        return
    limit = int(ctx.params.get("max_retired_pages", 60))
    rows = []
    found = False
    for g in health.gpus:
        subject = f"GPU{g.index}"
        evidence = {"gpu": g.index, "bus_id": g.bus_id, "uuid": g.uuid, "source": health.source,
                    "ecc_volatile_uncorrectable": g.ecc_volatile_uncorrectable,
                    "ecc_aggregate_uncorrectable": g.ecc_aggregate_uncorrectable,
                    "remap": [g.remap_correctable, g.remap_uncorrectable, g.remap_pending, g.remap_failure],
                    "retired": [g.retired_sbe, g.retired_dbe, g.retired_pending]}
        rows.append([g.index, g.ecc_volatile_uncorrectable if g.ecc_volatile_uncorrectable is not None else "-",
                     g.ecc_aggregate_uncorrectable if g.ecc_aggregate_uncorrectable is not None else "-",
                     {True: "yes", False: "no"}.get(g.remap_pending, "-"), {True: "yes", False: "no"}.get(g.remap_failure, "-"),
                     "-" if g.retired_sbe is None and g.retired_dbe is None else (g.retired_sbe or 0) + (g.retired_dbe or 0)])
        reset = f"nvidia-smi -r -i {g.index}   # with no process on the GPU; or reboot the node"
        # the driver's own verdict (R570+, where "Reset Required" is deprecated): recovery.toml
        asked = recovery.action(g.recovery_action) if g.recovery_action else "none"
        if g.recovery_action:
            evidence["recovery_action"] = g.recovery_action
        if g.remap_failure:
            found = True
            yield fail(f"{_gpu_name(g)}: row remapping failed — no spare memory rows left", subject=subject,
                       action="replace-hardware", evidence=evidence,
                       explanation="The GPU could not remap a row with uncorrectable errors: its memory can no longer "
                                   "be repaired in the field. NVIDIA's guidance is to replace the GPU.",
                       fix=f"nvidia-smi -q -i {g.index} -d ROW_REMAPPER   # record it for the RMA; keep the node drained")
        elif g.remap_pending or g.retired_pending or g.drain_and_reset_recommended or g.reset_required:
            found = True
            what = ("a row remap is pending" if g.remap_pending else "a page retirement is pending" if g.retired_pending
                    else "the driver recommends draining and resetting it")
            action = strongest(("reset-gpu", asked or "none"))
            yield fail(f"{_gpu_name(g)}: {what} ({g.remap_uncorrectable or g.ecc_volatile_uncorrectable or 0} "
                       f"uncorrectable error(s)) — needs a {'reboot' if action == 'reboot' else 'GPU reset'}",
                       subject=subject, action=action, evidence=evidence,
                       explanation="Memory with uncorrectable errors is taken out of use only when the GPU is reset; "
                                   "until then jobs can hit the same bad rows again (Xid 48/94/95).",
                       fix=reset if action == "reset-gpu" else "# drain the node and reboot it")
        elif g.recovery_action and recovery.key(g.recovery_action) != "none":
            found = True
            words = f"the driver's GPU Recovery Action is {g.recovery_action!r}"
            if asked is not None and needs_drain(asked):
                yield fail(f"{_gpu_name(g)}: {words} — {'reboot the node' if asked == 'reboot' else 'reset the GPU'}",
                           subject=subject, action=asked, evidence=evidence,
                           explanation="After an uncorrectable error the driver names the recovery it needs; until "
                                       "then new work on this GPU fails or reads bad data (" + recovery.SOURCE + ").",
                           fix=reset if asked == "reset-gpu" else "# drain the node and reboot it")
            else:
                yield warn(f"{_gpu_name(g)}: {words}", subject=subject, action=asked or "none", evidence=evidence,
                           explanation="Not a drain by itself: Drain P2P asks for peer-to-peer traffic to stop and the "
                                       "flag to be read again; a word recovery.toml does not know is only reported.",
                           fix=f"nvidia-smi -q -i {g.index} | grep -i 'recovery action'   # read it again")
        elif g.ecc_volatile_uncorrectable and g.remap_pending is None:
            found = True
            yield fail(f"{_gpu_name(g)}: {g.ecc_volatile_uncorrectable} uncorrectable ECC error(s) since the driver "
                       "loaded", subject=subject, action="reset-gpu", evidence=evidence,
                       explanation="Without row remapping (GPUs before Ampere) the page is retired at the next driver "
                                   "load; the GPU's data may be corrupt until then.", fix=reset)
        elif g.ecc_volatile_uncorrectable:
            found = True
            yield warn(f"{_gpu_name(g)}: {g.ecc_volatile_uncorrectable} uncorrectable ECC error(s) since the driver "
                       "loaded, recovered by row remapping", subject=subject, action="none", evidence=evidence,
                       explanation="The driver remapped the rows; nothing is pending. Watch for it recurring.",
                       fix=f"nvidia-smi -q -i {g.index} -d ECC,ROW_REMAPPER")
        retired = (g.retired_sbe or 0) + (g.retired_dbe or 0)
        if retired >= limit:
            found = True
            yield warn(f"{_gpu_name(g)}: {retired} retired memory pages (limit {limit})", subject=subject,
                       action="replace-hardware", evidence=evidence,
                       explanation="The page-retirement table is nearly full (it holds 64 pages); NVIDIA replaces GPUs "
                                   "that reach it.", fix=f"nvidia-smi -q -i {g.index} -d PAGE_RETIREMENT")
    table = {"columns": ["GPU", "volatile uncorr.", "aggregate uncorr.", "remap pending", "remap failure",
                         "retired pages"], "rows": rows}
    if not found:
        yield ok(f"{plural(len(health.gpus), 'GPU')}: no uncorrectable memory errors pending "
                 f"({health.source})", evidence={"table": table})


# --- Xid / SXid ------------------------------------------------------------------------------

@check("gpu.xid", title="No GPU Xid or NVSwitch SXid error in the kernel log that needs the node out of service",
       tags=("gpu", "health", "hardware", "log"), timeout=CHECK_TIMEOUT, params={"window_hours": 24.0})
def xid_errors(ctx: Context):
    """Xid lines in this boot's kernel log (/dev/kmsg, journalctl -k or dmesg) within the window,
    one finding per GPU naming each code once with its count, judged by NVIDIA's Xid catalogue
    (distdoctor/hardware/xid.toml). Errors the application caused (13, 31, 43, 45 ...) are told
    apart and never drain; Xid 45 beside a hardware Xid on the same GPU is that Xid's cleanup.
    "Fallen off the bus" printed without an Xid counts as Xid 79. An Xid 45 that names its cause
    ("caused by previous Xid 149") is judged by that cause; an NVLink5 Xid the driver itself calls
    "Nonfatal" is reported, not drained. A GPU the driver could not initialise (RmInitAdapter
    failed) needs a reboot. SXid lines come from NVSwitches: fatal ones need the node reset."""
    driver = ctx.facts.gpu_driver
    if driver.problem is not None and driver.problem.state == "absent":
        yield skip(driver.problem.summary)  # no driver, no Xid
        return
    log = ctx.facts.kernel_log
    if log.log is None:
        yield skip(f"the kernel log cannot be read here ({log.problem})",
                   explanation="Reading /dev/kmsg or `dmesg` needs root or kernel.dmesg_restrict=0; "
                               "`journalctl -k` needs the systemd-journal group.",
                   fix="sudo distdoctor check --only gpu.xid")
        return
    window = float(ctx.params.get("window_hours", 24.0)) * 3600
    index = {}
    health = ctx.facts.gpu_health
    for g in health.gpus:
        if g.bus_id:
            index[short_pci(g.bus_id)] = g.index
    per_gpu: dict[str, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    named: dict[str, set[int]] = defaultdict(set)  # codes seen only as the cause an Xid 45 names
    sxids: dict[str, list] = defaultdict(list)
    not_initialised: dict[str, list] = defaultdict(list)
    gsp_timeouts: dict[str, list] = defaultdict(list)  # by the driver's own GPU number ("GPU6")
    for event in log.log.events:
        if not log.within(event, window):
            continue
        if event.kind in ("xid", "fallen-off-bus"):
            device = short_pci(event.device) if event.device else "?"
            per_gpu[device][event.code or 79].append(event)
            cause = event.detail[len("after-xid-"):] if event.detail.startswith("after-xid-") else ""
            if cause.isdigit() and xid_catalogue.lookup(event.code or 0).judge_named_cause:
                per_gpu[device][int(cause)].append(event)
                named[device].add(int(cause))
        elif event.kind == "sxid":
            sxids[event.device].append(event)
        elif event.kind == "init-failed":
            not_initialised[short_pci(event.device)].append(event)
        elif event.kind == "gsp-timeout":
            gsp_timeouts[event.device].append(event)
    found = False
    for device, codes in sorted(per_gpu.items()):
        gpu = index.get(device)
        name = f"GPU{gpu} ({device})" if gpu is not None else f"the GPU at {device}"
        entries = {code: xid_catalogue.lookup(code) for code in codes}
        # NVLink5 Xids say themselves whether they were fatal: a code every line of which says
        # "Nonfatal" takes the catalogue's nonfatal_action (named causes carry no such word).
        nonfatal = {c for c, e in entries.items()
                    if e.nonfatal_action and all(ev.detail == "nonfatal" for ev in codes[c])}
        actions = {c: entries[c].nonfatal_action if c in nonfatal else e.action for c, e in entries.items()}
        for c, e in entries.items():
            if e.judge_recovery_target:  # the last change names what the GPU needs now
                last = codes[c][-1].detail
                if last.startswith("recovery-") and last[len("recovery-"):].isdigit():
                    word = recovery.word_for_code(int(last[len("recovery-"):]))
                    actions[c] = recovery.action(word) or "none"
        hardware = {c for c, e in entries.items() if e.origin == "hardware" and needs_drain(actions[c])}
        # Xid 45 is the driver cleaning up after another error: beside a hardware Xid it is that one's.
        judged = {c: actions[c] for c in entries if not (c == 45 and hardware)}
        action = strongest(judged.values())
        parts = []
        for c in sorted(codes):
            how = [] if any(ev.code == c for ev in codes[c]) else ["named as the cause by Xid 45"]
            how += [entries[c].meaning or "unknown"] + (["nonfatal"] if c in nonfatal else [])
            parts.append(f"Xid {c}" + (f" ×{len(codes[c])}" if len(codes[c]) > 1 else "") + f" ({', '.join(how)})")
        times = [t for evs in codes.values() for e in evs if (t := log.wall_time(e)) is not None]
        evidence = {"device": device, "gpu": gpu, "source": log.source,
                    "codes": {str(c): {"count": len(evs), "action": actions[c], "origin": entries[c].origin,
                                       "mnemonic": entries[c].mnemonic, "first": evs[0].message[:200]}
                              for c, evs in sorted(codes.items())},
                    "first_time": min(times) if times else None, "last_time": max(times) if times else None,
                    "catalogue": xid_catalogue.SOURCE}
        found = True
        unknown = [c for c, e in entries.items() if not e.known]
        reset_fix = f"nvidia-smi -r -i {gpu}" if gpu is not None else "nvidia-smi -r -i INDEX"
        fixes = {"reset-gpu": f"{reset_fix}   # with no process on the GPU; then check it: dcgmi diag -r 2",
                 "reboot": "# drain the node, then reboot it (a GPU that fell off the bus comes back only after a reboot)",
                 "replace-hardware": "nvidia-bug-report.sh   # drain the node and open a hardware case with its output",
                 "app-error": "# the program faulted (bad address, illegal instruction): run it under compute-sanitizer",
                 "restart-app": "# restart the job; if it recurs on this GPU only, run dcgmi diag -r 3 on it",
                 "none": "# informational; nothing to do"}
        summary = f"{name}: {', '.join(parts)}"
        explanation = ("From NVIDIA's Xid catalogue: " +
                       "; ".join(f"{c}: {entries[c].mnemonic or 'not catalogued'} → {actions[c]}"
                                 for c in sorted(codes)))
        if nonfatal:
            explanation += (f". The driver called {', '.join(f'Xid {c}' for c in sorted(nonfatal))} Nonfatal: "
                            "the link recovered; a Fatal one needs the GPU reset")
        # a state the event left (a row awaiting its remap) is the memory check's to drain for while it lasts
        state = strongest(e.state_action for e in entries.values() if e.state_action)
        if needs_drain(action):
            yield fail(summary, subject=f"GPU{gpu}" if gpu is not None else device, action=action,
                       evidence=evidence, explanation=explanation, fix=fixes[action])
        elif state not in ("", "none"):
            yield warn(summary, subject=f"GPU{gpu}" if gpu is not None else device, action=state,
                       evidence=evidence, explanation=explanation + ". The event leaves the GPU needing a reset "
                       "until it has one; gpu.memory-errors drains while the GPU still shows it (a reset since "
                       "then clears the state, not the log).",
                       fix="nvidia-smi -q -d ROW_REMAPPER   # Pending: Yes means the reset is still needed")
        elif action in ("app-error", "restart-app") or unknown or nonfatal:
            yield warn(summary, subject=f"GPU{gpu}" if gpu is not None else device, action=action or "none",
                       evidence=evidence, explanation=explanation + (" Application errors are the program's, not the "
                                                                     "node's: no drain."),
                       fix=fixes.get(action or "none", fixes["none"]))
        else:
            yield ok(summary, evidence=evidence)
    init = xid_catalogue.driver_events()["init-failed"]
    for device, events in sorted(not_initialised.items()):
        found = True
        gpu = index.get(device)
        subject = f"GPU{gpu}" if gpu is not None else device
        yield fail(f"{f'GPU{gpu} ({device})' if gpu is not None else f'the GPU at {device}'}: {init.meaning} "
                   f"({plural(len(events), 'line')})", subject=subject, action=init.action,
                   evidence={"device": device, "gpu": gpu, "count": len(events), "first": events[0].message[:200],
                             "source": log.source},
                   explanation="The kernel driver gave up bringing this GPU up (RmInitAdapter): CUDA cannot use "
                               "it. It comes back only after a reboot; if it fails again, check its power and "
                               "seating and open a hardware case.",
                   fix="# drain the node and reboot it; if the GPU fails again: lspci -d 10de: && nvidia-bug-report.sh")
    gsp = xid_catalogue.driver_events()["gsp-timeout"]
    for number, events in sorted(gsp_timeouts.items()):
        found = True
        yield fail(f"{number} (the driver's numbering): {gsp.meaning} ({plural(len(events), 'timeout')})",
                   subject=number, action=gsp.action,
                   evidence={"driver_gpu": number, "count": len(events), "first": events[0].message[:200],
                             "source": log.source},
                   explanation="The driver's RPCs to the GPU's GSP firmware time out (what Xid 119 reports): the "
                               "GPU takes no new work. NVIDIA resolves it by resetting the GPU; the driver numbers "
                               "GPUs its own way, so find the one it means by the PCI address on its Xid lines.",
                   fix="journalctl -k | grep -E 'Xid|GSP'   # the PCI address of the GPU; with no job on it: "
                       "nvidia-smi -r -i <its index>")
    for device, events in sorted(sxids.items()):
        found = True
        entries = {e.code: xid_catalogue.sxid_lookup(e.code, e.detail) for e in events}
        action = strongest(e.action for e in entries.values())
        counts = {c: sum(1 for e in events if e.code == c) for c in entries}
        summary = f"NVSwitch {device}: " + ", ".join(
            f"SXid {c}" + (f" ×{counts[c]}" if counts[c] > 1 else "") + f" ({entries[c].name or 'not catalogued'})"
            for c in sorted(entries))
        evidence = {"device": device, "codes": {str(c): {"count": counts[c], "category": e.category, "action": e.action}
                                                for c, e in sorted(entries.items())},
                    "first": events[0].message[:200], "catalogue": xid_catalogue.SXID_SOURCE}
        if needs_drain(action):
            yield fail(summary, subject=device, action=action, evidence=evidence,
                       explanation="NVIDIA's SXid guide: traffic through this NVSwitch stalls (jobs end with Xid "
                                   "45 or hang) until the GPUs and NVSwitches are reset, which on a bare-metal node "
                                   "is a reboot.",
                       fix="# drain the node and reboot it; if the SXid returns: nvidia-bug-report.sh")
        else:
            yield warn(summary, subject=device, action="none", evidence=evidence,
                       explanation="Non-fatal NVSwitch errors: the fabric carried on. Recurring ones point at a "
                                   "link or NVSwitch to inspect.", fix="# watch for a fatal SXid or Xid 74/145")
    if not found:
        yield ok(f"no Xid or SXid in the kernel log within {ctx.params.get('window_hours', 24.0):g} h "
                 f"({log.source}, {plural(log.log.lines, 'line')})")


# --- NVLink ----------------------------------------------------------------------------------

@check("gpu.nvlink", title="Every GPU's NVLink links are up and their error counters quiet",
       tags=("gpu", "health", "hardware", "nvlink"), timeout=CHECK_TIMEOUT,
       params={"expected_links": 0, "max_errors": 1000})
def nvlink(ctx: Context):
    """Links expected (expected_links per GPU, or else as many as the GPU with the most active
    ones) against links active: an inactive link on an NVLink system halves or worse the bandwidth of
    every collective and is reset-class (NVIDIA: Xid 74, reset the GPU). An SXM module listing links
    down short of its product's own count (hardware/nvlink.toml) with no GPU of the node showing more
    is named, not drained. Replay, recovery and CRC counters above max_errors point at a link to
    inspect; a counter at 65535 has saturated."""
    health, none = _health(ctx)
    if none:
        yield none
        return
    state = ctx.facts.nvlink
    if state.problem:
        yield skip(f"NVLink state not read: {state.problem}")
        return
    linked = [g for g in state.gpus if g.active]
    site = int(ctx.params.get("expected_links", 0))
    if not linked and not site:
        # No link up anywhere: no NVLink, or a PCIe card whose bridge is not fitted (it lists every
        # link <inactive>), or an SXM module in a VM. A site that expects links says so with expected_links.
        # An SXM module that lists its links down is named, not drained: with no link up anywhere
        # the node may be a VM or have its NVSwitch fabric down (gpu.fabric's to judge).
        down = [g for g in state.gpus if (g.all_inactive or g.inactive) and expected_links(g.name)]
        for g in down:
            yield warn(f"GPU{g.index} ({g.name}): every NVLink link inactive, none up on this node",
                       subject=f"GPU{g.index}", action="reset-gpu",
                       evidence={"gpu": g.index, "name": g.name, "inactive": g.inactive,
                                 "all_inactive": g.all_inactive, "expected": expected_links(g.name),
                                 "source": state.source},
                       explanation="This product uses all its NVLink links on every board NVIDIA ships it on. With "
                                   "no link up on any GPU the cause may be the node's NVSwitch fabric (see "
                                   "gpu.fabric) or a VM that hides the links; a module whose links stay down after a "
                                   "reset is hardware (gpud#1085).",
                       fix=f"nvidia-smi -r -i {g.index}   # with no process on it; then: nvidia-smi nvlink -s -i {g.index}")
        if down:
            return
        yield skip("no active NVLink on this node's GPUs" + (" (links listed, none active)" if any(
            g.links or g.all_inactive for g in state.gpus) else ""))
        return
    # Without a site's number, the GPU with the most active links sets what the others should have:
    # short of that, a GPU has lost a link (FAIL). A GPU that lists links down short of its SXM product's
    # own number (hardware/nvlink.toml) while the node shows none with more is named but not drained on
    # that alone: a paste of one GPU, a node whose GPUs all lost the same link, and a VM holding part of
    # a V100 mesh (its links to GPUs outside the VM down) look alike. A link not listed at all is not
    # counted as down: the driver lists every link, so a short list is a cut paste.
    most = max((len(g.active) for g in linked), default=0)
    limit = int(ctx.params.get("max_errors", 1000))
    found = False
    for g in state.gpus:
        active = g.active
        expected = site or most
        product = expected_links(g.name) if g.inactive or g.all_inactive else None
        # a paste that cut this GPU's listing shows only some of its links: count only what it lists
        counted = len(active) + len(g.inactive) if g.elided else expected
        evidence = {"gpu": g.index, "active": active, "inactive": g.inactive, "expected": expected,
                    "product_links": product, "source": state.source}
        down = f" (inactive: {', '.join(map(str, g.inactive))})" if g.inactive else ""
        fix = f"nvidia-smi -r -i {g.index}   # with no process on it; then: nvidia-smi nvlink -s -i {g.index}"
        if len(active) < min(expected, counted):
            found = True
            yield fail(f"GPU{g.index}: {len(active)} of {expected} NVLink links active" + down,
                       subject=f"GPU{g.index}", action="reset-gpu", evidence=evidence,
                       explanation="NCCL routes around a missing link through slower paths or PCIe; the link comes "
                                   "back only after a GPU reset, and a link that stays down is hardware.", fix=fix)
        elif not site and product and len(active) < product:
            found = True
            yield warn(f"GPU{g.index} ({g.name}): {len(active)} of the {product} NVLink links this product uses "
                       "active" + down, subject=f"GPU{g.index}", action="reset-gpu", evidence=evidence,
                       explanation="No GPU of this node shows more links, so this is not drained on its own: every "
                                   "GPU of a node losing the same link, or a VM holding part of a GPU mesh, looks "
                                   "the same. A link that stays down after a reset is hardware; a site sets "
                                   "expected_links to drain for it.", fix=fix)
        for link, counters in sorted(g.errors.items()):
            saturated = [n for n, v in counters.items() if v >= COUNTER_MAX]
            high = {n: v for n, v in counters.items() if v > limit}
            if saturated or high:
                found = True
                emit = fail if saturated else warn
                yield emit(f"GPU{g.index} NVLink {link}: " + ", ".join(f"{n} errors {v}" for n, v in sorted(high.items()))
                           + (" (saturated)" if saturated else ""), subject=f"GPU{g.index}/link{link}",
                           action="replace-hardware", evidence={"gpu": g.index, "link": link, "counters": counters},
                           explanation="CRC and replay errors are retransmissions on a marginal link: each one costs "
                                       "bandwidth, and a link that keeps counting needs its GPU, baseboard or "
                                       "NVSwitch tray inspected.",
                           fix=f"nvidia-smi nvlink -e -i {g.index}   # reset the counters with -r 0 and watch them")
    if not found:
        yield ok(f"{plural(len(linked), 'GPU')} with {site or most} NVLink links each, all active, counters under {limit}")


# --- PCIe ------------------------------------------------------------------------------------

@check("gpu.pcie-link", title="GPUs run their PCIe link at full width (and speed under load), without AER errors",
       tags=("gpu", "health", "hardware", "pcie"), timeout=CHECK_TIMEOUT,
       params={"busy_percent": 30, "max_corrected_aer": 100, "window_hours": 24.0})
def pcie_link(ctx: Context):
    """A GPU whose link trained narrower than it can (x8 of x16) moves host data at half speed:
    a seating, riser or slot problem. The link generation drops when a GPU idles (power saving),
    so a lower generation counts only while the GPU is busy. Fatal and non-fatal AER errors in the
    kernel log mean a device or its link failed; many corrected ones mean a marginal link."""
    health, none = _health(ctx)
    busy = int(ctx.params.get("busy_percent", 30))
    found = False
    for g in health.gpus if health else ():
        evidence = {"gpu": g.index, "gen": [g.pcie_gen_current, g.pcie_gen_max],
                    "width": [g.pcie_width_current, g.pcie_width_max], "pstate": g.performance_state,
                    "utilization": g.utilization}
        if g.pcie_width_current and g.pcie_width_max and g.pcie_width_current < g.pcie_width_max:
            found = True
            yield warn(f"{_gpu_name(g)}: PCIe link x{g.pcie_width_current} of x{g.pcie_width_max}", subject=f"GPU{g.index}",
                       action="replace-hardware", evidence=evidence,
                       explanation="The link trained narrower than the GPU supports: a badly seated card or riser, a "
                                   "damaged slot, or a slot wired narrower than the GPU (then expected).",
                       fix=f"lspci -vv -s {_q(g.bus_id[-12:].lower()) if g.bus_id else 'BUS:ID'} | grep -E 'LnkCap|LnkSta'")
        is_busy = (g.utilization or 0) >= busy
        if g.pcie_gen_current and g.pcie_gen_max and g.pcie_gen_current < g.pcie_gen_max and is_busy:
            found = True
            yield warn(f"{_gpu_name(g)}: PCIe Gen{g.pcie_gen_current} of Gen{g.pcie_gen_max} while {g.utilization} % busy",
                       subject=f"GPU{g.index}", action="replace-hardware", evidence=evidence,
                       explanation="Under load a GPU runs its link at the highest generation both ends support; a lower "
                                   "one is a link that retrained down (signal integrity, BIOS setting).",
                       fix=f"nvidia-smi -q -i {g.index} -d PERFORMANCE,PCI")
    log = ctx.facts.kernel_log
    if log.log is not None:
        window = float(ctx.params.get("window_hours", 24.0)) * 3600
        by_device: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for event in log.log.events:
            if event.kind == "aer" and log.within(event, window):
                by_device[event.device][event.detail] += 1
        limit = int(ctx.params.get("max_corrected_aer", 100))
        for device, counts in sorted(by_device.items()):
            evidence = {"device": device, "counts": dict(counts), "source": log.source}
            if counts.get("fatal") or counts.get("non-fatal"):
                found = True
                yield fail(f"PCIe device {device}: {counts.get('fatal', 0)} fatal and {counts.get('non-fatal', 0)} "
                           "non-fatal AER error(s)", subject=device, action="reboot", evidence=evidence,
                           explanation="An uncorrectable PCIe error: the device or its link failed (a GPU behind it "
                                       "often falls off the bus next). Recovery needs a reboot; recurrence, hardware.",
                           fix=f"lspci -vvv -s {_q(str(device))} | grep -A4 -i 'UESta'   # then drain and reboot the node")
            elif counts.get("corrected", 0) > limit:
                found = True
                yield warn(f"PCIe device {device}: {counts['corrected']} corrected AER errors", subject=device,
                           action="replace-hardware", evidence=evidence,
                           explanation="Corrected errors are retried transfers: many of them mean a marginal link.",
                           fix=f"lspci -vvv -s {_q(str(device))} | grep -A4 -i 'CESta'")
    if not found and health is None:
        # No GPU to judge; the AER part ran if the kernel log could be read.
        yield none if log.log is None else ok("no AER errors to act on in the kernel log (GPUs not judged: "
                                              f"{none.summary})")
    elif not found:
        yield ok(f"{plural(len(health.gpus), 'GPU')}: PCIe links at full width"
                 + ("" if log.log is None else ", no AER errors to act on"))


# --- clock-event (throttle) reasons -----------------------------------------------------------

_HARDWARE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
_SOFT_REASONS = ("sw_thermal_slowdown",)


def _sample_reasons(ctx: Context, source: str) -> dict[int, tuple[str, ...]]:
    """One more reading of every GPU's active clock-event reasons, from the source of the first."""
    if source == "nvml":
        snap = ctx.host.nvml_snapshot(4.0)  # in-process: cheap to ask again
        return {int(g["index"]): clock_reason_names(g.get("throttle_reasons")) for g in snap.get("gpus", [])}
    xml = source.endswith("-x")
    result = ctx.facts.nvidia_smi.run("-q", *(("-x",) if xml else ()), "-d", "PERFORMANCE")
    if not result.ok:
        return {}
    try:
        report = (parse_query_xml if xml else parse_query_text)(result.stdout)
    except ParseError:
        return {}
    return {g.index: g.clock_reasons for g in report.gpus}


@check("gpu.throttle", title="No GPU is held back by hardware slowdown, power brake or thermal limits",
       tags=("gpu", "health", "hardware"), timeout=CHECK_TIMEOUT,
       params=dict(thresholds()["gpu"]["throttle"]))
def throttle(ctx: Context):
    """One reading of a clock-event reason says little (a power brake can flicker); a reason that
    shows in the first reading is read again `samples` times over `window_seconds`, and only one
    active in at least `active_share` of the readings is reported (after gpud's rate rule:
    HW slowdown at >= 0.6 events a minute). Hardware slowdown and power brake come from the board
    or the system (power supply, cooling) and drain; software thermal slowdown is a warning."""
    health, none = _health(ctx)
    if none:
        yield none
        return
    watched = _HARDWARE_REASONS + _SOFT_REASONS
    first = {g.index: tuple(r for r in g.clock_reasons if r in watched) for g in health.gpus}
    if not any(first.values()):
        yield ok(f"{plural(len(health.gpus), 'GPU')}: no hardware or thermal slowdown")
        return
    samples = max(1, int(ctx.params.get("samples", 5)))
    gap = float(ctx.params.get("window_seconds", 2.0)) / samples
    seen: dict[int, dict[str, int]] = {i: {r: 1 for r in rs} for i, rs in first.items()}
    for _ in range(samples):
        time.sleep(gap)
        for index, reasons in _sample_reasons(ctx, health.source).items():
            for reason in reasons:
                if reason in watched and index in seen:
                    seen[index][reason] = seen[index].get(reason, 0) + 1
    share = float(ctx.params.get("active_share", 0.6))
    found = False
    for index, counts in sorted(seen.items()):
        lasting = sorted(r for r, n in counts.items() if n / (samples + 1) >= share)
        if not lasting:
            continue
        found = True
        hard = [r for r in lasting if r in _HARDWARE_REASONS]
        evidence = {"gpu": index, "readings": samples + 1, "active": counts}
        words = ", ".join(r.replace("_", " ") for r in lasting)
        if hard:
            yield fail(f"GPU{index}: {words} in {max(counts[r] for r in hard)} of {samples + 1} readings",
                       subject=f"GPU{index}", action="replace-hardware", evidence=evidence,
                       explanation="The board or the system asserts a slowdown (power brake from the power supply, "
                                   "an over-temperature or power alarm): the GPU runs at a fraction of its clock and "
                                   "every collective waits for it.",
                       fix=f"nvidia-smi -q -i {index} -d PERFORMANCE,TEMPERATURE,POWER   # check PSUs, fans, BMC logs")
        else:
            yield warn(f"GPU{index}: {words} in {max(counts.values())} of {samples + 1} readings", subject=f"GPU{index}",
                       action="fix-config", evidence=evidence,
                       explanation="The driver lowers the clock to keep the GPU under its temperature target.",
                       fix=f"nvidia-smi -q -i {index} -d TEMPERATURE   # check airflow and the fan curve")
    if not found:
        yield ok(f"slowdown seen once but not lasting over {samples + 1} readings")


CHECKS = [memory_errors, xid_errors, nvlink, pcie_link, throttle]
