"""One report per job on a real Slurm cluster (three nodes in network namespaces): several tasks
per node, one document out, every time."""

import os

import pytest

from tests.conftest import distdoctor_argv, load_report



@pytest.fixture
def job_env(tmp_path):
    # The job secret is made in $HOME on first use; the nodes share this filesystem, as a
    # cluster's home does.
    home = tmp_path / "home"
    home.mkdir()
    return {"HOME": str(home), "NO_COLOR": "1"}


def test_srun_several_tasks_per_node_prints_one_json_document_20_times(slurm_cluster, job_env):
    dd = " ".join(distdoctor_argv())
    for attempt in range(20):
        proc = slurm_cluster.srun(["-N2", "-n4", *dd.split(), "check", "--format", "json"], env=job_env, timeout=120)
        assert proc.returncode in (0, 1), (attempt, proc.stderr)
        doc = load_report(proc.stdout)  # exactly one document: json.loads refuses trailing data
        # Slurm picks any two of the three nodes (one may still be finishing the last step).
        assert doc["cluster"]["answered"] == 2 and len(doc["nodes"]) == 2, doc["cluster"]
        assert set(doc["nodes"]) <= {"node1", "node2", "node3"}, doc["nodes"]
        assert doc["cluster"]["missing"] == {}
    secret = os.path.join(job_env["HOME"], ".config", "distdoctor", "job-secret")
    assert oct(os.stat(secret).st_mode & 0o777) == "0o600"


def test_console_prints_the_common_result_once(slurm_cluster, job_env):
    dd = distdoctor_argv()
    proc = slurm_cluster.srun(["-N2", "-n4", *dd, "check"], env=job_env, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stdout.count(" · check · host ") == 1, proc.stdout
    assert proc.stdout.startswith("2 nodes, ")


def test_jsonl_is_one_whole_line_per_node(slurm_cluster, job_env):
    """One line per node, written whole; srun may forward it in pieces that interleave with the
    other node's (seen in one run of the whole suite), so the documented way reads it: --label, and each
    task's pieces joined in order."""
    proc = slurm_cluster.srun(["--label", "-N2", "-n4", *distdoctor_argv(), "check", "--format", "jsonl"],
                           env=job_env, timeout=120)
    pieces: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        task, _, text = line.partition(": ")
        pieces.setdefault(task.strip(), []).append(text)
    lines = ["".join(texts) for texts in pieces.values()]
    assert len(lines) == 2, proc.stdout[:2000]  # two of the four tasks: each node's local rank 0
    docs = [load_report(line) for line in lines]
    assert len({d["node"] for d in docs}) == 2 and {d["node"] for d in docs} <= {"node1", "node2", "node3"}


def test_a_node_with_another_secret_is_named_not_trusted(slurm_cluster, job_env, tmp_path):
    """Rank 0 refuses a report it cannot authenticate: the other node is named in the report. A
    refused report does not end rank 0's wait for that node (a stranger could send one in the
    node's name), so rank 0 waits out the job's bound (--timeout 10, plus 10 s to gather)."""
    script = tmp_path / "other-secret.sh"
    script.write_text("#!/bin/sh\n"
                      "[ \"$SLURM_NODEID\" = 1 ] && export DISTDOCTOR_JOB_SECRET=not-the-jobs-secret-0123456789abcdef\n"
                      f"exec {' '.join(distdoctor_argv())} \"$@\"\n")
    script.chmod(0o755)
    import time

    start = time.monotonic()
    proc = slurm_cluster.srun(["-N2", "-n2", str(script), "check", "--format", "json", "--timeout", "10"],
                           env=job_env, timeout=120)
    took = time.monotonic() - start
    doc = load_report(proc.stdout)
    assert took < 10 + 10 + 15, took  # the bound holds (srun's own start and stop included)
    assert "rank 0 could not authenticate this node's report" in proc.stderr
    assert doc["cluster"]["answered"] == 1
    assert "node2" in doc["cluster"]["missing"]
    reports = next(c for c in doc["checks"] if c["id"] == "cluster.reports")
    assert reports["status"] == "fail"
    [refused] = [f for f in reports["findings"] if f["status"] == "fail"]
    assert refused["summary"].startswith("node2: its report was refused: report failed authentication"), refused


def test_the_job_report_names_the_node_with_another_mtu(slurm_cluster, job_env):
    slurm_cluster.run_on("node2", ["ip", "link", "set", "dev", "eth0", "mtu", "1400"], timeout=10)
    try:
        proc = slurm_cluster.srun(["-N3", "-n6", *distdoctor_argv(), "check", "--format", "json"], env=job_env,
                               timeout=120)
        doc = load_report(proc.stdout)
        diff = next(d for d in doc["cluster"]["differences"] if d["fact"] == "net.if.eth0.mtu")
        assert diff["outliers"] == "node2" and diff["reference"] == 1500
        assert diff["fix"].splitlines()[0] == "ssh node2 ip link set dev eth0 mtu 1500"
        assert doc["nodes"]["node2"]["outlier_in"] == ["net.if.eth0.mtu"]
        assert proc.returncode == 1
    finally:
        slurm_cluster.run_on("node2", ["ip", "link", "set", "dev", "eth0", "mtu", "1500"], timeout=10)


def test_rank0_behind_a_firewall_node2_prints_its_own_report_and_the_fix_for_node1_clears_it(slurm_cluster, job_env):
    """node1 (rank 0) drops new connections from node2: node2 cannot hand its report over. Its
    report is not lost: node2 prints it, saying the connection timed out and giving the rule for
    node1; that line, run on node1 as printed, makes the next run one report of both nodes."""
    from tests.harness import apt

    apt.ensure("nftables")
    cluster = slurm_cluster
    argv = ["-w", "node1,node2", "-N2", "-n2", *distdoctor_argv(), "check", "--timeout", "8"]
    nft = ["nft", "add", "chain", "inet", "filter", "input", "{ type filter hook input priority 0 ; }"]
    try:
        for rule in (["nft", "add", "table", "inet", "filter"], nft,
                     ["nft", "add", "rule", "inet", "filter", "input", "ip", "saddr", cluster.address("node2"),
                      "ct", "state", "new", "drop"]):
            done = cluster.run_on("node1", rule)
            assert done.returncode == 0, done.stderr
        proc = cluster.srun(argv, env=job_env, timeout=150)
        # node2's own report, on its stderr (the job's log): stdout stays rank 0's one report.
        own, out = proc.stderr, proc.stdout
        assert "this node's report could not reach rank 0 (node1, port" in own and "timed out" in own, own[-3000:]
        assert "node2: no report within the job's bound" in out, out[-3000:]
        network = cluster.address("node2").rsplit(".", 1)[0] + ".0/24"
        rule = f"ssh node1 nft insert rule inet filter input ip saddr {network} accept"
        assert f"$ {rule}" in own and f"$ {rule}" in out, own[-3000:]

        # The fix, as printed, on node1 (its `ssh node1` is the test's way onto the node).
        done = cluster.run_on("node1", rule.split()[2:])
        assert done.returncode == 0, done.stderr
        again = cluster.srun([*argv[:-2], "--format", "json"], env=job_env, timeout=150)
        doc = load_report(again.stdout)
        assert doc["cluster"]["answered"] == 2 and doc["cluster"]["missing"] == {}, doc["cluster"]
        assert "could not reach rank 0" not in again.stdout
    finally:
        cluster.run_on("node1", ["nft", "delete", "table", "inet", "filter"])


def test_a_cloned_hostname_is_named_on_the_node_that_must_change(slurm_cluster, job_env):
    """node2 reports node1's hostname (a cloned image): the job's report names node2 as the one to
    rename, with the command for node2 only. Renaming it (`hostname node2`, what hostnamectl does
    without the persistence; there is no systemd in the test's nodes) clears the finding."""
    cluster = slurm_cluster
    argv = ["-w", "node1,node2", "-N2", "-n2", *distdoctor_argv(), "check", "--format", "json", "--timeout", "8"]
    try:
        assert cluster.run_on("node2", ["hostname", "node1"]).returncode == 0
        doc = load_report(cluster.srun(argv, env=job_env, timeout=150).stdout)
        identity = {c["id"]: c for c in doc["checks"]}["cluster.host-identity"]
        [named] = [f for f in identity["findings"] if f["subject"] == "host.name"]
        assert named["status"] == "fail" and "node[1-2] share hostname node1" in named["summary"]
        assert named["fix"].splitlines()[0] == "ssh node2 hostnamectl set-hostname node2", named["fix"]
        assert "ssh node1" not in named["fix"]
        # The nodes are UTS namespaces of one kernel: they share its boot id, and with the hostname
        # NCCL's host hash. One cause, one finding: the boot id is said in the hostname's, with
        # what it means and that it cannot be changed, not in findings of its own.
        assert "and one kernel (boot id " in named["summary"], named["summary"]
        assert [f["subject"] for f in identity["findings"]] == ["host.name"], identity["findings"]
        assert "# a boot id cannot be changed" in named["fix"], named["fix"]
    finally:
        cluster.run_on("node2", ["hostname", "node2"])
    again = load_report(cluster.srun(argv, env=job_env, timeout=150).stdout)
    [ok] = {c["id"]: c for c in again["checks"]}["cluster.host-identity"]["findings"]
    # Renamed, the shared kernel is harmless to NCCL, and said so, naming the nodes.
    assert ok["status"] == "ok" and ok["summary"].startswith("node[1-2] share one kernel (boot id "), ok


def test_a_stale_hosts_entry_for_rank0s_node_is_named_on_the_node_that_has_it_and_its_fix_clears_it(
        slurm_cluster, job_env, tmp_path):
    """node2's own /etc/hosts maps node1 to an address nobody has (a stale entry): node2's report
    cannot reach rank 0. node2 says so with both addresses (what node1 resolves to there, and
    Slurm's NodeAddr for it) and the line rewritten, not a firewall rule for node1; the line, run
    on node2 as printed, makes the next run one report of both nodes."""
    cluster = slurm_cluster
    node1 = cluster.address("node1")
    stale = node1.rsplit(".", 1)[0] + ".99"
    hosts = tmp_path / "hosts-node2"
    hosts.write_text(f"127.0.0.1\tlocalhost\n{stale}\tnode1\n{cluster.address('node2')}\tnode2\n")
    os.chmod(tmp_path, 0o755)
    argv = ["-w", "node1,node2", "-N2", "-n2", *distdoctor_argv(), "check", "--timeout", "8"]
    try:
        assert cluster.run_on("node2", ["mount", "--bind", str(hosts), "/etc/hosts"]).returncode == 0
        proc = cluster.srun(argv, env=job_env, timeout=150)
        own = proc.stderr
        said = " ".join(own.split())  # the console wraps long summaries
        assert f"node1 resolves here to {stale}, but Slurm reaches it at {node1}" in said, own[-3000:]
        assert "nft insert" not in own.split("could not reach rank 0", 1)[1], own[-3000:]
        block = own.split(f"# as root on node2: /etc/hosts line 2 maps node1 to {stale}", 1)[1].split("\n", 1)[1]
        line = block.splitlines()[0].strip().removeprefix("$ ")
        assert line.startswith("hosts=$(sed '2s/"), line
        done = cluster.run_on("node2", ["bash", "-c", line])
        assert done.returncode == 0, done.stderr
        assert f"{node1}\tnode1" in hosts.read_text()
        again = cluster.srun([*argv[:-2], "--format", "json"], env=job_env, timeout=150)
        doc = load_report(again.stdout)
        assert doc["cluster"]["answered"] == 2 and doc["cluster"]["missing"] == {}, doc["cluster"]
    finally:
        cluster.run_on("node2", ["umount", "/etc/hosts"])
