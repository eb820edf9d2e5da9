"""Unit tests of every operation's decide/apply (pure), and of replaying the live log."""

from __future__ import annotations

import copy

import pytest

from coordinator.catalog import (
    REPLICATION_FACTOR_MAX,
    TABLE_NAME_BYTES_MAX,
    TABLETS_PER_TABLE_MAX,
    Catalog,
    ServerState,
    TableState,
)
from coordinator.ops import (
    OPS,
    alter_table,
    apply_record,
    create_table,
    decode,
    drop_table,
    enlist_server,
    remove_server,
    retire_server,
    server_down,
    set_replication,
)
from coordinator.ops.server_down import ServerDownRequest
from logstore.memory import MemoryLogStore
from rpc.errors import (
    AlreadyExists,
    AlreadyInProgress,
    BadRequest,
    IllegalState,
    NotFound,
    Unavailable,
)
from rpc.protocols import coordinator_pb2 as pb

LOG = "coordinator"


class Log:
    """A MemoryLogStore plus a catalog kept current: commit = append + apply, as the leader."""

    def __init__(self, servers: int = 3) -> None:
        self.store = MemoryLogStore()
        self.catalog = Catalog()
        self.seq = 0
        for i in range(servers):
            self.run(enlist_server, pb.EnlistServerRequest(server_uuid=f"s{i}", address=f"h:{i}"))

    def rid(self) -> pb.RequestId:
        self.seq += 1
        return pb.RequestId(client_id="c1", seq=self.seq)

    def next_id(self) -> int:
        return self.store.last_id(LOG) + 1

    def commit(self, record: pb.LogRecord, invalidates=()) -> int:
        entry_id = self.store.append(
            LOG, record.SerializeToString(), expected_id=self.next_id(), invalidates=invalidates
        )
        apply_record(self.catalog, entry_id, record)
        return entry_id

    def run(self, module, request) -> pb.LogRecord | None:
        record = module.decide(self.catalog, request, self.next_id())
        if record is None:
            return None
        self.commit(record, module.invalidates_at_commit(record))
        return record

    def done(self, record: pb.LogRecord, invalidate_moot: bool = True) -> pb.LogRecord:
        """What complete() appends, without tablet servers."""
        kind = record.WhichOneof("record")
        done = copy.deepcopy(record)
        body = getattr(done, kind)
        body.header.phase = pb.DONE
        inv = [body.header.op_id]
        if kind == "drop_table":
            inv += list(body.moot_record_ids)
        if kind == "alter_table" and body.previous_alter_id:
            inv.append(body.previous_alter_id)
        self.commit(done, inv)
        return done

    def replay_fresh(self) -> Catalog:
        fresh = Catalog()
        for e in self.store.read(LOG, 1, 100_000):
            apply_record(fresh, e.id, decode(e.data))
        return fresh


def schema(*cols: tuple[str, int, bool, bool]) -> pb.Schema:
    s = pb.Schema()
    for name, type_, nullable, key in cols:
        s.columns.add(name=name, type=type_, nullable=nullable, is_key=key)
    return s


GOOD = schema(("id", pb.INT64, False, True), ("v", pb.STRING, True, False))


def create_req(log: Log, name="t", n=4, rf=3, sch=GOOD) -> pb.CreateTableRequest:
    return pb.CreateTableRequest(
        request_id=log.rid(), name=name, schema=sch, num_tablets=n, replication_factor=rf
    )


def state(c: Catalog):
    return (
        c.applied_id,
        dict(c.tables),
        dict(c.names),
        dict(c.tablets),
        dict(c.servers),
        list(c.pending),
        {k: dict(v) for k, v in c.sessions.items()},
    )


# ---------------------------------------------------------------- create


def test_create_decide_ids_placement_and_schema():
    log = Log(servers=3)
    op_id = log.next_id()
    record = create_table.decide(log.catalog, create_req(log, n=6, rf=2), op_id)
    ct = record.create_table
    assert ct.header.op_id == op_id and ct.header.phase == pb.STARTED
    assert ct.table_id == f"t{op_id}"
    assert [t.tablet_id for t in ct.tablets] == [f"t{op_id}-{i}" for i in range(6)]
    assert [(t.partition.hash_bucket, t.partition.num_buckets) for t in ct.tablets] == [
        (i, 6) for i in range(6)
    ]
    assert [c.id for c in ct.schema.columns] == [1, 2] and ct.schema.version == 1
    assert ct.schema.next_column_id == 3
    load: dict[str, int] = {}
    for t in ct.tablets:
        assert len(set(t.replica_uuids)) == 2  # never two replicas on one server
        for u in t.replica_uuids:
            load[u] = load.get(u, 0) + 1
    assert sorted(load.values()) == [4, 4, 4]  # balanced


def test_create_apply_started_then_done():
    log = Log()
    record = log.run(create_table, create_req(log))
    table = log.catalog.table_by_name("t")
    assert (
        table.state is TableState.CREATING
        and table.pending_op_id == record.create_table.header.op_id
    )
    assert list(log.catalog.pending) == [table.pending_op_id]
    result = log.catalog.session_result("c1", log.seq)
    assert not result.done and result.table_id == table.table_id
    log.done(record)
    table = log.catalog.table_by_name("t")
    assert table.state is TableState.RUNNING and not log.catalog.pending
    assert log.catalog.session_result("c1", log.seq).done
    assert len(log.catalog.tablets) == 4
    # The DONE record alone (STARTED invalidated) rebuilds the same catalog.
    fresh = log.replay_fresh()
    assert fresh.tables == log.catalog.tables and fresh.tablets == log.catalog.tablets


@pytest.mark.parametrize(
    "change, error",
    [
        (dict(name=""), BadRequest),
        (dict(name="x" * (TABLE_NAME_BYTES_MAX + 1)), BadRequest),
        (dict(name="   "), BadRequest),  # white space only
        (dict(name=" t1"), BadRequest),  # would list like "t1"
        (dict(name="t1\t"), BadRequest),
        (dict(sch=pb.Schema()), BadRequest),
        (dict(sch=schema(("v", pb.STRING, True, False))), BadRequest),  # no key column
        (dict(sch=schema(("id", pb.INT64, True, True))), BadRequest),  # nullable key
        (
            dict(sch=schema(("v", pb.STRING, True, False), ("id", pb.INT64, False, True))),
            BadRequest,
        ),
        (
            dict(sch=schema(("id", pb.INT64, False, True), ("id", pb.INT64, True, False))),
            BadRequest,
        ),
        (dict(sch=schema(("id", pb.TYPE_UNKNOWN, False, True))), BadRequest),
        (dict(sch=schema(("", pb.INT64, False, True))), BadRequest),
        (dict(n=0), BadRequest),
        (dict(n=TABLETS_PER_TABLE_MAX + 1), BadRequest),
        (dict(rf=8), BadRequest),  # rf 0 means the default now
        (dict(rf=4), BadRequest),  # above the 3 live servers
        (dict(rf=REPLICATION_FACTOR_MAX + 1), BadRequest),
    ],
)
def test_create_bad_input_changes_nothing(change, error):
    log = Log()
    before = state(log.catalog)
    with pytest.raises(error):
        create_table.decide(log.catalog, create_req(log, **change), log.next_id())
    assert state(log.catalog) == before


def test_create_duplicate_name_and_missing_request_id():
    log = Log()
    log.done(log.run(create_table, create_req(log)))
    with pytest.raises(AlreadyExists):
        create_table.decide(log.catalog, create_req(log), log.next_id())
    req = create_req(log, name="u")
    req.ClearField("request_id")
    with pytest.raises(BadRequest):
        create_table.decide(log.catalog, req, log.next_id())


def test_create_ignores_down_servers_for_placement():
    log = Log(servers=3)
    log.run(server_down, ServerDownRequest("s1", "test"))
    record = create_table.decide(log.catalog, create_req(log, rf=2), log.next_id())
    for t in record.create_table.tablets:
        assert "s1" not in t.replica_uuids
    with pytest.raises(Unavailable, match="above the 2 live"):  # s1 may come back
        create_table.decide(log.catalog, create_req(log, rf=3), log.next_id())


# ---------------------------------------------------------------- drop


def test_drop_decide_apply_and_invalidation():
    log = Log()
    created = log.done(log.run(create_table, create_req(log)))
    create_seq = log.seq
    table = log.catalog.table_by_name("t")
    with pytest.raises(NotFound):
        drop_table.decide(log.catalog, pb.DropTableRequest(request_id=log.rid(), name="nope"), 1)
    record = log.run(drop_table, pb.DropTableRequest(request_id=log.rid(), name="t"))
    dt = record.drop_table
    assert dt.table_id == table.table_id
    assert list(dt.moot_record_ids) == [table.create_record_id]
    assert len(dt.tablets) == 4
    assert log.catalog.tables[table.table_id].state is TableState.DROPPING
    with pytest.raises(AlreadyExists):  # the name stays taken until the drop is done
        create_table.decide(log.catalog, create_req(log), log.next_id())
    with pytest.raises(AlreadyInProgress):
        drop_table.decide(log.catalog, pb.DropTableRequest(request_id=log.rid(), name="t"), 1)
    log.done(record)
    assert not log.catalog.tables and not log.catalog.tablets and "t" not in log.catalog.names
    # The live log no longer mentions the table but still answers the create request.
    kinds = [decode(e.data).WhichOneof("record") for e in log.store.read(LOG, 1, 1000)]
    assert "create_table" not in kinds
    fresh = log.replay_fresh()
    assert not fresh.tables
    assert fresh.session_result("c1", create_seq).table_id == created.create_table.table_id


# ---------------------------------------------------------------- alter


def alter_req(log: Log, **kw) -> pb.AlterTableRequest:
    return pb.AlterTableRequest(request_id=log.rid(), name=kw.pop("name", "t"), **kw)


def test_alter_add_drop_rename():
    log = Log()
    log.done(log.run(create_table, create_req(log)))
    add = pb.ColumnSchema(name="w", type=pb.DOUBLE, nullable=True)
    record = log.run(
        alter_table, alter_req(log, new_name="t2", add_columns=[add], drop_columns=["v"])
    )
    at = record.alter_table
    assert at.new_schema.version == 2 and at.old_schema.version == 1
    assert [(c.name, c.id) for c in at.new_schema.columns] == [("id", 1), ("w", 3)]
    table = log.catalog.table_by_name("t2")
    assert table.state is TableState.ALTERING and "t" not in log.catalog.names
    log.done(record)
    table = log.catalog.table_by_name("t2")
    assert table.state is TableState.RUNNING and table.alter_record_id > 0
    # A second alter makes the first one moot; replaying the live log gives the same table.
    second = log.run(alter_table, alter_req(log, name="t2", new_name="t3"))
    assert second.alter_table.previous_alter_id == table.alter_record_id
    assert second.alter_table.new_schema.version == 2  # rename only: same schema version
    log.done(second)
    fresh = log.replay_fresh()
    assert fresh.tables == log.catalog.tables
    assert fresh.session_result("c1", log.seq - 1).schema_version == 2


@pytest.mark.parametrize(
    "kw, error",
    [
        (dict(name="nope", new_name="x"), NotFound),
        (dict(), BadRequest),  # nothing to alter
        (dict(drop_columns=["id"]), BadRequest),
        (dict(drop_columns=["zz"]), BadRequest),
        (dict(drop_columns=["v", "v"]), BadRequest),
        (dict(add_columns=[pb.ColumnSchema(name="w", type=pb.INT64, nullable=False)]), BadRequest),
        (
            dict(
                add_columns=[pb.ColumnSchema(name="w", type=pb.INT64, nullable=True, is_key=True)]
            ),
            BadRequest,
        ),
        (dict(add_columns=[pb.ColumnSchema(name="v", type=pb.INT64, nullable=True)]), BadRequest),
        (
            dict(
                drop_columns=["v"],
                add_columns=[pb.ColumnSchema(name="v", type=pb.INT64, nullable=True)],
            ),
            BadRequest,
        ),
        (dict(add_columns=[pb.ColumnSchema(name="w", nullable=True)]), BadRequest),
        (dict(new_name="other"), AlreadyExists),
        (dict(new_name="x" * (TABLE_NAME_BYTES_MAX + 1)), BadRequest),
        (dict(new_name="other "), BadRequest),
    ],
)
def test_alter_bad_input(kw, error):
    log = Log()
    log.done(log.run(create_table, create_req(log)))
    log.done(log.run(create_table, create_req(log, name="other")))
    before = state(log.catalog)
    with pytest.raises(error):
        alter_table.decide(log.catalog, alter_req(log, **kw), log.next_id())
    assert state(log.catalog) == before


# ---------------------------------------------------------------- servers


def test_enlist_server_rules():
    log = Log(servers=0)
    for uuid, address in [("", "h:1"), ("a", "nohost"), ("a", "h:port"), ("a", ":1")]:
        with pytest.raises(BadRequest):
            enlist_server.decide(
                log.catalog, pb.EnlistServerRequest(server_uuid=uuid, address=address), 1
            )
    first = log.run(enlist_server, pb.EnlistServerRequest(server_uuid="a", address="h:1"))
    assert first is not None and log.catalog.servers["a"].state is ServerState.LIVE
    assert log.run(enlist_server, pb.EnlistServerRequest(server_uuid="a", address="h:1")) is None
    moved = log.run(enlist_server, pb.EnlistServerRequest(server_uuid="a", address="h:2"))
    assert moved.enlist_server.previous_record_id == 1
    assert log.catalog.servers["a"].address == "h:2"
    assert [e.id for e in log.store.read(LOG, 1, 100)] == [2]  # one live record per server


def test_server_down_and_remove():
    log = Log(servers=2)
    with pytest.raises(NotFound):
        server_down.decide(log.catalog, ServerDownRequest("zz", "x"), 1)
    with pytest.raises(IllegalState):
        remove_server.decide(
            log.catalog, pb.RemoveServerRequest(request_id=log.rid(), server_uuid="s0"), 9
        )
    down = log.run(server_down, ServerDownRequest("s0", "silent"))
    assert down.server_down.previous_record_id == 1
    assert log.catalog.servers["s0"].state is ServerState.DOWN
    assert log.run(server_down, ServerDownRequest("s0", "again")) is None
    # Rejoining replaces the ServerDown record.
    back = log.run(enlist_server, pb.EnlistServerRequest(server_uuid="s0", address="h:0"))
    assert back.enlist_server.previous_record_id == log.catalog.servers["s0"].record_id - 1
    log.run(server_down, ServerDownRequest("s0", "silent"))
    log.run(remove_server, pb.RemoveServerRequest(request_id=log.rid(), server_uuid="s0"))
    assert "s0" not in log.catalog.servers
    assert log.catalog.session_result("c1", log.seq).done
    fresh = log.replay_fresh()
    assert fresh.servers == log.catalog.servers


# ---------------------------------------------------------------- retire


def retire_req(log: Log, uuid: str, cancel: bool = False) -> pb.RetireServerRequest:
    return pb.RetireServerRequest(request_id=log.rid(), server_uuid=uuid, cancel=cancel)


def test_retire_outlives_restarts_and_ends_with_remove_or_cancel():
    log = Log(servers=4)
    with pytest.raises(NotFound):
        retire_server.decide(log.catalog, retire_req(log, "zz"), 99)
    with pytest.raises(BadRequest):  # every logged request names its request id
        retire_server.decide(log.catalog, pb.RetireServerRequest(server_uuid="s1"), log.next_id())
    first = log.run(retire_server, retire_req(log, "s1"))
    assert first.retire_server.retired and first.retire_server.previous_record_id == 0
    first_id = log.store.last_id(LOG)
    assert log.catalog.retirements["s1"] == (True, first_id)
    assert log.catalog.session_result("c1", log.seq).done
    assert log.run(retire_server, retire_req(log, "s1")) is None  # already: nothing logged
    assert log.catalog.retired_servers() == {"s1"}
    assert [s.uuid for s in log.catalog.placeable_servers()] == ["s0", "s2", "s3"]
    # Down, back up, down again: still retired; each record replaced keeps the retirement.
    log.run(server_down, ServerDownRequest("s1", "silent"))
    log.run(enlist_server, pb.EnlistServerRequest(server_uuid="s1", address="h:9"))
    assert log.catalog.retired_servers() == {"s1"}
    assert log.replay_fresh().retirements == log.catalog.retirements
    # Cancelled: the cancel replaces the retirement record and stays live itself.
    cancel = log.run(retire_server, retire_req(log, "s1", cancel=True))
    assert cancel.retire_server.previous_record_id == first_id
    assert log.catalog.retired_servers() == frozenset()
    assert log.run(retire_server, retire_req(log, "s1", cancel=True)) is None
    live_ids = {e.id for e in log.store.read(LOG, 1, 100)}
    assert first_id not in live_ids
    assert log.catalog.retirements["s1"][1] in live_ids
    assert log.replay_fresh().retirements == log.catalog.retirements
    # Retired again, then down and removed: the removal invalidates the retirement too.
    log.run(retire_server, retire_req(log, "s1"))
    retire_id = log.catalog.retirements["s1"][1]
    log.run(server_down, ServerDownRequest("s1", "stopped"))
    removed = log.run(remove_server, pb.RemoveServerRequest(request_id=log.rid(), server_uuid="s1"))
    assert removed.remove_server.retire_record_id == retire_id
    live_ids = {e.id for e in log.store.read(LOG, 1, 100)}
    assert retire_id not in live_ids and "s1" not in log.catalog.servers
    assert "s1" not in log.catalog.retirements
    fresh = log.replay_fresh()
    assert (fresh.servers, fresh.retirements) == (log.catalog.servers, log.catalog.retirements)
    assert log.catalog.record_refs() <= live_ids


def test_retired_servers_get_no_new_replicas():
    log = Log(servers=4)
    log.run(retire_server, retire_req(log, "s2"))
    record = log.run(create_table, create_req(log, rf=3))
    for t in record.create_table.tablets:
        assert "s2" not in t.replica_uuids
    with pytest.raises(BadRequest, match="above the 3 live tablet servers not retired"):
        create_table.decide(log.catalog, create_req(log, name="u", rf=4), log.next_id())
    log.done(record)
    with pytest.raises(BadRequest, match="above the 3 live tablet servers not retired"):
        set_replication.decide(
            log.catalog,
            pb.SetReplicationRequest(request_id=log.rid(), name="t", replication_factor=4),
            log.next_id(),
        )
    # The default factor counts the servers not retired: 3 of 4 here, 2 once s3 retires
    # too (refused: t's factor 3 would not fit on s0 and s1).
    with pytest.raises(BadRequest, match="cannot retire s3: table 't' has replication factor 3"):
        retire_server.decide(log.catalog, retire_req(log, "s3"), log.next_id())
    assert "s3" not in log.catalog.retired_servers()
    # A server hosting nothing can always retire; then the default factor is 2.
    log.run(
        set_replication,
        pb.SetReplicationRequest(request_id=log.rid(), name="t", replication_factor=2),
    )
    log.run(retire_server, retire_req(log, "s3"))
    req = create_req(log, name="v", rf=0)
    record = create_table.decide(log.catalog, req, log.next_id())
    assert record.create_table.replication_factor == 2
    assert {u for t in record.create_table.tablets for u in t.replica_uuids} <= {"s0", "s1"}


def test_a_server_down_for_a_moment_does_not_lower_the_default_factor():
    """The default factor counts DOWN servers: with one of 3 down, a create with the
    default is refused (naming it; UNAVAILABLE: the client retries until it is back) rather
    than made at factor 2 for good; a factor given
    explicitly still fits the live ones."""
    log = Log(servers=3)
    log.run(server_down, ServerDownRequest("s1", "test"))
    before = state(log.catalog)
    with pytest.raises(Unavailable, match=r"default replication factor 3 .*\(s1 DOWN\)"):
        create_table.decide(log.catalog, create_req(log, rf=0), log.next_id())
    assert state(log.catalog) == before
    record = log.run(create_table, create_req(log, rf=2))
    assert record.create_table.replication_factor == 2
    assert {u for t in record.create_table.tablets for u in t.replica_uuids} == {"s0", "s2"}


def test_every_operation_module_has_the_interface():
    for kind, module in OPS.items():
        assert module.KIND == kind
        for fn in ("decide", "apply", "invalidates_at_commit", "response"):
            assert callable(getattr(module, fn))
