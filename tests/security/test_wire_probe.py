"""What the network sees of a real cluster (design/security.md section 2): a recording TCP
relay between a client and the coordinator node, and another between the client and the
tablet server that holds the table's tablet. On a secure cluster neither sees the table's
name, a column name, a row value, a method name or the server's UUID; on a plaintext one
(the control, which shows the probe can see them) both do."""

from __future__ import annotations

import pyarrow as pa
import pytest

import logcentric
from logcentric import Column
from logcentric.tablets import TabletServerClient
from optools.localcluster import LocalCluster
from rpc import credentials
from rpc.protocols.tserver_pb2 import INSERT
from tests.support.relay import Relay

pytestmark = pytest.mark.integration

TABLE = "probe_table_mauve_4711"
COLUMN = "secret_column_ochre"
ROW_VALUE = "row-value-vermilion-0815"


@pytest.mark.parametrize("secure", [True, False], ids=["secure", "plaintext-control"])
def test_a_probe_sees_no_table_name_row_or_method(tmp_path, secure):
    cluster = LocalCluster.create(tmp_path / "c", 1, 1, 1.0, secure=secure)
    coordinator_relay = tserver_relay = None
    try:
        cluster.up(timeout_s=120)
        coordinator_relay = Relay(cluster.spec.coordinators[0].rpc)
        creds = None
        if secure:
            # The admin's credentials, but naming the relay's address for the coordinator
            # (with that node's key): every coordinator call goes through the probe.
            admin = cluster.credentials()
            creds = tmp_path / "via-relay.credentials"
            node_key = admin.coordinators[0][1] if admin.coordinators else ""
            credentials.write(
                creds,
                credentials.document(
                    "admin", "user", ["admin"], admin.keypair,
                    [(coordinator_relay.address, node_key)],
                ),
            )  # fmt: skip
        with logcentric.connect(
            [coordinator_relay.address],
            credentials=str(creds) if creds else None,
            timeout_s=60,
        ) as client:
            client.create_table(
                TABLE, [Column("id", "int64", key=True), Column(COLUMN, "string")],
                num_tablets=1, replication_factor=1,
            )  # fmt: skip
            table = client.table(TABLE)
            (tablet,) = table.tablets()
            (replica,) = tablet.replicas
            tserver_relay = Relay(replica.address)
            keys = {}
            if secure:
                keys = {"keypair": client.credentials.keypair, "server_key": replica.public_key}
            with TabletServerClient(
                tserver_relay.address, replica.server_uuid, timeout_s=60, **keys
            ) as ts:
                rows = pa.table({"id": [1, 2, 3], COLUMN: [ROW_VALUE] * 3})
                ts.write(tablet.tablet_id, [(INSERT, rows)])
                back = ts.scan_table(tablet.tablet_id)
            assert back.column(COLUMN).to_pylist() == [ROW_VALUE] * 3
            server_uuid = replica.server_uuid
    finally:
        for relay in (coordinator_relay, tserver_relay):
            if relay is not None:
                relay.close()
        cluster.down()
    to_coordinator = bytes(coordinator_relay.seen)
    to_tserver = bytes(tserver_relay.seen)
    assert len(to_coordinator) > 1000 and len(to_tserver) > 1000
    coordinator_markers = [TABLE.encode(), COLUMN.encode(), b"Coordinator.CreateTable"]
    tserver_markers = [
        ROW_VALUE.encode(), COLUMN.encode(), b"TServer.Write", b"TServer.Scan",
        server_uuid.encode(),
    ]  # fmt: skip
    seen_coordinator = [m for m in coordinator_markers if m in to_coordinator]
    seen_tserver = [m for m in tserver_markers if m in to_tserver]
    if secure:
        assert seen_coordinator == [] and seen_tserver == []
    else:
        assert seen_coordinator == coordinator_markers
        assert seen_tserver == tserver_markers
