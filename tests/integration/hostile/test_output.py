"""-o writes to what the path is, never replaces a device or a pipe, and keeps a file's mode
and owner. Run as root (as distdoctor is on a cluster), with real device nodes, FIFOs,
symlinks and sockets made in a private tmp directory."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading

import pytest

from distdoctor import output
from distdoctor.model import EXIT_OK, EXIT_OUTPUT
from tests.harness.hostile import QUICK_PACK, dd, strict_json, write_pack


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mknod and chown need root")


def quick(tmp_path, out, *extra, timeout=60):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    return dd("check", "--checks-dir", str(pack), "--only", "hostile.*", "--format", "json", "-o", str(out),
              *extra, timeout=timeout)


@pytest.fixture
def devices(tmp_path):
    """Fresh char device nodes for /dev/null (1,3) and /dev/full (1,7)."""
    null, full = tmp_path / "null", tmp_path / "full"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    return null, full


@root_only
@pytest.mark.parametrize("name", ["null", "full"])
def test_a_device_node_is_written_in_place_and_never_replaced(tmp_path, devices, name):
    node = dict(zip(["null", "full"], devices))[name]
    before = os.lstat(node)
    result = quick(tmp_path, node)
    after = os.lstat(node)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    if name == "null":
        assert result.returncode == EXIT_OK, result.stderr
    else:
        assert result.returncode == EXIT_OUTPUT
        assert "no space left on device" in result.stderr
    assert "Traceback" not in result.stderr
    assert [p for p in os.listdir(tmp_path) if p.startswith(".distdoctor-")] == []


@root_only
def test_a_symlink_to_a_device_writes_to_the_device_and_keeps_the_link(tmp_path, devices):
    _null, full = devices
    link = tmp_path / "report.json"
    link.symlink_to(full)
    result = quick(tmp_path, link)
    assert result.returncode == EXIT_OUTPUT and "no space left on device" in result.stderr
    assert os.path.islink(link) and stat.S_ISCHR(os.stat(full).st_mode)


def test_a_fifo_gets_the_report_through_it(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = {}

    def read():
        with open(fifo, "rb") as fh:
            got["data"] = fh.read()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    result = quick(tmp_path, fifo)
    reader.join(10)
    assert result.returncode == EXIT_OK, result.stderr
    assert strict_json(got["data"].decode())["checks"][0]["id"] == "hostile.quick"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_with_no_reader_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = quick(tmp_path, fifo, timeout=30)
    assert result.returncode == EXIT_OUTPUT
    assert "FIFO with no reader" in result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dev_stdout_goes_to_the_real_stdout_without_replacing_it(tmp_path):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    target = tmp_path / "captured.json"
    target.write_text("old content that the shell's > already truncated\n")
    with open(target, "ab") as fh:  # as `>> captured.json`: the report is appended at the fd's offset
        proc = subprocess.run([sys.executable, "-m", "distdoctor", "check", "--checks-dir", str(pack),
                               "--only", "hostile.*", "--format", "json", "-o", "/dev/stdout"],
                              stdout=fh, stderr=subprocess.PIPE, timeout=60, check=False)
    assert proc.returncode == EXIT_OK, proc.stderr
    text = target.read_text()
    assert text.startswith("old content")
    strict_json(text.split("\n", 1)[1])


@pytest.mark.parametrize("make", ["directory", "socket", "dangling", "block"])
def test_what_is_not_a_file_device_or_pipe_is_refused_before_the_checks_run(tmp_path, make):
    path = tmp_path / "target"
    if make == "directory":
        path.mkdir()
    elif make == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    elif make == "dangling":
        path.symlink_to(tmp_path / "missing" / "file")
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod needs root")
        # 240-254 are reserved for local use: no driver, so nothing could be written even by mistake
        os.mknod(path, 0o600 | stat.S_IFBLK, os.makedev(240, 0))
    before = os.lstat(path)
    result = quick(tmp_path, path)
    assert result.returncode == EXIT_OUTPUT, result.stderr
    assert "cannot write the report" in result.stderr and "Traceback" not in result.stderr
    after = os.lstat(path)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


@root_only
def test_an_existing_file_is_replaced_atomically_keeping_its_mode_and_owner(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    os.chown(target, 4321, 4322)
    old_inode = os.stat(target).st_ino
    result = quick(tmp_path, target)
    assert result.returncode == EXIT_OK, result.stderr
    st = os.stat(target)
    assert stat.S_IMODE(st.st_mode) == 0o640 and (st.st_uid, st.st_gid) == (4321, 4322)
    assert st.st_ino != old_inode  # renamed over, never truncated in place
    strict_json(target.read_text())


def test_a_symlink_to_a_file_replaces_the_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    result = quick(tmp_path, link)
    assert result.returncode == EXIT_OK, result.stderr
    assert os.path.islink(link)
    strict_json(real.read_text())


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o027, 0o640)])
def test_a_new_file_honours_the_umask(tmp_path, umask, mode):
    target = tmp_path / f"new-{umask:o}.json"
    code = f"import os; os.umask({umask}); from distdoctor import output; output.write_report('{{}}', {str(target)!r})"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    assert stat.S_IMODE(os.stat(target).st_mode) == mode


def test_a_read_only_directory_is_refused_for_a_user_without_rights(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("drops to nobody with setpriv")
    # pytest's own tmp folders are 0700: nobody could not even look; the session TMPDIR is 0755
    base = tempfile.mkdtemp()
    os.chmod(base, 0o755)
    directory = os.path.join(base, "ro")
    os.mkdir(directory, 0o555)
    code = ("import sys\nfrom distdoctor import output\n"
            "try:\n    output.check_writable(sys.argv[1])\nexcept output.OutputError as exc:\n"
            "    print(exc); sys.exit(74)\n")
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-c", code, os.path.join(directory, "report.json")],
                          capture_output=True, text=True, timeout=30, env={**os.environ, "HOME": "/"}, check=False)
    assert proc.returncode == EXIT_OUTPUT, proc.stdout + proc.stderr
    assert "is not writable" in proc.stdout
    assert os.listdir(directory) == []
    shutil.rmtree(base)


def test_write_fd_gives_up_on_a_stalled_reader(tmp_path):
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        with pytest.raises(OSError, match="did not take the report"):
            output.write_fd(write_end, b"x" * (1 << 20), timeout=0.5)
    finally:
        os.close(read_end)
        os.close(write_end)


def _run_closed(tmp_path, close, *extra):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)

    def closing():
        for fd in close:
            os.close(fd)

    return subprocess.run([sys.executable, "-m", "distdoctor", "check", "--checks-dir", str(pack), "--only",
                           "hostile.*", "--format", "json", *extra], capture_output=True, timeout=60,
                          preexec_fn=closing, check=False)


def test_a_closed_stdout_is_exit_74_not_a_traceback(tmp_path):
    proc = _run_closed(tmp_path, [1])
    assert proc.returncode == EXIT_OUTPUT
    assert b"stdout" in proc.stderr and b"Traceback" not in proc.stderr


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_stdout_and_stderr_closed_still_write_the_file_and_the_code(tmp_path, fmt):
    out = tmp_path / "report.txt"
    assert _run_closed(tmp_path, [1, 2], "--format", fmt, "-o", str(out)).returncode == EXIT_OK
    assert "hostile.quick" in out.read_text()
    assert _run_closed(tmp_path, [1, 2], "--format", fmt).returncode == EXIT_OUTPUT
