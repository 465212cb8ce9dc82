"""The comparison engine shared by fleet, compare, nccl-test and log: pure logic, synthetic members."""

from distdoctor.crosscheck.engine import AGREE, DIFFER, Rule, compare, fold, matches_expectation, to_finding
from distdoctor.model import Status

RULES = (
    Rule("nccl.version", "NCCL version", AGREE, Status.FAIL, run="pip install nvidia-nccl-cu12=={reference}"),
    Rule("net.if.*.mtu", "MTU of *", AGREE, Status.WARN),
    Rule("host.boot_id", "boot id", DIFFER, Status.FAIL),
)


def _nodes(n, **odd):
    members = {f"gpu{i:03d}": {"nccl.version": "2.21.5", "net.if.eth0.mtu": 9000, "host.boot_id": f"b{i}"}
               for i in range(1, n + 1)}
    for name, facts in odd.items():
        members[name].update(facts)
    return members


def test_healthy_members_have_no_difference():
    assert compare(_nodes(64), RULES) == []


def test_odd_nodes_are_named_folded_with_majority_and_fix():
    diffs = compare(_nodes(64, gpu007={"nccl.version": "2.18.3"}, gpu012={"nccl.version": "2.18.3"}), RULES)
    assert len(diffs) == 1
    d = diffs[0]
    assert d.basis == "majority" and d.reference == "2.21.5"
    assert fold(d.outliers) == "gpu[007,012]"
    f = to_finding(d)
    assert f.status is Status.FAIL
    assert "2.18.3 on gpu[007,012]" in f.summary and "62 nodes have 2.21.5" in f.summary
    assert f.fix == "clush -w 'gpu[007,012]' -- pip install nvidia-nccl-cu12==2.21.5"


def test_glob_rules_expand_and_label_names_the_part():
    diffs = compare(_nodes(4, gpu002={"net.if.eth0.mtu": 1500}), RULES)
    assert [d.key for d in diffs] == ["net.if.eth0.mtu"]
    assert to_finding(diffs[0]).summary.startswith("MTU of eth0 differs: 1500 on gpu002")


def test_duplicates_of_a_must_differ_fact_name_every_holder():
    diffs = compare(_nodes(8, gpu003={"host.boot_id": "b5"}), RULES)
    assert len(diffs) == 1 and diffs[0].basis == "duplicate"
    assert set(diffs[0].outliers) == {"gpu003", "gpu005"}
    assert "gpu[003,005] share boot id b5" in to_finding(diffs[0]).summary


def test_tie_names_both_sides_without_inventing_a_majority():
    diffs = compare(_nodes(2, gpu002={"nccl.version": "2.18.3"}), RULES)
    assert diffs[0].basis == "tie" and diffs[0].reference is None
    assert set(diffs[0].outliers) == {"gpu001", "gpu002"}


def test_expectation_wins_over_the_majority_and_catches_absent_facts():
    members = _nodes(3)
    members["gpu003"].pop("nccl.version")
    diffs = compare(members, RULES, expect={"nccl.version": "2.21.5", "gpu.count": ">= 8"})
    by_key = {d.key: d for d in diffs}
    assert by_key["nccl.version"].outliers == ("gpu003",)
    assert by_key["gpu.count"].basis == "expected" and len(by_key["gpu.count"].outliers) == 3
    assert by_key["gpu.count"].status is Status.FAIL


def test_expectation_operators_numbers_and_unlimited():
    assert matches_expectation(8, ">= 8") and not matches_expectation(7, ">= 8")
    assert matches_expectation("unlimited", "unlimited") and matches_expectation("unlimited", "> 65536")
    assert matches_expectation(9000, "9000") and matches_expectation("9000", 9000.0)
    assert not matches_expectation("550.127.05", "550.127.08")
    assert matches_expectation("550.127.05", "550.127.05")


def test_ranks_fold_as_ranges():
    members = {str(r): {"nccl.version": "2.30.7" if r not in (5, 6, 7) else "2.21.5"} for r in range(16)}
    d = compare(members, RULES[:1])[0]
    assert fold(d.outliers) == "5-7"
    assert "2.21.5 on 5-7" in to_finding(d, noun="rank").summary


def test_absent_as_value_flags_a_member_without_the_fact():
    rule = Rule("torch.version", "torch version", absent="value")
    members = {"a": {"torch.version": "2.3"}, "b": {"torch.version": "2.3"}, "c": {}}
    d = compare(members, [rule])[0]
    assert d.outliers == ("c",) and "(absent) on c" in to_finding(d).summary
    assert compare(members, [Rule("torch.version", "torch version")]) == []


def test_unhashable_values_group():
    members = {"a": {"x": [1, 2]}, "b": {"x": [1, 2]}, "c": {"x": [2, 1]}}
    d = compare(members, [Rule("x", "x")])[0]
    assert d.outliers == ("c",)


def test_expectation_operators_compare_versions_not_strings():
    assert matches_expectation("2.21.5", ">= 2.18")
    assert not matches_expectation("2.17.1", ">= 2.18")
    assert matches_expectation("2.18", ">= 2.18.0")
    assert matches_expectation("535.54.03", "< 550.127.05")
    assert not matches_expectation("unknown", ">= 2.18")


def test_best_rule_takes_the_best_value_as_reference_even_in_a_minority():
    rule = Rule("check.x", "result of check x", AGREE, Status.WARN, best=lambda values: "ok" if "ok" in values else values[0])
    members = {f"n{i}": {"check.x": "fail" if i < 3 else "ok"} for i in range(1, 5)}
    (diff,) = compare(members, [rule])
    assert diff.basis == "best" and diff.reference == "ok"
    assert fold(diff.outliers) == "n[1-2]"
    assert to_finding(diff).summary == "result of check x: fail on n[1-2] (ok on n[3-4])"


def test_a_fix_line_is_a_command_only_with_plain_values_and_says_nothing_of_a_missing_reference():
    rule = Rule("env.NCCL_ALGO", "NCCL_ALGO", AGREE, Status.WARN,
                fix="export NCCL_ALGO={reference}\n# then restart the job on {nodes}")
    members = {f"n{i}": {"env.NCCL_ALGO": "Ring;reboot"} for i in range(3)}
    members["n3"] = {"env.NCCL_ALGO": "Tree"}
    (diff,) = compare(members, (rule,))
    assert to_finding(diff).fix.splitlines() == ["# export NCCL_ALGO=Ring;reboot", "# then restart the job on n3"]
    members["n0"] = {"env.NCCL_ALGO": "Tree"}  # 2 and 2: a tie, no reference
    (diff,) = compare(members, (rule,))
    assert diff.reference is None and to_finding(diff).fix.splitlines() == [f"# then restart the job on {fold(diff.outliers)}"]
