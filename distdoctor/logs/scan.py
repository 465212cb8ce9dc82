"""One pass over the input blocks: which lines show a failure signature, what NCCL said about
its setup, who printed what, and when each rank was last heard from.

A failed job's log is mostly chatter. Small inputs (one block) are read line by line. In
larger ones a search for every keyword that can matter (the catalogue's keywords, the INFO lines
nccl_setup reads, generic error words) picks the few candidate lines; only those are decoded and
split. The search is `grep -E -n` (the keywords as one alternation of literals; in C, about five
times faster than Python's regex alternation over the same bytes, and running beside this
process; see bench/log_scale.py), or that alternation where grep cannot run. Blocks read here
are fed to one grep as a stream; the blocks of a big plain file that the reader leaves in the
page cache (reader.Ref) are dealt to one grep per CPU and sent from the cache (search.py), the
answers read back in input order. The last lines of every block are kept too, so "last heard from" stays right to
within one block for ranks that keep logging.
"""

from __future__ import annotations

import collections
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from distdoctor.logs import ignored, outcome
from distdoctor.logs import prefix as prefix_mod
from distdoctor.logs.reader import FOLLOWS, Block
from distdoctor.logs.search import SENTINEL, Search

# INFO lines worth reading even though no signature names them (see nccl_setup.py), and lines
# that tie a pid to a rank.
INFO_KEYWORDS = ("NCCL version", "Bootstrap", "NET/Socket", "NET/IB : Using", "NET/IB: [", "NET : Using",
                 "Using network", "Using internal Network", "GPU Direct RDMA", "/GDRDMA", "cudaDriverVersion",
                 "IP Interfaces", "cudaDev", "INFO rank ", "via P2P", "via SHM", "via NET/", "via NVLS",
                 "via COLLNET", "via direct shared memory", "GLOBAL_RANK: ", "Completed store-based barrier")
# Every keyword is searched in every byte of a big log: one that shares a long substring with
# the chatter (" nranks " against COLL lines' "[nranks=64]") doubles the search time.
# Errors the catalogue may not know: an exception line, a signal, NCCL's WARN. When no signature
# matches anywhere, the earliest of these is still worth naming (with its rank and host).
# A C library's own error line names its source location first: Open MPI's components
# ("pml_ucx.c:285  Error: UCP worker does not support MPI_THREAD_MULTIPLE") and UCX before 1.4
# ("ucp_worker.c:260  Fatal: No uct_ep_h ...").
ERROR_KEYWORDS = ("Error", "Exception", "WARN", "Segmentation fault", "core dumped", "FATAL", "UCX  ERROR", "UCX ERROR",
                  "Fatal: ")
_ERROR = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception)\b[^:\n]{0,80}: \S|\bNCCL WARN\b|^(?:\S+ )?WARN \S|"
                    r"Segmentation fault|core dumped|\bFATAL\b|\bUCX +ERROR\b|"
                    r"^\s*\w[\w-]*\.(?:c|cc|cpp|cu|h):\d+ +(?:Error|Fatal): \S")
MAX_UNKNOWN = 1000
# lines worth a second, case-blind look at the catalogue when nothing matched them as written
_ERRORISH = re.compile(r"(?i)error|fail|warn|refused|timed out|timeout|abort|denied")
# torchrun's own verdict when a worker dies ("Root Cause (first observed failure):" then
# `host      : node1`, `rank      : 1 (local_rank: 1)`, `exitcode  : -9 (pid: 1234) (SIGKILL)`,
# torch/distributed/elastic/multiprocessing/errors): the rank that failed first, even when
# it died without a word (a SIGKILL from the OOM killer)
ELASTIC_KEYWORDS = ("Root Cause (first observed failure)", "host      : ", "(local_rank: ", "exitcode  : ",
                    "traceback : ", "time      : ")
_ELASTIC_FIELD = re.compile(r"^\s*(?P<key>time|host|rank|exitcode|traceback)\s*: ?(?P<value>.*)$")
TAIL_LINES = 64
MAX_TAIL_LINES = 2048
# Block tails are kept raw and split at the end, newest first, only until every speaker's last
# line is found: splitting every tail as it came cost 0.8 s per GiB of 64 ranks' chatter. Past
# this many bytes of kept tails the oldest are split at once (a job of thousands of ranks).
TAIL_BUDGET = 32 * 1024 * 1024
# Of a large input's first block, every line of this much is split to learn which ranks exist
# (each says something at start): the whole 4 MiB block cost 0.5 s, a fixed toll on every big log.
SURVEY = 1024 * 1024
# Small inputs are read line by line (and searched for pasted tool output) up to this many bytes
# in all: a folder of 512 ranks' 4 MiB logs goes through the fast path after the first few.
WHOLE_BUDGET = 8 * 1024 * 1024
MAX_EVENTS = 20_000
# Which launcher and libraries the log shows, so a fix fits them (signatures.CONTEXTS): looked
# for in the whole text of small inputs and in the first block of large ones. Plain substring
# tests (C speed), not one regex alternation: that costs seconds per 4 MiB block.
CONTEXT_SPAN = 1024 * 1024  # of each text: launchers and libraries announce themselves early
CONTEXT_WORDS = {
    "slurm": ("srun: ", "slurmstepd: ", "sbatch: ", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_PROCID", "SLURM_NTASKS",
              "SLURM_NODELIST"),
    "torchrun": ("torch.distributed.elastic", "torch.distributed.run", "torchrun"),
    "vllm": ("vllm", "vLLM", "VllmWorker", "EngineCore"),
    "ray": ("(raylet)", "ray::", "RayWorker", "ip=", "ray.exceptions"),
    "mpirun": ("mpirun", "mpiexec", "]<stdout>:", "]<stderr>:"),
    "deepspeed": ("deepspeed", "DeepSpeed"),
    "horovod": ("horovod", "Horovod"),
    "container": ("docker", "kubectl", "Kubernetes", "kubeflow"),
}
MAX_INFO_LINES = 20_000
# greps searching one big file at once: one per CPU, up to this many (a block of the file each
# in turn; the answers are read in order)
MAX_SEARCHES = 8
RECENT_LINES = 12


@dataclass
class Event:
    source: str
    index: int
    line: int  # 0 when unknown (after a skipped middle)
    raw: str
    body: str
    host: str
    rank: int | None
    local_rank: int | None
    pid: int | None
    time: tuple | None
    time_text: str
    signature: Any  # a catalogue Signature (an outcome Marker in Scan.exits)
    fields: dict = field(default_factory=dict)  # what a marker's named groups say
    before: tuple = ()  # (body, time, rank) of the lines read just before it in the same input
    # for a line without a clock of its own: the time of the nearest stamped line of its input
    # (Scanner.resolve), so NCCL's unstamped WARN is not ordered after the stamped error it caused
    near: tuple | None = None

    @property
    def order(self) -> tuple:
        # time first where the log gives one (or its neighbours do); then input order; then line order
        when = self.time if self.time is not None else self.near
        return ((0, when) if when is not None else (1,), self.index, self.line)


@dataclass
class Seen:
    last: tuple | None = None
    last_text: str = ""
    last_order: tuple = ()
    lines: int = 0


@dataclass
class Scan:
    events: list[Event] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)  # signature id -> matches past MAX_EVENTS
    info: list[prefix_mod.Prefixed] = field(default_factory=list)  # NCCL setup lines, split
    seen: dict[tuple, Seen] = field(default_factory=dict)  # (index, rank, host, pid, local_rank) -> Seen
    pid_rank: dict[tuple[str, int], int] = field(default_factory=dict)
    rank_host: dict[int, str] = field(default_factory=dict)
    unknown: list[Event] = field(default_factory=list)  # error-looking lines no signature matched
    notes: list[str] = field(default_factory=list)  # trouble while scanning, for the input's findings
    ranks: set[int] = field(default_factory=set)  # every rank a line was attributed to
    elastic: list[dict] = field(default_factory=list)  # torchrun's "Root Cause" records, in input order
    context: set[str] = field(default_factory=set)  # launchers and libraries the log shows (CONTEXT)
    exits: list[Event] = field(default_factory=list)  # lines saying a rank or process failed (outcome.py)
    long_lines: int = 0
    lines: int = 0  # lines of large inputs the reader left uncounted (blocks(..., count=False))


@dataclass
class _Span:
    """A block of a large input, without its data: where its lines are reported."""
    block: Block
    first: int | None = None  # number of its first line in its input; 0 when unknown
    lines: int = -1  # its number of lines; -1 until counted


class Prefilter:
    """Candidate lines: every line holding one of the keywords. `grep -E` runs as a streaming
    filter (Host.line_filter; search.py starts one per lane) while this process reads ahead, so
    the search and the reading overlap; Python's regex alternation over each block is the
    fallback where grep cannot run."""

    GREP_TIMEOUT = 120.0

    def __init__(self, words, host=None, use_grep: bool = True):
        words = sorted({w for w in words if w}, key=len, reverse=True)
        self.regex = re.compile(b"|".join(re.escape(w.encode()) for w in words))
        # One extended-regex alternation runs grep's DFA, which reads NCCL chatter at about 1.6x
        # the speed of `grep -F` with the same ~170 words as separate patterns (0.35 s against
        # 0.58 s per 256 MiB; grep turns separate literal patterns back into its -F search).
        # --line-buffered: a block's answer (its sentinel's line) comes out when found, not when
        # grep's output buffer fills, so that the scan can wait for it (search.py); a write per
        # candidate line, and there are few
        self.argv = ["grep", "-E", "-a", "-n", "--line-buffered", "-e",
                     "|".join(_ere(w) for w in [*words, SENTINEL.decode()])]
        self.host = host
        self.use_grep = use_grep and host is not None

    def start(self):
        return self.host.line_filter(self.argv, self.GREP_TIMEOUT) if self.use_grep else None

    def lines(self, data: bytes) -> list[tuple[int, bytes]]:
        """(0-based line index, line) of the candidate lines of one block, in Python."""
        out = []
        last = -1
        line = 0
        pos = 0
        for m in self.regex.finditer(data):
            start = data.rfind(b"\n", 0, m.start()) + 1
            if start <= last:
                continue
            line += data.count(b"\n", pos, start)
            pos = start
            last = start
            end = data.find(b"\n", m.end())
            out.append((line, data[start:end if end >= 0 else len(data)]))
        return out


_ERE_SPECIAL = frozenset(".[]()*+?{}|^$\\")


def _ere(word: str) -> str:
    """A literal word as a POSIX extended regex."""
    return "".join("\\" + c if c in _ERE_SPECIAL else c for c in word)


def _cpus(host) -> int:
    """The CPUs this process may run on (the machine's count where affinity is not known)."""
    try:
        return max(1, len(host.cpu_affinity()))
    except (AttributeError, OSError):  # no sched_getaffinity (not Linux)
        return max(1, host.cpu_count())


def _tail(data: bytes, want: int) -> tuple[int, bytes]:
    """The last `want` lines of a block (fewer if it has fewer), without the last newline, and
    how many they are."""
    end = len(data) - 1
    start = end
    kept = 0
    for _ in range(want):
        start = data.rfind(b"\n", 0, start - 1 if kept else end) + 1
        kept += 1
        if start == 0:
            break
    return kept, data[start:end] if kept else b""


def _ref_tail(ref, want: int) -> tuple[int, bytes]:
    """_tail of a block left in its file: its end read back, more of it until `want` lines
    (or the whole block) are in hand."""
    size = 64 * want
    while True:
        start = max(ref.start, ref.end - size)
        data = ref.read(start, ref.end) + (b"\n" if ref.newline else b"")
        if start == ref.start or data.count(b"\n") > want:
            break
        size *= 4
    if start > ref.start:
        data = data[data.find(b"\n") + 1:]  # a line cut by the window: the lines after it suffice
    return _tail(data, want) if data else (0, b"")


def speaker(scan: Scan, key: tuple) -> int | None:
    """The rank a `Scan.seen` key speaks for: the rank its lines state, else the rank its
    host:pid was seen with, else torchrun's local rank; None when the log does not say."""
    _index, rank, host, pid, local_rank = key
    if rank is None and host and pid is not None:
        rank = scan.pid_rank.get((host, pid))
    if rank is None and local_rank is not None:
        rank = local_rank
    return rank


class Scanner:
    def __init__(self, matcher, max_line: int = 64 * 1024, keep_text: int = 4 * 1024 * 1024, host=None,
                 use_grep: bool = True, on_text=None, searches: int | None = None):
        """on_text(source, text) is handed the whole text of each input small enough to be read
        line by line (where pasted tool output is looked for). `searches`: how many greps may
        search one big file at once (default: one per CPU this process may run on, at most
        MAX_SEARCHES)."""
        self.matcher = matcher
        self.on_text = on_text
        self.max_line = max_line
        self.keep_text = keep_text
        words = ({k for s in matcher.signatures for k in s.keywords} | set(INFO_KEYWORDS) | set(ERROR_KEYWORDS)
                 | set(ELASTIC_KEYWORDS) | outcome.keywords() | set(ignored.HEADERS))
        self.markers = outcome.markers()
        self._ignored = ignored.Ignored()  # reports Python printed and carried on after
        if host is None and use_grep:
            from distdoctor.host import Host

            host = Host()
        self.prefilter = Prefilter(words, host, use_grep)
        if searches is None:
            searches = min(_cpus(host), MAX_SEARCHES) if host is not None else 1
        self._search = Search(self.prefilter.start, searches, Prefilter.GREP_TIMEOUT)
        self.info_words = re.compile("|".join(re.escape(w) for w in INFO_KEYWORDS))
        self.scan = Scan()
        self._path_rank: dict[str, tuple[int | None, int | None]] = {}  # (rank, local rank) from a file name
        self._grep: bool | None = None  # whether the search runs in grep (None: not started)
        self._turn = 0  # which search gets a big file's next block
        self._surveyed = False
        self._whole_bytes = 0
        self._elastic: dict | None = None  # a torchrun Root Cause record being read
        # the last lines read per input (every line of small inputs, the candidates of large
        # ones): what a rank did just before a collective timed out
        self._recent: dict[int, collections.deque] = {}
        self._next_line: dict[int, int] = {}  # per input: the number of the line after the last counted block
        # (the block's span, how many of its last lines are kept, those lines raw)
        self._tails: collections.deque[tuple[_Span, int, bytes]] = collections.deque()
        self._tail_bytes = 0

    def feed(self, blocks: Iterable[Block]) -> Scan:
        try:
            for block in blocks:
                if block.ref is None and block.whole and len(block.data) <= self.keep_text \
                        and self._whole_bytes + len(block.data) <= WHOLE_BUDGET:
                    self._whole_bytes += len(block.data)
                    text = block.data.decode("utf-8", "replace")
                    self._context(text)
                    if self.on_text is not None:
                        self.on_text(block.source, text)
                    for n, line in enumerate(text.split("\n")[:-1]):
                        self._line(block, block.first_line + n if block.first_line else 0, line)
                else:
                    self._sparse(block)
        except BaseException:
            self._search.close(abort=True)  # an interrupt: the greps end now, unanswered
            raise
        self._answers(self._search.close())
        self.scan.notes.extend(self._search.notes)
        self._settle_tails()
        return self.scan

    def _settle_tails(self) -> None:
        """Split the kept block tails, newest first, until every rank heard anywhere has been
        heard in a tail: its last line is then known to within one block, as if every tail had
        been split (a rank that stopped logging early walks back to its last block)."""
        heard: set[int] = set()
        needed: set[int | None] = set()
        known = -1  # pid_rank's size when `needed` was computed: a new pid names more speakers
        while self._tails:
            span, kept, raw = self._tails.pop()
            self._tail_bytes -= len(raw)
            for key in self._tail_lines(span, kept, raw):
                who = speaker(self.scan, key)
                if who is not None:
                    heard.add(who)
            if known != len(self.scan.pid_rank):
                known = len(self.scan.pid_rank)
                needed = {speaker(self.scan, key) for key in self.scan.seen} - {None}
            if needed <= heard:
                break
        self._tails.clear()
        self._tail_bytes = 0

    def _context(self, text: str) -> None:
        text = text[:CONTEXT_SPAN]
        for flag, words in CONTEXT_WORDS.items():
            if flag not in self.scan.context and any(w in text for w in words):
                self.scan.context.add(flag)

    def _number(self, span: _Span) -> int:
        """The number of a span's first line in its input (0 when unknown), once the spans of
        its input before it are counted."""
        if span.first is None:
            fl = span.block.first_line
            span.first = fl if fl > 0 else (self._next_line.get(span.block.index, 0) if fl == FOLLOWS else 0)
        return span.first

    def _counted(self, span: _Span, lines: int | None) -> None:
        first = self._number(span)
        if lines is None:  # its search was lost: later line numbers of its input are unknown
            self._next_line[span.block.index] = 0
            return
        span.lines = lines
        self._next_line[span.block.index] = first + lines if first else 0
        if not span.block.lines:
            self.scan.lines += lines  # the reader left them to us

    def _sparse(self, block: Block) -> None:
        data = block.data
        ref = block.ref
        span = _Span(Block(block.source, block.index, b"", block.first_line, block.last, False, block.lines))
        if self._grep is None:
            self._grep = self._search.open()
        if self._grep:
            # a big file's blocks left in the page cache take turns among the greps, starting
            # with the second (its first block was read, as every other input's blocks are,
            # and these go to the first grep, one stream)
            turn = self._turn if ref is not None else 0
            self._turn = turn + 1 if ref is not None else 1
            self._answers(self._search.add(span, data, ref, turn))
        else:
            if ref is not None:
                data = ref.read(ref.start, ref.end) + (b"\n" if ref.newline else b"")
            self._counted(span, block.lines or data.count(b"\n"))
            first = span.first or 0
            for index, raw in self.prefilter.lines(data):
                self._line(span.block, first + index if first else 0, self._decode(raw))
        if not self._surveyed and data:
            self._context(data[:CONTEXT_SPAN].decode("utf-8", "replace"))
            # the start of the first block, every line: which ranks exist (every rank says
            # something at start), so the block tails below know how many lines to keep
            self._surveyed = True
            first = block.first_line if block.first_line > 0 else 0
            head = data[:data.rfind(b"\n", 0, SURVEY) + 1] if len(data) > SURVEY else data
            for n, raw in enumerate(head.split(b"\n")[:head.count(b"\n")]):
                self._line(block, first + n if first else 0, self._decode(raw), liveness_only=True)
        # the block's last lines, kept raw: who was still talking at its end (_settle_tails)
        # enough lines to see every rank at the end of a block, in a job of many ranks
        want = min(max(TAIL_LINES, 2 * len(self.scan.ranks)), MAX_TAIL_LINES)
        kept, raw = _tail(data, want) if ref is None else _ref_tail(ref, want)
        if kept:
            self._tails.append((span, kept, raw))
            self._tail_bytes += len(raw)
            # past the budget the oldest tails are split at once, when grep has counted their block
            while self._tail_bytes > TAIL_BUDGET and len(self._tails) > 1 and self._tails[0][0].lines >= 0:
                old, old_kept, old_raw = self._tails.popleft()
                self._tail_bytes -= len(old_raw)
                self._tail_lines(old, old_kept, old_raw)

    def _answers(self, answers: list) -> None:
        """The search's answers, in input order: candidate lines, then each block's line count."""
        for kind, span, k, *rest in answers:
            if kind == "end":
                self._counted(span, k)
            else:
                first = self._number(span)
                self._line(span.block, first + k if first else 0, self._decode(rest[0]))

    def _tail_lines(self, span: _Span, kept: int, raw: bytes) -> list[tuple]:
        """Read a kept tail (liveness only); the Scan.seen keys of its lines."""
        first = span.first + span.lines - kept if span.first and span.lines >= 0 else 0
        return [self._line(span.block, first + k if first else 0, self._decode(line), liveness_only=True)
                for k, line in enumerate(raw.split(b"\n"))]

    def _decode(self, raw: bytes) -> str:
        if len(raw) > self.max_line:
            self.scan.long_lines += 1
            raw = raw[:self.max_line]
        return raw.decode("utf-8", "replace")

    def _line(self, block: Block, line_no: int, line: str, liveness_only: bool = False) -> tuple:
        """Read one line; return its `Scan.seen` key."""
        p = prefix_mod.split(line)
        scan = self.scan
        if block.source not in self._path_rank:
            self._path_rank[block.source] = (prefix_mod.rank_from_path(block.source),
                                             prefix_mod.local_rank_from_path(block.source))
        path_rank, path_local = self._path_rank[block.source]
        rank = p.rank
        local_rank = p.local_rank if p.local_rank is not None else path_local
        if rank is not None and p.pid is not None and p.host:
            scan.pid_rank.setdefault((p.host, p.pid), rank)
        if rank is not None and p.host:
            scan.rank_host.setdefault(rank, p.host)
        if rank is None and local_rank is None and path_rank is not None:
            rank = path_rank
        if rank is not None:
            scan.ranks.add(rank)
        key = (block.index, rank, p.host, p.pid, local_rank)
        seen = scan.seen.get(key)
        if seen is None:
            seen = scan.seen[key] = Seen()
        seen.lines += 1
        order = (block.index, line_no)
        if not seen.last_order or order >= seen.last_order:
            seen.last_order = order
            seen.last_text = p.body[:300]
            if p.time is not None:
                seen.last = p.time
        if liveness_only:
            return key
        self._torchrun_root(block, line_no, p)
        recent = self._recent.get(block.index)
        if recent is None:
            recent = self._recent[block.index] = collections.deque(maxlen=RECENT_LINES)
        before = tuple(recent)
        recent.append((p.body[:300], p.time, rank))
        if self.info_words.search(p.body) and len(scan.info) < MAX_INFO_LINES:
            scan.info.append(p)
        if self._ignored.feed(block.index, p.body, line_no):
            return key
        sig = self.matcher.match(p.body)
        if sig is None and _ERRORISH.search(p.body):
            folded = getattr(self.matcher, "match_folded", None)
            sig = folded(p.body) if folded is not None else None
        if len(scan.exits) < MAX_UNKNOWN:
            hit = outcome.match(p.body, self.markers)
            if hit is not None:
                scan.exits.append(Event(block.source, block.index, line_no, line[:2000], p.body, p.host, rank,
                                        local_rank, p.pid, p.time, p.time_text, hit[0], hit[1]))
        if sig is None:
            if len(scan.unknown) < MAX_UNKNOWN and _ERROR.search(p.body):
                scan.unknown.append(Event(block.source, block.index, line_no, line[:2000], p.body, p.host, rank,
                                          local_rank, p.pid, p.time, p.time_text, None))
        elif len(scan.events) >= MAX_EVENTS:
            scan.dropped[sig.id] += 1
        else:
            scan.events.append(Event(block.source, block.index, line_no, line[:2000], p.body, p.host, rank,
                                     local_rank, p.pid, p.time, p.time_text, sig,
                                     before=before if sig.severity == "consequence" else ()))
        return key

    def _torchrun_root(self, block: Block, line_no: int, p) -> None:
        body = p.body
        if "Root Cause (first observed failure)" in body:
            # the report's failures listed before its root cause are not it
            self.scan.elastic[:] = [r for r in self.scan.elastic
                                    if not (r.get("headless") and r["index"] == block.index)]
            self._elastic = {"source": block.source, "index": block.index, "line": line_no}
            if len(self.scan.elastic) < 100:
                self.scan.elastic.append(self._elastic)
            return
        record = self._elastic
        m = _ELASTIC_FIELD.match(body)
        if (m and m.group("key") == "rank" and "(local_rank: " in body and len(self.scan.elastic) < 100
                and (record is None or record["index"] != block.index or "rank" in record)):
            # a paste that starts inside the report ("rank      : 0 (local_rank: 0)", then its
            # exitcode): the record still names the rank that failed (Megatron-LM#1880)
            record = self._elastic = {"source": block.source, "index": block.index, "line": line_no,
                                      "headless": True}
            self.scan.elastic.append(record)
        if record is None or record["index"] != block.index:
            return
        if not m or m.group("key") in record:
            return
        key, value = m.group("key"), m.group("value").strip()
        if key == "rank":
            r = re.match(r"(\d+)(?: \(local_rank: (\d+)\))?", value)
            if r:
                record["rank"] = int(r.group(1))
                record["local_rank"] = int(r.group(2)) if r.group(2) else None
        elif key == "exitcode":
            r = re.match(r"(-?\d+)(?: \(pid: (\d+)\))?\s*(?:\((\w+)\))?", value)
            if r:
                record["exitcode"] = int(r.group(1))
                record["pid"] = int(r.group(2)) if r.group(2) else None
                record["signal"] = r.group(3) or ""
        else:
            record[key] = value
        if key == "traceback":
            self._elastic = None

    def resolve(self) -> Scan:
        """Attribute events to ranks and hosts with what the whole log taught: a pid seen with
        its rank on one line names the rank of every other line of that pid."""
        scan = self.scan
        _common_clock(scan)
        _near_clock(scan.events + scan.unknown + scan.exits)
        scan.exits = outcome.retract(scan.exits)
        for e in scan.events + scan.unknown + scan.exits:
            if e.rank is None and e.host and e.pid is not None:
                e.rank = scan.pid_rank.get((e.host, e.pid))
            if e.rank is None and e.local_rank is not None and len({h for h in scan.rank_host.values()}) <= 1:
                e.rank = e.local_rank  # one node: torchrun's local rank is the rank
            if not e.host and e.rank is not None:
                e.host = scan.rank_host.get(e.rank, "")
        return scan


def _near_clock(events: list[Event]) -> None:
    """Give each line without a clock the time of the stamped line before it in its input (it
    came no earlier), else of the one after it (it came no later); ties keep line order."""
    by_input: dict[int, list[Event]] = {}
    for e in events:
        if e.line:
            by_input.setdefault(e.index, []).append(e)
    for group in by_input.values():
        group.sort(key=lambda e: e.line)
        stamped = [e for e in group if e.time is not None]
        if not stamped or len(stamped) == len(group):
            continue
        last = None
        for e in group:
            if e.time is not None:
                last = e.time
            else:
                e.near = last
        after = None
        for e in reversed(group):
            if e.time is not None:
                after = e.time
            elif e.near is None:
                e.near = after


def _common_clock(scan: Scan) -> None:
    """Make times from different formats comparable. glog and syslog stamps have no year and a
    bare `[12:03:41]` no date, so the times of one log are compared at the precision all of
    them share: (month, day, seconds), or seconds of the day alone."""
    events = [e for e in scan.events + scan.unknown + scan.exits if e.time is not None]
    seen = [v for v in scan.seen.values() if v.last is not None]
    stamps = [e.time for e in events] + [v.last for v in seen]
    if not stamps:
        return
    dated = all(t[1] and t[2] for t in stamps)

    def norm(t):
        if t is None:
            return None
        return (0, t[1], t[2], t[3]) if dated else (0, 0, 0, t[3])

    for e in events:
        e.time = norm(e.time)
    for e in scan.events:
        if e.before:
            e.before = tuple((body, norm(t), rank) for body, t, rank in e.before)
    for v in seen:
        v.last = norm(v.last)
