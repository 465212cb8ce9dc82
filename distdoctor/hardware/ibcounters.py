"""InfiniBand port error counters judged against the published thresholds (thresholds.toml), the
same way whether they were read from sysfs (ib.port-counters) or pasted as `perfquery` or
`ibqueryerrors` text into `distdoctor log`: the PMA names those tools print map onto the sysfs
names the thresholds use."""

from __future__ import annotations

# PortCounters / PortCountersExtended attribute names as perfquery and ibqueryerrors print them
# (infiniband-diags; the short names of older releases and ibdiagnet's snake_case "_extended"
# names too) -> /sys/class/infiniband/<hca>/ports/<n>/counters/<name>
_NAMES = (  # sysfs name, then the PMA names that mean it
    ("symbol_error", "SymbolErrorCounter", "SymbolErrors"),
    ("link_error_recovery", "LinkErrorRecoveryCounter", "LinkRecovers"),
    ("link_downed", "LinkDownedCounter", "LinkDowned"),
    ("port_rcv_errors", "PortRcvErrors", "RcvErrors"),
    ("port_rcv_remote_physical_errors", "PortRcvRemotePhysicalErrors", "RcvRemotePhysErrors"),
    ("port_rcv_switch_relay_errors", "PortRcvSwitchRelayErrors", "RcvSwRelayErrors"),
    ("port_xmit_discards", "PortXmitDiscards", "XmtDiscards"),
    ("port_xmit_constraint_errors", "PortXmitConstraintErrors", "XmtConstraintErrors"),
    ("port_rcv_constraint_errors", "PortRcvConstraintErrors", "RcvConstraintErrors"),
    ("local_link_integrity_errors", "LocalLinkIntegrityErrors", "LinkIntegrityErrors"),
    ("excessive_buffer_overrun_errors", "ExcessiveBufferOverrunErrors", "ExcBufOverrunErrors"),
    ("VL15_dropped", "VL15Dropped"),
    ("port_xmit_wait", "PortXmitWait", "XmtWait"),
    ("port_xmit_data", "PortXmitData", "XmtData"),
    ("port_rcv_data", "PortRcvData", "RcvData"),
    ("port_xmit_packets", "PortXmitPkts", "XmtPkts"),
    ("port_rcv_packets", "PortRcvPkts", "RcvPkts"),
    ("unicast_xmit_packets", "PortUnicastXmitPkts"), ("unicast_rcv_packets", "PortUnicastRcvPkts"),
    ("multicast_xmit_packets", "PortMulticastXmitPkts"), ("multicast_rcv_packets", "PortMulticastRcvPkts"),
)
PMA_TO_SYSFS = {pma: row[0] for row in _NAMES for pma in row[1:]}


def sysfs_name(pma: str) -> str:
    """The sysfs counter name of a PMA attribute name (ibdiagnet's `symbol_error_counter_extended`
    too); a name not known is returned as it is."""
    if pma in PMA_TO_SYSFS:
        return PMA_TO_SYSFS[pma]
    snake = pma.lower().removesuffix("_extended")
    for name, sysfs in PMA_TO_SYSFS.items():
        if sysfs == snake or snake == _snake(name):
            return sysfs
    return pma


def _snake(name: str) -> str:
    out: list[str] = []
    for ch in name:
        if ch.isupper() and out:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def judge_counters(first: dict[str, int], second: dict[str, int] | None, seconds: float,
                   uptime: float | None, limits: dict) -> list[tuple[str, str, str, str]]:
    """(counter, status, action, why) for each counter past its threshold: an increase between
    two readings, a rate over the counter's life, a count since boot, or a counter pinned at its
    width's maximum (the count is at least that; the rate cannot be known)."""
    out: list[tuple[str, str, str, str]] = []
    for name, rule in limits.items():
        value = first.get(name)
        if value is None:
            continue
        action = rule.get("action", "replace-hardware")
        if second is not None and "increase" in rule and second.get(name, value) - value >= rule["increase"]:
            within = f" in {seconds:.1f} s" if seconds else " between the two readings"
            out.append((name, "fail", action, f"rose by {second[name] - value}{within} (now {second[name]})"))
            continue
        if "per_hour" in rule and uptime and uptime > 0:
            rate = value / (uptime / 3600)
            if rate > rule["per_hour"] and value > rule["per_hour"]:
                out.append((name, "fail", action, f"{value} since boot, {rate:.0f}/h (limit {rule['per_hour']}/h)"))
                continue
        if "saturated" in rule and value >= rule["saturated"]:
            out.append((name, "warn", action, f"{value}: the counter is saturated (at least that many errors)"))
            continue
        if "since_boot" in rule and value >= rule["since_boot"]:
            out.append((name, "warn", action, f"{value} since boot (looked at from {rule['since_boot']})"))
    return out
