"""Shared helpers of the tablet server tests: schemas, Arrow IPC rows, in-process managers."""

from __future__ import annotations

import time

import pyarrow as pa

from rpc.protocols.tserver_pb2 import (
    ColumnSchemaPB,
    ConsensusRequest,
    ConsensusResponse,
    CreateTabletRequest,
    DataType,
    SchemaPB,
)
from rpc.server import RpcServer
from tservers.fs import FsLayout
from tservers.tablet.manager import TabletManager
from tservers.wal.log import WalOptions

SIX = SchemaPB(
    columns=[
        ColumnSchemaPB(name="id", type=DataType.INT64, is_key=True),
        ColumnSchemaPB(name="n", type=DataType.INT32, nullable=True),
        ColumnSchemaPB(name="x", type=DataType.DOUBLE, nullable=True),
        ColumnSchemaPB(name="s", type=DataType.STRING, nullable=True),
        ColumnSchemaPB(name="b", type=DataType.BOOL, nullable=True),
        ColumnSchemaPB(name="ts", type=DataType.TIMESTAMP, nullable=True),
    ]
)


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def six_rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "n": pa.array([i % 1000 for i in ids], pa.int32()),
            "x": pa.array([i * 0.5 for i in ids], pa.float64()),
            "s": pa.array([f"s{i}" for i in ids], pa.string()),
            "b": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
            "ts": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us")),
        }
    )


def keys(table: pa.Table, col: str = "id") -> list:
    return table.column(col).to_pylist()


def deadline(s: float = 10.0) -> float:
    return time.monotonic() + s


def open_manager(root, *, flush_rows: int = 200_000, segment_bytes: int = 1 << 20) -> TabletManager:
    from tservers.tablet.tablet import TabletOptions

    fs = FsLayout.open(root) if (root / "instance").exists() else FsLayout.format(root)
    m = TabletManager(
        fs,
        WalOptions(segment_size_bytes_max=segment_bytes),
        TabletOptions(flush_rows_threshold=flush_rows),
        maintenance=False,
    )
    m.open()
    return m


def create(m: TabletManager, tablet_id: str = "t1", schema: SchemaPB = SIX):
    return m.create_tablet(
        CreateTabletRequest(tablet_id=tablet_id, table_name="tbl", schema=schema)
    )


def consensus_peer(uuid: str, on_request) -> RpcServer:
    """A real rpc server standing for the peer tablet server `uuid` (not started): it takes
    one-way TServer.Consensus messages, as a tablet server does, and hands each request
    (and its call context) to `on_request`; it answers nothing."""

    def consensus(req: ConsensusRequest, ctx) -> ConsensusResponse:
        on_request(req, ctx)
        return ConsensusResponse()

    peer = RpcServer(uuid, "127.0.0.1:0", service=uuid)
    peer.register("TServer.Consensus", ConsensusRequest, consensus, inline=True, one_way=True)
    return peer
