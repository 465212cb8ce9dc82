"""Entry points and installed distributions are read without importlib.metadata where a listing
gives the same answer (entrypoints.py, Host.distribution*): the cached list of entry points is
used only while nothing installed has changed, and the listing agrees with importlib.metadata on
every distribution installed here."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from importlib import metadata

import pytest

from distdoctor import entrypoints
from distdoctor.host.pyenv import normalize_name
from distdoctor.host import Host
from distdoctor.toolcache import ToolCache

GROUP = "distdoctor.checks"


def _dist(site, name, version, entry_points: str | None):
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nDescription: x\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,sha256=abc,10\n\"{name}/odd,name.py\",,\n{info.name}/METADATA,,\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)
    return info


@pytest.fixture
def site(tmp_path, monkeypatch):
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def _counting(monkeypatch):
    calls = []
    real = entrypoints._from_metadata

    def counted(group):
        calls.append(group)
        return real(group)

    monkeypatch.setattr(entrypoints, "_from_metadata", counted)
    return calls


def _names(found):
    return {ep.name: ep.value for ep in found}


def test_the_cached_list_is_read_until_something_installed_changes(site, tmp_path, monkeypatch):
    calls = _counting(monkeypatch)
    cache = ToolCache(str(tmp_path / "cache"), "0.1.0")
    info = _dist(site, "sitepack", "1.0", f"[{GROUP}]\nsite = sitepack.checks\n")

    first = _names(entrypoints.for_group(GROUP, cache))
    assert first["site"] == "sitepack.checks" and len(calls) == 1
    assert _names(entrypoints.for_group(GROUP, cache)) == first and len(calls) == 1  # from the cache

    (info / "entry_points.txt").write_text(f"[{GROUP}]\nsite = sitepack.checks2\nmore = sitepack.more\n")
    changed = _names(entrypoints.for_group(GROUP, cache))
    assert changed["site"] == "sitepack.checks2" and changed["more"] == "sitepack.more" and len(calls) == 2

    _dist(site, "otherpack", "2.0", f"[{GROUP}]\nother = otherpack.checks\n")  # a new distribution
    assert _names(entrypoints.for_group(GROUP, cache))["other"] == "otherpack.checks" and len(calls) == 3

    os.rename(info, site / "sitepack-1.1.dist-info")  # upgraded: the folder's name changes
    entrypoints.for_group(GROUP, cache)
    assert len(calls) == 4
    (site / "unrelated.txt").write_text("a file written in a sys.path folder changes nothing")
    entrypoints.for_group(GROUP, cache)
    assert len(calls) == 4


def test_a_tampered_or_foreign_cache_entry_is_a_miss(site, tmp_path, monkeypatch):
    calls = _counting(monkeypatch)
    cache = ToolCache(str(tmp_path / "cache"), "0.1.0")
    _dist(site, "sitepack", "1.0", f"[{GROUP}]\nsite = sitepack.checks\n")
    key = cache.key_for({"entry_points": GROUP, "installed": entrypoints.installed_state()})
    cache.put_value(key, {"not": "a list"})
    assert _names(entrypoints.for_group(GROUP, cache))["site"] == "sitepack.checks" and len(calls) == 1
    cache.put_value(key, [["site", 7]])
    assert _names(entrypoints.for_group(GROUP, cache))["site"] == "sitepack.checks" and len(calls) == 2


def test_an_entry_point_loads_module_and_attribute():
    assert entrypoints.EntryPoint("x", "os.path:join").load() is os.path.join
    assert entrypoints.EntryPoint("x", "os.path").load() is os.path
    assert entrypoints.EntryPoint("x", "os.path:join [extra1, extra2]").load() is os.path.join


def test_a_sys_path_entry_that_is_not_a_string_is_skipped(monkeypatch, tmp_path):
    """A sitecustomize may put a Path on sys.path: importlib.metadata ignores it, and the cache
    key once raised TypeError out of every command."""
    import pathlib

    monkeypatch.setattr(sys, "path", [pathlib.Path("/nonexistent"), *sys.path])
    found = entrypoints.for_group(GROUP, ToolCache(str(tmp_path), "0.1.0"))
    assert "builtin" in _names(found)
    assert any(name == "psutil" for name in Host().distribution_names())


def test_a_warm_list_imports_no_importlib_metadata(tmp_path):
    code = ("import sys\nfrom distdoctor import cli\ncode = cli.main(['list'])\n"
            "print(code, 'importlib.metadata' in sys.modules, file=sys.stderr)\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                           cwd=str(tmp_path)) for _ in range(2)]
    assert "net.nccl-socket-interface" in runs[0].stdout and runs[0].stdout == runs[1].stdout
    assert runs[0].stderr.split()[-2:] == ["0", "True"]
    assert runs[1].stderr.split()[-2:] == ["0", "False"]


def test_distributions_read_by_listing_agree_with_importlib_metadata():
    host = Host()
    names = host.distribution_names()
    expected = set()
    for dist in metadata.distributions():
        expected.add(normalize_name(getattr(dist, "_normalized_name", None) or dist.metadata["Name"] or ""))
    assert set(names) == expected - {""}
    for name in names:
        ours = host.distribution(name)
        dist = metadata.distribution(name)
        assert ours is not None, name
        assert (ours.name, ours.version, ours.location) == (dist.metadata["Name"], dist.version, str(dist.locate_file("")))
        listed = ours.files
        if sys.version_info >= (3, 12):
            # 3.12's importlib drops RECORD entries whose file is missing (seen on a GPU machine: a
            # `pip install --target` copy whose RECORD names ../../bin scripts that went elsewhere);
            # distdoctor lists RECORD as written, without a stat per file (torch lists thousands).
            listed = tuple(f for f in listed if os.path.exists(os.path.join(ours.location, f)))
        assert listed == tuple(str(f) for f in (dist.files or ())), name
        version, location, text = host.distribution_metadata(name)
        assert (version, location) == (dist.version, str(dist.locate_file(""))) and text == (dist.read_text("METADATA") or "")
    assert host.distribution("no-such-distribution-anywhere") is None
    assert host.distribution_metadata("no-such-distribution-anywhere") is None


def test_a_distribution_in_a_temporary_site_folder(site):
    _dist(site, "my_pack", "3.1.4", None)
    dist = Host().distribution("My-Pack")
    assert (dist.name, dist.version, dist.location) == ("my_pack", "3.1.4", str(site))
    assert dist.files == ("my_pack/__init__.py", "my_pack/odd,name.py", "my_pack-3.1.4.dist-info/METADATA")
    assert Host().distribution_metadata("my.pack")[:2] == ("3.1.4", str(site))


def test_what_a_listing_cannot_see_is_asked_of_importlib_metadata(site, tmp_path, monkeypatch):
    egg = site / "legacy_pack.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy-pack\nVersion: 0.9\n")
    assert Host().distribution("legacy-pack").version == "0.9"
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zipped_pack-1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped-pack\nVersion: 1.2\n")
        zf.writestr("zipped_pack-1.2.dist-info/RECORD", "")
    monkeypatch.syspath_prepend(str(archive))
    assert Host().distribution("zipped-pack").version == "1.2"
    assert "zipped_pack" in Host().distribution_names()


def test_a_damaged_record_or_metadata_still_finds_the_distribution(site):
    info = _dist(site, "broken_pack", "1.0", None)
    (info / "RECORD").write_text("broken_pack/__init__.py,,\n" + "x" * 200_000 + ",,\nlater.py,,\n")
    dist = Host().distribution("broken-pack")
    assert dist.version == "1.0" and dist.files == ("broken_pack/__init__.py",)
    (info / "METADATA").write_bytes(b"\xff\xfe not text")
    (info / "RECORD").unlink()
    dist = Host().distribution("broken-pack")
    assert (dist.name, dist.version, dist.files) == ("broken-pack", "", ())
    assert Host().distribution_metadata("broken-pack")[0] == ""
