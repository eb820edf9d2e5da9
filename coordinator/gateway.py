"""The tablet-server gateway over rpc: the coordinator's idempotent calls to tablet servers.

Implements coordinator.ops.common.TabletServerGateway with the TServer protocol messages
(rpc/protocols/tserver.proto) and nothing else from the tablet servers. Idempotence, as the
operations need it: CreateTablet answering ALREADY_EXISTS is success (tablet ids are never
reused, so an existing id is this very tablet); DeleteTablet answering TABLET_NOT_FOUND is
success (never created, or gone); AlterSchema answering CAS_FAILED is success when the
replica already has the target version.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Sequence

from coordinator.catalog import ServerInfo
from rpc.client import RpcClient, Transport
from rpc.errors import AlreadyExists, CasFailed, IllegalState, TabletDeleted, TabletNotFound
from rpc.keys import ClientCurve
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts

logger = logging.getLogger(__name__)

CLIENTS_MAX = 4096


def schema_to_tserver(schema: pb.Schema) -> ts.SchemaPB:
    """Same field numbers on both sides; the copy goes through the wire format."""
    out = ts.SchemaPB()
    out.ParseFromString(schema.SerializeToString())
    return out


def partition_to_tserver(partition: pb.Partition) -> ts.PartitionPB:
    """The tablet server treats partition keys as opaque: bucket i of n is [i, i+1)."""
    return ts.PartitionPB(
        start_key=struct.pack(">II", partition.num_buckets, partition.hash_bucket),
        end_key=struct.pack(">II", partition.num_buckets, partition.hash_bucket + 1),
    )


class RpcTabletServerGateway:
    """One RpcClient per tablet-server address over one shared transport."""

    def __init__(
        self,
        caller_uuid: str,
        *,
        privileged_key: bytes | None = None,
        curve: ClientCurve | None = None,
    ) -> None:
        """`curve`: calls as a CURVE client, to tablet servers proving the key the
        ClientCurve gives for their UUID (a CURVE node's: its principals table)."""
        self.caller_uuid = caller_uuid
        # Signs every call (DeleteTablet is privileged: rpc/privileged.py).
        self._privileged_key = privileged_key
        self._transport = Transport(curve=curve)
        self._clients: dict[str, RpcClient] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._clients.clear()
        self._transport.close()

    def _client(self, address: str) -> RpcClient:
        with self._lock:
            client = self._clients.get(address)
            if client is None:
                if len(self._clients) >= CLIENTS_MAX:
                    self._clients.pop(next(iter(self._clients)))
                client = RpcClient(
                    address,
                    self.caller_uuid,
                    transport=self._transport,
                    privileged_key=self._privileged_key,
                )
                self._clients[address] = client
            return client

    def create_tablet(
        self,
        server: ServerInfo,
        table_id: str,
        table_name: str,
        tablet: pb.TabletPlacement,
        schema: pb.Schema,
        peers: Sequence[ServerInfo],
        timeout_s: float,
    ) -> None:
        request = ts.CreateTabletRequest(
            tablet_id=tablet.tablet_id,
            table_id=table_id,
            table_name=table_name,
            schema=schema_to_tserver(schema),
            partition=partition_to_tserver(tablet.partition),
        )
        request.config.opid_index = -1
        for peer in peers:
            request.config.peers.add(
                uuid=peer.uuid, address=peer.address, member_type=ts.MemberType.VOTER
            )
        try:
            self._client(server.address).call(
                server.uuid,
                "TServer.CreateTablet",
                request,
                ts.CreateTabletResponse,
                timeout_s=timeout_s,
                idempotent=True,
            )
        except AlreadyExists:
            logger.debug("tablet %s already on %s", tablet.tablet_id, server.uuid)

    def delete_tablet(self, server: ServerInfo, tablet_id: str, timeout_s: float) -> None:
        try:
            self._client(server.address).call(
                server.uuid,
                "TServer.DeleteTablet",
                ts.DeleteTabletRequest(tablet_id=tablet_id),
                ts.DeleteTabletResponse,
                timeout_s=timeout_s,
                idempotent=True,
            )
        except (TabletNotFound, TabletDeleted):
            logger.debug("tablet %s not live on %s: nothing to delete", tablet_id, server.uuid)

    def alter_schema(
        self,
        server: ServerInfo,
        tablet_id: str,
        old_schema: pb.Schema,
        new_schema: pb.Schema,
        timeout_s: float,
    ) -> None:
        old_names = {c.name for c in old_schema.columns}
        new_names = {c.name for c in new_schema.columns}
        request = ts.AlterSchemaRequest(
            tablet_id=tablet_id,
            expected_version=old_schema.version,
            # The catalog's version (the replica numbers the added columns itself, in step
            # with the catalog: see `catch_up_request`).
            new_version=new_schema.version,
        )
        for c in schema_to_tserver(new_schema).columns:
            if c.name not in old_names:
                request.add_columns.append(c)
        request.drop_columns.extend(c.name for c in old_schema.columns if c.name not in new_names)
        client = self._client(server.address)
        try:
            client.call(
                server.uuid,
                "TServer.AlterSchema",
                request,
                ts.AlterSchemaResponse,
                timeout_s=timeout_s,
                idempotent=True,
            )
        except CasFailed:
            # At the target version already (an earlier call whose answer was lost, or the
            # catch-up): done. Behind the old version too (an earlier alter skipped it, its
            # server down): brought to the new schema in one step here, since the catch-up
            # of coordinator/replication.py leaves the tables being altered to this call.
            sent = catch_up(client, server.uuid, tablet_id, new_schema, timeout_s)
            if sent is not None:
                logger.info(
                    "tablet %s on %s: schema version %d brought to %d (missed an alter)",
                    tablet_id,
                    server.uuid,
                    sent.expected_version,
                    new_schema.version,
                )

    def get_schema(self, server: ServerInfo, tablet_id: str, timeout_s: float) -> ts.SchemaPB:
        """The replica's schema as it says (GetSchema)."""
        return get_schema(self._client(server.address), server.uuid, tablet_id, timeout_s)


def get_schema(
    client: RpcClient, server_uuid: str, tablet_id: str, timeout_s: float
) -> ts.SchemaPB:
    """A replica's schema as it says (TServer.GetSchema)."""
    return client.call(
        server_uuid,
        "TServer.GetSchema",
        ts.GetSchemaRequest(tablet_id=tablet_id),
        ts.GetSchemaResponse,
        timeout_s=timeout_s,
        idempotent=True,
    ).schema


def catch_up_request(
    tablet_id: str, replica: ts.SchemaPB, table: pb.Schema
) -> ts.AlterSchemaRequest | None:
    """The AlterSchema that brings a replica left at an older schema version (`replica`, as
    its GetSchema said) to its table's (`table`, the catalog's) in one step (pure); None when
    the two cannot be matched (another first column).

    Columns are matched by id, not name: a column dropped and added again under its name is
    another column (new id; its old data must not come back), dropped and added. A replica
    numbers its columns in step with the catalog but not always from the same start: the
    catalog numbers a table's columns from 1, a tablet server numbers those of a replica
    created at version 1 from 0 (tservers/tablet/schema.py `validate_new`), and one created
    at a later version (`create_missing`) takes the catalog's ids. Both add 1 per added
    column, so the offset of the first column (a key column, never dropped) holds for every
    column: the request gives the added columns and the next column id in the replica's
    numbering, which keeps later alters of this replica in step with the others'."""
    if not replica.columns or not table.columns:
        return None
    first, mine = table.columns[0], replica.columns[0]
    if first.name != mine.name:
        return None
    offset = first.id - mine.id
    if offset < 0 or table.next_column_id < offset:
        return None
    target = schema_to_tserver(table)
    ids = {c.id - offset for c in target.columns}
    have = {c.id for c in replica.columns}
    request = ts.AlterSchemaRequest(
        tablet_id=tablet_id,
        expected_version=replica.version,
        new_version=table.version,
        next_column_id=max(table.next_column_id - offset, replica.next_column_id),
    )
    request.drop_columns.extend(c.name for c in replica.columns if c.id not in ids)
    for c in target.columns:
        if c.id - offset not in have:
            added = request.add_columns.add()
            added.CopyFrom(c)
            added.id = c.id - offset
    return request


def catch_up(
    client: RpcClient,
    server_uuid: str,
    tablet_id: str,
    table: pb.Schema,
    timeout_s: float,
) -> ts.AlterSchemaRequest | None:
    """Bring a replica to its table's schema `table` if it is older: GetSchema, then the
    AlterSchema of `catch_up_request`, each call with `timeout_s`. Returns the request
    sent; None when the replica is at that version or newer. Raises the calls' errors
    (CAS_FAILED: the replica's schema changed meanwhile), IllegalState when the two
    schemas cannot be matched."""
    current = get_schema(client, server_uuid, tablet_id, timeout_s)
    if current.version >= table.version:
        return None
    request = catch_up_request(tablet_id, current, table)
    if request is None:
        raise IllegalState(
            f"tablet {tablet_id} on {server_uuid}: its schema (version {current.version}, "
            f"first column {current.columns[0].name if current.columns else None!r}) does not "
            "match its table's"
        )
    client.call(
        server_uuid,
        "TServer.AlterSchema",
        request,
        ts.AlterSchemaResponse,
        timeout_s=timeout_s,
        idempotent=True,  # CAS on the replica's version
    )
    return request
