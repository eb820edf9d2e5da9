"""The decision to create a replica a CreateTable skipped and that never came to exist
(issue 27, section 3: tables acknowledged while every tablet server was down had tablets
that existed nowhere). Pure calls: the DONE record's skipped replicas in the catalog (also
after a fresh replay, as a new leader has them), which servers to ask, and when to create."""

from __future__ import annotations

import pytest

from coordinator.catalog import Catalog, TabletReportInfo
from coordinator.gateway import schema_to_tserver
from coordinator.ops import alter_table, create_table, drop_table, remove_server, server_down
from coordinator.ops.server_down import ServerDownRequest
from coordinator.replication import missing_candidates, missing_replicas
from rpc.errors import BadRequest
from rpc.protocols import coordinator_pb2 as pb
from tests.coordinator.test_ops import Log, create_req
from tservers.tablet.schema import validate_new


def log_done(log: Log, skipped_servers: set[str], name: str = "t") -> pb.LogRecord:
    """A CreateTable (rf 3, 2 tablets) completed with the replicas on `skipped_servers`
    skipped, as complete() logs it when those servers were down."""
    started = log.run(create_table, create_req(log, name=name, n=2, rf=3))
    done = pb.LogRecord()
    done.CopyFrom(started)
    done.create_table.header.phase = pb.DONE
    done.create_table.skipped_replicas.extend(
        f"{t.tablet_id}/{u}"
        for t in started.create_table.tablets
        for u in t.replica_uuids
        if u in skipped_servers
    )
    log.commit(done, (started.create_table.header.op_id,))
    return done


def candidates(catalog: Catalog, tablet_id: str) -> tuple[str, ...]:
    tablet = catalog.tablets[tablet_id]
    return missing_candidates(
        tablet,
        catalog.tables[tablet.table_id],
        catalog.tablet_reports.get(tablet_id),
        catalog.servers,
    )


def test_the_done_record_s_skipped_replicas_reach_every_node():
    log = Log(servers=3)
    done = log_done(log, {"s0", "s1", "s2"})
    for catalog in (log.catalog, log.replay_fresh()):  # the leader; a new leader's replay
        for t in done.create_table.tablets:
            info = catalog.tablets[t.tablet_id]
            assert info.replicas == tuple(t.replica_uuids)
            assert info.skipped == tuple(t.replica_uuids)  # every one skipped
    # A STARTED record skips nothing yet; a DONE without skips leaves none.
    log2 = Log(servers=3)
    started = log2.run(create_table, create_req(log2, rf=3))
    assert all(not log2.catalog.tablets[t.tablet_id].skipped for t in started.create_table.tablets)
    log2.done(started)
    assert all(not log2.catalog.tablets[t.tablet_id].skipped for t in started.create_table.tablets)


def test_every_replica_skipped_every_server_back_asks_each_and_creates_where_absent():
    log = Log(servers=3)
    done = log_done(log, {"s0", "s1", "s2"})
    tablet = done.create_table.tablets[0]
    asked = candidates(log.catalog, tablet.tablet_id)
    assert asked == tuple(tablet.replica_uuids)
    # What the servers answer decides: one shows a tombstone of it, one a live replica
    # (created, its answer lost), one no trace, one did not answer.
    s_tomb, s_live, s_none = tablet.replica_uuids
    hosted = {
        s_tomb: frozenset({tablet.tablet_id, "other"}),
        s_live: frozenset({tablet.tablet_id}),
        s_none: frozenset({"other"}),
    }
    assert missing_replicas(tablet.tablet_id, asked, hosted) == (s_none,)
    assert missing_replicas(tablet.tablet_id, asked, {**hosted, s_none: None}) == ()
    # A new leader replaying the log decides the same.
    fresh = log.replay_fresh()
    fresh.tablet_reports.update(log.catalog.tablet_reports)
    assert candidates(fresh, tablet.tablet_id) == asked


def test_a_server_still_down_is_never_stood_in_for():
    """A replica may exist on a server that is merely down: it is waited for, never
    replaced by a fresh one, and no other server is ever asked to create it."""
    log = Log(servers=3)
    done = log_done(log, {"s0", "s1", "s2"})
    log.run(server_down, ServerDownRequest("s1", "test"))
    for t in done.create_table.tablets:
        asked = candidates(log.catalog, t.tablet_id)
        assert "s1" not in asked
        assert set(asked) <= set(t.replica_uuids)


def test_nothing_for_tablets_with_a_leader_or_never_skipped():
    log = Log(servers=3)
    done = log_done(log, {"s2"})
    for t in done.create_table.tablets:
        expected = ("s2",) if "s2" in t.replica_uuids else ()
        assert candidates(log.catalog, t.tablet_id) == expected
        # A leader reported: its group works, it copies the tablet to the member lacking it.
        log.catalog.tablet_reports[t.tablet_id] = TabletReportInfo(
            "s0", 1, 0, tuple(t.replica_uuids), 0.0, reporter_uuid="s0", role="LEADER"
        )
        assert candidates(log.catalog, t.tablet_id) == ()
    clean = Log(servers=3)
    ok = clean.run(create_table, create_req(clean, rf=3))
    clean.done(ok)
    assert all(candidates(clean.catalog, t.tablet_id) == () for t in ok.create_table.tablets)


def test_a_member_replaced_since_is_not_created():
    log = Log(servers=4)
    log.run(server_down, ServerDownRequest("s3", "test"))
    done = log_done(log, {"s0", "s1", "s2"})
    t = done.create_table.tablets[0]
    a, b, c = t.replica_uuids
    # Followers (no leader now) report a config without c: it was replaced since.
    log.catalog.tablet_reports[t.tablet_id] = TabletReportInfo(
        "", 3, 5, (a, b, "s3"), 0.0, reporter_uuid=a, role="FOLLOWER"
    )
    assert candidates(log.catalog, t.tablet_id) == (a, b)


def test_altered_tables_are_created_at_their_current_schema_dropped_ones_left_alone():
    """An acknowledged table must always become readable: a table altered since (an ALTER
    pending or done) still has its never-created replicas created, at its current schema
    (the catalog's, which `_create` sends); a table being dropped, or gone, has none."""
    log = Log(servers=3)
    done = log_done(log, {"s0", "s1", "s2"})
    tablet_id = done.create_table.tablets[0].tablet_id
    everyone = candidates(log.catalog, tablet_id)
    assert everyone
    altered = log.run(
        alter_table,
        pb.AlterTableRequest(
            request_id=log.rid(),
            name="t",
            add_columns=[pb.ColumnSchema(name="x", type=pb.INT64, nullable=True)],
        ),
    )
    # ALTERING: the operation is pending (its AlterSchema answered TABLET_NOT_FOUND) and
    # waits for the replicas; the catalog already holds the new schema, version 2.
    assert log.catalog.tables[log.catalog.tablets[tablet_id].table_id].schema.version == 2
    assert candidates(log.catalog, tablet_id) == everyone
    log.done(altered)
    assert candidates(log.catalog, tablet_id) == everyone  # RUNNING at version 2
    fresh = log.replay_fresh()  # a new leader decides the same
    assert candidates(fresh, tablet_id) == everyone
    # Dropped: pending (DROPPING) or done (gone), nothing of it is created.
    log.run(drop_table, pb.DropTableRequest(request_id=log.rid(), name="t"))
    assert candidates(log.catalog, tablet_id) == ()


def test_a_server_takes_a_later_schema_version_as_given():
    """CreateTablet of an altered table's replica keeps its version and column ids (the
    other replicas' and the catalog's); a first version is numbered afresh as before."""
    log = Log(servers=3)
    log_done(log, {"s0", "s1", "s2"})
    for request in (
        pb.AlterTableRequest(
            request_id=log.rid(),
            name="t",
            add_columns=[pb.ColumnSchema(name="x", type=pb.INT64, nullable=True)],
        ),
        pb.AlterTableRequest(request_id=log.rid(), name="t", drop_columns=["x"]),
        pb.AlterTableRequest(
            request_id=log.rid(),
            name="t",
            add_columns=[pb.ColumnSchema(name="x", type=pb.STRING, nullable=True)],
        ),
    ):
        log.done(log.run(alter_table, request))
    table = next(iter(log.catalog.tables.values()))
    assert table.schema.version == 4
    got = validate_new(schema_to_tserver(table.schema))
    assert got.version == 4 and got.next_column_id == table.schema.next_column_id
    assert [(c.id, c.name, c.type) for c in got.columns] == [
        (c.id, c.name, c.type) for c in table.schema.columns
    ]
    broken = schema_to_tserver(table.schema)
    broken.next_column_id = max(c.id for c in broken.columns)  # an id not below it
    with pytest.raises(BadRequest):
        validate_new(broken)
    first = schema_to_tserver(table.schema)
    first.version = 1
    assert [c.id for c in validate_new(first).columns] == list(range(len(first.columns)))


def test_unplaceable_tables_are_left_alone():
    # A placed server removed: the initial config cannot be given whole.
    log2 = Log(servers=3)
    done2 = log_done(log2, {"s0", "s1", "s2"})
    log2.run(server_down, ServerDownRequest("s2", "test"))
    log2.run(remove_server, pb.RemoveServerRequest(request_id=log2.rid(), server_uuid="s2"))
    assert candidates(log2.catalog, done2.create_table.tablets[0].tablet_id) == ()
