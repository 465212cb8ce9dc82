from distdoctor.nccltest.fingerprint import driver_version
from distdoctor.nccltest.interface import choose, interface_for_address, route_source

IF_ADDRS = {
    "lo": [{"family": "inet", "address": "127.0.0.1", "netmask": "255.0.0.0"}],
    "ens5": [{"family": "inet", "address": "10.0.0.5", "netmask": "255.255.255.0"},
             {"family": "inet6", "address": "fe80::1%ens5", "netmask": None}],
}


def test_source_address_maps_to_its_interface():
    assert interface_for_address("10.0.0.5", IF_ADDRS) == "ens5"
    assert interface_for_address("fe80::1", IF_ADDRS) == "ens5"
    assert interface_for_address("127.0.0.2", IF_ADDRS) == "lo"
    assert interface_for_address("192.168.1.1", IF_ADDRS) == ""


def test_choose_reports_route_errors():
    assert choose("node1", IF_ADDRS, ("10.0.0.5", "")).name == "ens5"
    failed = choose("nowhere", IF_ADDRS, ("", "cannot resolve nowhere: Name or service not known"))
    assert (failed.name, failed.address) == ("", "") and "cannot resolve" in failed.how


def test_route_source_on_this_machine():
    assert route_source("127.0.0.1") == ("127.0.0.1", "")
    address, error = route_source("no-such-host.invalid")
    assert address == "" and error.startswith("cannot resolve no-such-host.invalid")


def test_driver_version_from_proc():
    text = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    assert driver_version(text) == "535.104.05"
    # the open kernel module's wording, as users post it
    open_text = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
                 "(dvs-builder@U22-I3-B17-02-5)  Tue Sep 23 09:55:41 UTC 2025\n")
    assert driver_version(open_text) == "580.95.05"
    assert driver_version(None) == "" and driver_version("garbage") == ""
