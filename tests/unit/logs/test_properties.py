"""Arbitrary text never makes a log-reading function raise (parsers may raise ParseError, which
callers turn into findings, and nothing else)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distdoctor.logs import pasted, prefix
from distdoctor.logs.diagnose import diagnose
from distdoctor.logs.nccl_setup import judge
from distdoctor.logs.reader import Block
from distdoctor.logs.scan import Scanner
from distdoctor.parsers import ParseError
from distdoctor.parsers.collect_env import parse_collect_env
from distdoctor.parsers.ibstat import parse_ibstat
from distdoctor.parsers.ip import parse_ifconfig, parse_ip_addr
from distdoctor.parsers.nccl_net_log import parse_nccl_net_log
from distdoctor.redact import redact_text

from .stub_catalogue import STUB

# Text built from the pieces logs are made of, so the search reaches the interesting paths.
PIECES = st.sampled_from([
    "0: ", "[1,3]<stderr>:", "[default2]:", "[rank5]:", "> ", "  12 | ", "2024-05-01 12:03:41,123 ",
    "Nov 24 12:03:41 gpu1 kernel: ", "[E1124 12:03:41.123456 1234 x.cpp:1] ", "[E ProcessGroupNCCL.cpp:1] ",
    "[12:03:41] ", "gpu1:100:101 [0] ", "NCCL INFO ", "NCCL WARN ", "rank 3 nranks 8", "[Rank 7] ",
    "srun: error: n1: task 3: Killed", "Bootstrap : Using eth0:10.0.0.1<0>", "NET/Socket : Using [0]lo:127.0.0.1<0>",
    "NCCL version 2.21.5+cuda12.4", "CUDA out of memory", "Watchdog caught collective operation timeout",
    "Connect to 10.0.0.4<56849> failed", "1: lo: <UP,LOOPBACK> mtu 65536", "    inet 10.0.0.1/24 scope global eth0",
    "CA 'mlx5_0'", "\tPort 1:", "\t\tState: Active", "hca_id:\tmlx5_1", "PyTorch version: 2.1",
    "GPU0\tGPU1\tCPU Affinity", "GPU0\t X \tNV12", "eth0: flags=4163<UP>  mtu 1500", "NCCL_SOCKET_IFNAME=eth0",
    "\n", "\t", " ", ":", "[", "]", "<", ">", "=", "\x00", "\ufffd", "é",
])
TEXT = st.one_of(st.text(max_size=300), st.lists(PIECES, max_size=40).map("".join))
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(TEXT)
def test_prefix_split(text):
    for line in text.split("\n"):
        p = prefix.split(line)
        assert isinstance(p.body, str)
    prefix.rank_from_path(text)
    prefix.local_rank_from_path(text)
    redact_text(text)


@FAST
@given(TEXT)
def test_parsers_raise_only_parse_error(text):
    for parse in (parse_ibstat, parse_collect_env, parse_ip_addr, parse_ifconfig):
        try:
            parse(text)
        except ParseError:
            pass
    parse_nccl_net_log(text)


@FAST
@given(TEXT)
def test_pasted_sections(text):
    sections, env = pasted.find("x", text)
    assert all(isinstance(v, str) for v in env.values())
    if len(sections) <= 2:
        pasted.runs([("x", text)])


@FAST
@given(st.binary(max_size=400) | TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")), st.booleans())
def test_scan_and_diagnose(data, whole):
    data = data if data.endswith(b"\n") else data + b"\n"
    scanner = Scanner(STUB, use_grep=False, max_line=64)
    scanner.feed([Block("x", 0, data, 1, True, whole)])
    scan = scanner.resolve()
    assert diagnose(scan)
    assert judge(scan)
