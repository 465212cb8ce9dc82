import gzip
import io
import os

from distdoctor.logs import reader
from distdoctor.model import Status


def _read(paths, **kw):
    stats = reader.Stats()
    return list(reader.blocks(paths, stats, **kw)), stats


def _text(blocks):
    return b"".join(b.data for b in blocks)


def test_plain_gz_and_missing_final_newline(tmp_path):
    (tmp_path / "a.log").write_bytes(b"one\ntwo")
    with gzip.open(tmp_path / "b.log.gz", "wb") as fh:
        fh.write(b"g1\ng2\n")
    blocks, stats = _read([str(tmp_path / "a.log"), str(tmp_path / "b.log.gz")])
    assert _text(blocks) == b"one\ntwo\ng1\ng2\n"
    assert [b.whole for b in blocks] == [True, True]
    assert stats.files == 2 and stats.lines == 4 and not stats.problems


def test_stdin(tmp_path):
    stdin = io.BufferedReader(io.BytesIO(b"a\nb\n"))
    blocks, _stats = _read(["-"], stdin=stdin)
    assert blocks[0].source == "-" and _text(blocks) == b"a\nb\n"


def test_blocks_hold_whole_lines_and_count_lines(tmp_path):
    (tmp_path / "big").write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    blocks, stats = _read([str(tmp_path / "big")], block=100)
    assert _text(blocks) == (tmp_path / "big").read_bytes()
    for b in blocks:
        assert b.data.endswith(b"\n")
        assert b.data.split(b"\n", 1)[0] == b"line %d" % (b.first_line - 1)
    assert stats.lines == 1000 and blocks[-1].last and not blocks[0].whole


def test_long_line_truncated(tmp_path):
    (tmp_path / "long").write_bytes(b"head\n" + b"x" * 10_000 + b"\ntail\n")
    blocks, stats = _read([str(tmp_path / "long")], block=1000, max_line=300)
    lines = _text(blocks).split(b"\n")
    assert lines[0] == b"head" and lines[1] == b"x" * 300 and lines[2] == b"tail"
    assert stats.truncated_lines == 1
    assert [b.first_line for b in blocks if b"tail" in b.data] == [3]


def test_head_and_tail_of_a_file_over_max_bytes(tmp_path):
    (tmp_path / "big").write_bytes(b"".join(b"line %04d\n" % i for i in range(1000)))
    blocks, stats = _read([str(tmp_path / "big")], block=256, max_bytes=2000)
    text = _text(blocks)
    assert text.startswith(b"line 0000\n") and text.endswith(b"line 0999\n")
    assert b"line 0500" not in text
    assert len(text) <= 2000 + 20
    assert any("skipped" in p.message and p.status == Status.WARN for p in stats.problems)
    assert {b.first_line for b in blocks if b"line 0999" in b.data} == {0}  # unknown after the gap


def test_problems_not_exceptions(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "core").write_bytes(b"\x7fELF\x00\x01\x02" + b"\x00" * 100)
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    secret = tmp_path / "secret"
    secret.write_bytes(b"x\n")
    secret.chmod(0)
    paths, problems = reader.expand([str(tmp_path), str(tmp_path / "nope")])
    _blocks, stats = _read(paths)
    messages = " | ".join(p.message for p in problems + stats.problems)
    assert "is empty" in messages and "not text" in messages and "No such file" in messages
    assert "bad.gz" in messages
    if os.geteuid() != 0:
        assert "Permission denied" in messages


def test_directory_cap(tmp_path):
    for i in range(30):
        (tmp_path / f"slurm-{i:03d}.out").write_text("x\n")
    paths, problems = reader.expand([str(tmp_path)], max_files=10)
    assert [os.path.basename(p) for p in paths] == [f"slurm-{i:03d}.out" for i in range(10)]
    assert "more than 10 files" in problems[0].message


def test_fifos_and_devices_are_skipped_not_opened(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    paths, problems = reader.expand([str(fifo), "/dev/null", str(tmp_path)])
    assert paths == []
    assert [p.path for p in problems] == [str(fifo), "/dev/null"]
    assert "not a regular file" in problems[0].message
