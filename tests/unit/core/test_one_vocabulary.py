"""One vocabulary of node facts: the inventory's names are the only names, one table of rules
compares them (crosscheck/rules.py) and one list says which environment variables take part."""

from __future__ import annotations

import ast
import os

import pytest

from distdoctor import inventory
from distdoctor.crosscheck import nodes, rules
from distdoctor.crosscheck.engine import ABSENT, Rule
from distdoctor.logs import nccl_setup
from distdoctor.model import Status
from distdoctor.nccltest import compare as nccl_compare

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _is_inventory_name(key: str) -> bool:
    # a rule's glob (`ib.*.rate`) stands for the inventory's placeholders (`ib.<hca>.<port>.rate`)
    return inventory.field_for(key.replace("*", "mlx5_0.1")) is not None


@pytest.mark.parametrize("rule", [r for r in rules.NODE_RULES if not r.key.startswith("check.")], ids=lambda r: r.key)
def test_every_rule_of_the_table_compares_an_inventory_fact(rule):
    assert _is_inventory_name(rule.key), f"{rule.key} is not a name in inventory.FIELDS (docs/inventory.md)"


@pytest.mark.parametrize("user, chosen", [
    ("nccl-test ranks", nccl_compare._RANK_RULES), ("nccl-test hosts", nccl_compare._HOST_RULES),
    ("log's NCCL setup", nccl_setup.RULES), ("node reports", nodes.NODE_RULES)])
def test_every_comparison_takes_its_rules_from_the_one_table(user, chosen):
    assert chosen and all(rule in rules.NODE_RULES for rule in chosen), user


def test_a_rule_the_table_lacks_is_an_error_not_a_comparison_skipped():
    with pytest.raises(KeyError, match="no rule for gpu_name"):
        rules.select("gpu.model", "gpu_name")


def test_no_other_module_writes_a_table_of_rules():
    """Rule(...) is built in the table, by the engine (a rule for a glob's key, an expectation),
    and once by nccl-test for which GPU a rank drives (not a node fact)."""
    allowed = {"distdoctor/crosscheck/rules.py": None, "distdoctor/crosscheck/engine.py": None,
               "distdoctor/nccltest/compare.py": 1}
    for folder, _dirs, files in os.walk(os.path.join(REPO, "distdoctor")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, REPO)
            with open(path) as fh:
                tree = ast.parse(fh.read())
            built = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Rule"]
            if rel in allowed:
                assert allowed[rel] is None or len(built) == allowed[rel], rel
            else:
                assert not built, f"{rel} builds its own Rule(...): add it to crosscheck/rules.py"


def test_one_list_of_compared_environment_variables():
    env = {"NCCL_IB_HCA": "mlx5_0", "GLOO_SOCKET_IFNAME": "eth0", "TORCH_DISTRIBUTED_DEBUG": "INFO",
           "UCX_TLS": "rc", "OMPI_MCA_btl_tcp_if_include": "eth0", "RANK": "3", "CUDA_VISIBLE_DEVICES": "0",
           "NCCL_IB_TOKEN": "hunter2", "HOME": "/root"}
    assert inventory.compared_env(env) == {
        "env.GLOO_SOCKET_IFNAME": "eth0", "env.NCCL_IB_HCA": "mlx5_0", "env.NCCL_IB_TOKEN": "<redacted>",
        "env.OMPI_MCA_btl_tcp_if_include": "eth0", "env.TORCH_DISTRIBUTED_DEBUG": "INFO", "env.UCX_TLS": "rc"}
    assert not hasattr(__import__("distdoctor.nccltest.fingerprint", fromlist=["x"]), "ENV_PREFIXES")


def _node(name: str, **facts) -> dict:
    return {"schema_version": "1.0", "tool": {"name": "distdoctor"}, "command": "check", "host": name,
            "status": "ok", "checks": [], "inventory": {"host.name": name, **facts}}


def test_fleet_and_nccl_test_judge_the_same_fact_the_same_way():
    """GPU count and a gloo setting on one node only: the same status and fix wording from both."""
    view = nodes.build({"a": _node("a", **{"gpu.count": 8, "env.GLOO_SOCKET_IFNAME": "eth0"}),
                        "b": _node("b", **{"gpu.count": 8, "env.GLOO_SOCKET_IFNAME": "eth0"}),
                        "c": _node("c", **{"gpu.count": 7})})
    fleet = {d.key: d for d in view.differences}
    assert fleet["gpu.count"].status is Status.FAIL and fleet["gpu.count"].outliers == ("c",)
    assert fleet["env.GLOO_SOCKET_IFNAME"].groups[-1].value == ABSENT
    fleet_fix = {f.subject: f.fix for f in view.findings}

    def fp(rank, host, **kw):
        return {"rank": rank, "host": host, "local_rank": 0, "interface": "eth0", "gpu.count": 8, **kw}

    found = {f.subject: f for f in nccl_compare.compare([fp(0, "a", **{"env.GLOO_SOCKET_IFNAME": "eth0"}),
                                                         fp(1, "b", **{"env.GLOO_SOCKET_IFNAME": "eth0"}),
                                                         fp(2, "c", **{"gpu.count": 7})])}
    assert found["gpu.count"].status is Status.FAIL
    assert found["gpu.count"].fix == fleet_fix["gpu.count"]
    assert found["GLOO_SOCKET_IFNAME"].fix == fleet_fix["env.GLOO_SOCKET_IFNAME"]
    assert found["GLOO_SOCKET_IFNAME"].fix.startswith("export GLOO_SOCKET_IFNAME=eth0")


def test_the_rule_type_is_the_engines():
    assert all(isinstance(r, Rule) for r in rules.NODE_RULES)
