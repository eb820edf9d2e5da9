"""Placement past a tablet server's reserved free space (design/storage.md "Disk as a
resource"): a server whose last heartbeat said full gets no new replica, from CreateTable or
from the re-replication policy; too few servers with room fail CreateTable with NO_SPACE."""

from __future__ import annotations

import pytest

from coordinator.ops import create_table
from coordinator.replication import ADD, Member, TabletView, plan
from rpc.errors import NoSpace
from rpc.protocols import coordinator_pb2 as pb
from tests.coordinator.test_ops import Log, create_req


def _full(log: Log, uuid: str, full: bool = True) -> None:
    free = 10 if full else 10_000
    log.catalog.disks[uuid] = pb.DiskReport(
        total_bytes=100_000, free_bytes=free, reserved_bytes=1_000, full=full
    )


def test_create_table_places_on_servers_with_room():
    log = Log(servers=4)
    _full(log, "s1")
    _full(log, "s2", full=False)
    record = log.run(create_table, create_req(log, "t", n=8, rf=3))
    placed = [u for t in record.create_table.tablets for u in t.replica_uuids]
    assert len(placed) == 24 and "s1" not in placed
    assert {placed.count(u) for u in ("s0", "s2", "s3")} == {8}


def test_create_table_fails_with_no_space_when_too_few_have_room():
    log = Log(servers=3)
    _full(log, "s1")
    with pytest.raises(NoSpace) as e:
        create_table.decide(log.catalog, create_req(log, "t", n=1, rf=3), log.next_id())
    assert "s1 (10 bytes free, reserve 1000)" in e.value.message
    assert "t" not in log.catalog.names
    # A lower factor fits on the servers with room; space back: the factor fits again.
    log.run(create_table, create_req(log, "t2", n=2, rf=2))
    _full(log, "s1", full=False)
    log.run(create_table, create_req(log, "t3", n=1, rf=3))


def test_policy_never_adds_a_replica_on_a_full_server():
    view = TabletView("t1-0", 3, "a", 7, (Member("a", True), Member("b", True)))
    live = frozenset("abcd")
    action = plan(view, live, {"c": 0, "d": 5}, full=frozenset("c"))
    assert action is not None and action.kind == ADD and action.peer_uuid == "d"
    assert plan(view, live, {}, full=frozenset("cd")) is None
    # Replicas already on a full server stay.
    whole = TabletView("t1-0", 3, "a", 7, tuple(Member(u, True) for u in "abc"))
    assert plan(whole, live, {}, full=frozenset("c")) is None
