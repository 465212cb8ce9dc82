"""A FakeHost replaying the GPU-node namespace captured by the lab (tests/data/netif/): the
real `ip -d -j link` output, psutil's view and the sysfs attributes of each interface."""

from __future__ import annotations

import errno
import json

from distdoctor.host import CommandResult
from distdoctor.testing import FakeHost
from tests.conftest import data_path

IP_LINK = ("ip", "-d", "-j", "link", "show")
_FAMILY = {"AF_INET": "inet", "AF_INET6": "inet6"}


def _report() -> dict:
    with open(data_path("netif", "psutil_report.json")) as fh:
        return json.load(fh)


def _gateways() -> dict:
    """Default gateways as Host.gateways() reports them, from netifaces-plus's view of the lab
    namespace ({'2': [[gateway, interface, is_default]]}: 2 is AF_INET, 10 AF_INET6)."""
    with open(data_path("netif", "netifaces_plus_report.json")) as fh:
        report = json.load(fh)["gateways"]
    out: dict = {}
    for family, name in (("2", "inet"), ("10", "inet6")):
        out.update({name: [(gw, dev) for gw, dev, _default in report[family]]} if family in report else {})
    return out


def lab_host(env=None, *, commands=None, files=None, dirs=None, links=None, drop_sysfs=(), if_stats=None,
             hostname="node1", resolve=None, gateways=None) -> FakeHost:
    report = _report()
    with open(data_path("netif", "ip_d_j_link.json")) as fh:
        ip_link = fh.read()
    all_files: dict = {}
    all_links: dict = {}
    all_dirs: dict = {"/sys/class/net": sorted(report["ifaces"])}
    addrs, stats = {}, {}
    for name, data in report["ifaces"].items():
        base = f"/sys/class/net/{name}"
        if name not in drop_sysfs:
            for key in ("type", "operstate", "carrier", "mtu", "speed", "ifindex", "iflink"):
                value = data["sysfs"][key]
                all_files[f"{base}/{key}"] = (OSError(errno.EINVAL, "Invalid argument") if value.startswith("<")
                                              else value + "\n")
            if data["sysfs"]["master"]:
                all_links[f"{base}/master"] = f"../{data['sysfs']['master']}"
            if data["sysfs"]["is_bridge"]:
                all_dirs[f"{base}/bridge"] = ["forward_delay", "stp_state"]
                all_dirs[f"{base}/brif"] = [n for n, d in report["ifaces"].items()
                                            if d["sysfs"]["master"] == name]
        addrs[name] = [{"family": _FAMILY.get(a["family"], "link"), "address": a["address"],
                        "netmask": a["netmask"]} for a in data["psutil_addrs"]]
        st = data["psutil_stats"]
        stats[name] = {"isup": st["isup"], "speed": st["speed"], "mtu": st["mtu"], "duplex": int(st["duplex"]),
                       "flags": st["flags"]}
    all_commands = {IP_LINK: ip_link}
    all_commands.update(commands or {})
    all_files.update(files or {})
    all_dirs.update(dirs or {})
    all_links.update(links or {})
    return FakeHost(env=env or {}, commands=all_commands, files=all_files, dirs=all_dirs, links=all_links,
                    if_addrs=addrs, if_stats=if_stats if if_stats is not None else stats, hostname=hostname,
                    gateways=gateways if gateways is not None else _gateways(),
                    resolve=resolve if resolve is not None else {hostname: ["127.0.0.1"]})


def route(dev: str, dst: str, src: str) -> str:
    return json.dumps([{"dst": dst, "dev": dev, "prefsrc": src, "flags": [], "uid": 0, "cache": []}])


def failed(stderr: str, code: int = 2) -> CommandResult:
    return CommandResult(("ip",), code, "", stderr)


def as_physical(*names: str) -> dict:
    """Overrides that make the named interfaces look like PCI NICs: no linkinfo kind in
    `ip -d -j link`, and a /sys/class/net/X/device link."""
    with open(data_path("netif", "ip_d_j_link.json")) as fh:
        links = json.load(fh)
    for link in links:
        if link["ifname"] in names:
            link.pop("linkinfo", None)
    return {"commands": {IP_LINK: json.dumps(links)},
            "links": {f"/sys/class/net/{n}/device": f"../../../0000:0{i + 1}:00.0" for i, n in enumerate(names)}}
