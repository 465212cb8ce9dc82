"""Host.line_filter, the streaming `grep` that `log` uses on large inputs: real processes."""

import time

from distdoctor.host import Host


def test_lines_are_numbered_over_everything_fed():
    f = Host().line_filter(["grep", "-F", "-n", "-e", "hit"], timeout=10)
    got = []
    for k in range(50):
        f.feed(b"".join(b"hit %d %d\n" % (k, i) if i % 100 == 7 else b"miss\n" for i in range(1000)))
        got += f.take()
    rest, code = f.close()
    got += rest
    assert code == 0
    assert len(got) == 500
    assert got[0] == b"8:hit 0 7\n" and got[-1] == b"49908:hit 49 907\n"


def test_a_filter_that_never_ends_is_killed_at_its_deadline():
    f = Host().line_filter(["sleep", "30"], timeout=0.5)
    f.feed(b"x\n")
    start = time.monotonic()
    _rest, code = f.close()
    assert code is None and time.monotonic() - start < 5


def test_a_missing_filter_is_none():
    assert Host().line_filter(["no-such-filter-distdoctor"], timeout=1) is None


def test_a_filter_that_stops_reading_never_blocks_the_caller():
    f = Host().line_filter(["sleep", "30"], timeout=0.5)
    start = time.monotonic()
    for _ in range(20):
        f.feed(b"x" * (1 << 20))  # far more than a pipe holds
    _rest, code = f.close()
    assert code not in (0, 1) and f.error
    assert time.monotonic() - start < 10


def test_a_range_of_a_file_is_sent_between_fed_bytes_in_order(tmp_path):
    path = tmp_path / "x.log"
    path.write_bytes(b"".join(b"hit %d\n" % i if i % 10 == 3 else b"miss %d\n" % i for i in range(100_000)))
    start = path.read_bytes().index(b"miss 20\n")
    end = path.read_bytes().index(b"miss 90000\n")
    f = Host().line_filter(["grep", "-F", "-n", "-e", "hit", "-e", "END"], timeout=10)
    with open(path, "rb") as fh:
        f.feed(b"hit first\n")
        f.feed_range(fh, start, end)
        f.feed(b"END\n")
        rows, code = f.close()
    assert code == 0 and not f.shrunk
    assert rows[0] == b"1:hit first\n" and rows[1] == b"5:hit 23\n"
    assert rows[-2] == b"%d:hit 89993\n" % (89993 - 20 + 2) and rows[-1] == b"%d:END\n" % (90000 - 20 + 2)
    assert len(rows) == 2 + 9000 - 2


def test_a_file_that_shrank_under_its_range_ends_the_partial_line(tmp_path):
    path = tmp_path / "x.log"
    path.write_bytes(b"one\ntwo hit")
    f = Host().line_filter(["grep", "-n", "-e", "hit", "-e", "END"], timeout=10)
    with open(path, "rb") as fh:
        f.feed_range(fh, 0, 4096)  # past its end: the file was cut since the range was taken
        f.feed(b"END\n")
        rows, _code = f.close()
    assert rows == [b"2:two hit\n", b"3:END\n"] and "shrank" in f.shrunk


def test_where_sendfile_cannot_feed_a_pipe_the_range_is_copied(tmp_path, monkeypatch):
    import errno
    import os

    def refused(*_args):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(os, "sendfile", refused)
    path = tmp_path / "x.log"
    path.write_bytes(b"".join(b"hit %d\n" % i for i in range(300_000)))  # several copies of 1 MiB
    f = Host().line_filter(["grep", "-c", "hit"], timeout=10)
    with open(path, "rb") as fh:
        f.feed_range(fh, 0, path.stat().st_size)
        rows, code = f.close()
    assert code == 0 and rows == [b"300000\n"] and not f.error


def test_a_queued_range_is_sent_from_its_file_even_once_the_caller_closed_it(tmp_path):
    # the reader closes a file when asked for the next one, whatever is still queued from it;
    # a file opened next (likely the same descriptor number) must not be sent in its place
    first, other = tmp_path / "first.log", tmp_path / "other.log"
    first.write_bytes(b"hit first\n" * 50_000)
    other.write_bytes(b"hit other\n" * 50_000)
    f = Host().line_filter(["grep", "-c", "first"], timeout=10)
    fh = open(first, "rb")  # noqa: SIM115 -- closed below, before the filter has read it
    for _ in range(6):
        f.feed_range(fh, 0, first.stat().st_size)
    fh.close()
    with open(other, "rb"):
        rows, code = f.close()
    assert code == 0 and rows == [b"300000\n"]
