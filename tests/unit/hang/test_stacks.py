import pytest

from distdoctor.hang import stacks
from distdoctor.host import CommandResult
from distdoctor.testing import fixture_text
from tests.conftest import data_path
from tests.unit.hang.fakeproc import proc_host


def capture(name: str) -> str:
    return fixture_text(data_path("py_spy", name))


def test_waiting_rank_parses_innermost_first():
    threads = stacks.parse_pyspy_json(capture("torchrun_gloo_rank0.json"), 0)
    assert [t.name for t in threads] == ["MainThread"]
    frames = threads[0].frames
    assert [(f.name, f.file) for f in frames][0] == ("all_reduce", "torch/distributed/distributed_c10d.py")
    assert frames[0].library and not frames[-1].library
    assert frames[-1].where() == "job.py:11"


def test_outlier_rank_parses():
    frames = stacks.parse_pyspy_json(capture("torchrun_gloo_rank2.json"), 0)[0].frames
    assert [(f.name, f.where()) for f in frames] == [("load_batch", "job.py:5"), ("<module>", "job.py:10")]


@pytest.mark.parametrize("name, kind", [("error_gone.txt", "gone"), ("error_not_python.txt", "not python"),
                                        ("error_denied.txt", "denied"), ("error_denied_exe.txt", "denied")])
def test_captured_failures_are_classified(name, kind):
    got, said = stacks.classify(capture(name))
    assert got == kind
    assert said and "backtrace" not in said.lower()


@pytest.mark.parametrize("text", ["", "not json", "{}", "[1, 2]", '[{"frames": 3}]'])
def test_garbage_is_a_parse_error(text):
    with pytest.raises(stacks.StackParseError):
        stacks.parse_pyspy_json(text, 1)


def test_dump_through_the_host(tmp_path):
    ok = proc_host({}, commands={("py-spy", "dump", "--pid", "5", "--json", "--nonblocking"): capture("torchrun_gloo_rank2.json"),
                                 ("py-spy", "dump", "--pid", "6", "--json", "--nonblocking"):
                                     CommandResult((), None, duration=5.0, timed_out=True),
                                 ("py-spy", "dump", "--pid", "7", "--json", "--nonblocking"):
                                     CommandResult((), 1, stderr=capture("error_gone.txt")),
                                 ("py-spy", "dump", "--pid", "8", "--json", "--nonblocking"): "garbage"})
    assert stacks.dump(ok, 5, "py-spy").main().frames[0].name == "load_batch"
    assert stacks.dump(ok, 6, "py-spy").error == "timeout"
    gone = stacks.dump(ok, 7, "py-spy")
    assert gone.error == "gone"
    assert gone.detail == "Error: Failed to get process executable name. Check that the process is running."
    assert stacks.dump(ok, 8, "py-spy").error == "garbled"
    assert stacks.dump(ok, 9, None).error == "missing"
    assert stacks.dump(ok, 9, "/nowhere/py-spy").error == "missing"  # FakeHost: not found, exit 127


def test_native_pauses_so_it_is_never_combined_with_nonblocking():
    host = proc_host({}, commands={"py-spy": "[]"})
    stacks.dump(host, 5, "py-spy", native=True)
    assert host.calls[-1] == ("py-spy", "dump", "--pid", "5", "--json", "--native")


def test_round_trip_through_the_snapshot_form():
    dump = stacks.StackDump(5, stacks.parse_pyspy_json(capture("torchrun_gloo_rank0.json"), 5))
    again = stacks.StackDump.from_dict(dump.to_dict())
    assert again.main().frames == dump.main().frames
