"""Real namespaces shaped like GPU nodes, with the real NCCL library as the oracle: for every
scenario and every NCCL_SOCKET_IFNAME value in the matrix, distdoctor's prediction must be the
interface and address libnccl's own bootstrap picks. Addresses are in the run's /24s
NET(0..29) (tests/harness/runprefix.py) and fd81::/16, inside the namespaces only; namespaces
are named <run tag>ddn*."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import load_report, REPO, distdoctor_argv
from tests.harness import nccl_lib
from tests.harness.netns import Namespaces
from tests.harness.runprefix import RUN


def NET(index: int) -> str:
    return RUN.subnet("net.netns", index)


ORACLE = os.path.join(REPO, "tests", "harness", "nccl_oracle.py")

# What distdoctor predicts, computed the way `distdoctor check` computes it, for many settings.
PREDICT = textwrap.dedent("""
    import json, sys
    from distdoctor.facts import Facts
    from distdoctor.host import Host
    from distdoctor.nccl_socket import predict_nccl_interfaces
    base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": sys.argv[2]}
    out = []
    table = Facts(Host(base)).interfaces
    for settings in json.loads(sys.argv[1]):
        facts = Facts(Host({**base, **settings}))
        choice = predict_nccl_interfaces(table.interfaces, facts.nccl_settings)
        pick = choice.bootstrap
        out.append(None if pick is None else [pick.interface, pick.address])
    print(json.dumps(out))
""")

COMMON = [{}, {"NCCL_SOCKET_IFNAME": "enp"}, {"NCCL_SOCKET_IFNAME": "=enp1s0f0"},
          {"NCCL_SOCKET_IFNAME": "^lo,docker"}, {"NCCL_SOCKET_IFNAME": "^=lo"}, {"NCCL_SOCKET_IFNAME": "eth"},
          {"NCCL_SOCKET_IFNAME": "^=enp1s0f0,lo"}, {"NCCL_SOCKET_FAMILY": "AF_INET6"},
          {"NCCL_SOCKET_IFNAME": "^"}, {"NCCL_SOCKET_IFNAME": "=,"}, {"NCCL_SOCKET_IFNAME": "enp1s0f0 "},
          {"NCCL_SOCKET_IFNAME": "ib"}, {"NCCL_SOCKET_IFNAME": "br-,veth"}, {"NCCL_SOCKET_IFNAME": "^="},
          {"NCCL_SOCKET_FAMILY": "AF_INET6", "NCCL_SOCKET_IFNAME": "^lo"}]
GPU_ONLY = [{"NCCL_SOCKET_IFNAME": "=enp2s0f1"}, {"NCCL_SOCKET_IFNAME": "tap0"},
            {"NCCL_SOCKET_IFNAME": "^docker,lo,ib,enp"}, {"NCCL_SOCKET_IFNAME": "^ib"},
            {"NCCL_SOCKET_IFNAME": "docker0"}, {"NCCL_COMM_ID": f"{NET(5)}.9:5000"},
            {"NCCL_COMM_ID": f"{NET(1)}.1:5000", "NCCL_SOCKET_IFNAME": "ib0"}, {"NCCL_COMM_ID": "10.99.0.1:5000"},
            {"NCCL_COMM_ID": ""}]


def sh(ns: Namespaces, short, *argv):
    ns.run(short, list(argv))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lib = nccl_lib.libnccl()
    with Namespaces("ddn") as ns:
        for short in ("sw", "c", "gpu", "ok", "dock", "v6"):
            ns.add(short)
        # "gpu": the lab's GPU-node layout (../shared/lab/netif.sh), every kind the kernel allows here
        ns.veth("gpu", "enp1s0f0", "sw", "g-enp1s0f0")
        ns.veth("gpu", "ib0", "sw", "g-ib0")
        ns.veth("gpu", "enp2s0f1", "sw", "g-enp2s0f1")
        for cmd in (["ip", "addr", "add", f"{NET(1)}.5/24", "dev", "enp1s0f0"],
                    ["ip", "addr", "add", "fd81:11::5/64", "dev", "enp1s0f0", "nodad"],
                    ["ip", "addr", "add", f"{NET(2)}.5/24", "dev", "ib0"],
                    ["ip", "addr", "add", f"{NET(3)}.5/24", "dev", "enp2s0f1"],
                    ["ip", "link", "set", "enp2s0f1", "down"],
                    ["ip", "link", "add", "docker0", "type", "bridge"],
                    ["ip", "addr", "add", f"{NET(4)}.1/24", "dev", "docker0"],
                    ["ip", "link", "set", "docker0", "up"],
                    ["ip", "tuntap", "add", "tap0", "mode", "tap"], ["ip", "link", "set", "tap0", "up"],
                    ["ip", "link", "add", "enp4s0", "type", "ifb"],
                    ["ip", "addr", "add", f"{NET(5)}.5/24", "dev", "enp4s0"], ["ip", "link", "set", "enp4s0", "up"],
                    ["ip", "route", "add", "default", "via", f"{NET(1)}.1"]):
            sh(ns, "gpu", *cmd)
        ns.veth("gpu", "vethab12cd", "c", "eth0")
        sh(ns, "gpu", "ip", "link", "set", "vethab12cd", "master", "docker0")
        sh(ns, "c", "ip", "addr", "add", f"{NET(4)}.2/24", "dev", "eth0")
        for cmd in (["ip", "addr", "add", f"{NET(1)}.1/24", "dev", "g-enp1s0f0"],
                    ["ip", "addr", "add", "fd81:11::1/64", "dev", "g-enp1s0f0", "nodad"],
                    ["ip", "addr", "add", f"{NET(2)}.1/24", "dev", "g-ib0"]):
            sh(ns, "sw", *cmd)
        # "ok": a healthy node: one uplink with the default route
        ns.veth("ok", "enp1s0f0", "sw", "o-enp1s0f0")
        sh(ns, "ok", "ip", "addr", "add", f"{NET(11)}.5/24", "dev", "enp1s0f0")
        sh(ns, "ok", "ip", "route", "add", "default", "via", f"{NET(11)}.1")
        sh(ns, "sw", "ip", "addr", "add", f"{NET(11)}.1/24", "dev", "o-enp1s0f0")
        # "dock": a docker user bridge that comes first in interface order (the classic failure)
        sh(ns, "dock", "ip", "link", "add", "br-5e6f7a8b9c0d", "type", "bridge")
        sh(ns, "dock", "ip", "addr", "add", f"{NET(21)}.1/24", "dev", "br-5e6f7a8b9c0d")
        sh(ns, "dock", "ip", "link", "set", "br-5e6f7a8b9c0d", "up")
        ns.veth("dock", "veth1c2d3e", "c", "eth1")
        sh(ns, "dock", "ip", "link", "set", "veth1c2d3e", "master", "br-5e6f7a8b9c0d")
        ns.veth("dock", "eno1", "sw", "d-eno1")
        sh(ns, "dock", "ip", "addr", "add", f"{NET(22)}.5/24", "dev", "eno1")
        sh(ns, "dock", "ip", "route", "add", "default", "via", f"{NET(22)}.1")
        sh(ns, "sw", "ip", "addr", "add", f"{NET(22)}.1/24", "dev", "d-eno1")
        # "v6": IPv6 only, with a link-local-only veth ahead of the real uplink
        ns.veth("v6", "veth0a1b", "c", "eth2")
        ns.veth("v6", "enp1s0f0", "sw", "v-enp1s0f0")
        sh(ns, "v6", "ip", "addr", "add", "fd81:41::5/64", "dev", "enp1s0f0", "nodad")
        sh(ns, "sw", "ip", "addr", "add", "fd81:41::1/64", "dev", "v-enp1s0f0", "nodad")
        sh(ns, "v6", "ip", "-6", "route", "add", "default", "via", "fd81:41::1")
        # link-local addresses need a moment to appear (DAD); wait until every veth has one
        ns.run("v6", ["sh", "-c", "for i in $(seq 50); do ip -6 addr show dev veth0a1b | grep -q fe80 && "
                                  "ip -6 addr show dev enp1s0f0 | grep -q fe80 && exit 0; sleep 0.1; done; exit 1"])
        ns.run("gpu", ["sh", "-c", "for i in $(seq 50); do ip -6 addr show dev vethab12cd | grep -q fe80 && "
                                   "exit 0; sleep 0.1; done; exit 1"])
        home = tmp_path_factory.mktemp("home")
        (home / "nccl.conf").write_text("# a site file\nNCCL_SOCKET_IFNAME=^=enp1s0f0,lo\nNCCL_DEBUG=WARN\n")
        yield ns, lib, str(home)


def in_ns(ns, short, argv, env=None, timeout=60):
    base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"}
    cmd = ["ip", "netns", "exec", ns.name(short), "env", "-i", *[f"{k}={v}" for k, v in {**base, **(env or {})}.items()],
           *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def oracle(ns, lib, short, matrix, home):
    proc = in_ns(ns, short, [sys.executable, ORACLE, lib, json.dumps(matrix)], {"HOME": home})
    assert proc.returncode == 0, proc.stderr
    return [None if r["interface"] is None else [r["interface"], r["address"]] for r in json.loads(proc.stdout)]


def predict(ns, short, matrix, home):
    proc = in_ns(ns, short, [sys.executable, "-c", PREDICT, json.dumps(matrix), home], {"HOME": home})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("scenario", ["gpu", "ok", "dock", "v6"])
def test_prediction_equals_the_real_nccl(lab, scenario):
    ns, lib, home = lab
    conf = os.path.join(home, "nccl.conf")
    matrix = COMMON + (GPU_ONLY if scenario == "gpu" else []) + [
        {"NCCL_CONF_FILE": conf}, {"NCCL_CONF_FILE": conf, "NCCL_SOCKET_IFNAME": "=enp1s0f0"}]
    want = oracle(ns, lib, scenario, matrix, home)
    got = predict(ns, scenario, matrix, home)
    mismatches = [(m, w, g) for m, w, g in zip(matrix, want, got) if w != g]
    assert not mismatches, mismatches
    assert any(w is None for w in want) and len({tuple(w) for w in want if w}) >= 2  # the matrix discriminates
    if scenario == "gpu":  # NCCL reads NCCL_CONF_FILE, and the environment wins over it
        assert want[-2] == ["docker0", f"{NET(4)}.1"] and want[-1] == ["enp1s0f0", f"{NET(1)}.5"] and want[0][0] == "ib0"


def check_json(ns, short, env=None, only="net"):
    proc = in_ns(ns, short, [*distdoctor_argv(), "check", "--only", only, "--format", "json"], env)
    assert proc.returncode in (0, 1), proc.stderr
    report = load_report(proc.stdout)
    return {run["id"]: run for run in report["checks"]}


def findings(run, status=None):
    return [f for f in run["findings"] if status is None or f["status"] == status]


def test_healthy_node_is_quiet(lab):
    ns, _lib, _home = lab
    runs = check_json(ns, "ok")
    assert {i: r["status"] for i, r in runs.items()} == {
        "net.nccl-socket-interface": "ok", "net.gloo-socket-interface": "ok", "net.mpi-tcp-interface": "ok",
        "net.infiniband": "skip", "net.link-speed-mtu": "ok"}
    nccl = runs["net.nccl-socket-interface"]["findings"]
    assert len(nccl) == 1 and f"enp1s0f0 {NET(11)}.5" in nccl[0]["summary"]
    console = in_ns(ns, "ok", [*distdoctor_argv(), "check", "--only", "net"])
    assert console.returncode == 0 and "How to fix" not in console.stdout


def connect(ns, short, address, port):
    code = f"import socket; socket.create_connection(({address!r}, {port}), timeout=2).close(); print('ok')"
    proc = in_ns(ns, short, [sys.executable, "-c", code])
    return proc.stdout.strip() == "ok", proc.stderr.strip().splitlines()[-1:] if proc.stderr else []


def test_bridge_first_warns_and_the_suggestion_works(lab):
    ns, lib, home = lab
    run = check_json(ns, "dock")["net.nccl-socket-interface"]
    warning = findings(run, "warn")[0]
    assert warning["subject"] == "br-5e6f7a8b9c0d" and "bridge" in warning["summary"]
    assert warning["fix"] == "export NCCL_SOCKET_IFNAME='=eno1' GLOO_SOCKET_IFNAME=eno1"
    # The real NCCL, given the suggestion, advertises eno1 ...
    (advertised,) = oracle(ns, lib, "dock", [{}], home)
    (fixed,) = oracle(ns, lib, "dock", [{"NCCL_SOCKET_IFNAME": "=eno1"}], home)
    assert advertised[0] == "br-5e6f7a8b9c0d" and fixed == ["eno1", f"{NET(22)}.5"]
    # ... which another node can reach, unlike the bridge address NCCL chose by itself.
    server = subprocess.Popen(["ip", "netns", "exec", ns.name("dock"), sys.executable, "-c",
                               "import socket,time; s=socket.socket(); s.bind(('0.0.0.0', 29411)); s.listen(8); "
                               "print('up', flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "up"
        assert connect(ns, "sw", fixed[1], 29411)[0]
        reached, why = connect(ns, "sw", advertised[1], 29411)
        assert not reached and "unreachable" in " ".join(why).lower()
    finally:
        server.kill()
        server.wait(timeout=10)


def test_gpu_node_findings(lab):
    ns, _lib, _home = lab
    default = findings(check_json(ns, "gpu")["net.nccl-socket-interface"], "warn")[0]
    assert default["subject"] == "ib0" and "veth" in default["summary"] and "=enp1s0f0" in default["fix"]
    routed = check_json(ns, "gpu", {"MASTER_ADDR": f"{NET(2)}.1"})["net.nccl-socket-interface"]
    assert routed["status"] == "ok"  # the kernel routes the master through ib0
    down = check_json(ns, "gpu", {"NCCL_SOCKET_IFNAME": "=enp2s0f1"})["net.nccl-socket-interface"]
    assert down["status"] == "fail" and "enp2s0f1 is down" in findings(down, "fail")[0]["summary"]
    ll = check_json(ns, "gpu", {"NCCL_SOCKET_IFNAME": "^docker,lo,ib,enp"})["net.nccl-socket-interface"]
    assert "link-local" in findings(ll, "warn")[0]["summary"]
    v6 = findings(check_json(ns, "v6")["net.nccl-socket-interface"], "warn")[0]
    assert v6["subject"] == "veth0a1b" and "=enp1s0f0" in v6["fix"]


def test_gloo_and_mpi_in_the_gpu_node(lab):
    ns, _lib, _home = lab
    # /etc/hosts maps this machine's hostname to loopback, as on many cloud images
    runs = check_json(ns, "gpu", {"SLURM_JOB_NUM_NODES": "2", "OMPI_MCA_btl_tcp_if_include": f"{NET(1)}.0/24,eth9"})
    gloo = runs["net.gloo-socket-interface"]
    hostname = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    resolved = subprocess.run(["getent", "hosts", hostname], capture_output=True, text=True).stdout.split()
    if not resolved or resolved[0].startswith("127."):
        fix = gloo["findings"][0]["fix"].splitlines()
        assert gloo["status"] == "warn" and fix[0] == "export GLOO_SOCKET_IFNAME=enp1s0f0"
        # and, for good, the /etc/hosts line that maps the name to loopback, for this node
        assert fix[1].startswith(f"# as root on {hostname}: /etc/hosts line ") and fix[2].startswith("hosts=$(sed ")
    else:
        assert gloo["status"] == "ok" and resolved[0] in gloo["findings"][0]["summary"]
    mpi = runs["net.mpi-tcp-interface"]
    assert mpi["status"] == "warn" and "no interface named 'eth9'" in mpi["findings"][0]["summary"]
    assert mpi["findings"][0]["evidence"]["matches"] == ["enp1s0f0"]
    named = check_json(ns, "gpu", {"GLOO_SOCKET_IFNAME": "enp2s0f1"})["net.gloo-socket-interface"]
    assert named["status"] == "fail" and "down" in named["findings"][0]["summary"]
