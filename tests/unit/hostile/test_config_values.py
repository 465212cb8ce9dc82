"""Config files and expected values a hostile or broken site can write: loading stays linear in
the number of keys, a file past the size cap is refused rather than read in part, and a value
no node can meet (nan, a superscript digit, a 5,000-digit number) is a usage error naming it."""

from __future__ import annotations

import argparse
import time

import pytest

from distdoctor import config as config_mod
from distdoctor import limits
from distdoctor.commands.common import UsageError, expectations, load_config
from distdoctor.testing import FakeHost


def _many_keys(n: int) -> str:
    checks = "".join(f'[checks."site.c{i}"]\nthreshold = {i}\n' for i in range(n // 2))
    expect = "[expect]\n" + "".join(f'"fact.f{i}" = {i}\n' for i in range(n // 2))
    return checks + expect


def test_twenty_thousand_keys_load_within_a_bound():
    """Each key's line was found by rescanning the file: 20,000 keys took 100 s."""
    text = _many_keys(20_000)
    start = time.monotonic()
    config = config_mod.load([("site.toml", text)])
    took = time.monotonic() - start
    assert len(config.checks) == 10_000 and len(config.expect) == 10_000
    line = text.splitlines().index('"fact.f9999" = 9999') + 1
    assert config.expect_sources["fact.f9999"] == f"site.toml:{line}"
    assert took < 10, took


def test_line_numbers_still_name_the_key():
    text = "[run]\njobs = 4\n\n[checks.\"a.b\"]\ntimeout = nan\n"
    with pytest.raises(config_mod.ConfigError, match=r"^f.toml:5: "):
        config_mod.load([("f.toml", text)])


@pytest.mark.parametrize("size", [config_mod.MAX_BYTES + 1, config_mod.MAX_BYTES + 4096])
def test_a_config_past_the_cap_is_refused_not_truncated(size):
    # `timeout = 30` placed so that a cut at the cap would read it as `timeout = 3`
    head = "[run]\n# " + "x" * (config_mod.MAX_BYTES - 20) + "\n"
    text = head + "timeout = 30\n"
    text = text + "#" * max(0, size - len(text))
    host = FakeHost(files={"/site.toml": text})
    with pytest.raises(UsageError, match="larger than 4 MiB"):
        load_config(["/site.toml"], host)


def test_a_config_at_the_cap_is_read_whole():
    text = "[run]\ntimeout = 30\n"
    text = text + "#" * (config_mod.MAX_BYTES - len(text) - 1) + "\n"
    assert len(text) == config_mod.MAX_BYTES
    config = load_config(["/site.toml"], FakeHost(files={"/site.toml": text}))
    assert config.run["timeout"] == 30


@pytest.mark.parametrize("item", ["gpu.count=²", "gpu.count=١٢", "gpu.count=" + "9" * 5000, "gpu.count=nan",
                                  "gpu.count=>= NaN", "gpu.count=" + "1" * (limits.MAX_DIGITS + 1),
                                  "gpu.count=8\x1b[2J"])
def test_expect_values_no_node_can_have_are_usage_errors(item):
    with pytest.raises(UsageError):
        expectations(argparse.Namespace(expect=[item]), None)


@pytest.mark.parametrize("item, value", [("gpu.count=8", 8), ("nccl.version=>= 2.18", ">= 2.18"),
                                         ("limits.memlock=unlimited", "unlimited"), ("shm.size=inf", "inf"),
                                         ("gpu.count=" + "9" * limits.MAX_DIGITS, int("9" * limits.MAX_DIGITS))])
def test_ordinary_expectations_still_pass(item, value):
    key = item.partition("=")[0]
    assert expectations(argparse.Namespace(expect=[item]), None) == {key: value}


@pytest.mark.parametrize("body", ['"gpu.count" = 1' + "0" * 5000, "x = " + "[" * 100000])
def test_toml_that_python_cannot_read_is_a_config_error(body):
    with pytest.raises(config_mod.ConfigError):
        config_mod.load([("f.toml", "[expect]\n" + body + "\n")])
