"""A node's web console address travels in its Lease records (holder_http_address), so a
follower's console links to the leader's without calling it (with CURVE the leader would
not admit the follower's key): the record's round trip, what the keeper writes once the
address is set, and what a follower reads for the holder it names."""

from __future__ import annotations

from coordinator.leases import LeaseConfig, LeaseKeeper, LeaseValue, Role
from coordinator.leases.driver import decode_lease, encode_lease

CFG = LeaseConfig(lease_timeout_s=1.0, renew_interval_s=0.2, drift_margin_s=0.1)


def test_the_console_address_survives_the_record():
    lease = LeaseValue("a", "a:1", 7, False, holder_http_address="127.0.0.1:8080")
    assert decode_lease(encode_lease(lease, written_unix_ms=1)) == lease
    assert decode_lease(encode_lease(LeaseValue("a", "a:1", 0, True))).holder_http_address == ""


def test_a_leader_writes_its_console_in_its_takeover_and_renewals():
    k = LeaseKeeper("a", "a:1", CFG, seed=1)
    k.http_address = "127.0.0.1:8080"
    k.observe_entries(0, [])
    k.observe_tail(0.0, 0)
    k.observe_live_leases(0, {})
    takeover = k.poll(1.0)
    assert takeover is not None and takeover.lease.takeover
    assert takeover.lease.holder_http_address == "127.0.0.1:8080"
    k.append_succeeded(1.0, takeover.expected_id)
    assert k.role is Role.LEADER
    renewal = k.poll(1.0 + CFG.renew_interval_s + 0.01)
    assert renewal is not None and not renewal.lease.takeover
    assert renewal.lease.holder_http_address == "127.0.0.1:8080"


def test_a_follower_reads_the_console_of_the_holder_it_names_only():
    k = LeaseKeeper("x", "x:1", CFG, seed=1)
    assert k.holder_http_address("b") == ""  # no record seen
    k.observe_entries(1, [(1, LeaseValue("b", "b:1", 0, True, "127.0.0.1:9001"), ())])
    k.observe_tail(10.0, 1)
    assert k.hint(10.1).uuid == "b"
    assert k.holder_http_address("b") == "127.0.0.1:9001"
    assert k.holder_http_address("c") == ""  # not the holder of the last record
    # The next holder's record replaces it.
    k.observe_entries(2, [(2, LeaseValue("c", "c:1", 0, True, "127.0.0.1:9002"), ())])
    assert k.holder_http_address("b") == ""
    assert k.holder_http_address("c") == "127.0.0.1:9002"
