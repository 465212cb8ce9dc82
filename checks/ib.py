"""InfiniBand/RoCE port health: error counters against published thresholds, a port that is not
ACTIVE although its cable is up, link flaps in the kernel log, and the adapter's own kernel lines
(firmware health, command timeouts, modules, slot power, PCIe width) (see docs/hardware.md; the
thresholds and their sources are distdoctor/hardware/thresholds.toml, the mlx5 lines mlx5.toml)."""

from __future__ import annotations

import shlex

import time
from collections import defaultdict

from distdoctor.api import Context, check, fail, ok, skip, warn
from distdoctor.facts.hardware import read_ib_counters
from distdoctor.hardware import mlx5
from distdoctor.hardware.actions import strongest
from distdoctor.hardware.ibcounters import judge_counters
from distdoctor.hardware.thresholds import load as thresholds
from distdoctor.text import plural

_q = shlex.quote  # a value from the machine, as one shell word in a fix

CHECK_TIMEOUT = 15.0


@check("ib.port-counters", title="InfiniBand/RoCE port error counters are within published thresholds",
       tags=("ib", "health", "hardware"), timeout=CHECK_TIMEOUT, params={"sample_seconds": 2.0})
def port_counters(ctx: Context):
    """Counters under /sys/class/infiniband/<hca>/ports/<n>/counters against the thresholds in
    thresholds.toml (NVSentinel, gpud). A port whose counters are past a since-boot or rate
    threshold is read again after sample_seconds: a counter still rising is a live fault (FAIL,
    the node needs its cable or HCA looked at); one that stopped is history (WARN)."""
    table = ctx.facts.ib_counters
    if not table.ports:
        yield skip("no InfiniBand/RoCE ports on this node")
        return
    limits = thresholds()["ib"]["counters"]
    suspects = {(p.hca, p.port): judge_counters(p.counters, None, 0, table.uptime, limits) for p in table.ports}
    second = {}
    wait = float(ctx.params.get("sample_seconds", 2.0))
    flagged = [p for p in table.ports if suspects[(p.hca, p.port)]]
    if flagged and wait > 0:
        time.sleep(max(0.0, wait - (time.monotonic() - table.read_at)))
        again = read_ib_counters(ctx.host, [(p.hca, p.port, p.state, p.phys_state, p.link_layer) for p in flagged])
        second = {(p.hca, p.port): p.counters for p in again}
    found = False
    for p in table.ports:
        key = (p.hca, p.port)
        if key in second:
            verdicts = judge_counters(p.counters, second[key], max(wait, 0.001), table.uptime, limits)
        else:
            verdicts = suspects[key]
        if not verdicts:
            continue
        found = True
        worst = fail if any(v[1] == "fail" for v in verdicts) else warn
        rising = key in second and any(v[1] == "fail" for v in verdicts)
        yield worst(f"{p.hca} port {p.port}: " + "; ".join(f"{n} {why}" for n, _s, _a, why in verdicts),
                    subject=f"{p.hca}:{p.port}", action=verdicts[0][2],
                    evidence={"hca": p.hca, "port": p.port, "counters": p.counters, "second": second.get(key),
                              "uptime_s": table.uptime, "sources": {n: limits[n].get("source", "") for n, *_ in verdicts}},
                    explanation=("Link errors are rising now: the cable, transceiver or HCA port is failing and NCCL "
                                 "traffic over it retries or stalls." if rising else
                                 "The port has counted link errors since boot; they have stopped for now. Check the "
                                 "cable and the switch port before it flaps again."),
                    fix=f"perfquery -x -C {_q(str(p.hca))} -P {_q(str(p.port))}"
                        "   # and on the switch side: ibdiagnet; reseat or replace the cable")
    if not found:
        yield ok(f"{plural(len(table.ports), 'port')}: error counters within thresholds")


@check("ib.port-state", title="No InfiniBand port is down or stuck while its physical link is up",
       tags=("ib", "health"), timeout=CHECK_TIMEOUT)
def port_state(ctx: Context):
    """A port whose physical state is LinkUp but whose logical state is not ACTIVE has a cable and
    a peer but was never brought up: on InfiniBand no subnet manager configured it (INIT), or the
    port was disabled. A port Polling has no peer answering (cable, transceiver, switch port)."""
    ib = ctx.facts.infiniband
    if not ib.ports:
        yield skip("no InfiniBand/RoCE ports on this node")
        return
    found = False
    for p in ib.ports:
        state, phys = p.state.upper(), p.phys_state.lower()
        evidence = {"hca": p.hca, "port": p.port, "state": p.state, "phys_state": p.phys_state,
                    "link_layer": p.link_layer}
        if phys == "linkup" and state and state != "ACTIVE":
            found = True
            yield fail(f"{p.hca} port {p.port} is {p.state} although its physical link is up", subject=f"{p.hca}:{p.port}",
                       action="fix-config", evidence=evidence,
                       explanation="The link trained but the port was not activated: on InfiniBand the subnet manager "
                                   "has not configured it (INIT/ARMED), so no traffic passes.",
                       fix="sminfo   # is a subnet manager running? then: ibstat " + p.hca)
        elif phys == "polling":
            found = True
            yield warn(f"{p.hca} port {p.port} is Polling: no peer answers on the link", subject=f"{p.hca}:{p.port}",
                       action="replace-hardware", evidence=evidence,
                       explanation="The port is looking for a link partner: an unplugged or broken cable, transceiver "
                                   "or switch port. Harmless only for a port that is not meant to be cabled.",
                       fix=f"ibstat {_q(str(p.hca))} {_q(str(p.port))}   # check the cable and the switch port")
    if not found:
        yield ok(f"{plural(len(ib.ports), 'port')}: none stuck below ACTIVE with the link up")


@check("ib.link-flaps", title="No RDMA port flapped or lost carrier repeatedly in the kernel log",
       tags=("ib", "health", "log"), timeout=CHECK_TIMEOUT,
       params={"window_hours": float(thresholds()["ib"]["kernel_log"]["window_hours"])})
def link_flaps(ctx: Context):
    """mlx5 port state changes (`Port: 1 Link DOWN`), Ethernet link downs of mlx5 interfaces and
    "lost carrier" lines within the window of thresholds.toml [ib.kernel_log]: gpud calls a port
    flapping after 3 down/up cycles; AzNHC flags 5 lost-carrier events in 24 hours. Link changes
    while the driver loads (before the port was ever ACTIVE) are not counted. A port that comes up
    again with no down line between went down unlogged (a log grep'd for the interface shows only
    the "Link up" lines): that is a cycle too."""
    if not ctx.facts.infiniband.hcas:
        yield skip("no InfiniBand/RoCE ports on this node")
        return
    log = ctx.facts.kernel_log
    if log.log is None:
        yield skip(f"the kernel log cannot be read here ({log.problem})")
        return
    rules = thresholds()["ib"]["kernel_log"]
    hours = float(ctx.params.get("window_hours", rules.get("window_hours", 24)))
    window = hours * 3600
    downs: dict[str, int] = defaultdict(int)
    carrier: dict[str, int] = defaultdict(int)
    was_up: set[str] = set()
    for e in log.log.events:
        if e.kind != "link" or not log.within(e, window):
            continue
        if e.detail in ("active", "up"):
            if e.device in was_up:  # up again with no down logged between: it went down unlogged
                downs[e.device] += 1
            was_up.add(e.device)
        elif e.detail in ("down", "init") and e.device in was_up:
            downs[e.device] += 1
            was_up.discard(e.device)
        elif e.detail == "lost-carrier":
            carrier[e.device] += 1
    found = False
    for device in sorted(set(downs) | set(carrier)):
        flaps, lost = downs.get(device, 0), carrier.get(device, 0)
        if flaps >= rules.get("link_down", 3) or lost >= rules.get("lost_carrier", 5):
            found = True
            when = "in the log" if hours >= 1e6 else f"within {hours:g} h"  # a paste is judged whole
            yield fail(f"{device}: {plural(flaps, 'down/up cycle')} and {lost} lost-carrier event(s) {when}",
                       subject=device, action="replace-hardware",
                       evidence={"device": device, "down_after_up": flaps, "lost_carrier": lost, "source": log.source},
                       explanation="A flapping link drops NCCL connections and stalls collectives each time it goes "
                                   "down: the cable, transceiver or switch port needs replacing.",
                       fix=f"journalctl -k | grep -F {_q(device.split('/')[0])}   # then reseat or replace the cable")
    if not found:
        yield ok(f"no RDMA link flapping in the kernel log ({log.source})")


@check("ib.hca-health", title="No RDMA adapter's firmware, module, slot power or PCIe link is failing in the kernel log",
       tags=("ib", "health", "hardware", "log"), timeout=CHECK_TIMEOUT, params={"window_hours": 24.0})
def hca_health(ctx: Context):
    """mlx5 (ConnectX/BlueField) lines of this boot's kernel log within the window, judged by
    distdoctor/hardware/mlx5.toml: a firmware that stopped answering (health counter missed, command
    timeouts) or reported an unrecoverable error takes the node out of service; a module error,
    too little slot power or a PCIe link narrower than the adapter can train is worth a look. One
    finding per adapter. An adapter whose firmware died may be gone from /sys/class/infiniband, so
    its lines are read whether or not the node still lists it."""
    log = ctx.facts.kernel_log
    if log.log is None:
        yield skip(f"the kernel log cannot be read here ({log.problem})")
        return
    window = float(ctx.params.get("window_hours", 24.0)) * 3600
    seen: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    rules: dict[str, mlx5.Mlx5Rule] = {}
    lines = 0
    for e in log.log.events:
        if e.kind != "mlx5" or not log.within(e, window):
            continue
        lines += 1
        rule = mlx5.classify(e.message, e.detail)
        if rule is not None:
            seen[e.device][rule.name].append(e)
            rules[rule.name] = rule
    if not lines and not ctx.facts.infiniband.hcas:
        yield skip("no mlx5 adapter on this node")
        return
    found = False
    for device, by_rule in sorted(seen.items()):
        judged = [rules[n] for n in by_rule if rules[n].action != "none"]
        if not judged:
            continue
        found = True
        draining = [r for r in judged if r.drain]
        action = strongest(r.action for r in (draining or judged))
        name = f"the mlx5 adapter at {device}" if device else "an mlx5 adapter"
        summary = f"{name}: " + "; ".join(
            f"{rules[n].meaning}" + (f" (×{len(evs)})" if len(evs) > 1 else "") for n, evs in sorted(by_rule.items())
            if rules[n].action != "none")
        evidence = {"device": device, "source": log.source,
                    "events": {n: {"count": len(evs), "action": rules[n].action, "drain": rules[n].drain,
                                   "first": evs[0].message[:200]} for n, evs in sorted(by_rule.items())}}
        grep = f"journalctl -k | grep -F {_q(device)}" if device else "journalctl -k | grep -F mlx5_core"
        if draining:
            yield fail(summary, subject=device or "mlx5", action=action, evidence=evidence,
                       explanation="The adapter's firmware stopped answering its driver or reported a hardware "
                                   "error: RDMA traffic through it stalls and NCCL hangs or fails. A reset of the "
                                   "adapter (a reboot) brings a hung firmware back; if it fails again, replace it.",
                       fix=f"{grep}   # then drain the node and reboot it; if it recurs, open a hardware case")
        elif "pcie-width" in by_rule and len(judged) == 1:
            yield warn(summary, subject=device or "mlx5", action=action, evidence=evidence,
                       explanation="The adapter trained fewer PCIe lanes than it has, which halves (or worse) what "
                                   "it can move: reseat it, or check the slot and riser. A slot wired narrower by "
                                   "design reads the same.",
                       fix=f"lspci -s {_q(device)} -vv | grep -E 'LnkCap|LnkSta'   # LnkSta narrower than LnkCap: "
                           "reseat the card" if device else f"{grep}")
        else:
            yield warn(summary, subject=device or "mlx5", action=action, evidence=evidence,
                       explanation="Worth a look, not a drain: a cable or transceiver module reporting errors "
                                   "(an overheating optic takes its link down), or a slot that cannot power the "
                                   "adapter.",
                       fix=f"{grep}   # the module or slot named there: reseat or replace the cable or transceiver")
    if not found:
        yield ok(f"no mlx5 adapter fault in the kernel log ({plural(lines, 'adapter line')}, {log.source})")


CHECKS = [port_counters, port_state, link_flaps, hca_health]
