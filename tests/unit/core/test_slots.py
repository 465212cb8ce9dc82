"""The torch slots of a parallel run (tests/harness/slots.py): taken in the order they were
waited for."""

import os
import threading
import time

from tests.harness.slots import every_slot, slot


def test_a_freed_slot_goes_to_the_one_that_waited_not_back_to_its_holder():
    """A worker's next torch test starts the moment its last one ends: it must not take the
    slot back from a test that has been waiting (a Slurm group's test waited 137 s so)."""
    kind, order = f"fairness-{os.getpid()}", []
    waiting = threading.Event()

    def other():
        waiting.set()
        with slot(kind, 1):
            order.append("waited")

    with slot(kind, 1):
        thread = threading.Thread(target=other)
        thread.start()
        waiting.wait(5)
        time.sleep(0.3)  # the other taker is in line
    with slot(kind, 1):
        order.append("holder again")
    thread.join(10)
    assert order == ["waited", "holder again"]


def test_every_slot_waits_for_the_held_ones_and_keeps_newcomers_out():
    kind, order = f"every-{os.getpid()}", []

    def everything():
        with every_slot(kind, 2):
            order.append("every")

    def newcomer():
        with slot(kind, 2):
            order.append("newcomer")

    with slot(kind, 2):
        first = threading.Thread(target=everything)
        first.start()
        time.sleep(0.3)  # in line, holding the free slot, waiting for this one
        second = threading.Thread(target=newcomer)
        second.start()
        time.sleep(0.3)
    first.join(10)
    second.join(10)
    assert order == ["every", "newcomer"]
