"""hostlist.expand against every recorded case, plus the invalid shapes it must reject."""

import json

import pytest

from distdoctor.hostlist import HostlistError, expand
from distdoctor.text import fold_hosts as fold
from tests.conftest import data_path

with open(data_path("hostlist", "hostlist_cases.json")) as fh:
    CASES = json.load(fh)["cases"]


def _ids(cases):
    return [f"{c['kind']}:{c['input']!r}" for c in cases]


EXPAND = [c for c in CASES if c["kind"] in ("expand", "count", "fold")]


def test_every_kind_in_the_fixture_is_covered():
    kinds = {c["kind"] for c in CASES}
    assert kinds <= {"expand", "count", "fold", "tasks_per_node", "expand_error"}, kinds


@pytest.mark.parametrize("case", EXPAND, ids=_ids(EXPAND))
def test_recorded_case(case):
    if case["kind"] == "expand":
        assert expand(case["input"]) == case["expected"]
    elif case["kind"] == "count":
        assert len(expand(case["input"])) == case["expected"]
    else:
        hosts = case["input"] if isinstance(case["input"], list) else expand(case["input"])
        assert fold(hosts) == case["expected"]


@pytest.mark.parametrize("expr, hosts", [
    # what `scontrol show hostnames` prints for these (checked on Slurm 22.05.8)
    ("n[1,1]", ["n1", "n1"]),
    ("r[2,1]n[3,1-2]", ["r2n3", "r2n1", "r2n2", "r1n3", "r1n1", "r1n2"]),
    ("n[01-3]", ["n01", "n02", "n03"]),
    ("odin[013-014]", ["odin013", "odin014"]),
    ("a,,b", ["a", "b"]),
    ("gpu[01-02,07],login-a[1-2]", ["gpu01", "gpu02", "gpu07", "login-a1", "login-a2"]),
])
def test_slurm_order_and_padding(expr, hosts):
    assert expand(expr) == hosts


@pytest.mark.parametrize("expr, words", [
    ("n[1-2", "unbalanced '['"),
    ("n1-2]", "unbalanced ']'"),
    ("n[1-2]]", "unbalanced ']'"),
    ("n[[1]]", "nested"),
    ("n[a-b]", "invalid range 'a-b'"),
    ("n[5-3]", "reversed range '5-3'"),
    ("n[]", "empty range"),
    ("n[1-2-3]", "invalid range '1-2-3'"),
    ("n[1,-2]", "invalid range '-2'"),
    ("node 1", "white space"),
])
def test_invalid_expressions_are_rejected_with_the_reason(expr, words):
    with pytest.raises(HostlistError) as exc:
        expand(expr)
    assert words in str(exc.value)
    assert expr.split(",")[0] in str(exc.value) or expr in str(exc.value)
