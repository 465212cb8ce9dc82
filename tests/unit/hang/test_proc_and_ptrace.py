import pytest

from distdoctor.hang import grouping, procstate, ptrace
from distdoctor.hang.stacks import Frame

LIB = "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def test_stat_with_spaces_and_parentheses_in_comm():
    s = procstate.parse_stat("77 (pt_main (thr) 2) R 76 77 77 0 -1 4194304 10 0 0 0 150 50 0 0 20 0 9 0 12345 1 1\n")
    assert (s.pid, s.comm, s.state, s.ppid, s.cpu_ticks, s.threads, s.start_ticks) == \
        (77, "pt_main (thr) 2", "R", 76, 200, 9, 12345)


@pytest.mark.parametrize("text", ["", "garbage", "1 (x) S 0", "1 (x) S a b c d e f g h i j k l m n o p q r s"])
def test_garbled_stat_raises_a_stat_error(text):
    with pytest.raises(procstate.StatError):
        procstate.parse_stat(text)


def test_cpu_percent_and_a_reused_pid():
    a = procstate.parse_stat("1 (p) R 0 0 0 0 0 0 0 0 0 0 100 0 0 0 0 0 1 0 500")
    b = procstate.parse_stat("1 (p) R 0 0 0 0 0 0 0 0 0 0 150 0 0 0 0 0 1 0 500")
    other = procstate.parse_stat("1 (p) R 0 0 0 0 0 0 0 0 0 0 150 0 0 0 0 0 1 0 900")
    assert procstate.cpu_percent(a, b, 0.5) == 100.0
    assert procstate.cpu_percent(a, other, 0.5) is None
    assert procstate.cpu_percent(a, None, 0.5) is None


CAP_ALL, CAP_NONE = 0x1FFFFFFFFFF, 0


@pytest.mark.parametrize("scope, cap, uids, allowed, fix_start", [
    (None, CAP_ALL, {0}, True, ""),
    (0, CAP_NONE, {1000}, True, ""),  # same user, classic rules
    (1, CAP_NONE, {1000}, False, "sudo sysctl -w kernel.yama.ptrace_scope=0"),
    (1, CAP_ALL, {1000}, True, ""),
    (2, CAP_NONE, {1000}, False, "sudo distdoctor hang"),
    (3, CAP_ALL, {1000}, False, "# kernel.yama.ptrace_scope=3"),
    (0, CAP_NONE, {1000, 1001}, False, "# run distdoctor hang as the job's user"),
])
def test_ptrace_rules(scope, cap, uids, allowed, fix_start):
    got = ptrace.judge(scope, cap, 1000, uids)
    assert got.allowed is allowed
    assert got.fix.startswith(fix_start)


def test_capability_and_uid_parsing():
    assert ptrace.cap_effective("CapEff:\t0000000000080000\n") >> ptrace.CAP_SYS_PTRACE & 1 == 1
    assert ptrace.cap_effective("nothing") is None
    assert ptrace.uid_of("Uid:\t1000\t1001\t1000\t1000\n") == 1001


def frames(*spec):
    return [Frame(n, f, line, ("/usr/lib/python3.11/site-packages/" + f) if f.startswith("torch/") else "/home/u/" + f)
            for n, f, line in spec]


def test_library_lines_are_ignored_own_lines_are_not():
    a = frames(("all_reduce", "torch/distributed/distributed_c10d.py", 3252), ("main", "train.py", 120))
    b = frames(("all_reduce", "torch/distributed/distributed_c10d.py", 3249), ("main", "train.py", 120))
    c = frames(("all_reduce", "torch/distributed/distributed_c10d.py", 3252), ("main", "train.py", 130))
    assert grouping.signature(a) == grouping.signature(b) != grouping.signature(c)


def test_the_wave_is_the_largest_group_and_ties_go_to_the_collective():
    wait = frames(("all_reduce", "torch/distributed/distributed_c10d.py", 1), ("main", "train.py", 120))
    load = frames(("load_batch", "data.py", 88), ("main", "train.py", 110))
    groups = grouping.group([(0, load), (1, wait), (2, wait), (3, load)])
    assert groups[0].collective and groups[0].members == [1, 2]
    assert grouping.place(wait) == "all_reduce at train.py:120"
    assert grouping.place(load) == "load_batch at data.py:88"
    assert grouping.place([]) == "no Python frame"


def test_torch_logger_wrapper_is_not_named_as_the_collective():
    f = frames(("all_reduce", "torch/distributed/distributed_c10d.py", 3252),
               ("_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83),
               ("<module>", "job.py", 11))
    assert grouping.place(f) == "all_reduce at job.py:11"


@pytest.mark.parametrize("status, disposition", [
    ("SigBlk:\t0000000000000000\nSigIgn:\t0000000001001000\nSigCgt:\t0000000000000002\n", ""),  # Python's default
    ("SigBlk:\t0000000000000200\nSigIgn:\t0\nSigCgt:\t0000000000000002\n", "blocked"),  # sigwait thread
    ("SigBlk:\t0\nSigIgn:\t0\nSigCgt:\t0000000000000202\n", "caught"),
    ("SigBlk:\t0\nSigIgn:\t0000000000000200\nSigCgt:\t0\n", "ignored"),
    ("garbage", ""),
])
def test_what_sigusr1_would_do(status, disposition):
    assert procstate.usr1_disposition(status) == disposition


def test_native_frames_never_split_the_wave():
    """py-spy --native puts C/C++ frames (addresses in libc.so.6, different in every process
    under ASLR) above the Python ones: they must not make every rank an outlier."""
    def native(addr):
        return Frame(addr, "libc.so.6", 0, "libc.so.6")
    wait = frames(("all_reduce", "torch/distributed/distributed_c10d.py", 1), ("main", "train.py", 120))
    a = [native("0x7fa9e98a3f16"), *wait]
    b = [native("0x7f901c4a3f16"), native("futex_wait"), *wait]
    assert grouping.signature(a) == grouping.signature(b)
    assert grouping.place(a) == "all_reduce at train.py:120"
    assert Frame("x", "job.py", 1, "/home/u/job.py").native is False
