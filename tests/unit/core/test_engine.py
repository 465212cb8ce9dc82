"""The engine contains every way a check can misbehave and still ends on time."""

import time

from distdoctor.api import Context, check, ok, warn
from distdoctor.engine import run_checks
from distdoctor.facts import Facts
from distdoctor.model import Status
from distdoctor.testing import FakeHost


def _run(checks, **kw):
    facts = Facts(FakeHost())
    return run_checks(checks, lambda info: Context(facts, info.params), **kw)


@check("t.raises", title="raises")
def raises(ctx):
    yield ok("before the crash")
    raise RuntimeError("disk on fire")


@check("t.hangs", title="hangs", timeout=0.5)
def hangs(ctx):
    time.sleep(3600)
    yield ok("never")


@check("t.not-a-finding", title="yields junk")
def junk(ctx):
    yield "just a string"


@check("t.prints", title="prints")
def prints(ctx):
    print("chatty output that must not reach stdout")
    yield ok("fine otherwise")


@check("t.fine", title="fine")
def fine(ctx):
    yield warn("a warning", fix="do the thing", evidence={"HF_TOKEN": "hf_abc", "plain": "x"})


@check("t.silent", title="silent")
def silent(ctx):
    return None


def test_exception_becomes_one_error_with_message_and_keeps_earlier_findings():
    [run] = _run([raises])
    assert run.status is Status.ERROR
    assert [f.status for f in run.findings] == [Status.OK, Status.ERROR]
    assert "RuntimeError: disk on fire" in run.findings[1].summary
    assert "traceback" not in run.findings[1].evidence


def test_debug_keeps_the_traceback():
    [run] = _run([raises], debug=True)
    assert "Traceback" in run.findings[-1].evidence["traceback"]


def test_hung_check_times_out_and_the_rest_still_runs():
    start = time.monotonic()
    runs = _run([hangs, fine], total_timeout=30)
    elapsed = time.monotonic() - start
    by_id = {r.id: r for r in runs}
    assert by_id["t.hangs"].status is Status.TIMEOUT
    assert "0.5 s deadline" in by_id["t.hangs"].findings[0].summary
    assert by_id["t.fine"].status is Status.WARN
    assert elapsed < 5, f"a 0.5 s deadline took {elapsed:.1f} s to enforce"


def test_global_timeout_bounds_the_run_even_for_queued_checks():
    slow = [check(f"t.slow-{i}", title=f"slow {i}", timeout=60)(hangs.func) for i in range(3)]
    start = time.monotonic()
    runs = _run(slow, jobs=1, total_timeout=1.0)
    assert time.monotonic() - start < 5
    assert all(r.status is Status.TIMEOUT for r in runs)
    assert "did not start: the run's 1 s bound (--timeout) ran out first" in runs[2].findings[0].summary
    # The one running names the bound that really stopped it, not its own 60 s.
    assert "when the run's 1 s bound (--timeout) ran out" in runs[0].findings[0].summary
    assert "60 s" not in runs[0].findings[0].summary


def test_non_finding_is_an_error():
    [run] = _run([junk])
    assert run.status is Status.ERROR
    assert "not a Finding" in run.findings[0].summary


def test_printing_is_contained_and_reported(capsys):
    [run] = _run([prints])
    assert run.status is Status.ERROR
    assert "chatty output" not in capsys.readouterr().out
    assert "chatty output" in run.findings[-1].evidence["printed"]


def test_secret_evidence_is_redacted():
    [run] = _run([fine])
    assert run.findings[0].evidence == {"HF_TOKEN": "<redacted>", "plain": "x"}


def test_silent_check_is_ok():
    [run] = _run([silent])
    assert run.status is Status.OK and run.findings[0].summary == "no problems found"


def test_checks_run_in_parallel():
    sleepers = [check(f"t.sleep-{i}", title="sleep", timeout=10)(lambda ctx: time.sleep(0.5) or iter(()))
                for i in range(4)]
    start = time.monotonic()
    runs = _run(sleepers, jobs=4)
    assert all(r.status is Status.OK for r in runs)
    # Four half-second sleeps in parallel finish well before the two seconds they take in a row.
    assert time.monotonic() - start < 1.8


@check("t.probe-hung", title="probe hung", timeout=30)
def probe_hung(ctx):
    from distdoctor.api import ProbeTimeout

    yield ok("the part that answered")
    raise ProbeTimeout("`tool` did not answer within 2 s", explanation="what a hang means", fix="reboot it",
                       evidence={"API_TOKEN": "x"})


def test_probe_timeout_is_reported_timeout_by_the_engine_before_the_deadline():
    start = time.monotonic()
    [run] = _run([probe_hung])
    assert time.monotonic() - start < 5
    assert run.status is Status.TIMEOUT
    assert [f.status for f in run.findings] == [Status.OK, Status.TIMEOUT]
    hung = run.findings[1]
    assert (hung.summary, hung.explanation, hung.fix) == ("`tool` did not answer within 2 s", "what a hang means",
                                                          "reboot it")
    assert hung.evidence == {"API_TOKEN": "<redacted>"}
