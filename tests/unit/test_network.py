"""Interface choice: the requested one, else the one routing to the peer, with a warning."""

import pytest
from sagetrain.errors import PlatformError
from sagetrain.launch.network import choose_interface

ADDRESSES = {"lo": "127.0.0.1", "eth0": "10.0.0.5", "eth1": "172.16.0.9"}


def routes_via(address: str | None):
    def route_towards(peer: str) -> str | None:
        return address

    return route_towards


def no_lookup(peer: str) -> str | None:
    raise AssertionError(f"looked up the route to {peer} although the requested interface exists")


def test_requested_interface_that_exists_is_used_without_resolving_the_peer():
    assert choose_interface("eth1", ADDRESSES, no_lookup, "algo-1") == ("eth1", None)


def test_sdk_v3_ethwe_falls_back_to_the_route_to_the_master():
    interface, warning = choose_interface("ethwe", ADDRESSES, routes_via("172.16.0.9"), "algo-1")
    assert interface == "eth1"
    assert (
        warning == "network interface ethwe does not exist on this host; using eth1, which routes to algo-1"
    )


def test_no_route_known_takes_the_first_non_loopback():
    interface, warning = choose_interface("ethwe", ADDRESSES, routes_via(None), "algo-1")
    assert interface == "eth0"
    assert "no interface routes to algo-1" in warning


def test_only_loopback_is_an_error():
    with pytest.raises(PlatformError, match="ethwe does not exist"):
        choose_interface("ethwe", {"lo": "127.0.0.1"}, routes_via("127.0.0.1"), "algo-1")
