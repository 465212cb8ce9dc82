"""Where `distdoctor log` reads from: files, directories, compressed files and stdin, streamed in
blocks of whole lines so memory stays bounded whatever the input.

What can go wrong with an input is a `Problem` (a finding later), never an exception: a
missing or unreadable path, a binary file (a NUL byte in its first block: core dumps,
checkpoints, a sparse file), an empty file, a directory holding more files than --max-files,
a line longer than `max_line` (kept truncated), a file larger than `max_bytes` (its head and
tail are read and the middle skipped: a failed job's cause is near the end, its NCCL setup
lines near the start).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from distdoctor.model import Status

BLOCK = 4 * 1024 * 1024
MAX_LINE = 64 * 1024
MAX_BYTES = 4 * 1024 ** 3
MAX_FILES = 2000
_SNIFF = 8192
_MAGIC = ((b"\x1f\x8b", gzip.open), (b"BZh", bz2.open), (b"\xfd7zXZ\x00", lzma.open))


@dataclass(frozen=True)
class Problem:
    path: str
    status: Status
    message: str


@dataclass(frozen=True)
class Ref:
    """Whole lines of a plain file left unread here: bytes [start, end) of `file`, which a
    search process is fed straight from the page cache (Host.line_filter's feed_range). `newline`:
    the file's last line has none, and one is to follow it, as the reader adds one."""
    file: BinaryIO
    start: int
    end: int
    newline: bool = False

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file (absolute offsets), fewer if it shrank since."""
        return os.pread(self.file.fileno(), max(0, end - start), start)


@dataclass(frozen=True)
class Block:
    source: str     # the path as the user will recognise it ("-" for stdin)
    index: int      # order of the source among all inputs
    data: bytes     # whole lines, each ending in b"\n"
    first_line: int  # line number of data's first line (1-based)
    last: bool      # no more blocks follow from this source
    whole: bool     # the source fit in this one block
    lines: int = 0  # number of lines in data (0 when not counted: blocks(..., count=False))
    ref: Ref | None = None  # data left in the file (empty `data`): blocks(..., refs_from=N)


@dataclass
class Stats:
    files: int = 0
    bytes: int = 0
    lines: int = 0
    truncated_lines: int = 0
    problems: list[Problem] = field(default_factory=list)


def expand(paths: list[str], max_files: int = MAX_FILES) -> tuple[list[str], list[Problem]]:
    """The files to read, in the order given (a directory's files in name order, recursively,
    symlinks to directories not followed), at most max_files of them."""
    out: list[str] = []
    problems: list[Problem] = []
    for path in paths:
        if path == "-":
            out.append(path)
            continue
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            problems.append(Problem(path, Status.WARN, f"cannot read {path}: {exc.strerror or exc}"))
            continue
        if stat.S_ISREG(mode):
            out.append(path)
            continue
        if not stat.S_ISDIR(mode):
            # a FIFO with no writer would block the open forever; a device may never end
            problems.append(Problem(path, Status.WARN, f"{path} is not a regular file or directory: skipped "
                                                       f"(pipe it in with `... | distdoctor log -`)"))
            continue
        found: list[str] = []
        over = False

        def onerror(exc: OSError, top: str = path) -> None:
            problems.append(Problem(exc.filename or top, Status.WARN,
                                    f"cannot list {exc.filename or top}: {exc.strerror or exc}"))

        for root, dirs, files in os.walk(path, onerror=onerror):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(root, name)
                try:
                    if not stat.S_ISREG(os.stat(full).st_mode):
                        continue  # sockets, FIFOs, dangling links inside a log folder
                except OSError:
                    pass  # unreadable: reading it reports why
                if len(found) >= max_files:
                    over = True
                    break
                found.append(full)
            if over:
                break
        if over:
            problems.append(Problem(path, Status.WARN,
                                    f"{path} holds more than {max_files} files: read the first {max_files} "
                                    f"in name order (raise --max-files to read more)"))
        out.extend(found)
    return out, problems


def _open(path: str, stdin: BinaryIO | None) -> tuple[BinaryIO, int | None]:
    """A binary stream over the file's text (decompressed when the magic bytes say so) and
    its size when it is a plain regular file (None for stdin, pipes and compressed files)."""
    if path == "-":
        raw: BinaryIO = stdin  # type: ignore[assignment]
        head = raw.peek(8)[:8] if hasattr(raw, "peek") else b""
        for magic, opener in _MAGIC:
            if head.startswith(magic):
                return opener(raw, "rb"), None  # type: ignore[return-value]
        return raw, None
    fh = open(path, "rb")  # noqa: SIM115 -- the caller closes it; the stream outlives this call
    try:
        st = os.fstat(fh.fileno())
        head = fh.read(8)
        fh.seek(0)
    except OSError:
        fh.close()
        raise
    for magic, opener in _MAGIC:
        if head.startswith(magic):
            return opener(fh, "rb"), None  # type: ignore[return-value]
    return fh, st.st_size if stat.S_ISREG(st.st_mode) else None


# Block.first_line of a block that follows the previous block of its input, when lines are not
# counted here: the consumer numbers it from the lines it counted (or grep counted) before it
FOLLOWS = -1


# Plain files from this size on are left in the page cache after their first block
# (blocks(..., refs_from=REFS_FROM)): `log` feeds them to its searches without reading them.
REFS_FROM = 64 * 1024 * 1024


def blocks(paths: list[str], stats: Stats, *, stdin: BinaryIO | None = None, block: int = BLOCK,
           max_line: int = MAX_LINE, max_bytes: int = MAX_BYTES, count: bool = True,
           refs_from: int | None = None) -> Iterator[Block]:
    """Every input as blocks of whole lines. Problems go to stats.problems. count=False leaves
    the lines of an input read in several blocks uncounted (Block.lines 0, stats.lines without
    them, first_line FOLLOWS after the first block): counting costs 0.36 s per GiB, and `log`'s
    grep counts them anyway. With refs_from (and count=False), a plain uncompressed file of at
    least that size, read whole (not over max_bytes) and holding no line the reader would
    truncate, comes as its first block read and then blocks of `Ref`s with empty data, cut at
    the same newlines as if read; the file stays open until the consumer asks past its last."""
    for index, path in enumerate(paths):
        name = "-" if path == "-" else path
        try:
            stream, size = _open(path, stdin)
        except OSError as exc:
            stats.problems.append(Problem(name, Status.WARN, f"cannot read {name}: {exc.strerror or exc}"))
            continue
        try:
            yield from _read(name, index, stream, size, stats, block, max_line, max_bytes, count, refs_from)
        except (OSError, EOFError, lzma.LZMAError, ValueError) as exc:
            # a truncated .gz, an I/O error mid-file: keep what was read, say what happened
            stats.problems.append(Problem(name, Status.WARN, f"stopped reading {name}: {exc}"))
        finally:
            if stream is not stdin:
                stream.close()


def _read(name: str, index: int, stream: BinaryIO, size: int | None, stats: Stats, block: int,
          max_line: int, max_bytes: int, count: bool = True, refs_from: int | None = None) -> Iterator[Block]:
    # A regular file is read up to the size it had when opened: one that keeps growing (a live
    # job's log, or /proc/self/fd of a writer that never stops) would otherwise never end.
    limit = min(size, max_bytes) if size is not None and size <= max_bytes else None
    first = stream.read(min(block, max_bytes, limit if limit is not None else max_bytes))
    if not first:
        stats.problems.append(Problem(name, Status.SKIP, f"{name} is empty"))
        return
    if b"\0" in first[:_SNIFF]:
        stats.problems.append(Problem(name, Status.WARN,
                                      f"{name} is not text (NUL bytes in its first {_SNIFF} bytes): skipped"))
        return
    stats.files += 1
    head_limit = tail_from = None
    if size is not None and size > max_bytes:
        head_limit, tail_from = max_bytes // 2, size - max_bytes // 2
        stats.problems.append(Problem(name, Status.WARN,
                                      f"{name} is {_size(size)}: read its first and last {_size(max_bytes // 2)} "
                                      f"and skipped {_size(tail_from - head_limit)} between them (--max-bytes)"))
    if (refs_from is not None and not count and limit is not None and size is not None
            and size >= refs_from and size > len(first) and isinstance(stream, io.BufferedReader)
            and first.find(b"\n") >= 0 and _short_lines(stream.fileno(), 0, len(first), size, max_line)):
        yield from _references(name, index, stream, size, first, stats, block, max_line)
        return
    yield from _lines(name, index, stream, stats, first, block, max_line, max_bytes, count, size, limit,
                      head_limit, tail_from)


def _lines(name: str, index: int, stream: BinaryIO, stats: Stats, chunk: bytes, block: int, max_line: int,
           max_bytes: int, count: bool, size: int | None, limit: int | None, head_limit: int | None,
           tail_from: int | None, read: int = 0, line_no: int = 1) -> Iterator[Block]:
    """The blocks of whole lines from `chunk`, read at offset `read`, on (line_no: the number
    of its first line, 0 once a middle was skipped, FOLLOWS after blocks left uncounted)."""
    carry = b""
    skipping = False  # inside an over-long line whose head was already kept
    only_block = read == 0
    while chunk:
        read += len(chunk)
        stats.bytes += len(chunk)
        # one copy per block: the carried head of a line joined to the chunk up to its last newline
        # (joining first and cutting after copied every block twice)
        head, carry = carry, b""
        start = 0
        if skipping:  # the rest of an over-long line whose head was already kept
            nl = chunk.find(b"\n")
            start = len(chunk) if nl < 0 else nl + 1
            skipping = nl < 0
        cut = chunk.rfind(b"\n", start) + 1
        if cut == 0:  # no line ends in this chunk
            whole, carry = b"", head + memoryview(chunk)[start:]
        else:
            whole = head + memoryview(chunk)[start:cut] if head else chunk[start:cut]
            carry = chunk[cut:]
        if len(carry) > max_line:
            whole += carry[:max_line] + b"\n"
            carry = b""
            skipping = True
            stats.truncated_lines += 1
        jumped = False
        if head_limit is not None and read >= head_limit:
            stream.seek(tail_from)
            head_limit = None
            jumped = True
            rest = stream.read(block)
            nl = rest.find(b"\n")  # the tail starts mid-line: drop that partial line
            nxt = rest[nl + 1:] if nl >= 0 else b""
        elif size is None and read >= max_bytes:
            nxt = b""
            stats.problems.append(Problem(name, Status.WARN,
                                          f"{name}: read its first {_size(max_bytes)} only (--max-bytes)"))
        elif limit is not None:
            nxt = stream.read(min(block, limit - read)) if read < limit else b""
        elif size is not None and tail_from is not None and head_limit is None:
            nxt = stream.read(min(block, max(0, size - stream.tell()))) if stream.tell() < size else b""
        else:
            nxt = stream.read(block)
        last = not nxt
        if (last or jumped) and carry:
            if not skipping:
                whole += carry + b"\n"
            carry = b""
        if jumped:
            skipping = False
        if whole:
            if count or (last and only_block):
                n = whole.count(b"\n")
                stats.lines += n
                yield Block(name, index, whole, line_no, last, last and only_block, n)
                if line_no:
                    line_no += n
            else:
                yield Block(name, index, whole, line_no, last, False, 0)
                if line_no:
                    line_no = FOLLOWS
        only_block = False
        if jumped:
            line_no = 0
        chunk = nxt


def _references(name: str, index: int, fh: BinaryIO, size: int, first: bytes, stats: Stats,
                block: int, max_line: int) -> Iterator[Block]:
    """A plain file as its first block (read: the scanner surveys it) then `Ref` blocks, each
    ending at the last newline of its `block`-sized chunk, as _read's blocks do. Each chunk is
    probed for a line the reader would truncate before its block is handed on; from a chunk that
    holds one, the rest of the file is read (and truncated) as _read reads it."""
    fd = fh.fileno()
    start = first.rfind(b"\n") + 1
    stats.bytes += start
    yield Block(name, index, first[:start], 1, False, False, 0)
    k = 1
    while start < size:
        chunk_end = min((k + 1) * block, size)
        if not _short_lines(fd, k * block, chunk_end, size, max_line):
            fh.seek(start)
            yield from _lines(name, index, fh, stats, fh.read(min(block, size - start)), block, max_line, size,
                              False, size, size, None, None, read=start, line_no=FOLLOWS)
            return
        end = size if chunk_end >= size else _last_newline(fd, max(start, k * block), chunk_end) + 1
        k += 1
        if end <= 0:
            continue  # no line ends in this chunk: its bytes belong to the next block
        last = end >= size
        newline = last and os.pread(fd, 1, size - 1) != b"\n"
        stats.bytes += end - start
        yield Block(name, index, b"", FOLLOWS, last, False, 0, Ref(fh, start, end, newline))
        start = end


def _last_newline(fd: int, lo: int, hi: int) -> int:
    """Offset of the last newline in bytes [lo, hi) of the file; -1 when there is none."""
    while hi > lo:
        at = max(lo, hi - 65536)
        found = os.pread(fd, hi - at, at).rfind(b"\n")
        if found >= 0:
            return at + found
        hi = at
    return -1


def _short_lines(fd: int, lo: int, hi: int, size: int, max_line: int) -> bool:
    """Whether no line of the file is long enough for the reader to truncate, as far as the
    windows of max_line // 2 bytes (aligned on that size) that start in bytes [lo, hi) show:
    every window holds a newline (a line of max_line - 1 bytes or more spans a whole window).
    The file's last window may not, when its last line lacks a newline: that line then started
    after the window before, which had one. A small read per window (lines are short) costs
    about 30 ms of CPU per GiB."""
    width = max(1, max_line // 2)
    for at in range(-(-lo // width) * width, min(hi, size), width):
        if at + width >= size:
            break
        if b"\n" not in os.pread(fd, min(512, width), at) and b"\n" not in os.pread(fd, width, at):
            return False
    return True


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
