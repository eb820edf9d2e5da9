"""Unit tests of the pure lease logic (coordinator/leases/lease.py): plain calls, time as input."""

from __future__ import annotations

import pytest

from coordinator.leases import AppendKind, LeaseConfig, LeaseKeeper, LeaseValue, NotServing, Role

CFG = LeaseConfig(
    lease_timeout_s=1.0,
    renew_interval_s=0.2,
    drift_margin_s=0.1,
    backoff_min_s=0.05,
    backoff_max_s=0.3,
    epochs_kept=2,
)


def keeper(uuid: str = "a") -> LeaseKeeper:
    return LeaseKeeper(uuid, f"{uuid}:1", CFG, seed=1)


def become_leader(k: LeaseKeeper, now: float = 0.0, tail: int = 0) -> int:
    """Drive a fresh keeper to leadership over a log whose last id is `tail`."""
    k.observe_entries(tail, [])
    k.observe_tail(now, tail)
    assert k.poll(now + 0.5) is None  # not yet: lease_timeout not elapsed
    t = now + CFG.lease_timeout_s
    assert k.poll(t) is None  # the live lease records must be read afresh first
    assert k.wants_full_read(t)
    k.observe_live_leases(tail, {})
    action = k.poll(t)
    assert action is not None and action.lease.takeover
    assert action.expected_id == tail + 1
    k.append_succeeded(t + 0.01, action.expected_id)
    assert k.role is Role.LEADER and k.epoch == tail + 1
    return action.expected_id


def test_follower_takes_over_after_timeout_from_sighting():
    k = keeper()
    k.observe_entries(5, [])
    k.observe_tail(10.0, 5)
    assert k.poll(10.99) is None
    # A new id resets the watch: the timeout counts from when the NEW id was seen.
    k.observe_entries(6, [])
    k.observe_tail(10.5, 6)
    assert k.poll(11.2) is None
    assert not k.wants_full_read(11.2)
    k.observe_live_leases(6, {})
    action = k.poll(11.5)
    assert action is not None
    assert action.expected_id == 7
    assert action.lease == LeaseValue("a", "a:1", 0, True)


def test_takeover_waits_until_history_is_read():
    k = keeper()
    k.observe_tail(0.0, 3)  # tail known but entries not read yet
    assert k.poll(5.0) is None
    k.observe_entries(3, [])
    assert k.poll(5.0) is None
    k.observe_live_leases(3, {})
    assert k.poll(5.0) is not None


def test_leader_lease_counts_from_append_start_minus_drift():
    k = keeper()
    become_leader(k)  # takeover started at t=1.0
    assert k.is_serving(1.0 + CFG.lease_timeout_s - CFG.drift_margin_s - 0.001)
    assert not k.is_serving(1.0 + CFG.lease_timeout_s - CFG.drift_margin_s)


def test_renewal_when_idle_invalidates_previous_renewal_not_takeover():
    k = keeper()
    takeover_id = become_leader(k)
    assert k.poll(1.1) is None  # written recently
    r1 = k.poll(1.201)
    assert r1 is not None and not r1.lease.takeover and r1.lease.epoch == takeover_id
    assert r1.invalidates == ()  # the takeover record stays live
    k.append_succeeded(1.21, r1.expected_id)
    r2 = k.poll(1.45)
    assert r2 is not None and r2.invalidates == (r1.expected_id,)
    k.append_succeeded(1.46, r2.expected_id)
    assert k.live_lease_ids() == [takeover_id, r2.expected_id]
    # The lease now counts from the start of the renewal.
    assert k.is_serving(1.45 + 0.89)


def test_operation_append_extends_lease_and_delays_renewal():
    k = keeper()
    become_leader(k)
    expected = k.begin_append(1.15)
    assert expected == 2
    assert k.poll(1.5) is None  # one append in flight at a time
    k.append_succeeded(1.16, expected)
    assert k.poll(1.3) is None  # idle only since 1.15
    assert k.poll(1.36) is not None


def test_failed_condition_steps_down_at_once_and_backs_off():
    k = keeper()
    become_leader(k)
    k.begin_append(1.1)
    k.append_failed(1.12, last_id=7)
    assert k.role is Role.FOLLOWER
    assert not k.is_serving(1.12)
    with pytest.raises(NotServing):
        k.begin_append(1.13)
    assert k.seen_id == 7 and k.seen_at == 1.12
    k.observe_entries(7, [])
    k.observe_live_leases(7, {})
    # Back-off is randomized but bounded; after lease_timeout from the sighting it may retry.
    assert k.poll(1.12 + CFG.lease_timeout_s - 0.01) is None
    assert k.poll(1.12 + CFG.lease_timeout_s + CFG.backoff_max_s) is not None


def test_failed_takeover_backs_off_randomly():
    k = keeper()
    k.observe_entries(0, [])
    k.observe_tail(0.0, 0)
    k.observe_live_leases(0, {})
    action = k.poll(1.0)
    assert action is not None
    k.append_failed(1.01, last_id=1)  # someone else took over first
    assert k.role is Role.FOLLOWER
    assert CFG.backoff_min_s <= k.backoff_until - 1.01 <= CFG.backoff_max_s


def test_leader_sees_foreign_tail_and_steps_down():
    k = keeper()
    become_leader(k)
    k.observe_tail(1.1, 1)
    assert k.role is Role.LEADER
    k.observe_tail(1.2, 2)  # nobody but us may write
    assert k.role is Role.FOLLOWER


def test_paused_leader_stops_serving_and_cannot_write():
    """SIGSTOP past the lease: on waking the leader is no longer serving, refuses to write,
    and its pending append (sent before the pause) fails on the condition."""
    k = keeper()
    become_leader(k)
    r = k.poll(1.201)
    k.append_succeeded(1.21, r.expected_id)
    # Paused from 1.25 to 5.0; meanwhile a follower took over at id 3.
    assert not k.is_serving(5.0)
    with pytest.raises(NotServing):
        k.begin_append(5.0)
    assert k.poll(5.0) is None
    assert k.role is Role.FOLLOWER
    assert "lease ran out" in k.step_down_reason


def test_paused_leader_with_append_in_flight_is_fenced():
    k = keeper()
    become_leader(k)
    expected = k.begin_append(1.1)  # then paused before the append reached the log
    assert not k.is_serving(5.0)
    # The follower's takeover used `expected`, so the append fails its condition.
    k.append_failed(5.0, last_id=expected)
    assert k.role is Role.FOLLOWER


def test_slow_append_success_extends_from_its_start():
    k = keeper()
    become_leader(k)
    expected = k.begin_append(1.8)
    assert not k.is_serving(1.95)  # lease from t=1.0 ran out while the append was in flight
    k.append_succeeded(2.0, expected)
    # Conditional success proves nobody took over; the lease counts from the append's start.
    assert k.is_serving(2.0)
    assert not k.is_serving(1.8 + 0.9)


def test_takeover_invalidates_old_renewals_and_epochs_beyond_kept():
    k = keeper("b")
    lease = LeaseValue
    k.observe_entries(
        6,
        [
            (1, lease("a", "a:1", 0, True), ()),
            (3, lease("a", "a:1", 1, False), ()),
            (4, lease("c", "c:1", 0, True), ()),
            (6, lease("c", "c:1", 4, False), ()),
        ],
    )
    k.observe_tail(0.0, 6)
    # A full read: renewal 3 was invalidated by a record that incremental reads never saw.
    k.observe_live_leases(
        6,
        {
            1: lease("a", "a:1", 0, True),
            4: lease("c", "c:1", 0, True),
            6: lease("c", "c:1", 4, False),
        },
    )
    action = k.poll(1.0)
    # epochs_kept=2: keep takeover 4, drop takeover 1; renewal 6 is moot.
    assert action.invalidates == (1, 6)
    assert k.hint(0.5).uuid == "c" and k.hint(0.5).epoch == 4
    k.append_succeeded(1.01, 7)
    assert k.live_lease_ids() == [4, 7]
    assert k.hint(1.02).uuid == "b" and k.hint(1.02).epoch == 7


def test_hint_follows_last_lease_record_and_invalidations():
    k = keeper("x")
    assert not k.hint(0.0)
    k.observe_entries(2, [(1, LeaseValue("a", "a:1", 0, True), ()), (2, None, ())])
    k.observe_tail(0.0, 2)
    assert k.hint(0.1).address == "a:1" and k.hint(0.1).epoch == 1
    k.observe_entries(3, [(3, LeaseValue("a", "a:1", 1, False), ())])
    k.observe_tail(0.2, 3)
    assert k.hint(0.3).epoch == 1


def test_config_rejects_renewal_slower_than_lease():
    with pytest.raises(AssertionError):
        LeaseConfig(lease_timeout_s=1.0, renew_interval_s=0.5, drift_margin_s=0.1)


def test_cancel_append_keeps_leadership():
    k = keeper()
    become_leader(k)
    k.begin_append(1.1)
    k.cancel_append()
    assert k.is_serving(1.2)
    assert k.begin_append(1.2) == 2
    assert AppendKind.OP  # the enum is public


def test_takeover_with_unknown_outcome_keeps_the_watch():
    """A store that did not answer changes nothing we saw: retry after the back-off only."""
    k = keeper()
    k.observe_entries(4, [])
    k.observe_tail(0.0, 4)
    k.observe_live_leases(4, {})
    action = k.poll(1.0)
    k.append_failed(1.5, last_id=None)
    assert k.seen_at == 0.0 and k.seen_id == 4
    retry = k.poll(1.5 + CFG.backoff_max_s)
    assert retry is not None and retry.expected_id == 5 == action.expected_id
    # Had the first attempt landed late, the tail moves and the watch restarts.
    k.append_failed(2.0, last_id=None)
    k.observe_entries(5, [])
    k.observe_tail(2.1, 5)
    assert k.seen_id == 5 and k.seen_at == 2.1
