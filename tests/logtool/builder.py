"""Builds a real coordinator log for the log tool's tests: real LogRecord protobufs appended,
the way the coordinator appends them (conditional on the next id, DONE invalidating
STARTED, renewals invalidating the previous renewal), to any LogStore (an embedded
ReplicatedLogStore replica or a RemoteLogStore to `logstore serve`).

`build_history(store)` returns what a correct inspection must report (`Expected`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from logstore.api import LogStore
from rpc.protocols import coordinator_pb2 as pb

LOG = "coordinator"
GARBAGE = b"\xff\xfe not a protobuf \x00\x01"
A_UUID, A_ADDR = "c1-aaaa", "127.0.0.1:7100"
B_UUID, B_ADDR = "c2-bbbb", "127.0.0.1:7101"
TS = ["ts-1", "ts-2", "ts-3"]


@dataclass
class Expected:
    ids: dict[str, int] = field(default_factory=dict)  # name -> log id
    live: set[int] = field(default_factory=set)
    invalidated: dict[int, int] = field(default_factory=dict)  # id -> invalidated by
    types: dict[int, str] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)
    last_id: int = 0


class Writer:
    """Appends like the coordinator's leader: every append conditional on last id + 1."""

    def __init__(self, store: LogStore, expected: Expected) -> None:
        self.store = store
        self.exp = expected

    def append(
        self, name: str, data: bytes, invalidates: tuple[int, ...] = (), type_: str = ""
    ) -> int:
        last = self.store.last_id(LOG)
        got = self.store.append(LOG, data, expected_id=last + 1, invalidates=invalidates)
        assert got == last + 1
        self.exp.ids[name] = got
        self.exp.types[got] = type_
        self.exp.sizes[got] = len(data)
        self.exp.live.add(got)
        for i in invalidates:
            self.exp.live.discard(i)
            self.exp.invalidated[i] = got
        if not data:
            self.exp.live.discard(got)  # an invalidation-only entry is never live
        self.exp.last_id = got
        return got

    def record(self, name: str, rec: pb.LogRecord, invalidates: tuple[int, ...] = ()) -> int:
        return self.append(name, rec.SerializeToString(), invalidates, rec.WhichOneof("record"))


def lease(holder: str, address: str, epoch: int, takeover: bool) -> pb.LogRecord:
    return pb.LogRecord(
        lease=pb.Lease(holder_uuid=holder, holder_address=address, epoch=epoch, takeover=takeover)
    )


def _schema(version: int = 1) -> pb.Schema:
    return pb.Schema(
        version=version,
        columns=[
            pb.ColumnSchema(id=1, name="k", type=pb.INT64, is_key=True),
            pb.ColumnSchema(id=2, name="v", type=pb.STRING, nullable=True),
        ],
        next_column_id=3,
    )


def _placements(table_id: str, n: int) -> list[pb.TabletPlacement]:
    return [
        pb.TabletPlacement(
            tablet_id=f"{table_id}-{b}",
            partition=pb.Partition(hash_bucket=b, num_buckets=n),
            replica_uuids=TS,
        )
        for b in range(n)
    ]


def create_table(op_id: int, name: str, phase: int, client: str, seq: int) -> pb.LogRecord:
    table_id = f"t{op_id}"
    return pb.LogRecord(
        create_table=pb.CreateTable(
            header=pb.OpHeader(
                op_id=op_id, request_id=pb.RequestId(client_id=client, seq=seq), phase=phase
            ),
            table_id=table_id,
            name=name,
            schema=_schema(),
            replication_factor=3,
            tablets=_placements(table_id, 2),
        )
    )


def build_history(store: LogStore) -> Expected:
    """Two epochs, servers, a table created, altered and dropped, a table left created, one
    operation left pending, an undecodable entry and an invalidation-only entry."""
    exp = Expected()
    w = Writer(store, exp)
    e1 = w.record("takeover_a", lease(A_UUID, A_ADDR, 0, True))
    r1 = w.record("renew_a1", lease(A_UUID, A_ADDR, e1, False))
    r2 = w.record("renew_a2", lease(A_UUID, A_ADDR, e1, False), (r1,))
    for n, ts in enumerate(TS):
        op = store.last_id(LOG) + 1
        w.record(
            f"enlist_{n}",
            pb.LogRecord(
                enlist_server=pb.EnlistServer(
                    header=pb.OpHeader(op_id=op, phase=pb.DONE),
                    server_uuid=ts,
                    address=f"127.0.0.1:{9000 + n}",
                )
            ),
        )
    # users: created (STARTED, then DONE invalidating STARTED), altered, dropped.
    op = store.last_id(LOG) + 1
    ct = w.record("users_started", create_table(op, "users", pb.STARTED, "cli", 1))
    ct_done = w.record("users_done", create_table(op, "users", pb.DONE, "cli", 1), (ct,))
    op = store.last_id(LOG) + 1
    alter = pb.AlterTable(
        header=pb.OpHeader(op_id=op, request_id=pb.RequestId(client_id="cli", seq=2)),
        table_id=f"t{ct}",
        old_name="users",
        new_name="people",
        old_schema=_schema(1),
        new_schema=_schema(2),
        tablets=_placements(f"t{ct}", 2),
    )
    alter.header.phase = pb.STARTED
    at = w.record("alter_started", pb.LogRecord(alter_table=alter))
    alter.header.phase = pb.DONE
    at_done = w.record("alter_done", pb.LogRecord(alter_table=alter), (at,))
    # A renewal in between, invalidating the previous one, as the lease keeper does.
    w.record("renew_a3", lease(A_UUID, A_ADDR, e1, False), (r2,))
    op = store.last_id(LOG) + 1
    drop = pb.DropTable(
        header=pb.OpHeader(op_id=op, request_id=pb.RequestId(client_id="cli", seq=3)),
        table_id=f"t{ct}",
        name="people",
        tablets=_placements(f"t{ct}", 2),
        moot_record_ids=[ct_done, at_done],
    )
    drop.header.phase = pb.STARTED
    dt = w.record("drop_started", pb.LogRecord(drop_table=drop))
    drop.header.phase = pb.DONE
    w.record("drop_done", pb.LogRecord(drop_table=drop), (dt, ct_done, at_done))
    # Epoch 2: B takes over (invalidating A's renewals, keeping A's takeover).
    r3 = exp.ids["renew_a3"]
    e2 = w.record("takeover_b", lease(B_UUID, B_ADDR, 0, True), (r3,))
    # orders: created and done; left alone.
    op = store.last_id(LOG) + 1
    o1 = w.record("orders_started", create_table(op, "orders", pb.STARTED, "cli2", 1))
    w.record("orders_done", create_table(op, "orders", pb.DONE, "cli2", 1), (o1,))
    # An entry some bug wrote: not a LogRecord.
    w.append("garbage", GARBAGE, (), "undecodable")
    # An entry that only invalidates (empty data).
    junk = w.append("junk", b"\x08\x01", (), "undecodable")
    w.append("inval_only", b"", (junk,), "invalidation")
    w.record("renew_b1", lease(B_UUID, B_ADDR, e2, False))
    # events: STARTED, no DONE: pending.
    op = store.last_id(LOG) + 1
    w.record("events_started", create_table(op, "events", pb.STARTED, "cli3", 7))
    return exp
