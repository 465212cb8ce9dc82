"""`distdoctor health` through the real CLI on this machine, without Slurm: the snapshot taken in
a login shell judged under `env -i` (as slurmd starts a HealthCheckProgram), --format json and
prometheus, and a node whose state cannot be read (no scontrol here) that is not drained. The
drains themselves are tested on the real Slurm cluster (tests/integration/slurm/test_health_real.py)."""

from __future__ import annotations

import os
import stat
import subprocess

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import distdoctor_argv, load_report


def _snapshot(tmp_path, env):
    snap = subprocess.run([*distdoctor_argv(), "inventory", "--snapshot"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert snap.returncode == 0, snap.stderr
    cfg = tmp_path / "site.toml"
    cfg.write_text(snap.stdout)
    return cfg, snap.stdout


def test_snapshot_from_a_login_shell_passes_under_env_i(tmp_path):
    # The login shell has a CUDA toolkit and an MPI on PATH (module load); slurmd's environment has neither.
    tools = tmp_path / "modules" / "bin"
    tools.mkdir(parents=True)
    (tools / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.48'\n")
    (tools / "mpirun").write_text("#!/bin/sh\necho 'mpirun (Open MPI) 5.0.9'\n")
    for name in ("nvcc", "mpirun"):
        (tools / name).chmod(stat.S_IRWXU)
    login = {**os.environ, "PATH": f"{tools}:{os.environ.get('PATH', '/usr/bin:/bin')}",
             "XDG_CONFIG_HOME": str(tmp_path / "none"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    cfg, text = _snapshot(tmp_path, login)
    assert "cuda.toolkit" not in text and "mpi.version" not in text and '"kernel"' not in text
    assert "pip.mypy" not in text and "pip.distdoctor" not in text
    argv = [*distdoctor_argv(), "health", "--dry-run", "--node", "nwcnode1", "--config", str(cfg),
            "--only", "node.expectations", "--format", "json"]
    # slurmd's bare environment; a PYTHONPATH that is how this distdoctor is installed stays.
    kept = [f"PYTHONPATH={os.environ['PYTHONPATH']}"] if os.environ.get("PYTHONPATH") else []
    proc = subprocess.run(["env", "-i", *kept, *argv], capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    doc = load_report(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert doc["command"] == "health" and doc["host"] == "nwcnode1"
    assert doc["checks"][0]["status"] == "ok", doc["checks"][0]["findings"]
    assert doc["health"]["action"] == "none" and doc["health"]["draining_checks"] == []


def test_a_failing_node_whose_state_cannot_be_read_is_not_drained(tmp_path):
    cfg = tmp_path / "site.toml"
    cfg.write_text('[expect]\n"shm.size" = ">= 1099511627776000"\n"cpu.count" = 100000\n')
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "none"), "PATH": "/usr/bin:/bin"}
    base = [*distdoctor_argv(), "health", "--node", "nwcnode1", "--config", str(cfg), "--only", "node.expectations"]
    proc = subprocess.run([*base, "--format", "json"], capture_output=True, text=True, timeout=120, env=env)
    doc = load_report(proc.stdout)
    verdict = doc["health"]
    assert proc.returncode == 1 and verdict["action"] == "none" and verdict["command"] == []
    assert verdict["state"] is None and verdict["state_problem"]
    assert verdict["why"].startswith("not draining nwcnode1: its state cannot be read")
    assert verdict["draining_checks"] == ["node.expectations"]
    fixes = [f["fix"] for f in doc["checks"][0]["findings"] if f["status"] == "fail"]
    assert fixes and all("nwcnode1" in f for f in fixes if "# on" in f)
    text = subprocess.run(base, capture_output=True, text=True, timeout=120, env=env).stdout
    assert "FAIL node.expectations:" in text and "not draining nwcnode1: its state cannot be read" in text
    assert "would run" not in text and not any(line.startswith("draining") for line in text.splitlines())
    prom = subprocess.run([*base, "--format", "prometheus"], capture_output=True, text=True, timeout=120, env=env)
    families = {f.name: f for f in text_string_to_metric_families(prom.stdout)}
    action = {s.labels["action"]: s.value for s in families["distdoctor_health_action"].samples}
    assert action == {"drain": 0, "resume": 0, "none": 1}
    assert families["distdoctor_health_state_readable"].samples[0].value == 0
