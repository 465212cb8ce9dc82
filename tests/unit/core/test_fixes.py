"""A fix is a record (remote.Fix) printed in one place, and the named remedies (distdoctor/fixes.py)
are each spelled once: every check, comparison and log diagnosis that needs one calls it."""

import json
import os
import re

import pytest

from distdoctor import fixes, remote
from distdoctor.api import Fix, warn
from distdoctor.fixlint import lint
from distdoctor.model import Finding, Status

from tests.unit.core.test_remote import bash_words

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_a_record_compares_by_value_whatever_sequence_it_was_given():
    a = Fix(["ip link set dev eth0 mtu 9000"], nodes=["gpu2", "gpu1", "gpu2"], comment="why")
    b = Fix(("ip link set dev eth0 mtu 9000",), nodes=("gpu2", "gpu1"), comment="why")
    assert a == b and hash(a) == hash(b) and a.nodes == ("gpu2", "gpu1")
    assert not Fix() and not Fix(nodes=["gpu1"]) and Fix(comment="say it")


@pytest.mark.parametrize("nodes,lines", [
    ((), ["# as root on gpu1: slurmd reads it at start", 'printf "x" > /etc/a && systemctl restart slurmd']),
    (("gpu1",), ["ssh gpu1 'printf \"x\" > /etc/a && systemctl restart slurmd'", "# slurmd reads it at start"]),
    (("gpu1", "gpu2"), ["clush -w 'gpu[1-2]' -- 'printf \"x\" > /etc/a && systemctl restart slurmd'",
                        "# slurmd reads it at start"]),
])
def test_commands_run_in_order_here_or_on_the_nodes(nodes, lines):
    """Here, the comment says where first; on nodes, the line that names them comes first."""
    note = "as root on gpu1: slurmd reads it at start" if not nodes else "slurmd reads it at start"
    fix = Fix(('printf "x" > /etc/a', "systemctl restart slurmd"), nodes, note)
    assert remote.render(fix).splitlines() == lines
    if nodes:  # the node's shell gets the whole script as one word: `>` and `&&` run there
        assert bash_words(lines[0])[-1] == 'printf "x" > /etc/a && systemctl restart slurmd'


def test_names_a_shell_must_not_see_become_comments():
    text = remote.render(Fix(("ibstat",), ["gpu1;reboot"], "look at the port"))
    assert all(line.startswith("#") for line in text.splitlines()), text
    assert remote.render(Fix((), ["gpu1", "gpu2"], "reseat the GPU")) == "# on gpu[1-2]: reseat the GPU"
    assert remote.render(Fix(("ibstat",), ["gpu1"], srun=True)) == "srun -w gpu1 -N1 -n1 ibstat"


def test_a_finding_given_records_keeps_them_and_prints_each_step_once():
    step = fixes.mtu("eth0", 9000, ["gpu3"])
    finding = warn("MTU differs", fix=[step, "# then rerun the job", step])
    assert finding.remedy == (step, Fix(("# then rerun the job",)))
    assert finding.fix == remote.render(step) + "\n# then rerun the job"
    doc = finding.to_dict()
    assert doc["fix"] == finding.fix
    assert doc["remedy"][0] == {"commands": ["ip link set dev eth0 mtu 9000"], "nodes": ["gpu3"],
                                "comment": fixes.MTU_PERSIST}
    json.dumps(doc)
    # the engine copies findings positionally: the record survives a copy that passes it on
    copy = Finding(Status.FAIL, "x", "", "", finding.fix, {}, remedy=finding.remedy)
    assert copy.remedy == finding.remedy and copy.fix == finding.fix


def test_a_pack_may_still_give_its_fix_as_text():
    finding = warn("scratch is missing", fix="mount /scratch")
    assert finding.fix == "mount /scratch" and finding.remedy == ()
    assert "remedy" not in finding.to_dict()


REMEDIES = {
    "memlock here": fixes.memlock(here="gpu1"),
    "memlock slurm here": fixes.memlock(slurm=True, here="gpu1"),
    "memlock nodes": fixes.memlock(["gpu1", "gpu2"]),
    "memlock slurm nodes": fixes.memlock(["gpu1"], slurm=True),
    "shm here": fixes.shm_size("16g", here="gpu1"),
    "shm nodes": fixes.shm_size(68719476736, ["gpu1", "gpu2"]),
    "shm missing": fixes.shm_missing(here="gpu1"),
    "ifname": fixes.socket_ifname(["ens5", "ib0", "lo"], gloo="ens5"),
    "gloo": fixes.gloo_ifname("ens5"),
    "firewall peers": fixes.firewall_allow_from("gpu2", ["10.0.0.1", "10.0.0.3"]),
    "firewall port": fixes.firewall_open_port(["gpu2", "gpu3"], 29500),
    "mtu": fixes.mtu("eth0", 9000, ["gpu3"]),
    "mtu here": fixes.mtus([("eth0", 9000), ("eth1", 9000)], here="gpu1"),
    "hostname": fixes.hostname_address("gpu1"),
    "named memlock": fixes.named("memlock", ["gpu7"]),
    "named shm": fixes.named("shm", ["gpu7"]),
    "named hostname": fixes.named("hostname", ["gpu7"]),
    "named hostname, no node": fixes.named("hostname"),
}


@pytest.mark.parametrize("name", sorted(REMEDIES))
def test_every_remedy_pastes_and_runs_as_printed(name):
    made = REMEDIES[name]
    records = made if isinstance(made, tuple) else (made,)
    assert records and all(records)
    assert lint(remote.render_all(records)) == []
    for record in records:  # and what each node's shell runs is clean there
        if record.nodes:
            assert lint(remote.script(record), on_node=True) == []


def test_remedies_never_put_a_value_that_is_not_plain_into_a_command():
    assert not fixes.shm_size("1g; reboot") and not fixes.shm_size(None)
    assert not fixes.mtu("eth0", "9000; reboot") and not fixes.mtu("eth0 x", 9000)
    assert not fixes.mtus([("eth0", "$(reboot)")])
    assert fixes.socket_ifname(["lo", "eth0;x"]).commands == ()
    assert fixes.gloo_ifname("lo").commands == ()
    hostile = fixes.firewall_allow_from("gpu2", ["10.0.0.1; reboot"])
    assert hostile.commands == () and "reboot" not in remote.render(hostile)
    assert all(r.commands == () for r in fixes.hostname_address("a b"))


def test_ifname_uses_exact_names_and_never_offers_loopback():
    (line,) = fixes.socket_ifname(["eth1", "lo", "eth1"]).commands
    assert line == "export NCCL_SOCKET_IFNAME='=eth1'"
    assert bash_words(line.split(" ", 1)[1]) == ["NCCL_SOCKET_IFNAME==eth1"]


def test_memlock_under_slurm_changes_slurmds_unit_elsewhere_limits_conf():
    slurm, login = fixes.memlock(["gpu1"], slurm=True), fixes.memlock(["gpu1"])
    assert any("LimitMEMLOCK=infinity" in c for c in slurm.commands) and slurm.commands[-1] == "systemctl restart slurmd"
    assert login.commands == (fixes.MEMLOCK_LIMITS_CONF,)
    assert remote.render(slurm).splitlines()[1].startswith("# slurmd's tasks inherit")
    assert remote.render(fixes.memlock(here="gpu1")).startswith("# as root on gpu1: ")


# Each remedy's tell-tale text: a product source other than fixes.py that contains one spells the
# remedy again instead of calling it.
SPELLED_ONCE = {
    "memlock": [r"memlock unlimited", r"LimitMEMLOCK=infinity", r"--ulimit memlock"],
    "shm": [r"remount,size=", r"--shm-size", r"tmpfs /dev/shm"],
    "ifname": [r"export NCCL_SOCKET_IFNAME=\{", r"export GLOO_SOCKET_IFNAME=\{"],
    "firewall": [r"nft insert rule", r"firewall-cmd --permanent"],
    "mtu": [r"ip link set (dev )?\{?\w*\}? mtu"],
}
# Text that names a remedy without being one: the docs each module carries, and the log catalogue's
# signatures whose own fix is a different step (a container's devices, a generic system error).
ALLOWED = {
    "distdoctor/fixlint.py": [r"use nft insert rule"],
    "distdoctor/logs/signatures.toml": [r"--device=/dev/infiniband --ulimit memlock=-1", r"--ipc=host \(or --shm-size=1g\)"],
}


def _product_sources():
    for root in ("distdoctor", "checks"):
        for folder, _dirs, files in os.walk(os.path.join(REPO, root)):
            for name in files:
                if name.endswith((".py", ".toml")):
                    path = os.path.join(folder, name)
                    yield os.path.relpath(path, REPO), path


def test_each_named_remedy_is_spelled_only_in_fixes_py():
    found = []
    for rel, path in _product_sources():
        if rel == "distdoctor/fixes.py":
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for allowed in ALLOWED.get(rel, []):
            text = re.sub(allowed, "", text)
        for remedy, patterns in SPELLED_ONCE.items():
            for pattern in patterns:
                for m in re.finditer(pattern, text):
                    line = text.count("\n", 0, m.start()) + 1
                    found.append(f"{rel}:{line}: spells the {remedy} remedy ({m.group(0)!r}); call distdoctor.fixes")
    assert found == [], "\n".join(found)


def test_the_spelling_rule_sees_a_second_spelling():
    text = 'fix = "echo \'* - memlock unlimited\' > /etc/security/limits.d/x.conf"'
    assert any(re.search(p, text) for p in SPELLED_ONCE["memlock"])
