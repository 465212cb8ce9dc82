"""A healthy two-node job on the real Slurm cluster (namespaces, real slurmctld/slurmd/srun):
`distdoctor check` inside the job takes its peers from the job and raises no false alarm.

Each node's eth0 is a veth on a shared bridge, and no sshd runs on the nodes: exactly what
`check` used to call "a virtual interface without the route to the other nodes" and "ssh port
22 refused" before it learnt the peers from the job."""

from __future__ import annotations

import os

import pytest

from tests.conftest import distdoctor_argv, load_report



@pytest.fixture
def cluster(slurm_cluster):
    return slurm_cluster


def _each_task_reports(cluster, srun_args, out_dir):
    dd = " ".join(distdoctor_argv())
    proc = cluster.srun([*srun_args, "bash", "-c",
                         f'exec {dd} check --each-task --format json -o "{out_dir}/r-$SLURM_PROCID.json"'],
                        timeout=180)
    reports = {}
    for name in sorted(os.listdir(out_dir)):
        with open(os.path.join(out_dir, name)) as fh:
            reports[name] = load_report(fh.read())
    return proc, reports


def _bad(findings):
    return [f"{f['status']}: {f['summary']}" for f in findings if f["status"] in ("warn", "fail", "error", "timeout")]


@pytest.mark.parametrize("tasks", [2, 4])
def test_the_jobs_report_has_no_network_warning_on_any_node(cluster, tasks):
    proc = cluster.srun(["-N2", f"-n{tasks}", *distdoctor_argv(), "check", "--format", "json"], timeout=180)
    doc = load_report(proc.stdout)
    assert sorted(doc["nodes"]) == ["node1", "node2"], proc.stderr
    for node, result in doc["nodes"].items():
        bad = {cid: st for cid, st in result["checks"].items()
               if cid.split(".")[0] in ("net", "reach") and st not in ("ok", "skip")}
        assert not bad, f"{node}: {bad}"
    for run in doc["checks"]:
        if run["area"] in ("net", "reach"):
            assert not _bad(run["findings"]), f"{run['id']}: {_bad(run['findings'])}"
    assert not [d for d in doc["cluster"]["differences"] if d["fact"].startswith(("net.", "ib."))]


def test_each_task_takes_its_peers_from_the_job(cluster, tmp_path):
    out = tmp_path / "each"
    out.mkdir()
    os.chmod(out, 0o777)
    proc, reports = _each_task_reports(cluster, ["-N2", "-n2"], str(out))
    assert len(reports) == 2, (proc.stdout, proc.stderr)
    hosts = set()
    for name, doc in reports.items():
        hosts.add(doc["host"])
        runs = {r["id"]: r for r in doc["checks"]}
        for run in doc["checks"]:
            if run["area"] in ("net", "reach"):
                assert not _bad(run["findings"]), f"{name} {run['id']}: {_bad(run['findings'])}"
        nccl = runs["net.nccl-socket-interface"]["findings"][-1]
        assert nccl["status"] == "ok" and "eth0" in nccl["summary"] and "veth" in nccl["summary"]
        assert "routes the other nodes on its own link" in nccl["summary"]
        peers = nccl["evidence"]["peers"]
        other = {"node1": "node2", "node2": "node1"}[doc["host"]]
        assert [(p["name"], p["dev"]) for p in peers] == [(other, "eth0")], peers
        assert peers[0]["source"].startswith("Slurm job ")
        assert "ssh not probed" in runs["reach.hosts"]["findings"][0]["summary"]
        assert doc["inventory"]["host.name"] == doc["host"]
        assert doc["inventory"]["net.if.eth0.kind"] == "veth"
    assert hosts == {"node1", "node2"}


def test_a_hostname_on_loopback_warns_in_a_two_node_job(cluster, tmp_path):
    """The Debian default: /etc/hosts maps the node's own name to 127.0.1.1. Each task gets such
    a file (its own name on loopback, the other node at its address) in a mount namespace of its
    own; gloo would then advertise loopback to the other node."""
    for me, other in (("node1", "node2"), ("node2", "node1")):
        (tmp_path / f"hosts-{me}").write_text(f"127.0.0.1 localhost\n127.0.1.1 {me}\n"
                                              f"{cluster.address(other)} {other}\n")
    os.chmod(tmp_path, 0o755)
    dd = " ".join(distdoctor_argv())
    proc = cluster.srun(["-N2", "-n2", "unshare", "--mount", "--propagation", "private", "sh", "-c",
                         f'mount --bind "{tmp_path}/hosts-$(hostname)" /etc/hosts && exec {dd} check --each-task --only '
                         'net.gloo-socket-interface --format json -o "' + str(tmp_path) + '/g-$SLURM_PROCID.json"'],
                        timeout=120)
    for rank in (0, 1):
        with open(tmp_path / f"g-{rank}.json") as fh:
            doc = load_report(fh.read())
        [finding] = doc["checks"][0]["findings"]
        assert finding["status"] == "warn", (finding, proc.stderr)
        assert "Gloo will advertise loopback" in finding["summary"]
        # The interface for now, then the /etc/hosts line rewritten to the node's cluster address.
        lines = finding["fix"].splitlines()
        assert lines[0] == "export GLOO_SOCKET_IFNAME=eth0", finding["fix"]
        assert "/etc/hosts line 2 maps node" in finding["fix"] and "to 127.0.1.1" in finding["fix"], finding["fix"]
