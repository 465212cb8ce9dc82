"""The pure NCCL selection model: NCCL_SOCKET_IFNAME syntax, the selection order, and the
recorded answers of the real library (the lab's capture; the live oracle is test_netns.py)."""

from __future__ import annotations

import re

import pytest

from distdoctor.facts import Facts
from distdoctor.netif import Address, Interface, from_ip_addr
from distdoctor.nccl_socket import parse_ifname_list, predict_nccl_interfaces, suggest_ifname
from distdoctor.parsers.ip import parse_ip_addr
from tests.conftest import data_path
from tests.harness.labhost import lab_host


def iface(name, index, *addrs, running=True):
    out = []
    for a in addrs:
        ip, _, prefix = a.partition("/")
        out.append(Address("inet6" if ":" in ip else "inet", ip, int(prefix) if prefix else None))
    return Interface(name, index, "ethernet", admin_up=True, running=running, addresses=tuple(out))


@pytest.mark.parametrize("value, exclude, exact, entries", [
    ("eth0", False, False, [("eth0", -1)]),
    ("^docker,lo", True, False, [("docker", -1), ("lo", -1)]),
    ("=eth0,ib0", False, True, [("eth0", -1), ("ib0", -1)]),
    ("^=mlx5_1:1,mlx5_2", True, True, [("mlx5_1", 1), ("mlx5_2", -1)]),
    (",,eth0,", False, False, [("eth0", -1)]),
    ("=^eth0", False, True, [("^eth0", -1)]),
    ("^=", True, True, []),
])
def test_parse_ifname_list(value, exclude, exact, entries):
    spec = parse_ifname_list(value)
    assert (spec.exclude, spec.exact, list(spec.entries)) == (exclude, exact, entries)


def test_parse_problems_name_the_mistake():
    assert any("spaces" in p for p in parse_ifname_list("eth0, ib0").problems)
    assert any("stray comma" in p for p in parse_ifname_list("eth0,,ib0").problems)
    assert any("every interface is excluded" in p for p in parse_ifname_list("^=").problems)
    assert parse_ifname_list("eth0,ib0").problems == ()


def test_prefix_exact_and_port_matching():
    spec = parse_ifname_list("eth1")
    assert spec.matches("eth1") and spec.matches("eth10") and not spec.matches("eth2")
    assert not parse_ifname_list("=eth1").matches("eth10")
    hca = parse_ifname_list("mlx5_0:1")
    assert hca.matches("mlx5_0", 1) and not hca.matches("mlx5_0", 2) and hca.matches("mlx5_01", 1)
    assert parse_ifname_list("^mlx5_1").matches("mlx5_0") and not parse_ifname_list("^mlx5_1").matches("mlx5_1")


NODE = [
    iface("lo", 1, "127.0.0.1/8", "::1/128"),
    iface("docker0", 2, "172.17.0.1/16"),
    iface("ens5", 3, "172.31.0.137/20", "fe80::1%ens5/64"),
    iface("veth75fa783", 4, "fe80::2%veth75fa783/64"),
    iface("virbr0", 5, "192.168.122.1/24"),
    iface("eth9", 6, "10.9.0.1/24", running=False),
]


def test_default_takes_everything_but_docker_lo_virbr_ipv4_first():
    choice = predict_nccl_interfaces(NODE, {})
    assert str(choice.bootstrap) == "ens5:172.31.0.137"
    # pytorch#68893: the veth's link-local address joins the socket list after every IPv4 one
    assert [str(p) for p in choice.sockets] == ["ens5:172.31.0.137", "veth75fa783:fe80::2%veth75fa783"]


def test_ib_first_then_last_resorts_in_order():
    with_ib = NODE + [iface("ib0", 7, "10.20.0.5/24")]
    assert predict_nccl_interfaces(with_ib, {}).bootstrap.interface == "ib0"
    only_virtual = [NODE[0], NODE[1], NODE[4]]
    assert predict_nccl_interfaces(only_virtual, {}).bootstrap.interface == "docker0"
    assert predict_nccl_interfaces([NODE[0], NODE[4]], {}).bootstrap.interface == "lo"
    assert predict_nccl_interfaces([NODE[4]], {}).bootstrap.interface == "virbr0"
    nothing = predict_nccl_interfaces([NODE[5]], {})
    assert nothing.bootstrap is None and nothing.error == "no socket interface found"


def test_family_and_ipv6_loopback():
    v6 = predict_nccl_interfaces(NODE, {"NCCL_SOCKET_FAMILY": "AF_INET6"})
    assert str(v6.bootstrap) == "ens5:fe80::1%ens5"
    assert predict_nccl_interfaces([NODE[0]], {"NCCL_SOCKET_FAMILY": "AF_INET6"}).bootstrap is None  # never ::1
    assert predict_nccl_interfaces(NODE, {"NCCL_SOCKET_FAMILY": "inet6"}).bootstrap.address == "172.31.0.137"


def test_user_setting_is_find_or_fail_and_short_values_are_ignored():
    assert predict_nccl_interfaces(NODE, {"NCCL_SOCKET_IFNAME": "eth9"}).error == "no socket interface found"
    ignored = predict_nccl_interfaces(NODE, {"NCCL_SOCKET_IFNAME": "e"})
    assert ignored.setting is None and "ignored" in ignored.ignored and ignored.bootstrap.interface == "ens5"
    assert predict_nccl_interfaces(NODE, {"NCCL_SOCKET_IFNAME": "=,"}).bootstrap.interface == "lo"


def test_comm_id_subnet_for_bootstrap_and_sockets():
    nodes = [iface("lo", 1, "127.0.0.1/8"), iface("enp1", 2, "10.1.0.5/24"), iface("enp2", 3, "10.2.0.5/24")]
    choice = predict_nccl_interfaces(nodes, {"NCCL_COMM_ID": "10.2.0.1:5555"})
    assert choice.bootstrap.interface == "enp2" and choice.sockets[0].interface == "enp2"
    with_setting = predict_nccl_interfaces(nodes, {"NCCL_COMM_ID": "10.2.0.1:5555", "NCCL_SOCKET_IFNAME": "enp1"})
    assert with_setting.bootstrap.interface == "enp2" and with_setting.sockets[0].interface == "enp1"
    far = predict_nccl_interfaces(nodes, {"NCCL_COMM_ID": "10.9.0.1:5555"})
    assert far.bootstrap is None and "No usable listening interface" in far.error
    named = predict_nccl_interfaces(nodes, {"NCCL_COMM_ID": "head:5555"}, resolve=lambda h: "10.1.0.1")
    assert named.bootstrap.interface == "enp1"
    assert "Invalid NCCL_COMM_ID" in predict_nccl_interfaces(nodes, {"NCCL_COMM_ID": "head:5555"}).error
    assert "Invalid NCCL_COMM_ID" in predict_nccl_interfaces(nodes, {"NCCL_COMM_ID": ""}).error


def test_settings_records_are_accepted():
    host = lab_host({"NCCL_SOCKET_IFNAME": "=enp1s0f0"})
    facts = Facts(host)
    choice = predict_nccl_interfaces(facts.interfaces.interfaces, facts.nccl_settings)
    assert str(choice.bootstrap) == "enp1s0f0:10.10.0.5"


def _lab_oracle():
    """tests/data/netif/nccl_nic_selection.txt: what the real libnccl 2.30.7 chose in the lab's
    namespace for each NCCL_SOCKET_IFNAME value."""
    rows = []
    with open(data_path("netif", "nccl_nic_selection.txt")) as fh:
        for line in fh:
            m = re.match(r"NCCL_SOCKET_IFNAME=(\S+)\s+-> (.*)$", line)
            if not m:
                continue
            value = None if m.group(1) == "<unset>" else m.group(1)
            using = re.search(r"Bootstrap: Using (\S+?):(\S+?)<\d+>", m.group(2))
            rows.append((value, (using.group(1), using.group(2)) if using else None))
    assert len(rows) == 10
    return rows


@pytest.mark.parametrize("value, expected", _lab_oracle())
def test_model_matches_the_recorded_real_library(value, expected):
    facts = Facts(lab_host({} if value is None else {"NCCL_SOCKET_IFNAME": value}))
    choice = predict_nccl_interfaces(facts.interfaces.interfaces, facts.nccl_settings)
    got = (choice.bootstrap.interface, choice.bootstrap.address) if choice.bootstrap else None
    assert got == expected


def _captured(name):
    with open(data_path("ip_addr", name)) as fh:
        return from_ip_addr(parse_ip_addr(fh.read()))


def test_predictions_over_real_captures():
    k8s = predict_nccl_interfaces(_captured("ip-a_k8s_netns_flannel_cni0_veth_eth0@if10.txt"), {})
    # nccl#224: flannel.1 comes first in interface order, so the bootstrap advertises the overlay.
    assert str(k8s.bootstrap) == "flannel.1:10.244.0.0"
    assert [p.interface for p in k8s.sockets][:3] == ["flannel.1", "cni0", "eth0"]
    cloud = predict_nccl_interfaces(_captured("ip-brief-addr_cloudvm_docker0_br_veth.txt"), {})
    assert [p.interface for p in cloud.sockets] == ["eth0", "br-a3f6756bc94f", "veth62cb68b"]
    azure = predict_nccl_interfaces(_captured("ip-a_azure_hpc_vm_ibP_down_docker0.txt"), {})
    assert azure.bootstrap.interface == "eth0"  # the IPoIB link is down, docker0 has no carrier
    node1 = predict_nccl_interfaces(_captured("ip-a_2node_pair_node1_ens6_ib0_partial.txt"), {})
    node2 = predict_nccl_interfaces(_captured("ip-a_2node_pair_node2_ens14f0_ib0_partial.txt"), {})
    assert node1.bootstrap.interface == node2.bootstrap.interface == "ib0"


def test_suggestion_syntax():
    assert suggest_ifname(["eth1"]) == "=eth1"
    assert suggest_ifname(["ens6", "ens14f0", "ens6"]) == "=ens6,ens14f0"
    two_nodes = [_captured("ip-a_2node_pair_node1_ens6_ib0_partial.txt"),
                 _captured("ip-a_2node_pair_node2_ens14f0_ib0_partial.txt")]
    value = suggest_ifname(["ens6", "ens14f0"])
    for node, name in zip(two_nodes, ("ens6", "ens14f0")):
        assert predict_nccl_interfaces(node, {"NCCL_SOCKET_IFNAME": value}).bootstrap.interface == name


def test_real_logs_list_every_ipv4_address_before_any_ipv6_one():
    """The ordering rule the model relies on (getifaddrs: all IPv4, then all IPv6), as seen in
    socket lists NCCL printed on other people's machines."""
    import glob

    from distdoctor.parsers.nccl_net_log import parse_nccl_net_log

    checked = 0
    for path in glob.glob(data_path("nccl_debug", "*.txt")):
        with open(path, encoding="utf-8", errors="replace") as fh:
            log = parse_nccl_net_log(fh.read())
        for selection in log.of("socket"):
            families = ["inet6" if ":" in addr else "inet" for _if, addr in selection.interfaces]
            assert families == sorted(families), (path, selection)
            assert len({name for name, _ in selection.interfaces}) == len(selection.interfaces)  # one per interface
            checked += "inet6" in families and "inet" in families
    assert checked >= 3
