"""The `ip addr`, `ip -d -j link` and NCCL_DEBUG interface-line parsers: the shapes the captures
show beyond the golden runner's comparison (tests/unit/core/test_golden.py), and bad input."""

from __future__ import annotations


import pytest

from distdoctor.parsers import ParseError
from distdoctor.parsers.ip import parse_ip_addr, parse_link_json, parse_route_get_json
from distdoctor.parsers.nccl_net_log import parse_nccl_net_log
from tests.conftest import data_path

def _text(path: str) -> str:
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8", "replace")


def test_ip_addr_details():
    k8s_text = _text(data_path("ip_addr", "ip-a_k8s_netns_flannel_cni0_veth_eth0@if10.txt"))
    k8s = {link.name: link for link in parse_ip_addr(k8s_text)}
    assert k8s["eth0"].peer_index == 10 and k8s["eth0"].ifindex == 9
    assert k8s["veth482f2c81"].master == "cni0"
    azure = parse_ip_addr(_text(data_path("ip_addr", "ip-a_azure_hpc_vm_ibP_down_docker0.txt")))
    assert [a[1] for a in azure[1].addresses] == ["172.16.0.4/24", "fe80::222:48ff:fea7:27e0/64"]  # 'metric 100'
    assert azure[3].link_type == "infiniband" and azure[3].state == "DOWN"


@pytest.mark.parametrize("text", ["hello world\n", "1: lo <LOOPBACK>\n", "    inet 10.0.0.1/24 scope global x\n"])
def test_ip_addr_rejects_other_text(text):
    with pytest.raises(ParseError) as err:
        parse_ip_addr(text)
    assert err.value.tool == "ip" and err.value.line == 1


def test_ip_link_json_from_the_lab_namespace():
    with open(data_path("netif", "ip_d_j_link.json")) as fh:
        links = {link.name: link for link in parse_link_json(fh.read())}
    assert [links[n].info_kind for n in ("enp1s0f0", "docker0", "vethab12cd", "tap0", "enp4s0", "lo")] == \
        ["veth", "bridge", "veth", "tun", "ifb", ""]
    assert links["tap0"].tun_type == "tap" and "NO-CARRIER" in links["tap0"].flags
    assert links["vethab12cd"].master == "docker0" and links["vethab12cd"].slave_kind == "bridge"
    assert links["enp2s0f1"].operstate == "DOWN" and links["lo"].link_type == "loopback"
    assert [links[n].ifindex for n in ("lo", "enp1s0f0", "enp4s0")] == [1, 2, 8]


@pytest.mark.parametrize("text, words", [
    ("[{\"ifindex\": 1", "not JSON"),
    ("{}", "JSON list"),
    ('[{"ifindex": 1}]', "no interface name"),
    ('[{"ifindex": "x", "ifname": "a"}]', "non-numeric"),
])
def test_ip_link_json_garbage(text, words):
    with pytest.raises(ParseError, match=words):
        parse_link_json(text)


def test_route_get():
    r = parse_route_get_json('[{"dst":"10.99.9.9","gateway":"10.81.1.1","dev":"enp1s0f0","prefsrc":"10.81.1.5",'
                             '"flags":[],"uid":0,"cache":[]}]')
    assert (r.dev, r.gateway, r.prefsrc, r.kind) == ("enp1s0f0", "10.81.1.1", "10.81.1.5", "unicast")
    with pytest.raises(ParseError):
        parse_route_get_json("[]")


def test_nccl_log_shapes():
    veth = parse_nccl_net_log(_text(data_path("nccl_debug", "nccl-2.3.7_horovod_vlan_ipv6_linklocal_ifaces.txt")))
    srv4 = [s for s in veth.of("socket") if s.host == "srv4:314"][0]
    assert [i for i, _ in srv4.interfaces] == ["ens5f0.3003", "enp5s0", "ens5f0"]
    assert srv4.interfaces[1][1] == "fe80::4eed:fbff:fe91:8317%enp5s0"
    flannel = parse_nccl_net_log(_text(data_path(
        "nccl_debug", "nccl-2.4.2_k8s_flannel_in_socket_list_34_roce_hcas_empty_oob_tag-output_EXCERPT.txt")))
    assert flannel.of("oob")[0].interfaces == (("", ""),)  # "OOB :" with no interface
    assert "flannel.1" in [i for i, _ in flannel.of("socket")[0].interfaces]
    new = parse_nccl_net_log("node:1:2 [0] NCCL INFO Bootstrap: Using ens49f1np1:192.168.30.122<0>\n")
    old = parse_nccl_net_log("node:1:2 [0] NCCL INFO Bootstrap : Using ens49f1np1:192.168.30.122<0>\n")
    assert new == old and new.of("bootstrap")[0].interfaces == (("ens49f1np1", "192.168.30.122"),)
