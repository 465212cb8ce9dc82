"""What each rank says of NCCL's own interface choice (nccltest/fingerprint.py)."""

from distdoctor.facts import Facts
from distdoctor.nccltest.fingerprint import nccl_prediction
from tests.harness.labhost import lab_host


def test_a_virtual_pick_is_suspect_against_the_route_but_not_against_the_loopback():
    """The lab node: NCCL takes ib0 (a veth). Routed to rank 0 through enp1s0f0, that is the
    classic veth hang; routed through lo (rank 0 reaching its own name on 127.0.1.1) the route
    says nothing of the way to the others (live, it gave 'eth0 cannot be reached, use eth0')."""
    routed = nccl_prediction(Facts(lab_host()), "enp1s0f0")
    assert routed["nccl_interface"] == "ib0" and routed["nccl_suspect"].startswith("veth")
    assert nccl_prediction(Facts(lab_host()), "lo")["nccl_suspect"] == ""
