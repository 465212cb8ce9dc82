"""`distdoctor fleet` on a real three-node Slurm cluster: real srun fan-out, real differences
made in one node's namespaces, a node that hangs and one that prints garbage."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import distdoctor_argv, load_report

DD = [sys.executable, "-m", "distdoctor"]


def _fleet(cluster, *args, timeout=120, env=None):
    return subprocess.run(distdoctor_argv() + ["fleet", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(cluster.env, NO_COLOR="1", **(env or {})), check=False)


def _wrapper(tmp_path, name, body):
    """A stand-in for distdoctor on the nodes that misbehaves on node2 only."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\nif [ \"$SLURMD_NODENAME\" = node2 ]; then\n{body}\nfi\n"
                    f"exec {' '.join(DD)} \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def test_fleet_over_the_nodes_gathers_every_node(slurm_cluster, tmp_path):
    out = _fleet(slurm_cluster, "--nodes", "node[1-3]", "--format", "json", "--save", str(tmp_path / "saved"))
    doc = load_report(out.stdout)
    assert doc["command"] == "fleet", out.stderr
    assert doc["cluster"]["answered"] == 3 and doc["cluster"]["missing"] == {}, doc["cluster"]
    assert sorted(doc["nodes"]) == ["node1", "node2", "node3"]
    # A healthy cluster: no false alarm (the nodes share one kernel and /etc/machine-id, which is
    # harmless while their hostnames, and so NCCL's host hashes, differ).
    assert doc["cluster"]["differences"] == [], doc["cluster"]["differences"]
    assert sorted(os.listdir(tmp_path / "saved")) == ["node1.json", "node2.json", "node3.json"]
    # The saved reports compare offline to the same verdict.
    again = subprocess.run(distdoctor_argv() + ["compare", "--json", str(tmp_path / "saved")], capture_output=True,
                           text=True, timeout=60, check=False)
    assert load_report(again.stdout)["cluster"]["outliers"] == doc["cluster"]["outliers"]


def test_a_hung_node_is_named_not_waited_for(slurm_cluster, tmp_path):
    import time

    hang = _wrapper(tmp_path, "hang.sh", "  exec sleep 300")
    start = time.monotonic()
    out = _fleet(slurm_cluster, "--nodes", "node[1-3]", "--timeout", "8", "--distdoctor", hang, "--json")
    took = time.monotonic() - start
    doc = load_report(out.stdout)
    assert doc["cluster"]["missing"] == {"node2": "node2: no answer within 8 s"}, (doc["cluster"], out.stderr)
    assert doc["cluster"]["answered"] == 2 and out.returncode == 1
    assert took < 8 + 12, took


def test_garbage_and_an_older_schema_are_named(slurm_cluster, tmp_path):
    garbage = _wrapper(tmp_path, "garbage.sh", "  echo 'Segmentation fault (core dumped)'; exit 139")
    out = _fleet(slurm_cluster, "--nodes", "node[1-3]", "--distdoctor", garbage, "--json")
    doc = load_report(out.stdout)
    assert doc["cluster"]["missing"] == {"node2": "node2: output is not a distdoctor report"}, doc["cluster"]
    old = _wrapper(tmp_path, "old.sh", "  echo '{\"schema_version\": \"0.9\", \"tool\": {\"name\": \"distdoctor\"}, "
                                       "\"checks\": []}'; exit 0")
    doc = load_report(_fleet(slurm_cluster, "--nodes", "node[1-3]", "--distdoctor", old, "--json").stdout)
    assert "report schema 0.9 is not one this distdoctor reads" in doc["cluster"]["missing"]["node2"]


def test_inside_an_allocation_fleet_uses_its_nodes(slurm_cluster):
    out = subprocess.run(["salloc", "-N3", *distdoctor_argv(), "fleet", "--format", "prometheus"],
                         capture_output=True, text=True, timeout=120, env=dict(slurm_cluster.env), check=False)
    assert out.returncode in (0, 1), out.stderr
    for node in ("node1", "node2", "node3"):
        assert f'distdoctor_node_up{{node="{node}"}} 1' in out.stdout, out.stdout[-3000:]



def test_a_real_mtu_difference_is_named_with_its_node_and_fix(slurm_cluster, tmp_path):
    slurm_cluster.run_on("node2", ["ip", "link", "set", "dev", "eth0", "mtu", "1400"], timeout=10)
    try:
        out = _fleet(slurm_cluster, "--nodes", "node[1-3]", "--json", "--save", str(tmp_path))
        doc = load_report(out.stdout)
        saved = json.loads((tmp_path / "node2.json").read_text())
        if "inventory" not in saved:
            pytest.skip("node reports carry no inventory yet")
        diff = next(d for d in doc["cluster"]["differences"] if d["fact"] == "net.if.eth0.mtu")
        assert diff["outliers"] == "node2" and diff["reference"] == 1500
        assert diff["fix"].splitlines()[0] == "ssh node2 ip link set dev eth0 mtu 1500"
        assert doc["nodes"]["node2"]["outlier_in"] == ["net.if.eth0.mtu"]
    finally:
        slurm_cluster.run_on("node2", ["ip", "link", "set", "dev", "eth0", "mtu", "1500"], timeout=10)


def test_a_node_presenting_another_nodes_hostname_is_named(slurm_cluster, tmp_path):
    slurm_cluster.run_on("node3", ["hostname", "node1"], timeout=10)
    try:
        out = _fleet(slurm_cluster, "--nodes", "node[1-3]", "--json", "--save", str(tmp_path))
        doc = load_report(out.stdout)
        if "inventory" not in json.loads((tmp_path / "node3.json").read_text()):
            pytest.skip("node reports carry no inventory yet")
        diff = next(d for d in doc["cluster"]["differences"] if d["fact"] == "host.name")
        assert diff["status"] == "fail" and diff["outliers"] == "node[1,3]"
        assert out.returncode == 1
    finally:
        slurm_cluster.run_on("node3", ["hostname", "node3"], timeout=10)


def test_a_small_dev_shm_on_one_node_is_named_with_a_remount_fix(slurm_cluster, tmp_path):
    """A 64 MiB tmpfs over /dev/shm in node2's mount namespace (Docker's default size)."""
    slurm_cluster.run_on("node2", ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", "/dev/shm"], timeout=10)
    try:
        out = _fleet(slurm_cluster, "--nodes", "node[1-3]", "--json")
        doc = load_report(out.stdout)
        diff = next(d for d in doc["cluster"]["differences"] if d["fact"] == "shm.size")
        assert diff["outliers"] == "node2" and diff["groups"]["67108864"] == "node2"
        assert diff["fix"].splitlines()[0] == f"ssh node2 mount -o remount,size={diff['reference']} /dev/shm"
    finally:
        slurm_cluster.run_on("node2", ["umount", "/dev/shm"], timeout=10)
