"""The rpc tablet-server gateway against a real tablet server: every call is idempotent.
The server runs with CURVE (the default), given a coordinator group's keys (the group is not
started: its heartbeats go nowhere), and the gateway calls it with node c0's key, as that
node would."""

from __future__ import annotations

import pytest
from coordproc import CoordinatorGroup, TServer

from coordinator.catalog import ServerInfo, ServerState
from coordinator.gateway import RpcTabletServerGateway
from rpc.errors import BadRequest, TimedOut, Unavailable
from rpc.keys import ClientCurve
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts

pytestmark = pytest.mark.integration

SCHEMA = pb.Schema(
    version=1,
    next_column_id=3,
    columns=[
        pb.ColumnSchema(id=1, name="id", type=pb.INT64, is_key=True),
        pb.ColumnSchema(id=2, name="v", type=pb.STRING, nullable=True),
    ],
)


@pytest.fixture
def tserver(tmp_path):
    group = CoordinatorGroup(tmp_path, 1)
    server = TServer(tmp_path, "ts", group)
    server.coordinator_curve = ClientCurve(
        group.node_keypair(0), {server.uuid: server.keypair.public}
    )
    yield server
    server.close()


def test_create_alter_delete_are_idempotent(tserver):
    info = ServerInfo(tserver.uuid, tserver.address, ServerState.LIVE, 1)
    tablet = pb.TabletPlacement(
        tablet_id="t7-0",
        partition=pb.Partition(hash_bucket=0, num_buckets=2),
        replica_uuids=[tserver.uuid],
    )
    gw = RpcTabletServerGateway("coordinator-test", curve=tserver.coordinator_curve)
    try:
        for _ in range(2):
            gw.create_tablet(info, "t7", "table", tablet, SCHEMA, [info], 5.0)
        assert tserver.live_tablets() == {"t7-0"}
        new = pb.Schema()
        new.CopyFrom(SCHEMA)
        new.version = 2
        new.next_column_id = 4
        new.columns.add(id=3, name="w", type=pb.INT32, nullable=True)
        for _ in range(2):  # the second one answers CAS_FAILED: already at version 2
            gw.alter_schema(info, "t7-0", SCHEMA, new, 5.0)
        assert tserver.schema_versions() == {"t7-0": 2}
        for _ in range(2):
            gw.delete_tablet(info, "t7-0", 5.0)
        assert tserver.tablets() == {"t7-0": ts.DELETED}
        gw.delete_tablet(info, "never-created", 5.0)  # TABLET_NOT_FOUND is success
    finally:
        gw.close()


def test_unreachable_server_is_unavailable_or_timed_out(tserver):
    """What call_replica retries and, once the server is marked down, skips."""
    gw = RpcTabletServerGateway("coordinator-test", curve=tserver.coordinator_curve)
    tserver.close()
    info = ServerInfo(tserver.uuid, tserver.address, ServerState.LIVE, 1)
    try:
        with pytest.raises((Unavailable, TimedOut)):
            gw.delete_tablet(info, "t1-0", 2.0)
    finally:
        gw.close()


def test_a_schema_the_server_refuses_is_bad_request(tserver):
    """What the memory gateway's `refusing` stands for (call_replica skips it): a schema
    against the servers' rules, past the coordinator's own check, is BAD_REQUEST."""
    info = ServerInfo(tserver.uuid, tserver.address, ServerState.LIVE, 1)
    tablet = pb.TabletPlacement(
        tablet_id="t8-0",
        partition=pb.Partition(hash_bucket=0, num_buckets=1),
        replica_uuids=[tserver.uuid],
    )
    bad = pb.Schema()
    bad.CopyFrom(SCHEMA)
    bad.columns[0].name = "my-id"
    gw = RpcTabletServerGateway("coordinator-test", curve=tserver.coordinator_curve)
    try:
        with pytest.raises(BadRequest, match="bad column name"):
            gw.create_tablet(info, "t8", "table", tablet, bad, [info], 5.0)
        assert "t8-0" not in tserver.live_tablets()
    finally:
        gw.close()
