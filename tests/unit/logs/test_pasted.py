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


# --- the second first-sight round's classes (pastesight2), each over every capture of its tool --------

def _said(text: str) -> list[tuple[str, str, str]]:
    return [(r.id, f.status.value, f.summary) for r in pasted.runs([("paste", text)]) for f in r.findings]


def _captures(tool: str) -> list[str]:
    folder = os.path.join(DATA, tool)
    return sorted(f for f in os.listdir(folder) if f.endswith(".txt"))


@pytest.mark.parametrize("name", _captures("nvidia_smi_topo"))
def test_a_topology_cut_inside_its_last_gpu_row_is_read_up_to_it(name):
    """Every captured matrix cut in the middle of its last GPU row (as an excerpt or a post ends):
    never "could not be read", the cut row named, and the rows before it judged."""
    from distdoctor.parsers import ParseError as Unreadable
    from distdoctor.parsers.nvidia_smi import parse_topo_matrix

    text = _read("nvidia_smi_topo", name)
    try:
        whole = parse_topo_matrix(text)
    except Unreadable:
        pytest.skip("a capture the parser refuses whole")
    last = whole.gpus[-1].label
    if len(whole.gpus) < 3:
        pytest.skip("too few GPU rows to cut one and judge the rest")
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if line.split()[:1] == [last])
    cut = "\n".join(lines[:k] + [lines[k][:len(lines[k]) // 3]]) + "\n"
    said = _said(cut)
    assert not any("could not be read" in s for _i, _st, s in said), said
    assert any(f"cut off in {last}'s row" in s for _i, _st, s in said), said
    assert any(i in ("gpu.p2p-topology", "gpu.nic-affinity") for i, _st, _s in said), said
    # cut at the end of the row before it (a post that ends on a whole row): the same, said "after"
    before = lines[k - 1].split()[0]
    said = _said("```\n" + "\n".join(lines[:k]) + "\n")
    assert not any("could not be read" in s for _i, _st, s in said), said
    assert any(f"cut off after {before}" in s for _i, _st, s in said), said


@pytest.mark.parametrize("name", _captures("ibstat"))
def test_ibstat_flattened_reads_as_indented(name):
    """A paste that loses ibstat's tabs (inline code, a chat) reads port by port as the capture does."""
    text = _read("ibstat", name)
    if not text.lstrip().startswith("CA '"):
        pytest.skip("not ibstat's CA listing")
    flat = "\n".join(line.strip() for line in text.splitlines()) + "\n"
    indented = sorted(s for i, _st, s in _said(text) if i == "log.pasted-output")
    assert sorted(s for i, _st, s in _said(flat) if i == "log.pasted-output") == indented
    assert [st for i, st, _s in _said(flat) if i != "log.pasted-output"] == \
        [st for i, st, _s in _said(text) if i != "log.pasted-output"]


@pytest.mark.parametrize("name", _captures("ibstat"))
def test_an_ibstat_port_quoted_without_its_ca_line(name):
    """Each capture's first port quoted alone: its state stated (WARN when not Active), its HCA unknown."""
    lines = _read("ibstat", name).splitlines()
    start = next((k for k, line in enumerate(lines) if line.strip().startswith("Port ") and line.strip().endswith(":")),
                 None)
    if start is None:
        pytest.skip("no `Port N:` block (ibv_devinfo's listing)")
    # the block ends where a line is indented no deeper than its `Port N:` line (tabs, or spaces: 8 then 16)
    depth = len(lines[start].expandtabs(8)) - len(lines[start].expandtabs(8).lstrip())
    end = next((k for k in range(start + 1, len(lines))
                if len(lines[k].expandtabs(8)) - len(lines[k].expandtabs(8).lstrip()) <= depth), len(lines))
    port = "\n".join(lines[start:end]) + "\n"
    state = next(line.split(":", 1)[1].strip() for line in lines[start:end] if line.strip().startswith("State:"))
    (said,) = _said("with ibstat outputs like\n\n" + port)
    assert said[0] == "log.pasted-output" and "which HCA (CA) it belongs to is not shown" in said[2]
    assert said[1] == ("ok" if state == "Active" else "warn"), said


@pytest.mark.parametrize("text, why", [
    ("No IB devices found\n", "no RDMA adapter, or its kernel driver"),
    ("$ ibv_devinfo\nlibibverbs: Warning: no userspace device-specific driver found for "
     "/sys/class/infiniband_verbs/uverbs0\nNo IB devices found\n", "no user-space provider"),
    ("libibverbs: Warning: couldn't open config directory '/etc/libibverbs.d'.\nNo IB devices found\n",
     "no provider configuration"),
    ("libibverbs: Warning: couldn't open config directory '/etc/libibverbs.d'.\n", None),
])
def test_verbs_finding_no_device_says_why(text, why):
    said = _said(text)
    if why is None:  # a warning alone says nothing of the devices
        assert said == []
        return
    (got,) = said
    assert got[1] == "warn" and why in got[2] and "no IB devices found" in got[2]


@pytest.mark.parametrize("name, warns", [
    ("sinfo_table_default_drain.txt", ["drain node1"]),
    ("sinfo_table_N_l_drained.txt", ["drained node1"]),
    ("sinfo_table_N_drain.txt", ["drain node1"]),
    ("sinfo_table_public_drng_fail_maint_arjuna69.txt", ["fail* f005", "maint c[003", "fail* c[020-022]"]),
])
def test_pasted_sinfo_names_the_nodes_slurm_will_not_use(name, warns):
    (got,) = _said("here is sinfo:\n\n" + _read("slurm", name))
    assert got[1] == "warn" and all(w in got[2] for w in warns), got
    assert "idle" not in got[2].split(": ", 1)[1]  # the usable nodes are not among the ones named


def test_pasted_sinfo_reads_a_state_without_its_flag():
    """sinfo's flag suffixes (reboot^ issued, drain* not responding, idle~ powered off) do not hide
    the state: a node rebooting takes no jobs, one powered off is started on demand."""
    lines = _read("slurm", "sinfo_table_default_drain.txt").splitlines()
    (got,) = _said("\n".join([lines[0], lines[2].replace("idle", "reboot^"), lines[2].replace("idle", "idle~")]) + "\n")
    assert got[1] == "warn" and "reboot^ node[2-3]" in got[2] and "idle~" not in got[2], got


def test_pasted_sinfo_all_usable_and_other_tables_with_state_columns():
    lines = _read("slurm", "sinfo_table_default_drain.txt").splitlines()
    (got,) = _said("\n".join([lines[0], lines[2]]) + "\n")
    assert got[1] == "ok" and "none down or drained" in got[2]
    # flux's table has STATE and NODELIST too, but it is not sinfo's: said nothing about, not misread
    assert _said("     STATE QUEUE    PROPERTIES NNODES   NCORES    NGPUS NODELIST\n"
                 "      down batch,al                 1        4        0 picl4\n") == []


@pytest.mark.parametrize("name", _captures("ip_addr"))
def test_an_interface_list_cut_off_says_so_and_names_no_choice(name):
    """Every `ip addr` capture pasted in a code block the post never closes, cut after its first
    interface: said cut off, and NCCL's choice among what is shown is not stated as the node's."""
    text = _read("ip_addr", name)
    lines = text.splitlines()
    second = next((k for k, line in enumerate(lines) if k and line[:1].isdigit() and ": " in line), None)
    if second is None or not lines[0][:1].isdigit():
        pytest.skip("one interface, or not the full `ip addr` form")
    said = _said("```\n" + "\n".join(lines[:second]) + "\n")
    assert any("cut off" in s and "cannot be told" in s for _i, _st, s in said), said
    assert not any(i == "net.nccl-socket-interface" and st == "ok" for i, st, _s in said), said


@pytest.mark.parametrize("name, gpu, status", [
    ("nvlink-s_v100sxm2_inactive_elided_azhpc73.md", "GPU 3", "warn"),       # SXM2: every link wired
    ("topo-m_h100nvl_numa_and_nvlink-s_nccl1608.md", "GPU 0", "ok"),         # H100 NVL: bridged pairs
])
def test_inactive_nvlinks_judged_only_where_every_link_is_wired(name, gpu, status):
    said = [s for s in _said(_read("logs", "pasted", name)) if "nvlink -s" in s[2]]
    assert said and said[0][1] == status and gpu in said[0][2]


def test_an_ibstatus_port_cut_before_its_state_is_not_called_down():
    text = _read("logs", "pasted", "ibstatus_a100_9ports_all_active_gpud.md")
    cut = text[:text.index("base lid:")]  # the first port's fields from its base lid on are not shown
    (got,) = _said(cut)
    assert got[1] == "ok" and "mlx5_0/1 state not shown" in got[2], got


@pytest.mark.parametrize("line, reason", [
    ("nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown",
     "driver/library version mismatch"),
    ("      Message: ... stderr: nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown",
     "driver not loaded"),
])
def test_nvml_failing_in_the_container_runtime_hook(line, reason):
    (got,) = _said(line + "\n")
    assert got[1] == "fail" and "nvidia-container-cli" in got[2] and reason in got[2], got


@pytest.mark.parametrize("name", _captures("collect_env"))
@pytest.mark.parametrize("same_line", [True, False])
def test_collect_env_with_its_gpu_topology_field(name, same_line):
    """collect_env's supersets print `topo -m` as a field (ScaleLLM on the field's line, vLLM on the
    next): the fields after it are still collect_env's, and the matrix is judged as a topology."""
    text = _read("collect_env", name)
    topo = _read("nvidia_smi_topo", "topo_dgx1_v100_4xmlx5_unsorted_nics.txt").strip("\n")
    head, _sep, tail = text.partition("\nNvidia driver version:")
    if not _sep:
        pytest.skip("no driver line to follow the topology")
    field = "GPU topology: " + topo if same_line else "GPU Topology:\n" + topo
    said = _said(head + "\n" + field + "\n\nNvidia driver version:" + tail)
    driver = parse_collect_env(text).driver or "unknown"
    assert any(i == "log.pasted-collect-env" and f"driver {driver}" in s for i, _st, s in said), said
    assert any(i == "gpu.p2p-topology" for i, _st, _s in said), said
    assert not any("could not be read" in s for _i, _st, s in said), said


def test_every_unread_tool_is_met_in_a_real_paste():
    """Each entry of logs/unread_tools.toml is there because a real paste of that tool was met:
    one of the labelled pastes is said seen-not-read under its name."""
    from distdoctor.logs import pasted_unread

    folder = os.path.join(DATA, "logs", "pasted")
    said = "\n".join(s for name in sorted(os.listdir(folder)) if name.endswith(".md") and name != "INDEX.md"
                     for _i, _st, s in _said(_read("logs", "pasted", name)))
    for tool in pasted_unread.catalogue():
        assert f"pasted `{tool.tool}` output: distdoctor does not read" in said, tool.tool


def test_no_capture_of_a_tool_distdoctor_reads_is_called_unread():
    """Every captured output in tests/data (the tools distdoctor parses): never taken for a tool it
    does not read."""
    unread = []
    for folder in sorted(os.listdir(DATA)):
        path = os.path.join(DATA, folder)
        if not os.path.isdir(path):
            continue
        for name in sorted(os.listdir(path)):
            if name.endswith(".txt"):
                sections, _env = pasted.find(name, _read(folder, name))
                unread += [f"{folder}/{name}:{s.line}" for s in sections if s.kind == "unread"]
    assert unread == []


_HEALTH = {"Remapped Rows": lambda g: g.remap_pending or g.remap_failure,
           "Retired Pages": lambda g: g.retired_pending,
           "GPU Reset Status": lambda g: g.reset_required or g.drain_and_reset_recommended}


@pytest.mark.parametrize("head", sorted(_HEALTH))
@pytest.mark.parametrize("name", _captures("nvidia_smi_q"))
def test_a_health_block_quoted_alone_is_judged_like_its_gpu(name, head):
    """Each capture's first Remapped Rows / Retired Pages / GPU Reset Status block pasted without
    its GPU: a FAIL exactly where the parse of the whole capture finds that GPU's remap or retirement
    pending, its remap failed, or a reset asked for; the GPU said not shown."""
    from distdoctor.parsers.nvidia_smi_query import parse_query

    text = _read("nvidia_smi_q", name)
    lines = text.splitlines()
    k = next((i for i, line in enumerate(lines) if line.strip() == head), None)
    if k is None:
        pytest.skip(f"no {head} block (absent, or `{head} : N/A` on one line)")
    try:
        gpus = parse_query(text).gpus
    except ParseError:
        pytest.skip("a capture without its GPU section: nothing to compare with")
    gpu = next(g for g in reversed(gpus)
               if any(lines[j].strip().startswith("GPU 0") and g.bus_id in lines[j] for j in range(k)))
    indent = len(lines[k]) - len(lines[k].lstrip())
    end = next((j for j in range(k + 1, len(lines)) if len(lines[j]) - len(lines[j].lstrip()) <= indent), len(lines))
    said = [s for s in _said("like this:\n\n" + "\n".join(lines[k:end]) + "\n") if head in s[2]]
    assert said and "which GPU is not shown" in said[0][2], said
    assert said[0][1] == ("fail" if _HEALTH[head](gpu) else "ok"), (said, gpu)


@pytest.mark.parametrize("text, gpu", [
    ("[Sun Jan 11 09:52:01 2026] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
     "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874\n", None),
    ("NVRM: GPU 0000:1b:00.0: rpcRmApiAlloc_GSP: GspRmAlloc failed: status=0x00000062\n"
     "NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062)\n",
     "0000:1b:00.0"),
])
def test_the_drivers_reset_required_fails_naming_the_gpu_where_shown(text, gpu):
    (got,) = [s for s in _said(text) if "Reset required" in s[2]]
    assert got[1] == "fail" and (gpu in got[2] if gpu else "do not show" in got[2]), got


@pytest.mark.parametrize("name, head, field", [
    ("q_535_8xH100_hw_slowdown_power_brake_fabric_completed.txt", "GPU Reset Status", "Reset Required"),
    ("q_535_8xH100_hw_slowdown_power_brake_fabric_completed.txt", "GPU Reset Status", "Drain and Reset Recommended"),
    ("q_535_8xH100_hw_slowdown_power_brake_fabric_completed.txt", "Retired Pages", "Pending Page Blacklist"),
])
def test_a_health_block_asking_for_a_reset_fails(name, head, field):
    """No real capture held shows these fields at Yes: a real block with one field turned to Yes (as
    a GPU that needs it reports), quoted alone, FAILs naming what is pending."""
    lines = _read("nvidia_smi_q", name).splitlines()
    k = next(i for i, line in enumerate(lines) if line.strip() == head)
    end = next(j for j in range(k + 1, len(lines)) if len(lines[j]) - len(lines[j].lstrip()) <= 4)
    block = [line.replace(": No", ": Yes").replace(": N/A", ": Yes") if line.strip().startswith(field) else line
             for line in lines[k:end]]
    assert any(line.strip().startswith(field) and line.endswith("Yes") for line in block), block
    (got,) = [s for s in _said("\n".join(block) + "\n") if head in s[2]]
    assert got[1] == "fail" and "needs a reset" in got[2], got
