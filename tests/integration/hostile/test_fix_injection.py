"""A fix built from what the machine says runs only what it prints: a directory in
LD_LIBRARY_PATH named `l;touch${IFS}pwned;x` holding a broken libnccl.so.2 gives a fix that,
pasted into a shell, lists that file and runs nothing else. Real distdoctor, real bash."""

from __future__ import annotations

import subprocess

import pytest

from tests.harness.hostile import dd, strict_json

HOSTILE_DIRS = ["l;touch${IFS}pwned;x", "l$(touch pwned)x", "l`touch pwned`x", "l&&touch pwned&&x", "l|touch pwned|x",
                "l'touch pwned'x", "l\ntouch pwned\nx"]


@pytest.mark.parametrize("name", HOSTILE_DIRS, ids=range(len(HOSTILE_DIRS)))
def test_a_library_directory_named_like_a_command_stays_a_name(tmp_path, name):
    libdir = tmp_path / name
    libdir.mkdir()
    (libdir / "libnccl.so.2").write_bytes(b"\x7fELF not really a library")
    result = dd("check", "--only", "build.nccl-libraries", "--json", "-v", "--timeout", "30",
                env={"LD_LIBRARY_PATH": str(libdir)}, timeout=60)
    assert "Traceback" not in result.stderr
    report = strict_json(result.stdout)
    fixes = [f["fix"] for c in report["checks"] for f in c["findings"] if f.get("fix")]
    mine = [fix for fix in fixes if "libnccl.so.2" in fix or "LD_LIBRARY_PATH" in fix]
    if not mine:
        pytest.skip(f"the check did not judge this library here: {[c['findings'] for c in report['checks']]}")
    run_in = tmp_path / "paste-here"
    run_in.mkdir()
    for fix in mine:
        subprocess.run(["bash", "-c", fix], cwd=run_in, capture_output=True, timeout=30, check=False)
    assert not (run_in / "pwned").exists(), mine
    assert not any(p.name == "pwned" for p in tmp_path.rglob("pwned")), mine


@pytest.mark.parametrize("version", ["2.0;touch${IFS}pwned;x", "2.0$(touch pwned)", "2.0`touch pwned`"],
                         ids=["semicolon", "dollar-paren", "backquote"])
def test_a_version_from_a_dist_info_folder_name_stays_a_word(tmp_path, version):
    """pip fixes quote the name==version they build from `*.dist-info` folder names."""
    site = tmp_path / "site"
    lib = site / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"\x7fELF not really a library")
    info = site / f"nvidia_nccl_cu12-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: {version}\n")
    (info / "RECORD").write_text("nvidia/nccl/lib/libnccl.so.2,,\n")
    result = dd("check", "--only", "build.nccl-libraries", "--json", "-v", "--timeout", "30",
                env={"PYTHONPATH": str(site)}, timeout=60)
    assert "Traceback" not in result.stderr
    report = strict_json(result.stdout)
    fixes = [f["fix"] for c in report["checks"] for f in c["findings"] if f.get("fix") and "pip" in f["fix"]]
    if not fixes:
        pytest.skip("the check found no pip NCCL package here")
    run_in = tmp_path / "paste-here"
    run_in.mkdir()
    for fix in fixes:
        # pip itself must not run: only what the shell makes of the line matters
        subprocess.run(["bash", "-c", f"pip() {{ :; }}; {fix}"], cwd=run_in, capture_output=True, timeout=30,
                       check=False)
    assert not (run_in / "pwned").exists(), fixes
