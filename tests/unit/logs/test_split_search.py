"""A big plain file's blocks left in the page cache (reader `Ref`s) and searched by several real
greps at once must give exactly what one stream of read blocks gives: the same candidate lines
with the same line numbers, the same line count, the same last words per rank, whatever block
size, however many greps, wherever a failure line falls against the block edges."""

import pytest

from distdoctor.host import Host
from distdoctor.logs import reader, signatures
from distdoctor.logs.analysis import analyse
from distdoctor.logs.scan import Scanner

from .test_prefilter import _real_text

FAILURE = ("17: 2024-05-01T12:00:09.500000 gpu003:20017:20058 [1] misc/socket.cc:484 NCCL WARN socketPollConnect: "
           "Connect to 10.1.3.12<43211> returned 113(No route to host) errno 115(Operation now in progress)")


def _chatter(ops: int, ranks: int = 8, start: int = 0) -> list[str]:
    return [f"{r}: 2024-05-01T12:00:{(start + op) % 60:02d}.{r:06d} gpu{r // 4 + 1:03d}:{20000 + r}:{20040 + r} [{r % 4}] "
            f"NCCL INFO AllReduce: opCount {start + op:x} sendbuff 0x7f2b4c count 262144 datatype 7 op 0 root 0 "
            f"comm 0x55d5c8a0 [nranks={ranks}] stream 0x55d5c9b0" for op in range(ops) for r in range(ranks)]


def _timeouts(ranks: int = 8) -> list[str]:
    return [f"{r}: 2024-05-01T12:10:10.000000 [E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=262144, Timeout(ms)=600000) ran for "
            f"600010 milliseconds before timing out." for r in range(ranks) if r != 17 % ranks]


def _scan(paths, *, refs: bool, block: int, searches: int = 2, use_grep: bool = True):
    stats = reader.Stats()
    paths, problems = reader.expand(paths)
    assert not problems
    scanner = Scanner(signatures.matcher(), use_grep=use_grep, searches=searches)
    scan = scanner.feed(reader.blocks(paths, stats, block=block, count=False, refs_from=0 if refs else None))
    scanner.resolve()
    return stats, scan


def _what(stats, scan, liveness: bool = True):
    """Everything the diagnosis reads from a scan, comparable (lines of different inputs sorted:
    a small input read whole can come before the answers for a big one read earlier, either way)."""
    events = sorted((e.source, e.line, e.raw, e.signature.id, e.rank, e.host, e.time, e.before, e.near)
                    for e in scan.events)
    unknown = sorted((e.source, e.line, e.raw, e.rank, e.near) for e in scan.unknown)
    exits = sorted((e.source, e.line, e.raw, str(e.fields)) for e in scan.exits)
    out = {"events": events, "unknown": unknown, "exits": exits, "info": sorted(p.body for p in scan.info),
           "elastic": scan.elastic, "lines": stats.lines + scan.lines, "bytes": stats.bytes, "notes": scan.notes,
           "long": (stats.truncated_lines, scan.long_lines), "ranks": scan.ranks, "context": scan.context}
    if liveness:
        out["seen"] = {k: (s.last_order, s.last_text, s.last) for k, s in scan.seen.items()}
    return out


def _both(paths, block, searches=2, liveness=True, use_grep=True):
    one = _what(*_scan(paths, refs=False, block=block, use_grep=use_grep), liveness)
    split = _what(*_scan(paths, refs=True, block=block, searches=searches, use_grep=use_grep), liveness)
    return one, split


def _refs(path, block):
    stats = reader.Stats()
    return [b for b in reader.blocks([str(path)], stats, block=block, count=False, refs_from=0)]


@pytest.mark.parametrize("block", [4096, 65536, 100_003])
@pytest.mark.parametrize("searches", [2, 3])
def test_a_failure_straddling_each_block_edge_is_found_once_with_its_line_number(tmp_path, block, searches):
    lines = _chatter(4 * block // (8 * 180) + 10)
    text = "".join(line + "\n" for line in lines)
    # the failure line crosses the second raw chunk edge (block * 2): half of it on each side
    at = text.rfind("\n", 0, 2 * block - len(FAILURE) // 2) + 1
    before = text[:at].count("\n")
    body = text[:at] + FAILURE + "\n" + text[at:] + "".join(t + "\n" for t in _timeouts())
    assert at < 2 * block < at + len(FAILURE)
    path = tmp_path / "slurm-1.out"
    path.write_text(body)
    refs = _refs(path, block)
    assert sum(b.ref is not None for b in refs) >= 2  # the split path really ran
    one, split = _both([str(path)], block, searches)
    assert split == one
    hits = [e for e in split["events"] if "No route to host" in e[2]]
    assert [(h[1], h[4], h[5]) for h in hits] == [(before + 1, 17, "gpu003")]
    assert split["lines"] == body.count("\n")


@pytest.mark.parametrize("block", [4096, 32768])
def test_a_last_line_without_newline_is_searched_and_counted(tmp_path, block):
    lines = _chatter(40) + _timeouts()
    body = "".join(line + "\n" for line in lines) + FAILURE  # no newline at the very end
    path = tmp_path / "tail.out"
    path.write_text(body)
    assert _refs(path, block)[-1].ref.newline
    one, split = _both([str(path)], block)
    assert split == one
    assert split["lines"] == len(lines) + 1
    assert any(e[1] == len(lines) + 1 and "No route to host" in e[2] for e in split["events"])


@pytest.mark.parametrize("block", [8192, 65536, 1 << 20])
def test_every_real_log_in_tests_data_as_one_file(tmp_path, block):
    # hundreds of real failures, pastes and torchrun records, in every block size: the line
    # numbers of what is found are the same (who spoke last can shift with grep's timing in
    # either path, as ranks are learnt: not compared here)
    path = tmp_path / "all.log"
    path.write_bytes(_real_text())
    one, split = _both([str(path)], block, searches=3, liveness=False)
    assert len(one["events"]) > 200 and one["elastic"]
    assert split == one


def test_a_folder_of_big_and_small_files_and_the_python_search(tmp_path):
    chatter = "".join(line + "\n" for line in _chatter(30))
    (tmp_path / "a.log").write_text(chatter + FAILURE)  # big, last line without newline
    (tmp_path / "b.log").write_text(FAILURE + "\n")  # small: read whole
    (tmp_path / "c.log").write_text(chatter + "".join(t + "\n" for t in _timeouts()) + chatter)
    paths = [str(tmp_path)]
    one, split = _both(paths, 4096, searches=2)
    assert split == one
    assert [e[0].rsplit("/", 1)[1] for e in one["events"] if "No route" in e[2]] == ["a.log", "b.log"]
    # where grep cannot run, the blocks left in the file are read back and searched here
    py_one, py_split = _both(paths, 4096, use_grep=False)
    assert py_split == py_one
    assert [(e[0], e[1], e[2]) for e in py_split["events"]] == [(e[0], e[1], e[2]) for e in split["events"]]


def test_ref_blocks_cut_at_the_same_newlines_as_read_blocks(tmp_path):
    text = _real_text()[:400_000] + b"no newline at the end"
    path = tmp_path / "x.log"
    path.write_bytes(text)
    for block in (257, 4096, 65536, 99_991):
        read = list(reader.blocks([str(path)], reader.Stats(), block=block, count=False))
        refs = []
        got = []
        for b in reader.blocks([str(path)], reader.Stats(), block=block, count=False, refs_from=0):
            refs.append(b)  # read while the reader holds the file open
            got.append(b.data or b.ref.read(b.ref.start, b.ref.end) + (b"\n" if b.ref.newline else b""))
        assert refs[0].ref is None and all(b.ref is not None and not b.data for b in refs[1:])
        assert got == [b.data for b in read]
        assert [b.last for b in refs] == [b.last for b in read]


@pytest.mark.parametrize("at", [0, 30, 60])
def test_from_a_line_the_reader_would_truncate_on_the_file_is_read(tmp_path, at):
    # the chunk holding it, and every one after, is read and truncated as the reader does; the
    # blocks before it stay in the file; the scan is the same either way
    lines = [line + "\n" for line in _chatter(90)]
    lines.insert(at * 8, "17: " + "x" * 70_000 + " NCCL WARN the end of a long line\n")
    lines.append(FAILURE + "\n")
    path = tmp_path / "long.log"
    path.write_text("".join(lines))
    stats = reader.Stats()
    got = list(reader.blocks([str(path)], stats, block=4096, count=False, refs_from=0))
    assert stats.truncated_lines == 1
    refs = [b.ref is not None for b in got]
    # the first block is read anyway; then blocks left in the file, then blocks read
    assert not refs[0] and refs[1:] == sorted(refs[1:], reverse=True) and not refs[-1]
    assert any(refs) == (at > 0)
    one, split = _both([str(path)], 4096)
    assert split == one and split["long"] == (1, 0)
    # a line just under the window's reach is no reason to: the file is split to its end
    # (unless it fills the whole first chunk: that block is the survey's)
    path.write_text("".join(lines).replace("x" * 70_000, "y" * 30_000))
    assert (_refs(path, 4096)[-1].ref is not None) == (at > 0)


def test_small_files_stdin_and_gz_keep_the_single_stream(tmp_path):
    import gzip

    chatter = "".join(line + "\n" for line in _chatter(60)).encode()
    (tmp_path / "big.log").write_bytes(chatter)
    with gzip.open(tmp_path / "big.log.gz", "wb") as fh:
        fh.write(chatter)
    assert any(b.ref for b in reader.blocks([str(tmp_path / "big.log")], reader.Stats(), block=4096, count=False,
                                            refs_from=len(chatter)))
    assert not any(b.ref for b in reader.blocks([str(tmp_path / "big.log")], reader.Stats(), block=4096,
                                                count=False, refs_from=len(chatter) + 1))
    assert not any(b.ref for b in reader.blocks([str(tmp_path / "big.log.gz")], reader.Stats(), block=4096,
                                                count=False, refs_from=0))


def test_analyse_reports_the_same_diagnosis_split_or_not(tmp_path):
    body = "".join(line + "\n" for line in _chatter(50)) + FAILURE + "\n" + "".join(t + "\n" for t in _timeouts())
    path = tmp_path / "job.out"
    path.write_text(body)
    split, _ = analyse([str(path)], block=4096, refs_from=0, searches=2)
    one, _ = analyse([str(path)], block=4096, refs_from=None)

    def findings(runs):
        return [(r.id, [(f.status, f.summary, f.evidence.get("where") if f.evidence else None) for f in r.findings
                        if not f.summary.startswith("read ")]) for r in runs]

    assert findings(split) == findings(one)
    assert findings(one)[1][1][0][1].startswith("rank 17 on gpu003 failed first: NCCL could not reach a peer")


def test_an_interrupt_ends_every_grep_at_once(tmp_path):
    body = "".join(line + "\n" for line in _chatter(200))
    path = tmp_path / "big.out"
    path.write_text(body)
    started = []
    scanner = Scanner(signatures.matcher(), host=Host(), searches=3)
    start = scanner.prefilter.start

    def recording():
        f = start()
        started.append(f)
        return f

    scanner._search._start = recording

    def interrupted():
        for k, b in enumerate(reader.blocks([str(path)], reader.Stats(), block=4096, count=False, refs_from=0)):
            if k == 8:
                raise KeyboardInterrupt
            yield b

    with pytest.raises(KeyboardInterrupt):
        scanner.feed(interrupted())
    assert len(started) == 3
    for f in started:
        assert f.proc.poll() is not None  # killed and reaped, not left searching


def test_a_file_where_every_line_matches_holds_little_and_finds_the_same(tmp_path, monkeypatch):
    # the greps run ahead of the scan; past HOLD bytes of their answers the scan waits for the
    # answers due first instead of feeding more (grep --line-buffered answers a block at once)
    from distdoctor.logs import search

    monkeypatch.setattr(search, "HOLD", 2048)
    held = []
    catch_up = search.Search._catch_up

    def counted(self):
        out = catch_up(self)
        held.append(self._held)
        return out

    monkeypatch.setattr(search.Search, "_catch_up", counted)
    path = tmp_path / "warn.log"
    path.write_text("".join(f"{r % 8}: NCCL WARN peer {r} closed connection\n" for r in range(20_000)))
    one, split = _both([str(path)], 4096, searches=3)
    assert split == one and len(split["unknown"]) + len(split["events"]) > 900
    assert held and max(held) <= 2048  # each wait ended with at most HOLD held


def test_one_search_per_cpu_this_process_may_use_at_most_eight():
    from distdoctor.testing import FakeHost

    class NoAffinity(FakeHost):
        def cpu_affinity(self):
            raise AttributeError("sched_getaffinity")

    def width(host):
        return Scanner(signatures.matcher(), host=host)._search.width

    assert width(FakeHost(cpu_count=16, cpu_affinity=[2, 3, 5])) == 3
    assert width(FakeHost(cpu_count=64)) == 8
    assert width(NoAffinity(cpu_count=4)) == 4
    assert Scanner(signatures.matcher(), use_grep=False)._search.width == 1
