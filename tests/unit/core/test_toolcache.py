"""The tool cache answers only while the tool, its files and its environment are unchanged;
it is private to its user and a broken entry is a miss. Real binaries (small shell scripts)
run through the real Host."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time

from distdoctor.host import Host
from distdoctor.toolcache import ToolCache, directory_for
from tests.conftest import distdoctor_argv


def _tool(path, text):
    path.write_text(f"#!/bin/sh\necho {text} $OMPI_MCA_x\necho ran >> {path}.log\n")
    path.chmod(0o755)


def _runs(path) -> int:
    try:
        return len(open(f"{path}.log").read().splitlines())
    except FileNotFoundError:
        return 0


def test_hit_then_invalidated_by_binary_env_and_file(tmp_path):
    tool = tmp_path / "ompi_info"
    _tool(tool, "one")
    dep = tmp_path / "ld.so.cache"
    dep.write_text("a")
    cache = ToolCache(str(tmp_path / "cache"), "0.1.0")
    host = Host(env={"PATH": os.environ["PATH"]}, cache=cache)

    def ask(h=host):
        return h.run_cached([str(tool), "--all"], timeout=10, depends_on=[str(dep)]).stdout.strip()

    assert ask() == "one" and _runs(tool) == 1
    assert ask() == "one" and _runs(tool) == 1  # from the cache
    other = Host(env={"PATH": os.environ["PATH"], "OMPI_MCA_x": "y"}, cache=cache)
    assert ask(other) == "one y" and _runs(tool) == 2  # the environment is part of the key
    time.sleep(0.01)
    _tool(tool, "two")  # reinstalled: size and mtime change
    assert ask() == "two" and _runs(tool) == 3
    dep.write_text("bb")
    assert ask() == "two" and _runs(tool) == 4
    assert ask() == "two" and _runs(tool) == 4
    assert Host(env={"PATH": os.environ["PATH"]}).run_cached([str(tool)], timeout=10).stdout  # no cache: runs


def test_private_atomic_and_corruption_is_a_miss(tmp_path):
    tool = tmp_path / "tool"
    _tool(tool, "x")
    directory = tmp_path / "cache"
    host = Host(env={"PATH": os.environ["PATH"]}, cache=ToolCache(str(directory), "0.1.0"))
    host.run_cached([str(tool)], timeout=10)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    [entry] = [p for p in directory.iterdir()]
    assert entry.suffix == ".json" and stat.S_IMODE(entry.stat().st_mode) == 0o600
    entry.write_text("{not json")
    assert host.run_cached([str(tool)], timeout=10).stdout.strip() == "x" and _runs(tool) == 2
    assert host.run_cached([str(tool)], timeout=10).stdout.strip() == "x" and _runs(tool) == 2  # rewritten
    directory.chmod(0o777)  # another user could plant answers: not read, not written
    try:
        host.run_cached([str(tool)], timeout=10)
        assert _runs(tool) == 3
    finally:
        directory.chmod(0o700)


def test_failures_are_not_cached(tmp_path):
    tool = tmp_path / "tool"
    tool.write_text(f"#!/bin/sh\necho ran >> {tool}.log\nexit 3\n")
    tool.chmod(0o755)
    host = Host(env={"PATH": os.environ["PATH"]}, cache=ToolCache(str(tmp_path / "c"), "0.1.0"))
    assert host.run_cached([str(tool)], timeout=10).returncode == 3
    assert host.run_cached([str(tool)], timeout=10).returncode == 3 and _runs(tool) == 2


def test_check_uses_xdg_cache_home_and_no_cache_skips_it(tmp_path):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert directory_for(env, "/home/u") == str(tmp_path / "xdg" / "distdoctor")
    assert directory_for({}, "/home/u") == "/home/u/.cache/distdoctor"
    argv = [*distdoctor_argv(), "check", "--only", "build", "--json"]
    subprocess.run([*argv, "--no-cache"], env=env, capture_output=True, timeout=120)
    assert not (tmp_path / "xdg" / "distdoctor").exists()
    subprocess.run(argv, env=env, capture_output=True, timeout=120)
    if any(os.access(os.path.join(d, t), os.X_OK) for d in env["PATH"].split(os.pathsep)
           for t in ("ompi_info", "mpirun", "ldconfig")):
        assert list((tmp_path / "xdg" / "distdoctor").iterdir())


def test_a_tool_started_early_runs_once_and_its_answer_is_shared(tmp_path):
    tool = tmp_path / "slowtool"
    tool.write_text(f"#!/bin/sh\nsleep 0.3\necho answer\necho ran >> {tool}.log\n")
    tool.chmod(0o755)
    host = Host(env={"PATH": os.environ["PATH"]}, cache=ToolCache(str(tmp_path / "c"), "0.1.0"))
    assert host.start_cached([str(tool), "--all"], timeout=10)
    assert not host.start_cached([str(tool), "--all"], timeout=10)  # already under way
    result = host.run_cached([str(tool), "--all"], timeout=10)  # waits for the early run
    assert result.stdout.strip() == "answer" and _runs(tool) == 1
    assert not host.start_cached([str(tool), "--all"], timeout=10)  # cached now: nothing to start
    other = Host(env={"PATH": os.environ["PATH"]}, cache=ToolCache(str(tmp_path / "c"), "0.1.0"))
    assert other.run_cached([str(tool), "--all"], timeout=10).stdout.strip() == "answer" and _runs(tool) == 1
    assert not Host(env={"PATH": os.environ["PATH"]}).start_cached([str(tool)], timeout=10)  # no cache, no start


def _fake_ompi_info(bin_dir):
    bin_dir.mkdir()
    tool = bin_dir / "ompi_info"
    tool.write_text(f"#!/bin/sh\necho ran >> {tool}.log\nsleep 0.2\n"
                    "echo 'ompi:version:full:4.1.4'\necho 'mca:mpi:base:param:mpi_built_with_cuda_support:value:false'\n")
    tool.chmod(0o755)
    return tool


def test_check_starts_ompi_info_early_only_for_the_checks_that_read_it(tmp_path):
    tool = _fake_ompi_info(tmp_path / "bin")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    argv = [*distdoctor_argv(), "check", "--json"]
    subprocess.run([*argv, "--only", "host"], env=env, capture_output=True, timeout=120)
    assert _runs(tool) == 0  # no chosen check reads it: not started
    first = subprocess.run([*argv, "--only", "build.mpi-cuda-aware"], env=env, capture_output=True, text=True, timeout=120)
    assert _runs(tool) == 1  # started early and read by the fact: one run
    assert "ompi_info" in first.stdout and str(tool) in first.stdout
    second = subprocess.run([*argv, "--only", "build.mpi-cuda-aware"], env=env, capture_output=True, text=True, timeout=120)
    assert _runs(tool) == 1  # from the cache
    assert [c["status"] for c in json.loads(first.stdout)["checks"]] == [c["status"] for c in json.loads(second.stdout)["checks"]]


def test_every_check_that_reads_ompi_info_is_named_for_the_early_start():
    """slowtools starts ompi_info early only for the checks it names: a check that reads the
    fact and is not named still works, but waits for ompi_info on a cold run. Keep them in step."""
    import inspect

    from distdoctor.checks import _from_modules
    from distdoctor.facts import slowtools

    readers = {info.id for _module, info in _from_modules() if "ompi_build" in inspect.getsource(info.func)}
    [(argv, _timeout, named)] = [t for t in slowtools.SLOW_TOOLS if t[0] == slowtools.OMPI_INFO]
    assert readers and readers == set(named), readers


def test_pruning_drops_the_least_recently_read_not_the_oldest_written(tmp_path, monkeypatch):
    """ompi_info's answer is written once and read on every run; entries keyed on a job's
    working directory pile up behind it. Reading an entry keeps it."""
    from distdoctor import toolcache

    monkeypatch.setattr(toolcache, "MAX_ENTRIES", 3)
    cache = ToolCache(str(tmp_path / "c"), "0.1.0")
    old = time.time() - 1000
    for i, key in enumerate(("ompi", "job1", "job2")):
        cache.put_value(key, i)
        os.utime(cache._path(key), (old + i, old + i))
    assert cache.get_value("ompi") == 0  # the oldest written, read again now
    cache.put_value("job3", 3)
    assert cache.get_value("ompi") == 0 and cache.get_value("job1") is None
