"""Prometheus output linted by Prometheus' own `promtool check metrics` (Debian's `prometheus`
package): the exposition parses and follows the naming conventions, for a node's `check`, for
the cluster view (`compare` over saved reports) and with the build-info and overall-status
series a dashboard needs."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import distdoctor_argv
from tests.harness import apt
from tests.harness.reports import fleet


@pytest.fixture(scope="module")
def promtool() -> str:
    apt.ensure("prometheus")
    found = shutil.which("promtool")
    if not found:
        pytest.skip("promtool not on PATH after installing prometheus")
    return found


def lint(promtool: str, text: str) -> str:
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_a_nodes_check_output_passes_promtool(promtool):
    done = subprocess.run([*distdoctor_argv(), "check", "--only", "host,net", "--format", "prometheus"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    lint(promtool, done.stdout)
    assert 'distdoctor_build_info{host="' in done.stdout and 'version="' in done.stdout
    # The run's status: exactly one series at 1.
    status = [line for line in done.stdout.splitlines() if line.startswith("distdoctor_status{")]
    assert len(status) == 6 and sum(line.endswith(" 1") for line in status) == 1


def test_the_cluster_view_passes_promtool(promtool, tmp_path):
    for node, doc in fleet(3, gpu002={"net.if.eth0.mtu": 1500}).items():
        (tmp_path / f"{node}.json").write_text(json.dumps(doc))
    done = subprocess.run([*distdoctor_argv(), "compare", *sorted(str(p) for p in tmp_path.glob("*.json")),
                           "--format", "prometheus"], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    lint(promtool, done.stdout)
    # node_status in check_status's style: one series per status, the node's at 1.
    gpu001 = [line for line in done.stdout.splitlines() if line.startswith('distdoctor_node_status{node="gpu001"')]
    assert len(gpu001) == 6 and sum(line.endswith(" 1") for line in gpu001) == 1
