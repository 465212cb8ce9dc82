import os

import pytest

from distdoctor.logs import pasted
from distdoctor.logs.analysis import analyse
from distdoctor.model import Status
from distdoctor.parsers import ParseError
from distdoctor.parsers.collect_env import parse_collect_env
from distdoctor.parsers.ibstat import parse_ibstat
from distdoctor.parsers.ip import parse_ip_addr

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data")


def _read(*parts):
    with open(os.path.join(DATA, *parts), encoding="utf-8") as fh:
        return fh.read()


def test_issue_paste_judged_like_a_live_node():
    runs, _ok = analyse([os.path.join(DATA, "logs", "pasted", "issue_ifname_eth0_ip-a_and_ip-o.md")])
    nccl = [r for r in runs if r.id == "net.nccl-socket-interface"]
    # two pastes (an indented `ip a` and a quoted `ip -o addr`), one NCCL_SOCKET_IFNAME=eth0 for both
    assert [r.status for r in nccl] == [Status.OK, Status.FAIL]
    failed = nccl[1].findings[0]
    assert "NCCL_SOCKET_IFNAME=eth0 matches no usable interface" in failed.summary
    assert "ens5" in failed.fix and "lo" not in failed.fix.replace("GLOO", "")
    assert "issue_ifname_eth0_ip-a_and_ip-o.md:32" in nccl[1].title


def test_sections_found_through_quotes_and_indentation():
    text = ("see below\n> ```\n>     CA 'mlx5_0'\n>     \tPort 1:\n>     \t\tState: Down\n>     \t\tPhysical state: Polling\n"
            "> ```\nNCCL_IB_HCA=mlx5_0\nand topo:\n" + _read("nvidia_smi_topo", "topo_4xA10_allSYS_2nic.txt"))
    sections, env = pasted.find("x", text)
    assert [s.kind for s in sections] == ["ib", "topo"]
    assert env == {"NCCL_IB_HCA": "mlx5_0"}
    assert parse_ibstat(sections[0].text)[0].state == "DOWN"


def test_nccl_info_env_lines_count_as_env():
    _sections, env = pasted.find("x", "host:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0\n")
    assert env == {"NCCL_SOCKET_IFNAME": "ib0"}


def test_ip_oneline_and_ifconfig_forms():
    oneline = ("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
               "2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n"
               "2: eth0    inet6 fe80::1/64 scope link \\       valid_lft forever preferred_lft forever\n")
    links = parse_ip_addr(oneline)
    assert [(link.name, [a[1] for a in link.addresses]) for link in links] == [
        ("lo", ["127.0.0.1/8"]), ("eth0", ["10.0.0.5/24", "fe80::1/64"])]
    new = ("eth0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 9001\n"
           "        inet 172.31.0.137  netmask 255.255.240.0  broadcast 172.31.15.255\n"
           "        inet6 fe80::8ff:fe12:3456  prefixlen 64  scopeid 0x20<link>\n"
           "        ether 0a:ff:12:34:56:78  txqueuelen 1000  (Ethernet)\n\n"
           "lo: flags=73<UP,LOOPBACK,RUNNING>  mtu 65536\n        inet 127.0.0.1  netmask 255.0.0.0\n"
           "        loop  txqueuelen 1000  (Local Loopback)\n")
    old = ("eth0      Link encap:Ethernet  HWaddr 00:16:3e:00:00:01\n"
           "          inet addr:10.1.2.3  Bcast:10.1.2.255  Mask:255.255.255.0\n"
           "          inet6 addr: fe80::216:3eff:fe00:1/64 Scope:Link\n"
           "          UP BROADCAST RUNNING MULTICAST  MTU:1500  Metric:1\n")
    a, b = parse_ip_addr(new)
    assert (a.name, a.mtu, a.state, a.link_type, a.addresses[0][1], a.addresses[1][2]) == \
        ("eth0", 9001, "UP", "ether", "172.31.0.137/20", "link")
    assert (b.name, b.link_type, b.addresses[0][2]) == ("lo", "loopback", "host")
    (c,) = parse_ip_addr(old)
    assert (c.name, c.mtu, c.state, c.addresses) == ("eth0", 1500, "UP", (
        ("inet", "10.1.2.3/24", "global"), ("inet6", "fe80::216:3eff:fe00:1/64", "link")))


@pytest.mark.parametrize("name, ports", [
    ("ibstat_mlx4_cx3_fdr56_active.txt", [("mlx4_0", 1, "ACTIVE", "LinkUp", "56", "InfiniBand")]),
    ("ibv_devinfo_cx6_hdr_ib_active_tabs.txt", [("mlx5_0", 1, "ACTIVE", "", "", "InfiniBand")]),
])
def test_ibstat_fixtures(name, ports):
    got = [(p.hca, p.port, p.state, p.phys_state, p.rate, p.link_layer) for p in parse_ibstat(_read("ibstat", name))]
    assert got == ports


def test_ibv_devinfo_all_ports_down():
    got = parse_ibstat(_read("ibstat", "ibv_devinfo_4x_cx7_roce_port_down.txt"))
    assert [(p.hca, p.state, p.link_layer) for p in got] == [(f"mlx5_{i}", "DOWN", "Ethernet") for i in range(4)]


@pytest.mark.parametrize("name, torch, cuda, driver, gpus", [
    ("collect_env_torch1.6_8xV100_driver410_oldformat.txt", "1.6.0+cu101", "10.1", "410.104", 8),
    ("collect_env_torch1.4_centos7_4xTITANRTX_espnet_template.txt", "1.4.0", "10.0", "440.33.01", 4),
    ("collect_env_torch2.5.1_rocm6.2_wsl2_rx7900xtx_runpy_warning.txt", "2.5.1+rocm6.2", None, None, 0),
])
def test_collect_env(name, torch, cuda, driver, gpus):
    env = parse_collect_env(_read("collect_env", name))
    assert (env.torch_version, env.torch_cuda, env.driver, len(env.gpus)) == (torch, cuda, driver, gpus)


def test_collect_env_driver_too_old_fails_like_check():
    runs, _ok = analyse([os.path.join(DATA, "collect_env", "collect_env_torch1.6_8xV100_driver410_oldformat.txt")])
    compat = next(r for r in runs if r.id == "gpu.cuda-compat")
    assert compat.status == Status.FAIL
    assert "driver 410.104 supports up to CUDA 10.0" in compat.findings[0].summary


def test_unreadable_paste_is_a_finding_not_a_traceback():
    runs = pasted.runs([("x", "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t what is this\n")])
    assert [(r.id, r.status) for r in runs] == [("log.pasted-output", Status.WARN)]
    assert "pasted topo output at x:1 could not be read" in runs[0].findings[0].summary


def test_parsers_raise_parse_error_on_other_text():
    with pytest.raises(ParseError):
        parse_ibstat("hello\n")
    with pytest.raises(ParseError):
        parse_collect_env("hello: world\n")


def test_pasted_nvidia_smi_header_gives_the_drivers_cuda():
    runs, _ok = analyse([os.path.join(DATA, "logs", "pasted", "issue_collect_env_and_nvidia-smi.md")])
    compat = next(r for r in runs if r.id == "gpu.cuda-compat")
    assert compat.source.endswith("the driver's CUDA 10.2 from the pasted nvidia-smi header")
    assert compat.status == Status.OK


def test_ompi_info_judged_when_the_paste_shows_gpus():
    text = ("ompi_info says:\n\n" + _read("ompi_info", "ompi_info_parsable_grep_cuda_false_cluster.txt") + "\nand\n\n"
            + _read("nvidia_smi_topo", "topo_4xA10_allSYS_2nic.txt"))
    runs = {r.id: r for r in pasted.runs([("x", text)])}
    aware = runs["build.mpi-cuda-aware"]
    assert aware.status == Status.WARN
    assert "built without CUDA support, on a node with 4 GPU(s)" in aware.findings[0].summary


def test_ompi_info_without_gpus_in_the_paste_is_stated_not_judged():
    runs = pasted.runs([("x", _read("ompi_info", "ompi_info_parsable_grep_cuda_false_cluster.txt"))])
    assert [(r.id, r.status) for r in runs] == [("log.pasted-output", Status.OK)]
    assert "does not show whether the node has GPUs" in runs[0].findings[0].summary


def test_pastes_kept_are_bounded():
    collector = pasted.Collector()
    collector.MAX_KEPT = 3000
    topo = _read("nvidia_smi_topo", "topo_4xA10_allSYS_2nic.txt")
    for k in range(5):
        collector.add(f"f{k}", topo)
    size = sum(len(sec.text) for sec in pasted.find("x", topo)[0])
    assert len(collector.found) == 3000 // size == 2
    notes = [r for r in collector.runs() if r.id == "log.pasted-output"]
    assert len(notes) == 1 and "was not judged" in notes[0].findings[0].summary


def test_log_lines_that_merely_mention_gpu0_are_not_a_topology():
    sections, _env = pasted.find("x", "GPU0 temperature is 80C\nGPU0 utilization 100%\n0: GPU0 ready\n")
    assert sections == []
