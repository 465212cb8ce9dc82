"""Peers come from the job (Slurm's node list, mpirun's node), and interfaces are judged by
whether those peers can reach them, over the lab's captured GPU-node namespace (FakeHost).
In that capture enp1s0f0 (10.10.0.5/24) and ib0 (10.20.0.5/24) are veths."""

from __future__ import annotations

import json

from distdoctor.checks import net, reach
from distdoctor.facts import Facts
from distdoctor.model import Status
from distdoctor.testing import run_check
from tests.harness.labhost import lab_host

SLURM_STEP = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
              "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_STEP_NODELIST": "gpu[01-02]", "SLURM_JOB_NUM_NODES": "2",
              "SLURM_STEP_NUM_NODES": "2", "SLURMD_NODENAME": "gpu01"}


def route_json(dev: str, dst: str, src: str, gateway: str = "") -> str:
    entry = {"dst": dst, "dev": dev, "prefsrc": src, "flags": [], "uid": 0, "cache": []}
    if gateway:
        entry["gateway"] = gateway
    return json.dumps([entry])


def main_finding(findings):
    return [f for f in findings if f.subject != "interfaces"][-1]


def node(env, routes, **kw):
    commands = {("ip", "-j", "route", "get", dst): text for dst, text in routes.items()}
    commands.update(kw.pop("commands", {}))
    return lab_host(env, commands=commands, hostname="gpu01",
                    resolve={"gpu01": ["10.10.0.5"], "gpu02": ["10.10.0.9"], **kw.pop("resolve", {})}, **kw)


def test_the_slurm_jobs_other_node_is_the_peer_and_an_on_link_veth_is_fine():
    # ib0 is a veth that does not carry the default route: only the job's peers make it right
    host = node(SLURM_STEP, {"10.20.0.9": route_json("ib0", "10.20.0.9", "10.20.0.5")},
                resolve={"gpu02": ["10.20.0.9"]})
    peers = Facts(host).peers
    assert [(p.name, p.source, p.address) for p in peers] == [("gpu02", "Slurm job 42", "10.20.0.9")]
    f = main_finding(run_check(net.nccl_socket_interface, host))
    assert f.status is Status.OK, f
    assert "ib0" in f.summary and "routes the other nodes on its own link" in f.summary
    # the same node outside the job has no peers: the veth is then a virtual interface without the route
    alone = main_finding(run_check(net.nccl_socket_interface, node({}, {})))
    assert alone.status is Status.WARN and "without the route to the other nodes" in alone.summary


def test_this_node_is_never_its_own_peer():
    env = {**SLURM_STEP, "SLURM_STEP_NODELIST": "gpu[01-03]", "SLURM_JOB_NODELIST": "gpu[01-03]"}
    host = node(env, {"10.10.0.9": route_json("enp1s0f0", "10.10.0.9", "10.10.0.5"),
                      "10.10.0.10": route_json("enp1s0f0", "10.10.0.10", "10.10.0.5")},
                resolve={"gpu03": ["10.10.0.10"]})
    assert [p.name for p in Facts(host).peers] == ["gpu02", "gpu03"]


def test_mpiruns_node_is_a_peer():
    env = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1",
           "OMPI_MCA_orte_hnp_uri": "858783744.0;tcp://10.20.0.1:58385;tcp6://[fd00::2]:52633"}
    host = node(env, {"10.20.0.1": route_json("ib0", "10.20.0.1", "10.20.0.5")})
    [peer] = Facts(host).peers
    assert peer.address == "10.20.0.1" and peer.source.startswith("mpirun")
    f = main_finding(run_check(net.nccl_socket_interface, host))
    assert f.status is Status.OK and "ib0" in f.summary  # NCCL's first choice (ib*) reaches the peers


def test_mpirun_started_on_this_node_is_not_a_peer():
    env = {"OMPI_MCA_orte_hnp_uri": "858783744.0;tcp://10.10.0.5:58385"}  # one of this node's addresses
    assert Facts(node(env, {})).peers == []


def test_a_private_veth_behind_a_gateway_is_a_natted_container_and_the_fix_is_host_networking():
    env = {**SLURM_STEP, "NCCL_SOCKET_IFNAME": "=enp1s0f0"}
    host = node(env, {"10.10.0.9": route_json("enp1s0f0", "10.10.0.9", "10.10.0.5", gateway="10.10.0.1")})
    f = main_finding(run_check(net.nccl_socket_interface, host))
    assert f.status is Status.WARN
    assert "private address 10.10.0.5" in f.summary and "gateway 10.10.0.1" in f.summary
    assert f.fix.startswith("docker run --network=host ...") and "on gpu01" in f.fix
    assert "NCCL_SOCKET_IFNAME=" not in f.fix.split("#")[0]
    gloo = run_check(net.gloo_socket_interface, host)  # gpu01 resolves to its address: fine by itself
    assert [g.status for g in gloo] == [Status.OK]


def test_a_kubernetes_pod_behind_a_gateway_is_routed_by_the_cni():
    env = {**SLURM_STEP, "NCCL_SOCKET_IFNAME": "=enp1s0f0", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    host = node(env, {"10.10.0.9": route_json("enp1s0f0", "10.10.0.9", "10.10.0.5", gateway="10.10.0.1")})
    f = main_finding(run_check(net.nccl_socket_interface, host))
    assert f.status is Status.OK and "routes the other nodes through it" in f.summary


def test_gloo_warns_for_a_multi_node_job_whose_hostname_is_loopback():
    env = {**SLURM_STEP, "NCCL_SOCKET_IFNAME": "=enp1s0f0"}
    host = node(env, {"10.10.0.9": route_json("enp1s0f0", "10.10.0.9", "10.10.0.5")},
                resolve={"gpu01": ["127.0.1.1"]})
    [f] = run_check(net.gloo_socket_interface, host)
    assert f.status is Status.WARN and "Gloo will advertise loopback" in f.summary
    assert f.fix == "export GLOO_SOCKET_IFNAME=enp1s0f0"


def test_reach_hosts_does_not_probe_ssh_for_the_nodes_of_an_srun_step():
    env = dict(SLURM_STEP)
    host = node(env, {}, resolve={"gpu02": ["10.10.0.9"]})  # every TCP connect is refused in the fake
    findings = run_check(reach.hosts, host)
    assert [f.status for f in findings] == [Status.OK], findings
    assert "ssh not probed" in findings[0].summary
    assert findings[0].evidence["table"]["columns"] == ["host", "name"]
    # asked for explicitly, it is probed (and, under Slurm, a closed port only warns)
    forced = run_check(reach.hosts, host, params={"ssh": True})
    assert max(f.status.severity for f in forced) == Status.WARN.severity
    bad = run_check(reach.hosts, host, params={"ssh": "sometimes"})
    assert bad[0].status is Status.FAIL and "ssh must be true, false or \"auto\"" in bad[0].summary


def test_torchrun_under_srun_is_still_an_srun_step_for_ssh():
    env = {**SLURM_STEP, "TORCHELASTIC_RUN_ID": "7", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "LOCAL_RANK": "0"}
    host = node(env, {}, resolve={"gpu02": ["10.10.0.9"]})
    findings = run_check(reach.hosts, host)
    assert [f.status for f in findings] == [Status.OK] and "ssh not probed" in findings[0].summary


def test_a_rootless_podman_tap_behind_a_gateway_is_natted():
    # slirp4netns: tap0 10.0.2.100/24, everything via 10.0.2.2; here the lab's tap0 gets that address
    from tests.harness.labhost import _report

    stats = {name: {**data["psutil_stats"], "duplex": int(data["psutil_stats"]["duplex"])}
             for name, data in _report()["ifaces"].items()}
    stats["tap0"] = {**stats["tap0"], "isup": True, "flags": "up,broadcast,running,multicast"}
    host = node({"MASTER_ADDR": "10.10.0.9", "NCCL_SOCKET_IFNAME": "=tap0"},
                {"10.10.0.9": route_json("tap0", "10.10.0.9", "10.0.2.100", gateway="10.0.2.2")},
                if_stats=stats, files={"/sys/class/net/tap0/carrier": "1\n", "/sys/class/net/tap0/operstate": "up\n"})
    host.if_addrs["tap0"] = [{"family": "inet", "address": "10.0.2.100", "netmask": "255.255.255.0"}]
    f = main_finding(run_check(net.nccl_socket_interface, host))
    assert f.status is Status.WARN and "gateway 10.0.2.2" in f.summary, f
    assert f.fix.startswith("docker run --network=host")


def test_an_mpirun_rank_in_its_daemons_step_still_sees_every_node_of_the_allocation():
    """Real capture (tests/data/launch): rank 1 of mpirun inside `sbatch -N2` runs in the step
    of the daemon mpirun started with srun, whose node list is its own node only."""
    from distdoctor.parsers.slurm import parse_env_dump
    from tests.conftest import data_path

    with open(data_path("launch", "mpirun_in_slurm_sbatch_rank1.env")) as fh:
        env = parse_env_dump(fh.read()).values
    assert env["SLURM_STEP_NODELIST"] == "node2"
    host = node(env, {"10.10.0.9": route_json("enp1s0f0", "10.10.0.9", "10.10.0.5"),
                      "10.132.192.11": route_json("enp1s0f0", "10.132.192.11", "10.10.0.5")},
                resolve={"node1": ["10.10.0.9"], "node2": ["10.10.0.5"]})
    names = [p.name for p in Facts(host).peers]
    assert "node1" in names and "node2" not in names
