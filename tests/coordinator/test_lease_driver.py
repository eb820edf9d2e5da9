"""The lease driver (thread + time.monotonic()) with several keepers over one MemoryLogStore."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from coordinator.leases import LeaseConfig, Role
from coordinator.leases.driver import LOG_NAME, LeaseDriver, decode_lease
from logstore.memory import MemoryLogStore
from rpc.errors import NotLeader
from rpc.protocols import coordinator_pb2 as pb

CFG = LeaseConfig(
    lease_timeout_s=0.5,
    renew_interval_s=0.1,
    drift_margin_s=0.05,
    backoff_min_s=0.02,
    backoff_max_s=0.2,
    epochs_kept=2,
)


def wait_for(cond: Callable[[], object], timeout_s: float = 10.0) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError("condition not met before the deadline")


def op_record(name: str) -> bytes:
    return pb.LogRecord(server_down=pb.ServerDown(server_uuid=name)).SerializeToString()


@pytest.fixture
def group():
    store = MemoryLogStore()
    drivers = [
        LeaseDriver(store, f"node{i}", f"127.0.0.1:{7000 + i}", CFG, seed=i) for i in range(3)
    ]
    for d in drivers:
        d.start()
    yield store, drivers
    for d in drivers:
        d.close()


def serving(drivers: list[LeaseDriver]) -> list[LeaseDriver]:
    return [d for d in drivers if d.is_serving()]


def test_one_leader_and_followers_get_hint(group):
    store, drivers = group
    leader = wait_for(lambda: (s := serving(drivers)) and s[0])
    assert len(serving(drivers)) == 1
    got = leader.safe_append(lambda expected: (op_record("x"), ()))
    assert store.read(LOG_NAME, got, 1)[0].id == got
    for d in drivers:
        if d is leader:
            continue
        wait_for(lambda d=d: d.hint().uuid == leader.keeper.uuid)
        with pytest.raises(NotLeader) as info:
            d.safe_append(lambda expected: (op_record("y"), ()))
        assert info.value.leader_hint.address == leader.keeper.address


def test_idle_leader_renews_without_growing_the_log(group):
    store, drivers = group
    leader = wait_for(lambda: (s := serving(drivers)) and s[0])
    first = store.last_id(LOG_NAME)
    wait_for(lambda: store.last_id(LOG_NAME) >= first + 10)
    live = store.read(LOG_NAME, 1, 1000)
    leases = [decode_lease(e.data) for e in live]
    assert all(lease is not None for lease in leases)
    # Live: the takeover of each kept epoch and at most one renewal per epoch.
    assert len(live) <= 2 * CFG.epochs_kept
    assert leader.is_serving()


def test_leader_close_hands_over(group):
    store, drivers = group
    leader = wait_for(lambda: (s := serving(drivers)) and s[0])
    leader.close()
    assert leader.role is Role.FOLLOWER
    rest = [d for d in drivers if d is not leader]
    new = wait_for(lambda: (s := serving(rest)) and s[0])
    assert new.epoch > leader.epoch
    got = new.safe_append(lambda expected: (op_record("z"), ()))
    assert got > new.epoch


def test_paused_leader_is_fenced_after_waking(group):
    """Holding a driver's lock freezes it like SIGSTOP; on waking it must not write."""
    store, drivers = group
    leader = wait_for(lambda: (s := serving(drivers)) and s[0])
    old_epoch = leader.epoch
    with leader._lock:  # paused: neither its thread nor appends make progress
        rest = [d for d in drivers if d is not leader]
        wait_for(lambda: serving(rest))
    before = store.last_id(LOG_NAME)
    with pytest.raises(NotLeader):
        leader.safe_append(lambda expected: (op_record("late"), ()))
    assert not leader.is_serving()
    wait_for(lambda: leader.role is Role.FOLLOWER)
    writers = {
        lease.holder_uuid
        for e in store.read(LOG_NAME, before + 1, 1000)
        if (lease := decode_lease(e.data)) is not None
    }
    assert leader.keeper.uuid not in writers
    assert max(d.epoch for d in rest) > old_epoch


def test_role_change_callback():
    store = MemoryLogStore()
    seen: list[tuple[Role, int]] = []
    with LeaseDriver(
        store, "solo", "127.0.0.1:1", CFG, on_role_change=lambda r, e: seen.append((r, e))
    ):
        wait_for(lambda: seen)
    assert seen[0] == (Role.LEADER, 1)
    assert seen[-1][0] is Role.FOLLOWER
