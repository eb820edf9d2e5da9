"""An AlterTable never leaves a replica at an old schema for good, with real processes: one
coordinator, three tablet servers, a table of one tablet with replication 3.

A follower's tablet server is stopped (SIGSTOP) until the coordinator marks it DOWN; an
AlterTable adding a column then succeeds without it (its replica skipped), and rows are
written at the new version (the tablet's leader and the other follower commit them). Once
the server is back, the coordinator brings its replica to the table's schema
(coordinator/replication.py `alter_stale`) before the follower gives up waiting for it
(tservers/tablet/tablet.py SCHEMA_CATCH_UP_S, then the replica FAILS): every replica ends at
the new version with the new column, none FAILED, every one applying the rows written at it.
Before the catch-up the stopped replica stayed at version 1 for good.

Also the gateway's AlterSchema against a real tablet server (as test_gateway_integration.py):
an AlterTable that finds a replica behind its old version (it missed an earlier alter) brings
it to the new schema itself, since the catch-up leaves tables being altered to their alter.
"""

from __future__ import annotations

import signal

import pytest
from coordproc import CoordinatorGroup, TServer

from coordinator.catalog import ServerInfo, ServerState
from coordinator.gateway import RpcTabletServerGateway
from logcentric.client import Client, Column
from rpc.errors import RpcError
from rpc.keys import ClientCurve
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

COLUMNS = [Column("id", "int64", key=True), Column("name", "string")]
# Far above what the catch-up takes (a heartbeat, the enlisting, a round of 0.5 s), and
# above SCHEMA_CATCH_UP_S: a replica left behind fails within it.
CATCH_UP_TIMEOUT_S = 90.0


def write(client: Client, table, rows) -> None:
    with client.new_session() as s:
        s.upsert(table, rows)
        s.flush()
    assert s.errors == []


def test_a_replica_skipped_by_an_alter_is_brought_to_the_new_schema(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=1, tservers=3) as cluster:
        with Client(
            cluster.spec.coordinator_addresses, timeout_s=60, credentials=cluster.credentials()
        ) as client:
            wait_for(lambda: len(client.list_servers()) == 3, 60, "3 tablet servers enlisted")
            client.create_table("t", COLUMNS, num_tablets=1, replication_factor=3)

            def located():
                (tablet,) = client.tablet_locations("t").tablets
                leaders = [r for r in tablet.replicas if r.is_leader]
                return (tablet, leaders[0]) if len(tablet.replicas) == 3 and leaders else None

            tablet, leader = wait_for(located, 60, "the tablet's leader reported")
            table = client.table("t")
            write(client, table, [{"id": i, "name": f"n{i}"} for i in range(100)])

            by_rpc = {n.rpc: n for n in cluster.spec.tservers}
            servers = {s.uuid: s.address for s in client.list_servers()}
            victim_uuid = next(r.server_uuid for r in tablet.replicas if not r.is_leader)
            victim = by_rpc[servers[victim_uuid]]
            clients = {
                s.uuid: cluster.tserver_client(by_rpc[s.address]) for s in client.list_servers()
            }

            def state(uuid: str) -> str:
                return next(s.state for s in client.list_servers() if s.uuid == uuid)

            cluster.kill(victim, signal.SIGSTOP)
            try:
                wait_for(lambda: state(victim_uuid) == "DOWN", 60, "the stopped server DOWN")
                extra = Column("extra", "string", nullable=True)
                assert client.alter_table("t", add_columns=[extra]) == 2
                table = client.table("t")
                write(client, table, [{"id": i, "name": f"m{i}", "extra": f"e{i}"}
                                      for i in range(50, 150)])  # fmt: skip
            finally:
                cluster.kill(victim, signal.SIGCONT)
            log = (cluster.log_dir / "coordinator-0.log").read_text(errors="replace")
            assert f"skipping {tablet.tablet_id} on {victim_uuid}: server down" in log

            def replicas() -> dict[str, object]:
                out = {}
                for uuid, c in clients.items():
                    try:
                        reports = c.list_tablets().tablets
                    except RpcError:
                        return {}
                    out[uuid] = next(r for r in reports if r.tablet_id == tablet.tablet_id)
                return out

            def caught_up() -> bool:
                now = replicas()
                if not now:
                    return False
                failed = {u: r.error for u, r in now.items() if r.status == "FAILED"}
                assert not failed, f"replicas FAILED: {failed}"
                applied = {r.applied_index for r in now.values()}
                return {r.schema_version for r in now.values()} == {2} and len(applied) == 1

            wait_for(caught_up, CATCH_UP_TIMEOUT_S, "every replica at version 2, caught up",
                     interval_s=0.2)  # fmt: skip
            for uuid, c in clients.items():
                schema = c.schema(tablet.tablet_id, refresh=True)  # GetSchema
                assert schema.version == 2 and schema.arrow.names == ["id", "name", "extra"], uuid
            log = (cluster.log_dir / "coordinator-0.log").read_text(errors="replace")
            assert f"the replica on {victim_uuid} brought from schema version 1 to 2" in log

            def status():
                return client.meta.call(
                    "ReplicationStatus", pb.ReplicationStatusRequest(), pb.ReplicationStatusResponse
                )

            assert status().schemas_caught_up >= 1
            # The notes follow the servers' reports: one the victim built before its catch-up
            # (still at version 1) may note it again, until its next report says 2.
            wait_for(lambda: status().stale_schemas == 0, 60, "no replica noted stale")

            # The healed tablet takes writes at the new version on every replica.
            write(client, table, [{"id": i, "name": f"k{i}", "extra": f"x{i}"}
                                  for i in range(150, 200)])  # fmt: skip
            wait_for(caught_up, CATCH_UP_TIMEOUT_S, "every replica applied the last write")
            rows = table.to_arrow().to_pylist()
            assert len(rows) == 200
            assert {r["id"]: r["extra"] for r in rows}[120] == "e120"
            assert {r["id"]: r["extra"] for r in rows}[10] is None
            for c in clients.values():
                c.close()


def schema_pb(version: int, next_id: int, *columns: tuple[int, str]) -> pb.Schema:
    out = pb.Schema(version=version, next_column_id=next_id)
    out.columns.add(id=1, name="id", type=pb.INT64, is_key=True)
    for cid, name in columns:
        out.columns.add(id=cid, name=name, type=pb.STRING, nullable=True)
    return out


def test_an_alter_brings_a_replica_behind_its_old_version_up(tmp_path):
    group = CoordinatorGroup(tmp_path, 1)  # not started: its keys only
    server = TServer(tmp_path, "ts", group)
    curve = ClientCurve(group.node_keypair(0), {server.uuid: server.keypair.public})
    info = ServerInfo(server.uuid, server.address, ServerState.LIVE, 1)
    tablet = pb.TabletPlacement(
        tablet_id="t9-0",
        partition=pb.Partition(hash_bucket=0, num_buckets=1),
        replica_uuids=[server.uuid],
    )
    v1 = schema_pb(1, 3, (2, "v"))
    v2 = schema_pb(2, 4, (2, "v"), (3, "w"))  # an alter this replica missed
    v3 = schema_pb(3, 5, (3, "w"), (4, "x"))  # the alter now: drop v, add x
    gw = RpcTabletServerGateway("coordinator-test", curve=curve)
    try:
        gw.create_tablet(info, "t9", "table", tablet, v1, [info], 5.0)
        for _ in range(2):  # CAS_FAILED (at 1, not 2): caught up; then at 3: done
            gw.alter_schema(info, "t9-0", v2, v3, 5.0)
        got = gw.get_schema(info, "t9-0", 5.0)
        # The server numbers a version-1 replica's columns from 0, the catalog from 1.
        assert got.version == 3 and got.next_column_id == 4
        assert [(c.name, c.id) for c in got.columns] == [("id", 0), ("w", 2), ("x", 3)]
        assert server.schema_versions() == {"t9-0": 3}
        assert got.columns[1].type == ts.STRING
    finally:
        gw.close()
        server.close()
