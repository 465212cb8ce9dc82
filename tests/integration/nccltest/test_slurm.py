"""`srun -N2 distdoctor nccl-test` on the real two-node Slurm cluster (namespaces per node)."""

import time

import pytest

from tests.conftest import distdoctor_argv
from tests.harness.ranks import checks, report, require_torch, statuses, trouble

TIMEOUT = 20


@pytest.fixture
def cluster(request):
    require_torch()
    return request.getfixturevalue("slurm_cluster")


def nccl_test(cluster, *srun_args: str, wrapper: str = "", timeout: float = TIMEOUT):
    command = [*distdoctor_argv(), "nccl-test", "--timeout", str(timeout), "--json"]
    if wrapper:  # a per-node shell snippet, like a node-local profile
        command = ["bash", "-c", wrapper + '; exec "$@"', "wrapper", *command]
    start = time.monotonic()
    proc = cluster.srun([*srun_args, *command], timeout=timeout + 60)
    return proc, report(proc.stdout), time.monotonic() - start


@pytest.mark.parametrize("tasks", ["2", "4"])
def test_srun_two_nodes(cluster, tasks):
    proc, doc, _ = nccl_test(cluster, "-N2", "-n", tasks)
    assert proc.returncode == 0, proc.stderr
    world = int(tasks)
    context = doc["context"]
    assert context["kind"] == "slurm-step" and context["launcher"] == "srun" and context["world_size"] == world
    rendezvous = doc["nccl_test"]["rendezvous"]
    assert rendezvous["master_addr"] == "node1" and "first host" in rendezvous["addr_why"]
    assert "derived from Slurm job" in rendezvous["port_why"]
    hosts = [fp["host"] for fp in doc["nccl_test"]["fingerprints"]]
    assert hosts == ["node1"] * (world // 2) + ["node2"] * (world // 2)
    assert statuses(doc)["nccl-test.mesh"] == "ok"  # spans nodes: on by default
    # one prober per host: two rows, whatever the ranks per host
    assert [h["host"] for h in doc["nccl_test"]["mesh"]["hosts"]] == ["node1", "node2"]
    assert len(doc["nccl_test"]["mesh"]["rows"]) == 2
    total = world * (world + 1) / 2
    assert f"= {total:g}" in checks(doc)["nccl-test.all-reduce"]["findings"][0]["summary"]
    assert doc["status"] == "ok"


def test_srun_cross_rank_catches_one_nodes_environment(cluster):
    proc, doc, _ = nccl_test(cluster, "-N2", "-n2",
                             wrapper='[ "$SLURM_NODEID" = 1 ] && export NCCL_SOCKET_IFNAME=ib0 || true')
    # node2 has no ib0: beyond the differing setting, NCCL itself would find no interface there.
    assert proc.returncode == 1, proc.stderr
    cross = checks(doc)["nccl-test.cross-rank"]
    assert cross["status"] == "fail"
    (differs,) = [f for f in cross["findings"] if f["subject"] == "NCCL_SOCKET_IFNAME" and "differs" in f["summary"]]
    assert "(unset) on rank 0 (node1)" in differs["summary"] and "ib0 on rank 1 (node2)" in differs["summary"]
    (none,) = [f for f in cross["findings"] if f["subject"] == "NCCL_SOCKET_IFNAME" and "no usable" in f["summary"]]
    assert none["status"] == "fail" and "rank(s) 1" in none["summary"]
    assert none["fix"] == "export NCCL_SOCKET_IFNAME='=eth0'"


def test_srun_node_whose_ranks_never_start_is_named(cluster):
    # A bound of 20 s, not 10: rank 1 (node1, beside rank 0) must have arrived by then even while
    # other tests import torch beside it (CI once saw it miss 7.8 s); node2's ranks never do, so
    # rank 0 waits the whole bound either way.
    proc, doc, wall = nccl_test(cluster, "-N2", "-n4", wrapper='[ "$SLURM_NODEID" = 1 ] && exit 3 || true',
                                timeout=20)
    assert proc.returncode != 0
    assert wall < 20 + 10  # srun's own start and stop included
    finding = checks(doc)["nccl-test.rendezvous"]["findings"][0]
    assert finding["evidence"].get("missing_ranks") == [2, 3], trouble(doc)
    assert finding["evidence"]["hosts_without_ranks"] == ["node2"]
    assert "(expected on node2)" in finding["summary"] and "no rank arrived from host node2" in finding["summary"]
