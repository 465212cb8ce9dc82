"""The clock: one bound, and where the time went."""

from distdoctor.nccltest.clock import Clock


def test_time_by_phase_and_the_phase_that_used_the_bound():
    clock = Clock(started=100.0, timeout=10.0)
    clock.enter("start", 100.0)
    clock.enter("import torch", 100.2)
    clock.enter("rendezvous", 109.3)
    clock.enter("init", 109.5)
    assert clock.current == "init"
    spent = dict(clock.spent(now=110.0))
    assert round(spent["import torch"], 3) == 9.1 and round(spent["init"], 3) == 0.5
    assert clock.blame(now=110.0) == "import torch 9.1 s, init 0.5 s, start 0.2 s, rendezvous 0.2 s"
    assert clock.hog(now=110.0) == ("import torch", spent["import torch"])


def test_no_phase_hogs_a_run_that_is_merely_stuck_where_it_is():
    clock = Clock(started=0.0, timeout=10.0)
    clock.enter("init", 0.0)
    clock.enter("all-reduce", 3.0)
    clock.enter("init", 3.5)  # entered twice: summed
    assert dict(clock.spent(now=5.0))["init"] == 4.5
    assert clock.hog(now=5.0) == ("init", 4.5)
    assert Clock(0.0, 10.0).hog(now=1.0) is None


def test_the_reserve_keeps_time_for_the_report():
    clock = Clock(started=0.0, timeout=4.0)
    assert clock.deadline == 4.0 and clock.phase_deadline() == 3.0
    assert Clock(0.0, 60.0).phase_deadline() == 57.5
