import pytest

from distdoctor import config as cfg
from distdoctor.api import check, ok


@check("t.thing", title="thing", params={"expected_count": 8, "names": ["eth0"], "anything": None})
def thing(ctx):
    yield ok("x")


def load(text, path="/etc/distdoctor/config.toml"):
    return cfg.load([(path, text)])


def test_later_files_win_key_by_key():
    config = cfg.load([
        ("/etc/a.toml", '[run]\ntimeout = 10\njobs = 2\n[checks."t.thing"]\nexpected_count = 4\nnames = ["ib0"]\n'),
        ("/home/u/b.toml", None),  # absent file: skipped
        ("/tmp/c.toml", '[run]\njobs = 6\n[checks."t.thing"]\nexpected_count = 2\n'),
    ])
    assert config.run == {"timeout": 10, "jobs": 6}
    assert config.params_for("t.thing", thing.params) == {"expected_count": 2, "names": ["ib0"], "anything": None}
    assert config.files == ["/etc/a.toml", "/tmp/c.toml"]


def test_wrong_types_name_file_line_and_key():
    with pytest.raises(cfg.ConfigError, match=r"^/x.toml:3: run.jobs must be an integer, not 'many'$"):
        cfg.load([("/x.toml", '[run]\ntimeout = 5\njobs = "many"\n')])
    with pytest.raises(cfg.ConfigError, match=r'checks."t.thing".enabled must be true or false'):
        load('[checks."t.thing"]\nenabled = "yes"\n')
    with pytest.raises(cfg.ConfigError, match="fail_on"):
        load('[run]\nfail_on = "sometimes"\n')


def test_param_type_is_checked_against_the_default():
    config = load('[checks."t.thing"]\nexpected_count = "eight"\n')
    with pytest.raises(cfg.ConfigError, match=r'expected_count must be an integer, not .eight.'):
        config.validate_against({"t.thing": thing})
    config = load('[checks."t.thing"]\nexpected_count = 8.0\nanything = {a = 1}\n')
    config.validate_against({"t.thing": thing})
    assert config.problems == []


def test_unknown_things_are_problems_not_errors():
    config = load('[run]\nverbose = true\n[checks."t.thing"]\nexpectd_count = 3\n[checks."t.gone"]\nx = 1\n'
                  '[reporting]\nx = 1\n')
    config.validate_against({"t.thing": thing})
    text = "\n".join(config.problems)
    assert "/etc/distdoctor/config.toml:2: unknown key run.verbose" in text
    assert "unknown parameter 'expectd_count' for t.thing (it takes: anything, expected_count, names)" in text
    assert '[checks."t.gone"] names no known check' in text
    assert "unknown section [reporting]" in text


def test_disable_and_enabled():
    config = load('[run]\ndisable = ["t.thing"]\n[checks."t.other"]\nenabled = false\ntimeout = 3\n')
    assert not config.enabled("t.thing") and not config.enabled("t.other") and config.enabled("t.x")
    assert config.timeout_for("t.other", 10) == 3.0 and config.timeout_for("t.x", 10) == 10


def test_syntax_error():
    with pytest.raises(cfg.ConfigError, match=r"^/etc/distdoctor/config.toml: invalid TOML: .*line 2"):
        load('[run]\ntimeout = = 3\n')
