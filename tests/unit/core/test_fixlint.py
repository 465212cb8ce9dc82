"""The fix linter: each class of unpasteable fix seen in a real report is rejected, and the
shapes the checks really print pass."""

from __future__ import annotations

import pytest

from distdoctor.fixlint import lint, lint_all, lint_record
from distdoctor.remote import Fix
from distdoctor.nccltest.hostmesh import firewall_fix


def exists(*paths: str):
    return lambda path: path in paths


@pytest.mark.parametrize("fix, why", [
    ("run distdoctor on a GPU node: srun --gpus-per-node=1 distdoctor check --only gpu", "'run' is not a command"),
    ("fix or remove the pack; `distdoctor list` shows what loaded", "'fix' is not a command"),
    ("upgrade the NVIDIA driver; or pip install torch", "'upgrade' is not a command"),
    ("compare MASTER_ADDR on every node with torchrun's --rdzv-endpoint", "does not parse as shell"),
    ("export SLURM_CONF=/etc/slurm/slurm.conf   # the cluster's slurm.conf", "/etc/slurm/slurm.conf does not exist"),
    ("export NCCL_SOCKET_IFNAME==eth0,lo", "NAME==value"),
    ("export NCCL_SOCKET_IFNAME=eth0,lo", "offers loopback"),
    ("NCCL_SOCKET_IFNAME='=lo' torchrun train.py", "offers loopback"),
    ("export GLOO_SOCKET_IFNAME=lo", "offers loopback"),
    ("ssh-keyscan node3 > /tmp/node3.key", "use mktemp"),
    ("nft add rule inet filter input ip saddr 10.0.0.0/8 accept   # on every node", "use nft insert rule"),
    ("nft insert rule inet filter input ip saddr 10.0.0.2 accept", "must name its node"),
    ("iptables -A INPUT -p tcp --dport 29500 -j ACCEPT", "use -I"),
    ("srun --gpus-per-node=<N> --gpu-bind=none python train.py", "<N> is a placeholder"),
    ("export MASTER_ADDR=<rank 0's host>", "placeholder"),
    ("ssh vm 'systemctl status slurmctld; check the logs'", "'check' is not a command"),
    ("export 'two words'", "export takes NAME"),
    ("bash -c 'check the logs'", "'check' is not a command"),
])
def test_rejects(fix, why):
    problems = lint(fix, exists())
    assert any(why in p for p in problems), problems


@pytest.mark.parametrize("fix", [
    "# a comment is a fix: nothing runs",
    "unset NCCL_IB_DISABLE",
    "export NCCL_SOCKET_IFNAME=^lo,docker   # exclusions may name lo",
    "export NCCL_SOCKET_IFNAME='=ens5,eth0'",
    "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)   # first node",
    "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))",
    "nvidia-smi; python -c 'import torch; print(torch.version.cuda)'",
    "clush -w n2 -- python3 -m pip install torch==2.3.0",
    "key=$(mktemp) && ssh-keyscan -t ed25519 node3 > \"$key\"\nssh-keygen -lf \"$key\"",
    "ssh node2 nft insert rule inet filter input ip saddr { 10.0.0.1, 10.0.0.3 } accept",
    "# on node2:\nnft insert rule inet filter input tcp dport 29500 accept",
    "mkdir -p /etc/x.d && printf '[Service]\\nLimitMEMLOCK=infinity\\n' > /etc/x.d/memlock.conf",
    "echo '* soft memlock unlimited\n* hard memlock unlimited' >> /etc/security/limits.conf",
    "export LD_LIBRARY_PATH=/usr/lib:/opt/lib",
    "#SBATCH --gres=gpu:4   # ask Slurm for the GPUs\nunset CUDA_VISIBLE_DEVICES",
    "timeout 5 bash -c '</dev/tcp/10.0.0.1/29500' && echo reachable",
    "mkdir -p /opt/site && echo x > /opt/site/env && export SITE_ENV=/opt/site/env",
])
def test_accepts(fix):
    assert lint(fix, exists("/usr/lib", "/opt/lib", "/etc/security/limits.conf")) == []


def test_paths_are_only_checked_when_asked():
    assert lint("export SLURM_CONF=/nonexistent/slurm.conf") == []
    assert lint_all(["unset X", "run it", "run it"]) == {"run it": [
        "'run it': 'run' is not a command; a fix is shell or a # comment"]}


def test_firewall_fix_goes_on_the_node_that_drops_and_is_inserted():
    hosts = {0: "nodea", 1: "nodeb", 2: "nodec"}
    addresses = {0: "10.0.0.1", 1: "10.0.0.2", 2: "10.0.0.3"}
    fix = firewall_fix([(0, 1, "timeout"), (2, 1, "timeout"), (1, 0, "refused")], hosts, addresses)
    assert fix.splitlines() == ["ssh nodea nft insert rule inet filter input ip saddr 10.0.0.2 accept",
                                "ssh nodeb 'nft insert rule inet filter input ip saddr { 10.0.0.1, 10.0.0.3 } accept'"]
    assert lint(fix) == []
    # an address from a rank that is not plainly one never reaches the rule
    hostile = firewall_fix([(0, 1, "timeout")], hosts, {0: "10.0.0.1; reboot", 1: "10.0.0.2"})
    assert "reboot" not in hostile


def test_the_script_an_ssh_or_clush_line_runs_is_linted_as_run_on_that_node():
    assert lint("clush -w 'gpu[1-2]' -- 'nft insert rule inet filter input ip saddr 10.0.0.2 accept'") == []
    assert lint("ssh gpu1 'nft insert rule inet filter input ip saddr 10.0.0.2 accept'") == []
    [problem] = lint("clush -w 'gpu[1-2]' -- 'nft add rule inet filter input ip saddr 10.0.0.2 accept'")
    assert "nft add rule appends" in problem
    [problem] = lint("clush -w gpu1 -- 'fix the node'")
    assert "'fix' is not a command" in problem
    assert "without the node" in lint("clush -- ibstat")[0]


def test_a_fix_that_leaves_its_own_finding_in_place_is_a_problem():
    from distdoctor.fixlint import persisting

    def doc(*findings):
        return {"checks": [{"id": "nccl-test.cross-rank", "findings": [
            {"status": s, "subject": "interface", "summary": "names differ", "fix": f} for s, f in findings]}]}

    fix = "export NCCL_SOCKET_IFNAME='=ens5,eth0'"
    before = doc(("warn", fix))
    assert persisting(before, doc(("ok", "")), [fix]) == []
    [problem] = persisting(before, doc(("warn", fix)), [fix])
    assert "nccl-test.cross-rank [interface]" in problem and "still reported" in problem
    assert persisting(before, doc(("warn", fix)), ["unset NCCL_IB_DISABLE"]) == []  # not the fix applied
    assert persisting({"checks": "junk"}, {}, [fix]) == []


# --- records: each knows where its commands run, so nothing is read back from an ssh line -------

def test_a_record_for_nodes_is_linted_as_the_script_their_shells_run():
    record = Fix(("nft insert rule inet filter input ip saddr 10.0.0.2 accept",), ("gpu1", "gpu2"))
    assert lint_record(record) == []  # its nodes name where the firewall changes
    [problem] = lint_record(Fix(("nft add rule inet filter input ip saddr 10.0.0.2 accept",), ("gpu1",)))
    assert "nft add rule appends" in problem
    [problem] = lint_record(Fix(("fix the node",), ("gpu1",)))
    assert "'fix' is not a command" in problem
    # a path is a fact of the node it runs on: this machine is not asked about it
    assert lint_record(Fix(("export SLURM_CONF=/nonexistent/slurm.conf",), ("gpu1",)), exists()) == []


def test_a_record_for_here_is_linted_as_printed_and_its_comment_may_name_the_node():
    firewall = ("nft insert rule inet filter input ip saddr 10.0.0.2 accept",)
    assert "must name its node" in lint_record(Fix(firewall))[0]
    assert lint_record(Fix(firewall, comment="as root on gpu1: let the peer in")) == []
    assert lint_record(Fix(("export SLURM_CONF=/nonexistent/slurm.conf",)), exists()) == [
        "'export SLURM_CONF=/nonexistent/slurm.conf': /nonexistent/slurm.conf does not exist"]


def test_what_only_a_record_can_get_wrong():
    assert "addressed twice" in lint_record(Fix(("ssh gpu1 ibstat",), ("gpu1",)))[0]
    assert "addressed twice" in lint_record(Fix(("clush -w gpu1 -- ibstat",), ("gpu1",)))[0]
    assert "comments out the steps" in lint_record(Fix(("# look first", "ibstat"), ("gpu1",)))[0]
    assert "one line" in lint_record(Fix(comment="fine\nreboot"))[0]
    assert "neither a command nor a comment" in lint_record(Fix(nodes=("gpu1",)))[0]


def test_lint_all_takes_records_and_text():
    bad = Fix(("nft add rule inet filter input accept",), ("gpu1",))
    found = lint_all([bad, "run it", Fix(("ibstat",), ("gpu1",)), bad])
    assert set(found) == {bad, "run it"}


def test_every_named_remedy_lints_clean_as_a_record():
    from distdoctor import fixes

    made = [fixes.memlock(["gpu1"], slurm=True), fixes.memlock(here="gpu1"), fixes.shm_size("16g", ["gpu1"]),
            fixes.socket_ifname(["ens5"], gloo="ens5"), fixes.firewall_allow_from("gpu1", ["10.0.0.2"]),
            *fixes.firewall_open_port(["gpu1", "gpu2"], 29500), fixes.mtu("eth0", 9000, ["gpu1"]),
            *fixes.hostname_address("gpu1")]
    assert lint_all(made, exists()) == {}


def test_a_substitution_inside_single_quotes_is_a_word_not_a_command():
    """A hostile value quoted into a fix (`pip install 'torch==$(x)'`) runs nothing; the same
    text unquoted or in double quotes runs x, and x is linted as a command."""
    from distdoctor import fixlint

    assert fixlint.lint("pip install 'torch==$(pwned)'", None) == []
    # ssh's command runs in the node's shell: quoted once, the substitution runs there
    for live in ("echo $(pwned)", 'echo "$(pwned)"', "echo 'a'$(pwned)'b'", "ssh node1 'ls $(pwned)'"):
        assert any("'pwned' is not a command" in p for p in fixlint.lint(live, None)), live
