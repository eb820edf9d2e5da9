"""Replicas left at an older schema version (coordinator/replication.py `alter_stale`): the
heartbeat bookkeeping (`note_report`, `stale_schema_of`, pure), the AlterSchema that brings
a replica to its table's schema (coordinator/gateway.py `catch_up_request`, pure), and what a
server's reports forget (`Engine._forget_gone`). The end-to-end test with real processes is
tests/coordinator/test_alter_catch_up_integration.py."""

from __future__ import annotations

import dataclasses

from coordinator import replication
from coordinator.catalog import (
    Catalog,
    ServerInfo,
    ServerState,
    TableInfo,
    TableState,
    TabletInfo,
    TabletReportInfo,
)
from coordinator.gateway import catch_up_request
from coordinator.replication import (
    STRAYS_MAX,
    ReplicationConfig,
    ReplicationManager,
    note_report,
    note_table_schemas,
)
from rpc.errors import CasFailed
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts
from tests.coordinator.test_engine import cluster, enlist  # noqa: F401 (the fixture)
from tservers.tablet import schema as schemamod

V1 = pb.Schema(
    version=1,
    columns=[
        pb.ColumnSchema(id=1, name="id", type=pb.INT64, is_key=True),
        pb.ColumnSchema(id=2, name="v", type=pb.STRING, nullable=True),
    ],
    next_column_id=3,
)


def altered(schema: pb.Schema, add=(), drop=()) -> pb.Schema:
    """The catalog's next version, as AlterTable decides it (coordinator/ops/alter_table)."""
    out = pb.Schema(version=schema.version + 1, next_column_id=schema.next_column_id)
    out.columns.extend(c for c in schema.columns if c.name not in drop)
    for name in add:
        out.columns.add(id=out.next_column_id, name=name, type=pb.STRING, nullable=True)
        out.next_column_id += 1
    return out


V2 = altered(V1, add=["w"])
V3 = altered(V2, drop=["v"], add=["x"])


def catalog_with(schema: pb.Schema, state: TableState = TableState.RUNNING) -> Catalog:
    catalog = Catalog()
    catalog.tables["t1"] = TableInfo("t1", "t", schema, 3, ("t1-0",), state, 1)
    catalog.tablets["t1-0"] = TabletInfo("t1-0", "t1", 0, 1, ("a", "b", "c"))
    catalog.tablet_reports["t1-0"] = TabletReportInfo(
        "a", 2, 7, ("a", "b", "c"), 0.0, reporter_uuid="a", role="LEADER"
    )
    return catalog


def report(version: int, tablet="t1-0", state="READY", role="FOLLOWER", index=7):
    return pb.TabletReport(
        tablet_id=tablet,
        data_state=state,
        role=role,
        config_index=index,
        config_uuids=["a", "b", "c"],
        schema_version=version,
    )


def test_a_replica_behind_its_running_table_is_noted_until_it_reports_the_version():
    catalog = catalog_with(V2)
    note_report(catalog, "b", report(1))
    note_report(catalog, "c", report(2))
    assert catalog.stale_schemas == {("b", "t1-0"): 1}
    note_report(catalog, "b", report(2))  # altered since
    assert catalog.stale_schemas == {}


def test_what_is_not_noted():
    catalog = catalog_with(V2)
    note_report(catalog, "b", report(0))  # no version said
    note_report(catalog, "b", report(1, state="DELETED"))  # a tombstone
    note_report(catalog, "b", report(1, state="COPYING"))  # its copy brings the schema
    note_report(catalog, "b", report(1, role="FAILED"))  # replaced by the policy
    note_report(catalog, "x", report(1, tablet="gone-0"))  # its table dropped: a stray
    assert catalog.stale_schemas == {}
    # Evicted (not in the leader's config, behind it): a stray, deleted rather than altered.
    catalog.tablet_reports["t1-0"] = dataclasses.replace(
        catalog.tablet_reports["t1-0"], config_index=9, config_uuids=("a", "b", "e")
    )
    note_report(catalog, "c", report(1, index=7))
    assert ("c", "t1-0") in catalog.strays and catalog.stale_schemas == {}


def test_a_table_being_altered_is_left_to_its_alter():
    catalog = catalog_with(V2)
    note_report(catalog, "b", report(1))
    assert ("b", "t1-0") in catalog.stale_schemas
    table = catalog.tables["t1"]
    catalog.tables["t1"] = dataclasses.replace(table, schema=V3, state=TableState.ALTERING)
    note_report(catalog, "b", report(1))
    assert catalog.stale_schemas == {}


def test_an_unchanged_report_is_noted_once_its_table_is_altered():
    """The replica on a server down while the AlterTable completed comes back with the same
    report (never sent again): the round looks at the reports kept of an altered table."""
    catalog = catalog_with(V1)
    catalog.replica_reports["t1-0"] = {"a": report(1, role="LEADER"), "b": report(1)}
    note_table_schemas(catalog, catalog.tables["t1"])
    assert catalog.stale_schemas == {}
    catalog.tables["t1"] = dataclasses.replace(catalog.tables["t1"], schema=V2)
    catalog.replica_reports["t1-0"]["a"] = report(2, role="LEADER")
    note_table_schemas(catalog, catalog.tables["t1"])
    assert catalog.stale_schemas == {("b", "t1-0"): 1}


def test_the_noted_replicas_are_bounded():
    catalog = catalog_with(V2)
    table = catalog.tables["t1"]
    ids = tuple(f"t1-{i}" for i in range(STRAYS_MAX + 10))
    catalog.tables["t1"] = dataclasses.replace(table, tablet_ids=ids)
    for tablet_id in ids:
        catalog.tablets[tablet_id] = TabletInfo(tablet_id, "t1", 0, 1, ("a", "b", "c"))
        note_report(catalog, "b", report(1, tablet=tablet_id))
    assert len(catalog.stale_schemas) == STRAYS_MAX


def tserver_schema(catalog_schema: pb.Schema) -> ts.SchemaPB:
    """The schema a tablet server gives a replica created at version 1 (ids from 0)."""
    return schemamod.validate_new(
        ts.SchemaPB(columns=[ts.ColumnSchemaPB(name=c.name, type=c.type, nullable=c.nullable,
                                               is_key=c.is_key) for c in catalog_schema.columns])
    )  # fmt: skip


def apply(replica: ts.SchemaPB, request: ts.AlterSchemaRequest) -> ts.SchemaPB:
    return schemamod.altered(
        replica,
        list(request.add_columns),
        list(request.drop_columns),
        request.new_version,
        request.next_column_id,
    )


def test_catch_up_request_skips_versions_in_the_replicas_numbering():
    replica = tserver_schema(V1)  # ids 0, 1; next 2 (the catalog's: 1, 2; next 3)
    request = catch_up_request("t1-0", replica, V3)
    assert request is not None
    assert (request.expected_version, request.new_version) == (1, 3)
    assert list(request.drop_columns) == ["v"]
    assert [(c.name, c.id) for c in request.add_columns] == [("w", 2), ("x", 3)]
    caught_up = apply(replica, request)
    # In step with a replica that had every alter (numbered by the replica itself).
    step = replica
    step = schemamod.altered(step, [ts.ColumnSchemaPB(name="w", type=ts.STRING, nullable=True)],
                             [], 2)  # fmt: skip
    step = schemamod.altered(step, [ts.ColumnSchemaPB(name="x", type=ts.STRING, nullable=True)],
                             ["v"], 3)  # fmt: skip
    assert caught_up == step


def test_a_column_dropped_and_added_again_is_another_column():
    v3 = altered(V2, drop=["w"])
    v4 = altered(v3, add=["w"])  # the same name, a new id: the old data must not come back
    replica = apply(tserver_schema(V1), catch_up_request("t1-0", tserver_schema(V1), V2))
    request = catch_up_request("t1-0", replica, v4)
    assert list(request.drop_columns) == ["w"]
    assert [(c.name, c.id) for c in request.add_columns] == [("w", 3)]
    assert [(c.name, c.id) for c in apply(replica, request).columns] == [
        ("id", 0),
        ("v", 1),
        ("w", 3),
    ]
    # Added and dropped in the versions missed: only the version (and the next id) move.
    request = catch_up_request("t1-0", replica, v3)
    assert list(request.add_columns) == [] and list(request.drop_columns) == ["w"]
    v5 = altered(altered(V2, add=["y"]), drop=["y"])
    request = catch_up_request("t1-0", replica, v5)
    assert (list(request.add_columns), list(request.drop_columns)) == ([], [])
    assert (request.new_version, request.next_column_id) == (4, 4)


def test_a_replica_created_at_a_later_version_has_the_catalogs_ids():
    replica = schemamod.validate_new(ts.SchemaPB.FromString(V2.SerializeToString()))
    request = catch_up_request("t1-0", replica, V3)
    assert [(c.name, c.id) for c in request.add_columns] == [("x", 4)]
    assert request.next_column_id == V3.next_column_id


def test_schemas_that_do_not_match_are_not_altered():
    other = ts.SchemaPB(version=1, columns=[ts.ColumnSchemaPB(name="k", type=ts.INT64,
                                                              is_key=True)])  # fmt: skip
    assert catch_up_request("t1-0", other, V2) is None
    assert catch_up_request("t1-0", ts.SchemaPB(version=1), V2) is None


def test_a_replica_its_server_no_longer_reports_is_forgotten(cluster):  # noqa: F811
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    with a.catalog.lock:
        a.catalog.stale_schemas[("s0", "x1")] = 1
        a.catalog.stale_schemas[("s0", "x2")] = 1
        a.catalog.stale_schemas[("s1", "x1")] = 1

    def beat(incremental: bool, vanished=()):
        a.engine.heartbeat(
            pb.HeartbeatRequest(
                server_uuid="s0",
                address="127.0.0.1:1",
                incremental=incremental,
                vanished_tablet_ids=list(vanished),
            )
        )

    beat(True, vanished=["x1"])  # deleted: named gone
    assert set(a.catalog.stale_schemas) == {("s0", "x2"), ("s1", "x1")}
    beat(False)  # a full report without it
    assert set(a.catalog.stale_schemas) == {("s1", "x1")}


class FakeServers:
    """What `ReplicationManager._client` hands out: each server's replicas' schemas, served
    by GetSchema and changed by AlterSchema as a tablet server does (CAS included)."""

    def __init__(self, schemas: dict[tuple[str, str], ts.SchemaPB]) -> None:
        self.schemas = schemas
        self.calls: list[tuple[str, str]] = []

    def __call__(self, address: str):
        return self

    def call(self, uuid, method, request, response_type, timeout_s=None, idempotent=False):
        assert timeout_s is not None  # every call has a deadline
        self.calls.append((uuid, method))
        key = (uuid, request.tablet_id)
        if method == "TServer.GetSchema":
            return ts.GetSchemaResponse(schema=self.schemas[key])
        assert method == "TServer.AlterSchema"
        if request.expected_version != self.schemas[key].version:
            raise CasFailed("moved")
        self.schemas[key] = apply(self.schemas[key], request)
        return ts.AlterSchemaResponse(schema=self.schemas[key])


def manager_with(catalog: Catalog, servers: FakeServers, per_round: int = 8):
    manager = ReplicationManager(
        catalog,
        "coordinator-test",
        lambda: True,
        ReplicationConfig(catch_ups_per_round_max=per_round),
    )
    manager._client = servers
    return manager


def test_each_round_brings_noted_replicas_on_live_servers_to_the_tables_schema(monkeypatch):
    monkeypatch.setattr(replication, "STALE_GRACE_S", 0.0)
    catalog = catalog_with(V3)
    ids = ("t1-0", "t1-1", "t1-2")
    catalog.tables["t1"] = dataclasses.replace(catalog.tables["t1"], tablet_ids=ids)
    for tablet_id in ids:
        catalog.tablets[tablet_id] = TabletInfo(tablet_id, "t1", 0, 1, ("a", "b", "c"))
    catalog.servers["b"] = ServerInfo("b", "b:1", ServerState.LIVE, 1)
    catalog.servers["c"] = ServerInfo("c", "c:1", ServerState.DOWN, 1)
    v1 = tserver_schema(V1)
    servers = FakeServers({("b", t): v1 for t in ids} | {("c", "t1-0"): v1})
    for uuid, tablet_id in servers.schemas:
        note_report(catalog, uuid, report(1, tablet=tablet_id))
    assert len(catalog.stale_schemas) == 4
    manager = manager_with(catalog, servers, per_round=2)
    assert manager.alter_stale() == 2  # bounded per round
    assert manager.alter_stale() == 1
    assert manager.counters.schemas_caught_up == 3
    assert all(servers.schemas[("b", t)].version == 3 for t in ids)
    # The DOWN server's replica stays noted, untouched, until its server is LIVE.
    assert catalog.stale_schemas == {("c", "t1-0"): 1}
    assert all(uuid == "b" for uuid, _ in servers.calls)
    catalog.servers["c"] = ServerInfo("c", "c:1", ServerState.LIVE, 2)
    assert manager.alter_stale() == 1 and catalog.stale_schemas == {}
    assert servers.schemas[("c", "t1-0")] == servers.schemas[("b", "t1-0")]


def test_a_noted_replica_is_checked_against_the_catalog_first(monkeypatch):
    monkeypatch.setattr(replication, "STALE_GRACE_S", 0.0)
    catalog = catalog_with(V2)
    catalog.servers["b"] = ServerInfo("b", "b:1", ServerState.LIVE, 1)
    servers = FakeServers({("b", "t1-0"): tserver_schema(V1)})
    manager = manager_with(catalog, servers)
    note_report(catalog, "b", report(1))
    table = catalog.tables["t1"]
    catalog.tables["t1"] = dataclasses.replace(table, schema=V3, state=TableState.ALTERING)
    assert manager.alter_stale() == 0  # being altered: left to its AlterTable, forgotten
    assert catalog.stale_schemas == {} and servers.calls == []
    catalog.tables["t1"] = table
    note_report(catalog, "b", report(1))
    del catalog.tables["t1"]  # dropped
    assert manager.alter_stale() == 0 and catalog.stale_schemas == {} and servers.calls == []
    catalog.tables["t1"] = table
    note_report(catalog, "b", report(1))
    servers.schemas[("b", "t1-0")] = apply(
        tserver_schema(V1), catch_up_request("t1-0", tserver_schema(V1), V2)
    )  # altered meanwhile (its report not in yet): asked, not altered again
    assert manager.alter_stale() == 0
    assert servers.calls == [("b", "TServer.GetSchema")] and catalog.stale_schemas == {}


def test_a_replica_just_noted_waits_for_its_report():
    """The sweep of a table just altered notes the replicas whose new report is not in yet:
    altered only once noted STALE_GRACE_S (the report clears them meanwhile)."""
    catalog = catalog_with(V2)
    catalog.servers["b"] = ServerInfo("b", "b:1", ServerState.LIVE, 1)
    servers = FakeServers({("b", "t1-0"): tserver_schema(V1)})
    manager = manager_with(catalog, servers)
    note_report(catalog, "b", report(1))
    assert manager.alter_stale() == 0 and servers.calls == []
    assert ("b", "t1-0") in catalog.stale_schemas
    note_report(catalog, "b", report(2))
    assert manager.alter_stale() == 0 and catalog.stale_schemas == {}


def test_the_sweep_of_the_tables_a_round_names_notes_what_a_sweep_of_every_table_does():
    """issue 28: the round's schema sweep looks only at the tables changed since its last
    look (`Catalog.take_touched_tables`), not at every table whenever one changed. Random
    alters, creates, drops and reports, the same on two catalogs: the one swept that way
    notes the same stale replicas as the one swept whole by a fresh manager each time."""
    import random

    rng = random.Random(28)
    cats = [Catalog(), Catalog()]
    schemas = {}

    def create(i: int) -> None:
        tid, tablet = f"T{i}", f"T{i}-0"
        schemas[tid] = V1
        state = rng.choice((TableState.RUNNING, TableState.CREATING))
        for c in cats:
            c.tables[tid] = TableInfo(tid, tid, V1, 3, (tablet,), state, 1)
            c.tablets[tablet] = TabletInfo(tablet, tid, 0, 1, ("a", "b", "c"))
            c.replica_reports[tablet] = {u: report(1, tablet=tablet) for u in "abc"}

    for i in range(20):
        create(i)
    incremental = ReplicationManager(cats[0], "me", lambda: True, ReplicationConfig())
    made = 20
    for step in range(300):
        op = rng.randrange(5)
        tid = rng.choice(sorted(cats[0].tables))
        tablet, uuid = f"{tid}-0", rng.choice("abc")
        state = rng.choice((TableState.RUNNING, TableState.CREATING))
        if op == 0:  # altered (its replicas' reports unchanged: a server was down)
            schemas[tid] = altered(schemas[tid], add=[f"c{step}"])
        r = report(rng.randint(1, schemas[tid].version), tablet=tablet)
        if op == 4:
            create(made)
            made += 1
        for c in cats:
            if op == 0:
                c.put_table(dataclasses.replace(c.tables[tid], schema=schemas[tid]))
            elif op == 1:  # a replica reports a version
                c.replica_reports[tablet][uuid] = r
                note_report(c, uuid, r)
            elif op == 2:  # CREATING -> RUNNING, or the other way round
                c.put_table(dataclasses.replace(c.tables[tid], state=state))
            elif op == 3 and len(c.tables) > 5:
                c.remove_table(tid)
        if rng.random() < 0.7:  # some changes pile up between two rounds
            _, tables_changed = incremental._look_at()
            incremental._sweep_altered(tables_changed)
            whole = ReplicationManager(cats[1], "me", lambda: True, ReplicationConfig())
            whole._sweep_altered(None)
            assert cats[0].stale_schemas == cats[1].stale_schemas, step
    assert cats[0].stale_schemas  # (the case came up)
