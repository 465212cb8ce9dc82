"""The net checks over the lab's captured GPU-node namespace (FakeHost), including bad input."""

from __future__ import annotations

import errno
import json

import pytest

from distdoctor.checks import net, net_mpi
from distdoctor.facts import Facts
from distdoctor.host import CommandResult
from distdoctor.model import Status
from distdoctor.testing import FakeHost, run_check
from tests.harness.labhost import IP_LINK, as_physical, lab_host, route


def statuses(findings):
    return [f.status for f in findings]


def worst(findings):
    return max((f.status for f in findings), key=lambda s: s.severity)


def main_finding(findings):
    return [f for f in findings if f.subject != "interfaces"][-1]


def test_default_choice_is_a_veth_named_ib0_and_warns_with_the_default_route_interface():
    findings = run_check(net.nccl_socket_interface, lab_host())
    f = main_finding(findings)
    assert f.status is Status.WARN
    assert "ib0:10.20.0.5" in f.summary and "veth" in f.summary
    assert f.fix == "export NCCL_SOCKET_IFNAME='=enp1s0f0' GLOO_SOCKET_IFNAME=enp1s0f0"
    assert f.evidence["rule"] == "NCCL's first choice: names starting with ib"
    assert [row[0] for row in f.evidence["table"]["rows"]][:2] == ["lo", "enp1s0f0"]


def test_master_addr_routed_through_ib0_makes_ib0_the_right_choice():
    host = lab_host({"MASTER_ADDR": "10.20.0.1"},
                    commands={("ip", "-j", "route", "get", "10.20.0.1"): route("ib0", "10.20.0.1", "10.20.0.5")})
    findings = run_check(net.nccl_socket_interface, host)
    assert statuses(findings) == [Status.OK]
    assert "ib0 10.20.0.5" in findings[0].summary
    assert findings[0].evidence["peers"][0]["dev"] == "ib0"
    records = {r["name"]: r for r in findings[0].evidence["interfaces"]}
    assert [records[n]["addressing"] for n in ("enp1s0f0", "vethab12cd", "tap0", "lo")] == \
        ["ipv4", "link-local-only", "none", "ipv4"]
    assert records["ib0"]["virtual"] and records["docker0"]["kind"] == "bridge"
    assert records["tap0"]["state"] == "no-carrier" and records["enp2s0f1"]["state"] == "down"


def test_route_lookup_to_master_addr_picks_the_suggestion():
    host = lab_host({"MASTER_ADDR": "10.40.0.9", "NCCL_SOCKET_IFNAME": "docker0"},
                    commands={("ip", "-j", "route", "get", "10.40.0.9"): route("enp1s0f0", "10.40.0.9", "10.10.0.5")})
    f = main_finding(run_check(net.nccl_socket_interface, host))
    assert f.status is Status.WARN and "docker0" in f.summary and "bridge" in f.summary
    assert "=enp1s0f0" in f.fix


@pytest.mark.parametrize("value, words", [
    ("eth", "no interface here is named like that"),
    ("=enp2s0f1", "enp2s0f1 is down"),
    ("tap0", "tap0 is no-carrier"),
    ("^=", "matches no usable interface"),
])
def test_settings_matching_nothing_usable_fail_and_say_why(value, words):
    findings = run_check(net.nccl_socket_interface, lab_host({"NCCL_SOCKET_IFNAME": value}))
    f = [x for x in findings if x.status is Status.FAIL][0]
    assert f.subject == "NCCL_SOCKET_IFNAME" and words in f.summary
    assert "no socket interface found" in f.explanation
    assert "=enp1s0f0" in f.fix


def test_link_local_only_veth_warns():
    f = main_finding(run_check(net.nccl_socket_interface, lab_host({"NCCL_SOCKET_IFNAME": "^docker,lo,ib,enp"})))
    assert f.status is Status.WARN and f.subject == "vethab12cd" and "link-local" in f.summary


def test_exclusion_list_that_lets_loopback_in_warns_for_multi_node_jobs():
    single = main_finding(run_check(net.nccl_socket_interface, lab_host({"NCCL_SOCKET_IFNAME": "^ib"})))
    assert single.status is Status.OK and "fine on one node" in single.summary
    multi = main_finding(run_check(net.nccl_socket_interface,
                                   lab_host({"NCCL_SOCKET_IFNAME": "^ib", "SLURM_JOB_NUM_NODES": "4"})))
    assert multi.status is Status.WARN and "lo:127.0.0.1" in multi.summary and "loopback" in multi.summary


def test_master_node_itself_is_judged_by_the_interface_holding_master_addr():
    local = '[{"type":"local","dst":"10.20.0.5","dev":"lo","prefsrc":"10.20.0.5","flags":[],"uid":0,"cache":[]}]'
    host = lab_host({"MASTER_ADDR": "10.20.0.5"}, commands={("ip", "-j", "route", "get", "10.20.0.5"): local})
    findings = run_check(net.nccl_socket_interface, host)
    assert statuses(findings) == [Status.OK] and findings[0].evidence["peers"][0]["dev"] == "ib0"


def test_setting_from_etc_nccl_conf_is_used_and_named():
    host = lab_host(files={"/etc/nccl.conf": "NCCL_SOCKET_IFNAME=eth\n"})
    f = [x for x in run_check(net.nccl_socket_interface, host) if x.status is Status.FAIL][0]
    assert "(set in /etc/nccl.conf)" in f.summary


def test_one_character_value_is_reported_as_ignored():
    findings = run_check(net.nccl_socket_interface, lab_host({"NCCL_SOCKET_IFNAME": "e"}))
    assert any(f.status is Status.WARN and "ignored" in f.summary for f in findings)


@pytest.mark.parametrize("value, problem", [(" enp1s0f0", "spaces"), ("enp1s0f0,,", "stray comma"),
                                            ("=", "ignored"), ("^", "ignored"), ("", "ignored"),
                                            ("=,", "selects every interface, loopback first")])
def test_malformed_values_get_clear_findings(value, problem):
    findings = run_check(net.nccl_socket_interface, lab_host({"NCCL_SOCKET_IFNAME": value}))
    assert any(problem in f.summary for f in findings if f.status is not Status.OK), [f.summary for f in findings]
    assert all(f.status is not Status.ERROR for f in findings)


def test_prefix_matching_a_dummy_next_to_the_nic_warns_with_exact_syntax():
    findings = run_check(net.nccl_socket_interface, lab_host({"NCCL_SOCKET_IFNAME": "enp"}))
    over = [f for f in findings if "NCCL uses all" in f.summary][0]
    assert over.status is Status.WARN and "enp1s0f0, enp4s0" in over.summary
    assert over.fix == "export NCCL_SOCKET_IFNAME='=enp1s0f0'"


def test_prefix_that_is_a_full_name_warns_but_several_good_nics_do_not():
    host = lab_host({"NCCL_SOCKET_IFNAME": "enp4s0"}, **as_physical("enp1s0f0", "enp4s0"))
    quiet = run_check(net.nccl_socket_interface, lab_host({"NCCL_SOCKET_IFNAME": "enp"},
                                                          **as_physical("enp1s0f0", "enp4s0")))
    assert not any("NCCL uses all" in f.summary for f in quiet)
    assert not any("NCCL uses all" in f.summary for f in run_check(net.nccl_socket_interface, host))
    host.if_addrs["enp4s0f1"] = [{"family": "inet", "address": "10.41.0.5", "netmask": "255.255.255.0"}]
    host.if_stats["enp4s0f1"] = {"isup": True, "speed": 0, "mtu": 1500, "duplex": 0, "flags": "up,running"}
    over = [f for f in run_check(net.nccl_socket_interface, host) if "NCCL uses all" in f.summary][0]
    assert "enp4s0, enp4s0f1" in over.summary and over.fix == "export NCCL_SOCKET_IFNAME='=enp4s0'"


def test_bridge_port_found_through_brport_when_ip_is_missing():
    host = lab_host(links={"/sys/class/net/vethab12cd/brport/bridge": "../../docker0"})
    del host.commands[IP_LINK]
    del host.links["/sys/class/net/vethab12cd/master"]
    assert Facts(host).interfaces.get("vethab12cd").master == "docker0"


def test_ip_missing_still_predicts_and_says_so():
    host = lab_host()
    del host.commands[IP_LINK]
    findings = run_check(net.nccl_socket_interface, host)
    assert any("iproute2" in f.summary for f in findings)
    assert "ib0:10.20.0.5" in main_finding(findings).summary
    assert Status.ERROR not in statuses(findings)
    kinds = {i.name: i.kind for i in Facts(host).interfaces.interfaces}
    # sysfs alone: the bridge by its bridge/ directory, a veth by iflink != ifindex. The peers of
    # enp1s0f0, ib0 and enp2s0f1 live in another namespace under the same index, so those are only
    # known to be virtual (no device link), which is what the judgement needs.
    assert kinds == {"lo": "loopback", "enp1s0f0": "virtual", "ib0": "virtual", "enp2s0f1": "virtual",
                     "docker0": "bridge", "vethab12cd": "veth", "tap0": "virtual", "enp4s0": "virtual"}


@pytest.mark.parametrize("answer", ["{not json", "[1, 2]", '{"ifname": 3}', ""])
def test_garbage_from_ip_is_a_finding_not_a_traceback(answer):
    findings = run_check(net.nccl_socket_interface, lab_host(commands={IP_LINK: answer}))
    assert any("unreadable" in f.summary for f in findings)
    assert Status.ERROR not in statuses(findings)


def test_ip_hanging_is_reported():
    hung = CommandResult(IP_LINK, None, "", "", 3.0, timed_out=True)
    findings = run_check(net.nccl_socket_interface, lab_host(commands={IP_LINK: hung}))
    assert any("did not finish" in f.summary for f in findings)


def test_unreadable_sysfs_and_a_vanished_interface_do_not_break_the_check():
    host = lab_host(files={"/sys/class/net/ib0/type": PermissionError(errno.EACCES, "Permission denied")},
                    drop_sysfs=("tap0",))
    host.if_addrs["ghost0"] = [{"family": "inet", "address": "10.77.0.1", "netmask": "255.255.255.0"}]
    findings = run_check(net.nccl_socket_interface, host)
    assert Status.ERROR not in statuses(findings)
    ghost = Facts(host).interfaces.get("ghost0")
    assert ghost is not None and not ghost.running
    assert any("vanished while being read" in note for note in ghost.notes)


def test_gloo_unset_with_hostname_on_loopback_warns_only_for_multi_node_jobs():
    single = run_check(net.gloo_socket_interface, lab_host())
    assert statuses(single) == [Status.OK]
    multi = run_check(net.gloo_socket_interface, lab_host({"SLURM_JOB_NUM_NODES": "2"}))
    assert statuses(multi) == [Status.WARN]
    assert "127.0.0.1" in multi[0].summary and multi[0].fix == "export GLOO_SOCKET_IFNAME=enp1s0f0"


def test_gloo_on_a_debian_hosts_line_names_the_line_and_the_fix_for_this_node():
    """Debian's `127.0.1.1 node1`: the finding quotes the line; the fix keeps GLOO_SOCKET_IFNAME
    for now and maps the name to the interface's address in /etc/hosts, which bash then does."""
    import os
    import subprocess
    import tempfile

    from distdoctor.parsers.etc_hosts import loopback_lines

    text = "127.0.0.1\tlocalhost\n127.0.1.1\tnode1.cluster\tnode1\n\n::1 localhost ip6-localhost ip6-loopback\n"
    host = lab_host({"SLURM_JOB_NUM_NODES": "2"}, files={"/etc/hosts": text}, resolve={"node1": ["127.0.1.1"]})
    [finding] = run_check(net.gloo_socket_interface, host)
    assert finding.status is Status.WARN and "(/etc/hosts line 2: 127.0.1.1 node1.cluster node1)" in finding.summary
    lines = finding.fix.splitlines()
    assert lines[0] == "export GLOO_SOCKET_IFNAME=enp1s0f0"
    assert lines[1] == "# as root on node1: /etc/hosts line 2 maps node1 to 127.0.1.1"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hosts")
        with open(path, "w") as fh:
            fh.write(text)
        subprocess.run(["bash", "-c", lines[2].replace("/etc/hosts", path)], check=True, timeout=10)
        with open(path) as fh:
            after = fh.read()
    assert loopback_lines(after, "node1") == [] and after.splitlines()[1].endswith("\tnode1.cluster\tnode1")
    assert "localhost" in after.splitlines()[0] and after.splitlines()[3] == "::1 localhost ip6-localhost ip6-loopback"


@pytest.mark.parametrize("value, status, words", [
    ("eth0", Status.FAIL, "does not exist"),
    ("enp1s0", Status.FAIL, "did you mean enp1s0f0"),
    ("enp2s0f1", Status.FAIL, "down"),
    ("docker0", Status.WARN, "bridge"),
    ("enp1s0f0", Status.OK, "up with an address"),
    ("enp1s0f0,", Status.FAIL, "empty name"),
])
def test_gloo_socket_ifname(value, status, words):
    findings = run_check(net.gloo_socket_interface, lab_host({"GLOO_SOCKET_IFNAME": value}))
    assert worst(findings) is status
    assert any(words in f.summary for f in findings), [f.summary for f in findings]


@pytest.mark.parametrize("env, status, words", [
    ({}, Status.OK, "not restricted"),
    ({"OMPI_MCA_btl_tcp_if_include": "enp1s0f0"}, Status.OK, "selects enp1s0f0"),
    ({"OMPI_MCA_btl_tcp_if_include": "10.10.0.0/24"}, Status.OK, "selects enp1s0f0"),
    ({"OMPI_MCA_btl_tcp_if_include": "eth0"}, Status.FAIL, "no interface named 'eth0'"),
    ({"OMPI_MCA_btl_tcp_if_include": "10.99.0.0/16"}, Status.FAIL, "no interface has an address in 10.99.0.0/16"),
    ({"OMPI_MCA_btl_tcp_if_include": "enp1s0f0,10.300.0.0/8"}, Status.WARN, "neither an interface name nor"),
    ({"OMPI_MCA_btl_tcp_if_exclude": "docker0"}, Status.WARN, "does not exclude loopback"),
    ({"OMPI_MCA_btl_tcp_if_exclude": "lo,docker0"}, Status.OK, "lo,docker0"),
    ({"OMPI_MCA_btl_tcp_if_include": "ib0", "OMPI_MCA_btl_tcp_if_exclude": "lo"}, Status.FAIL, "both"),
])
def test_mpi_tcp_interface(env, status, words):
    findings = run_check(net_mpi.mpi_tcp_interface, lab_host(env))
    assert worst(findings) is status
    assert any(words in f.summary for f in findings), [f.summary for f in findings]


def ib_host(env=None, port2_state="1: DOWN", port2_phys="3: Disabled"):
    base = "/sys/class/infiniband"
    files = {}
    for hca, state, phys in (("mlx5_0", "4: ACTIVE", "5: LinkUp"), ("mlx5_1", port2_state, port2_phys)):
        p = f"{base}/{hca}/ports/1"
        files.update({f"{p}/state": state + "\n", f"{p}/phys_state": phys + "\n",
                      f"{p}/rate": "200 Gb/sec (4X HDR)\n", f"{p}/link_layer": "InfiniBand\n"})
    return lab_host(env, files=files, dirs={base: ["mlx5_0", "mlx5_1"], f"{base}/mlx5_0/ports": ["1"],
                                           f"{base}/mlx5_1/ports": ["1"], f"{base}/mlx5_0/device/net": ["ib0"]})


def test_infiniband_down_port_warns_and_suggests_the_active_one():
    findings = run_check(net.infiniband, ib_host())
    down = [f for f in findings if f.status is Status.WARN][0]
    assert "mlx5_1 port 1 is DOWN / Disabled" == down.summary
    assert "NCCL_IB_HCA='=mlx5_0:1'" in down.fix


def test_infiniband_hca_selection_and_disable():
    assert statuses(run_check(net.infiniband, ib_host({"NCCL_IB_HCA": "^=mlx5_1"}))) == [Status.OK]
    assert statuses(run_check(net.infiniband, ib_host({"NCCL_IB_HCA": "mlx5_0:1"}))) == [Status.OK]
    nomatch = run_check(net.infiniband, ib_host({"NCCL_IB_HCA": "mlx4"}))
    assert statuses(nomatch) == [Status.FAIL] and "matches none of mlx5_0, mlx5_1" in nomatch[0].summary
    wrong_port = run_check(net.infiniband, ib_host({"NCCL_IB_HCA": "mlx5_0:2"}))
    assert statuses(wrong_port) == [Status.FAIL]
    disabled = run_check(net.infiniband, ib_host({"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": "=mlx5_0"}))
    assert any(f.status is Status.WARN and "NCCL_IB_DISABLE=1" in f.summary for f in disabled)


def test_no_infiniband_skips_or_warns_when_hca_is_set():
    assert statuses(run_check(net.infiniband, lab_host())) == [Status.SKIP]
    assert statuses(run_check(net.infiniband, lab_host({"NCCL_IB_HCA": "mlx5"}))) == [Status.WARN]


def test_slow_physical_link_warns():
    host = lab_host({"NCCL_SOCKET_IFNAME": "=enp1s0f0"}, files={"/sys/class/net/enp1s0f0/speed": "1000\n"},
                    **as_physical("enp1s0f0"))
    findings = run_check(net.link_speed_mtu, host)
    assert statuses(findings) == [Status.WARN] and "1000 Mb/s" in findings[0].summary
    ok = run_check(net.link_speed_mtu, lab_host({"NCCL_SOCKET_IFNAME": "=enp1s0f0"}))
    assert statuses(ok) == [Status.OK]


@pytest.mark.parametrize("qdisc, flagged", [("tbf", True), ("netem", True), ("fq_codel", False), ("mq", False),
                                             ("noqueue", False)])
def test_a_shaper_on_the_interface_nccl_uses_is_named_with_the_command_that_removes_it(qdisc, flagged):
    """Live (bench/live_faults.py tbf-1mbit-node2): a rate limit on node2's eth0 stalled nccl-test's
    1 MiB transfer, and the fix was to compare MTUs. The default queues are not findings."""
    physical = as_physical("enp1s0f0")
    links = json.loads(physical["commands"][IP_LINK])
    next(link for link in links if link["ifname"] == "enp1s0f0")["qdisc"] = qdisc
    physical["commands"][IP_LINK] = json.dumps(links)
    host = lab_host({"NCCL_SOCKET_IFNAME": "=enp1s0f0"}, hostname="node2", **physical)
    found = run_check(net.link_speed_mtu, host)
    shaped = [f for f in found if f.evidence.get("qdisc")]
    assert bool(shaped) is flagged, [f.summary for f in found]
    if flagged:
        [f] = shaped
        assert f.status is Status.WARN and f.summary.startswith(f"enp1s0f0 has a {qdisc} queueing discipline")
        assert f.fix == ("# as root on node2: unless someone set it on purpose\n"
                         "tc qdisc show dev enp1s0f0 && tc qdisc del dev enp1s0f0 root"), f.fix
    else:
        assert statuses(found) == [Status.OK]


def test_a_vm_uplink_is_never_matched_to_a_host_local_bridge():
    """eth0-like uplink at 1400 (a cloud VM) and docker0 at 1500: no MTU warning, and never
    `ip link set <uplink> mtu 1500`, which would cut the VM off its network."""
    host = lab_host({"NCCL_SOCKET_IFNAME": "enp1s0f0,docker0"}, files={"/sys/class/net/enp1s0f0/mtu": "1400\n"},
                    **as_physical("enp1s0f0"))
    findings = run_check(net.link_speed_mtu, host)
    assert not any(f.subject == "mtu" for f in findings), findings
    assert not any("mtu 1500" in f.fix for f in findings)


def test_physical_interface_is_quiet():
    host = lab_host({"NCCL_SOCKET_IFNAME": "=enp1s0f0"}, **as_physical("enp1s0f0"))
    findings = [f for f in run_check(net.nccl_socket_interface, host) if f.subject != "interfaces"]
    assert statuses(findings) == [Status.OK]
    assert "physical Ethernet" in findings[0].summary


class _Unlistable(FakeHost):
    def list_dir(self, path):
        if path.startswith("/sys/class/infiniband") or path.endswith("/brif"):
            raise PermissionError(errno.EACCES, "Permission denied")
        return super().list_dir(path)


def test_unlistable_sysfs_directories_are_findings():
    host = lab_host()
    host.__class__ = _Unlistable
    ib = run_check(net.infiniband, host)
    assert statuses(ib) == [Status.WARN, Status.SKIP] and "Permission denied" in ib[0].summary
    assert Status.ERROR not in statuses(run_check(net.nccl_socket_interface, host))


@pytest.mark.parametrize("comm_id, words", [("10.99.0.1:5000", "No usable listening interface"),
                                            ("nosuchhost:5000", "Invalid NCCL_COMM_ID")])
def test_nccl_comm_id_without_a_local_subnet_fails(comm_id, words):
    findings = run_check(net.nccl_socket_interface, lab_host({"NCCL_COMM_ID": comm_id}))
    f = [x for x in findings if x.status is Status.FAIL][0]
    assert f.subject == "NCCL_COMM_ID" and words in f.summary


def test_nccl_comm_id_in_a_local_subnet_picks_that_interface():
    findings = run_check(net.nccl_socket_interface, lab_host({"NCCL_COMM_ID": "10.10.0.1:5000"}))
    assert main_finding(findings).evidence["bootstrap"] == "enp1s0f0:10.10.0.5"


def test_inside_a_docker_bridge_container_no_variable_helps():
    # A container started without --network=host: eth0 is its end of docker0's veth pair.
    overlay = "1186 1046 0:91 / / rw,relatime master:336 - overlay overlay rw,lowerdir=/var/lib/docker/l/A\n"
    host = lab_host({"SLURM_JOB_NUM_NODES": "2", "MASTER_ADDR": "10.10.0.1"},
                    files={"/.dockerenv": "", "/proc/self/mountinfo": overlay},
                    commands={("ip", "-j", "route", "get", "10.10.0.1"): route("enp1s0f0", "10.10.0.1", "10.10.0.5")})
    f = main_finding(run_check(net.nccl_socket_interface, host))
    assert f.status is Status.WARN and "docker container's end of a bridge network" in f.summary
    assert f.fix.startswith("docker run --network=host")
    gloo = run_check(net.gloo_socket_interface, host)
    assert gloo[0].fix.startswith("docker run --network=host")


def test_a_kubernetes_pod_uplink_is_fine():
    host = lab_host({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "NCCL_SOCKET_IFNAME": "=enp1s0f0"})
    assert statuses(run_check(net.nccl_socket_interface, host)) == [Status.OK]


def test_dockerenv_left_in_a_vm_image_is_not_a_container():
    # This lab machine: a VM built from a container image, /.dockerenv present, ext4 root.
    ext4 = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n"
    host = lab_host(files={"/.dockerenv": "", "/proc/self/mountinfo": ext4, "/proc/self/cgroup": "9:pids:/\n"})
    assert Facts(host).container_network == ""
    cgroup = lab_host(files={"/.dockerenv": "", "/proc/self/mountinfo": ext4,
                             "/proc/self/cgroup": "9:pids:/docker/0123abcd\n"})
    assert Facts(cgroup).container_network == "docker"


def test_hosts_from_the_command_line_are_expanded_and_routed():
    host = lab_host(commands={("ip", "-j", "route", "get", "10.20.0.7"): route("ib0", "10.20.0.7", "10.20.0.5"),
                              ("ip", "-j", "route", "get", "10.20.0.8"): route("ib0", "10.20.0.8", "10.20.0.5")},
                    resolve={"node1": ["127.0.0.1"], "gpu07": ["10.20.0.7"], "gpu08": ["10.20.0.8"]})
    facts = Facts(host)
    facts.options = {"hosts": ["gpu[07-08]"]}
    assert [(p.name, p.route.dev) for p in facts.peers] == [("gpu07", "ib0"), ("gpu08", "ib0")]


def test_bracketed_ipv6_master_addr_is_looked_up_as_an_address():
    host = lab_host({"MASTER_ADDR": "[fd00:10::1]"},
                    commands={("ip", "-j", "route", "get", "fd00:10::1"): route("enp1s0f0", "fd00:10::1", "fd00:10::5")})
    (peer,) = Facts(host).peers
    assert peer.address == "fd00:10::1" and peer.route.dev == "enp1s0f0" and not peer.error
