"""A healthy two-node job on the real Slurm cluster (namespaces, real slurmctld/slurmd/srun):
`distdoctor check` inside the job takes its peers from the job and raises no false alarm.

Each node's eth0 is a veth on a shared bridge, and no sshd runs on the nodes: exactly what
`check` used to call "a virtual interface without the route to the other nodes" and "ssh port
22 refused" before it learnt the peers from the job."""

from __future__ import annotations

import os

import pytest

from tests.conftest import distdoctor_argv, load_report
from tests.harness.slurm import SlurmCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    c = SlurmCluster(prefix="qa", net16="10.120")
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _reports(cluster, srun_args, out_dir):
    dd = " ".join(distdoctor_argv())
    proc = cluster.srun([*srun_args, "bash", "-c",
                         f'exec {dd} check --format json -o "{out_dir}/r-$SLURM_PROCID.json"'], timeout=180)
    files = sorted(os.listdir(out_dir))
    reports = {}
    for name in files:
        with open(os.path.join(out_dir, name)) as fh:
            reports[name] = load_report(fh.read())
    return proc, reports


@pytest.mark.parametrize("tasks", [2, 4])
def test_a_healthy_two_node_job_gets_no_network_warning(cluster, tmp_path, tasks):
    out = tmp_path / f"n{tasks}"
    out.mkdir()
    os.chmod(out, 0o777)
    proc, reports = _reports(cluster, ["-N2", f"-n{tasks}"], str(out))
    assert len(reports) == tasks, (proc.stdout, proc.stderr)
    hosts = set()
    for name, doc in reports.items():
        hosts.add(doc["host"])
        runs = {r["id"]: r for r in doc["checks"]}
        for run in doc["checks"]:
            if run["area"] in ("net", "reach"):
                bad = [f"{f['status']}: {f['summary']}" for f in run["findings"] if f["status"] in ("warn", "fail",
                                                                                                    "error", "timeout")]
                assert not bad, f"{name} {run['id']}: {bad}"
        nccl = runs["net.nccl-socket-interface"]["findings"][-1]
        assert nccl["status"] == "ok" and "eth0" in nccl["summary"] and "veth" in nccl["summary"]
        peers = nccl["evidence"]["peers"]
        other = {"node1": "node2", "node2": "node1"}[doc["host"]]
        assert [(p["name"], p["dev"]) for p in peers] == [(other, "eth0")], peers
        assert peers[0]["source"].startswith("Slurm job ")
        assert doc["inventory"]["host.name"] == doc["host"]
        assert doc["inventory"]["net.if.eth0.kind"] == "veth"
    assert hosts == {"node1", "node2"}
