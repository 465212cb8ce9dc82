"""Every parser survives arbitrary text: property tests (hypothesis) over every public function
of every module in distdoctor/parsers/, found by discovery so a new parser is covered the day
it lands, plus hostlist.expand and NCCL_SOCKET_IFNAME parsing. A parser may refuse text only
with its documented ParseError (HostlistError for hostlists); anything else is a bug, and so
is taking more than a second over a 200 KB token."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import distdoctor.parsers as parsers_pkg
from distdoctor import hostlist, nccl_socket
from distdoctor.parsers import ParseError
from distdoctor.parsers.ssh import parse_ssh_result

# Extra arguments for the few parsers that take more than the text.
EXTRA = {"parse_id_list": ("CUDA_VISIBLE_DEVICES",), "parse_counts": ("SLURM_TASKS_PER_NODE",),
         "loopback_lines": ("node1",)}
NOT_TEXT = {"parse_ssh_result"}  # (returncode, stderr): fuzzed on its own below


def discover():
    found = []
    for info in pkgutil.iter_modules(parsers_pkg.__path__):
        module = importlib.import_module(f"{parsers_pkg.__name__}.{info.name}")
        for name, func in inspect.getmembers(module, inspect.isfunction):
            if func.__module__ == module.__name__ and not name.startswith("_") and name not in NOT_TEXT:
                found.append(pytest.param(func, id=f"{info.name}.{name}"))
    found.append(pytest.param(hostlist.expand, id="hostlist.expand"))
    found.append(pytest.param(nccl_socket.parse_ifname_list, id="nccl_socket.parse_ifname_list"))
    return found


PARSERS = discover()

# The pieces real outputs are made of, so the fuzzer reaches past the first line's check.
TOKENS = ["[", "]", "-", ",", "(x", ")", ":", "|", "=", "^", "\n", "\r\n", "\t", " ", "0", "01", "7",
          "65536", "99999999999999999999", "-1", "nan", "inf", "GPU", "GPU 0:", "UUID", "NV12", "SYS", "X",
          "NET/Socket", "NET/IB", "[0]", "eth0", "lo", "172.17.0.2<0>", "slurm 23.11.4", "Slurmctld(primary)",
          "mpirun (Open MPI) 4.1.5", "MCA", "version", "{", "}", '"', "'", "#", "\\", "\x00", "\ud800", "é",
          "Available Horovod", "[X]", "hostname", "port", "user", "slots=", "max_slots=", "libnccl.so.2",
          "=>", "(libc6,x86-64)", "inet", "mtu", "link/ether", "state UP", "Offending", "Host key"]
ANY_TEXT = st.text(alphabet=st.characters(blacklist_categories=()), max_size=400)  # surrogates included
PIECES = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
TEXT = st.one_of(ANY_TEXT, PIECES)
ALLOWED = (ParseError, hostlist.HostlistError)


def call(func, text):
    try:
        func(text, *EXTRA.get(func.__name__, ()))
    except ALLOWED:
        pass


@pytest.mark.parametrize("func", PARSERS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXT)
@example(text="\ud800")  # a lone surrogate, as os.environ holds for undecodable bytes
@example(text="\udcff\udcfe GPU 0: x")
@example(text="")
@example(text="\x00" * 10)
def test_every_parser_takes_any_text(func, text):
    call(func, text)


@pytest.mark.parametrize("func", PARSERS)
@pytest.mark.parametrize("token", ["9" * 200_000, "a" * 200_000, "[" * 200_000, "1-" * 100_000,
                                   "x" * 100_000 + "\n" + "GPU 0: " * 20_000],
                         ids=["digits", "letters", "brackets", "ranges", "gpu-lines"])
def test_every_parser_takes_a_200_kb_token_quickly(func, token):
    # CPU seconds of this process, not wall: a loaded machine (a parallel suite) does not move
    # them, and a quadratic parser on 200 KB still needs minutes of them.
    start = time.process_time()
    call(func, token)
    assert time.process_time() - start < 1.0


@settings(max_examples=150, deadline=None)
@given(returncode=st.one_of(st.none(), st.integers(-2**31, 2**31)), stderr=TEXT, timed_out=st.booleans())
def test_ssh_outcome_takes_any_stderr(returncode, stderr, timed_out):
    parse_ssh_result(returncode, stderr, timed_out)


def test_discovery_covers_the_parsers_package():
    names = {p.id for p in PARSERS}
    for expected in ("slurm.parse_counts", "nvidia_smi.parse_topo_matrix", "hostfile.parse_hostfile",
                     "ip.parse_ip_addr", "nccl_net_log.parse_nccl_net_log", "hostlist.expand"):
        assert expected in names


NUMBERISH = st.sampled_from(["0", "7", "-1", "nan", "inf", "-inf", "1e400", "0x1f", "0xZZ", "9" * 5000, "[N/A]",
                             "N/A", "Enabled", "Disabled", "", " ", "81920 MiB", "\ud800"])


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.lists(NUMBERISH, min_size=9, max_size=9), min_size=1, max_size=4))
def test_query_gpu_rows_of_odd_numbers(rows):
    from distdoctor.parsers.nvidia_smi import parse_query_gpu

    call(parse_query_gpu, "\n".join(", ".join(row) for row in rows))
