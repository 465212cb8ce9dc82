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
