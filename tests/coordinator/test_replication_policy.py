"""The re-replication policy's pure decision (coordinator/replication.py `plan`), and the
SetReplication operation on a catalog."""

from __future__ import annotations

import pytest

from coordinator.catalog import Catalog, TabletInfo, TabletReportInfo
from coordinator.ops import create_table, decode, drop_table, set_replication
from coordinator.replication import (
    ADD,
    ORPHAN,
    REMOVE,
    STRAYS_MAX,
    Member,
    Move,
    TabletView,
    is_healthy,
    note_report,
    plan,
    stray_of,
    unhealthy_reason,
)
from rpc.errors import AlreadyInProgress, BadRequest
from rpc.protocols import coordinator_pb2 as pb
from tests.coordinator.test_ops import LOG, Log, create_req

LIVE4 = frozenset({"a", "b", "c", "d"})


def view(members, rf=3, leader="a", index=7):
    return TabletView("t1-0", rf, leader, index, tuple(Member(u, v) for u, v in members))


def test_healthy_tablet_gets_nothing():
    v = view([("a", True), ("b", True), ("c", True)])
    assert plan(v, LIVE4, {}) is None
    assert is_healthy(v, LIVE4, frozenset())


def test_dead_voter_is_replaced_by_the_least_loaded_live_server_then_removed():
    live = frozenset({"a", "b", "d", "e"})  # c is down
    v = view([("a", True), ("b", True), ("c", True)])
    action = plan(v, live, {"d": 5, "e": 1})
    assert action is not None
    assert (action.kind, action.peer_uuid, action.cas_config_index) == (ADD, "e", 7)
    assert action.leader_uuid == "a"
    # While the new replica is a NON_VOTER (being copied), nothing more is sent.
    v2 = view([("a", True), ("b", True), ("c", True), ("e", False)], index=8)
    assert plan(v2, live, {}) is None
    # Once promoted, the dead one goes, with the CAS on the promoted config's index.
    v3 = view([("a", True), ("b", True), ("c", True), ("e", True)], index=9)
    action = plan(v3, live, {})
    assert action is not None
    assert (action.kind, action.peer_uuid, action.cas_config_index) == (REMOVE, "c", 9)
    v4 = view([("a", True), ("b", True), ("e", True)], index=10)
    assert plan(v4, live, {}) is None and is_healthy(v4, live, frozenset())


def test_no_target_left_means_wait():
    live = frozenset({"a", "b"})
    assert plan(view([("a", True), ("b", True), ("c", True)]), live, {}) is None


def test_dead_non_voter_is_removed_first():
    live = frozenset({"a", "b", "c", "d"})
    v = view([("a", True), ("b", True), ("c", True), ("x", False)])
    action = plan(v, live, {})
    assert action is not None and (action.kind, action.peer_uuid) == (REMOVE, "x")


def test_unknown_or_dead_leader_waits():
    live = frozenset({"b", "c", "d"})
    assert plan(view([("a", True), ("b", True), ("c", True)]), live, {}) is None


def test_move_adds_the_requested_target_then_removes_the_source():
    v = view([("a", True), ("b", True), ("c", True)])
    move = Move("t1-0", "b", "d")
    action = plan(v, LIVE4, {}, move)
    assert action is not None and (action.kind, action.peer_uuid) == (ADD, "d")
    v2 = view([("a", True), ("b", True), ("c", True), ("d", True)], index=9)
    action = plan(v2, LIVE4, {}, move)
    assert action is not None and (action.kind, action.peer_uuid) == (REMOVE, "b")


def test_a_dead_voter_in_a_config_above_its_factor_goes_first():
    """A move's target promoted, then another voter's server dies, and no server is left to
    add: the dead voter is removed (four voters need three to commit, three need two);
    the move then waits for a server to take a replica, with three live voters."""
    live = frozenset({"a", "b", "d"})  # c died
    move = Move("t1-0", "b", "d")
    v = view([("a", True), ("b", True), ("c", True), ("d", True)], index=9)
    action = plan(v, live, {}, move)
    assert action is not None and (action.kind, action.peer_uuid) == (REMOVE, "c")
    v2 = view([("a", True), ("b", True), ("d", True)], index=10)
    assert plan(v2, live, {}, move) is None  # nowhere to add a third good voter: wait
    # A FAILED replica counts as dead; a config at its factor keeps its dead voter until a
    # replacement is promoted.
    action = plan(v, LIVE4, {}, move, failed=frozenset({"c"}))
    assert action is not None and (action.kind, action.peer_uuid) == (REMOVE, "c")
    three = view([("a", True), ("b", True), ("c", True)])
    assert plan(three, frozenset({"a", "b"}), {}) is None  # c down, no server to add: wait


def test_moving_the_leader_removes_it_last():
    v = view([("a", True), ("b", True), ("c", True), ("d", True)])
    action = plan(v, LIVE4, {}, Move("t1-0", "a", "d"))
    assert action is not None and (action.kind, action.peer_uuid) == (REMOVE, "a")


def test_retiring_server_is_drained():
    v = view([("a", True), ("b", True), ("c", True)])
    action = plan(v, LIVE4, {}, None, frozenset({"c"}))
    assert action is not None and (action.kind, action.peer_uuid) == (ADD, "d")
    assert not is_healthy(v, LIVE4, frozenset({"c"}))


def test_lower_factor_removes_excess_voters_never_the_leader():
    v = view([("a", True), ("b", True), ("c", True)], rf=2)
    action = plan(v, LIVE4, {"b": 1, "c": 4, "a": 9})
    assert action is not None and (action.kind, action.peer_uuid) == (REMOVE, "c")
    v1 = view([("a", True), ("b", True), ("c", True)], rf=1)
    assert plan(v1, LIVE4, {"a": 9}).peer_uuid != "a"


def test_higher_factor_adds():
    v = view([("a", True), ("b", True)], rf=3)
    action = plan(v, LIVE4, {"c": 3, "d": 0})
    assert action is not None and (action.kind, action.peer_uuid) == (ADD, "d")


# ---------------------------------------------------------------- SetReplication / defaults


def live_kinds(log: Log) -> list[str]:
    return [decode(e.data).WhichOneof("record") for e in log.store.read(LOG, 1, 1000)]


def test_default_replication_is_three_or_the_live_servers():
    log = Log(servers=4)
    record = log.run(create_table, create_req(log, name="a", rf=0))
    assert record.create_table.replication_factor == 3
    assert all(len(t.replica_uuids) == 3 for t in record.create_table.tablets)
    small = Log(servers=2)
    record = small.run(create_table, create_req(small, name="b", rf=0))
    assert record.create_table.replication_factor == 2
    record = log.run(create_table, create_req(log, name="c", rf=1))  # explicit still works
    assert record.create_table.replication_factor == 1


def test_set_replication_is_logged_replaces_the_previous_and_dies_with_the_table():
    log = Log(servers=3)
    created = log.run(create_table, create_req(log, name="t", rf=3))

    def req(n):
        return pb.SetReplicationRequest(request_id=log.rid(), name="t", replication_factor=n)

    with pytest.raises(AlreadyInProgress):  # still CREATING
        log.run(set_replication, req(2))
    log.done(created)
    first = log.run(set_replication, req(2))
    assert first is not None and first.set_replication.old_replication_factor == 3
    assert log.catalog.table_by_name("t").replication_factor == 2
    assert log.run(set_replication, req(2)) is None  # already 2: nothing logged
    first_id = log.catalog.table_by_name("t").replication_record_id
    second = log.run(set_replication, req(1))
    assert second.set_replication.previous_record_id == first_id
    with pytest.raises(BadRequest):
        log.run(set_replication, req(4))  # above the 3 live servers
    assert log.replay_fresh().table_by_name("t").replication_factor == 1
    assert live_kinds(log).count("set_replication") == 1
    dropped = log.run(drop_table, pb.DropTableRequest(request_id=log.rid(), name="t"))
    rec_id = log.catalog.table_by_name("t").replication_record_id
    assert rec_id in list(dropped.drop_table.moot_record_ids)
    log.done(dropped)
    assert "set_replication" not in live_kinds(log)


def report(tablet="t1-0", state="READY", index=7, uuids=("a", "b", "c")):
    return pb.TabletReport(
        tablet_id=tablet, data_state=state, config_index=index, config_uuids=list(uuids)
    )


def leader_report(index=9, uuids=("a", "b", "e"), leader="a"):
    return TabletReportInfo(leader, 2, index, tuple(uuids), 0.0, reporter_uuid=leader,
                            role="LEADER")  # fmt: skip


def test_replica_of_a_dropped_tablet_is_an_orphan():
    assert stray_of("c", report(), False, None) == ORPHAN
    # Not READY: a tombstone or a copy in progress is left alone.
    assert stray_of("c", report(state="DELETED"), False, None) is None
    assert stray_of("c", report(state="COPYING"), False, None) is None


def test_evicted_replica_is_deleted_with_its_own_config_index_as_cas():
    # c was replaced by e at config 9; c still reports config 7.
    assert stray_of("c", report(index=7), True, leader_report()) == 7


def test_members_and_replicas_not_behind_the_leader_are_not_stray():
    lr = leader_report()
    assert stray_of("b", report(index=7), True, lr) is None  # a member, lagging
    assert stray_of("a", report(index=7), True, lr) is None  # the leader itself
    # A new replica whose config is at least the leader's as we know it (our report may
    # be older than its addition) is not stray.
    assert stray_of("f", report(index=9), True, lr) is None
    assert stray_of("f", report(index=10), True, lr) is None
    # Without a report from the tablet's leader nothing is decided.
    assert stray_of("c", report(index=7), True, None) is None
    follower = TabletReportInfo("a", 2, 9, ("a", "b", "e"), 0.0, reporter_uuid="b",
                                role="FOLLOWER")  # fmt: skip
    assert stray_of("c", report(index=7), True, follower) is None


def test_note_report_keeps_the_stray_set_current_and_bounded():
    catalog = Catalog()
    catalog.tablets["t1-0"] = TabletInfo("t1-0", "t1", 0, 1, ("a", "b", "c"))
    catalog.tablet_reports["t1-0"] = leader_report()
    note_report(catalog, "c", report(index=7))
    note_report(catalog, "x", report(tablet="gone-0"))
    assert catalog.strays == {("c", "t1-0"): 7, ("x", "gone-0"): ORPHAN}
    # Deleted since: the next report clears it.
    note_report(catalog, "c", report(state="DELETED"))
    assert ("c", "t1-0") not in catalog.strays
    for i in range(STRAYS_MAX + 10):
        note_report(catalog, "x", report(tablet=f"gone-{i}"))
    assert len(catalog.strays) == STRAYS_MAX


def test_failed_replica_is_replaced_like_a_dead_one_then_removed():
    """A replica its server reports FAILED (corrupt WAL, unreadable metadata) on a live server
    cannot vote or be copied over: it is replaced, then removed."""
    v = view([("a", True), ("b", True), ("c", True)])
    failed = frozenset({"c"})
    assert not is_healthy(v, LIVE4, frozenset(), failed)
    action = plan(v, LIVE4, {"d": 0}, failed=failed)
    assert action is not None and (action.kind, action.peer_uuid) == (ADD, "d")
    v3 = view([("a", True), ("b", True), ("c", True), ("d", True)], index=9)
    action = plan(v3, LIVE4, {}, failed=failed)
    assert action is not None and (action.kind, action.peer_uuid) == (REMOVE, "c")
    v4 = view([("a", True), ("b", True), ("d", True)], index=10)
    assert plan(v4, LIVE4, {}, failed=failed) is None and is_healthy(v4, LIVE4, frozenset(), failed)


def test_note_report_tracks_failed_replicas():
    catalog = Catalog()
    catalog.tablets["t1-0"] = TabletInfo("t1-0", "t1", 0, 1, ("a", "b", "c"))
    catalog.tablet_reports["t1-0"] = leader_report(uuids=("a", "b", "c"))
    failed = report(index=9)
    failed.role = "FAILED"
    note_report(catalog, "c", failed)
    assert catalog.failed_replicas == {"t1-0": {"c"}}
    note_report(catalog, "c", report(state="DELETED"))  # deleted since (or repaired)
    assert catalog.failed_replicas == {}


def test_unhealthy_reasons_name_the_members_and_the_count():
    live = frozenset({"a", "b", "d"})
    v = view([("a", True), ("b", True), ("c", True)])
    assert (
        unhealthy_reason(view([("a", True), ("b", True), ("d", True)]), live, frozenset()) is None
    )
    assert unhealthy_reason(None, live, frozenset()) == "no report from a leader of it yet"
    assert unhealthy_reason(v, live, frozenset()) == "voter on c, a DOWN server; 2 good voters of 3"
    v4 = view([("a", True), ("b", True), ("c", True), ("d", False)])
    assert unhealthy_reason(v4, live, frozenset()) == (
        "voter on c, a DOWN server; NON_VOTER on d being copied, then promoted; 2 good voters of 3"
    )
    healthy = view([("a", True), ("b", True), ("d", True)])
    assert unhealthy_reason(healthy, live, frozenset(), frozenset({"b"})) == (
        "replica on b FAILED; 2 good voters of 3"
    )
    assert unhealthy_reason(healthy, live, frozenset({"d"})) == (
        "replica on d, a server being retired; 2 good voters of 3"
    )
    assert unhealthy_reason(healthy, live, frozenset(), move=Move("t1-0", "b", "e")) == (
        "replica on b being moved to e; 2 good voters of 3"
    )
    # No live majority: said first-hand, whatever the count of good voters.
    lost = unhealthy_reason(view([("a", True), ("c", True)], rf=2), frozenset({"a"}), frozenset())
    assert lost is not None and "UNAVAILABLE: 1 of its 2 voters live, not a majority" in lost
    three = view([("a", True), ("c", True), ("e", True)], leader="c")
    lost = unhealthy_reason(three, frozenset({"a"}), frozenset())
    assert lost is not None and "UNAVAILABLE: 1 of its 3 voters live" in lost
    # A majority live, the leader not: an election is due.
    assert unhealthy_reason(v, frozenset({"a", "b"}), frozenset()) == (
        "voter on c, a DOWN server; 2 good voters of 3"
    )
    gone = unhealthy_reason(view([("a", True), ("b", True), ("c", True)], leader="c"),
                            frozenset({"a", "b"}), frozenset())  # fmt: skip
    assert gone is not None and gone.endswith("its last leader c is DOWN: an election is due")
    # More voters than the factor (after set-replication down).
    assert unhealthy_reason(healthy, live, frozenset()) is None
    assert unhealthy_reason(view([("a", True), ("b", True), ("d", True)], rf=2), live,
                            frozenset()) == "3 good voters of 2"  # fmt: skip
