"""Fuzzing of the tablet server's edges with malformed requests (issue 27, section 1).

The write fuzzer builds valid Arrow IPC row blocks for every operation type on a table of
every column type, mutates them (byte flips, truncation, bad string offsets, invalid UTF-8,
wrong, nested and dictionary types, extra, missing and duplicated columns, nulls where none
are allowed, huge declared lengths, compression, extension types, many batches) and sends
each as a raw `TServer.Write` to the leader of a tablet replicated on three real servers.
A model decides, from Arrow's own full validation of the body in this process and the
schema's rules, what the body means; the server may answer OK only for a body the model
finds valid (and applies it), ALREADY_EXISTS / NOT_FOUND only as the model does, and
otherwise BAD_REQUEST. No process may die, no replica fail; the scan is exactly the model's
rows, before and after every server is killed -9 and restarted (WAL replay of every entry).

The seed is printed and can be set with WRITE_FUZZ_SEED (and the count with
WRITE_FUZZ_MUTATIONS): a failure is replayed exactly.
"""

from __future__ import annotations

import os
import random
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

import pyarrow as pa
import pytest

from logcentric.tablets import TabletServerClient, column
from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    AlterSchemaRequest,
    AlterSchemaResponse,
    ColumnSchemaPB,
    CreateTabletRequest,
    CreateTabletResponse,
    DataType,
    MemberType,
    OpType,
    PredicatePB,
    RaftConfigPB,
    RowBlockPB,
    ScanRequest,
    ScanResponse,
    SchemaPB,
    ValuePB,
    WriteOpPB,
    WriteRequest,
    WriteResponse,
)
from tests.replication.helpers import TServerTrio
from tests.support.cli import run_cli
from tests.support.procs import wait_for
from tests.tservers.helpers import create, deadline, open_manager
from tests.tservers.procs import TServerProcess
from tservers.consensus.types import ProposalStatus
from tservers.fs import FsLayout
from tservers.tablet import schema as schemamod
from tservers.tablet.tablet import TabletStatus

SEED = int(os.environ.get("WRITE_FUZZ_SEED", "2027"))
MUTATIONS = int(os.environ.get("WRITE_FUZZ_MUTATIONS", "300"))
TABLET = "fuzz0001"
CALL_TIMEOUT_S = 60.0
ROWS_MAX = 100_000

COLS = [
    column("id", "int64", key=True),
    column("s", "string"),  # not nullable: nulls and its absence must be refused
    column("b", "binary", nullable=True),
    column("d", "double", nullable=True),
    column("f", "bool", nullable=True),
    column("i", "int32", nullable=True),
    column("ts", "timestamp", nullable=True),
]
TYPES = {
    "id": pa.int64(),
    "s": pa.string(),
    "b": pa.binary(),
    "d": pa.float64(),
    "f": pa.bool_(),
    "i": pa.int32(),
    "ts": pa.timestamp("us"),
}
NONKEY = ["s", "b", "d", "f", "i", "ts"]
NULLABLE = {"b", "d", "f", "i", "ts"}
OPS = [OpType.INSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE]
ALPHABET = "abcxyz09 _-\u00e9\u00df\u20ac\u4e2d\U0001d11e"


# ---------------------------------------------------------------- valid bodies
def ipc(data: pa.Table | list[pa.RecordBatch], compression: str | None = None) -> bytes:
    batches = data.to_batches() if isinstance(data, pa.Table) else data
    schema = data.schema if isinstance(data, pa.Table) else data[0].schema
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, schema, options=opts) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue().to_pybytes()


def random_values(rng: random.Random, name: str, n: int, *, nulls: bool) -> pa.Array:
    def maybe(v):
        return None if nulls and rng.random() < 0.15 else v

    if name == "s":
        vals = ["".join(rng.choices(ALPHABET, k=rng.randrange(0, 12))) for _ in range(n)]
    elif name == "b":
        vals = [rng.randbytes(rng.randrange(0, 12)) for _ in range(n)]
    elif name == "d":
        vals = [rng.uniform(-1e6, 1e6) for _ in range(n)]
    elif name == "f":
        vals = [rng.random() < 0.5 for _ in range(n)]
    elif name == "i":
        vals = [rng.randint(-(2**31), 2**31 - 1) for _ in range(n)]
    elif name == "ts":
        vals = [rng.randrange(0, 4 * 10**15) for _ in range(n)]
        return pa.array([maybe(v) for v in vals], pa.int64()).cast(pa.timestamp("us"))
    else:
        raise AssertionError(name)
    return pa.array([maybe(v) for v in vals], TYPES[name])


@dataclass
class Model:
    """The rows the table must hold: key -> (s, b, d as bits, f, i, ts in µs)."""

    rows: dict[int, tuple] = field(default_factory=dict)
    next_key: int = 1

    def new_keys(self, rng: random.Random, n: int) -> list[int]:
        out = []
        for _ in range(n):
            self.next_key += rng.randrange(1, 5)
            out.append(self.next_key)
        return out


def valid_table(rng: random.Random, op: int, model: Model) -> pa.Table:
    """A valid row block for `op` against the model (UPDATE and DELETE of existing keys)."""
    existing = sorted(model.rows)
    n = rng.randrange(3, 25)
    if op == OpType.INSERT:
        keys = model.new_keys(rng, n)
    elif op == OpType.UPSERT:
        old = rng.sample(existing, min(len(existing), n // 2))
        keys = old + model.new_keys(rng, n - len(old))
    else:
        keys = rng.sample(existing, min(len(existing), n))
    rng.shuffle(keys)
    cols = {"id": pa.array(keys, pa.int64())}
    if op == OpType.DELETE:
        return pa.table(cols)
    for name in NONKEY:
        if op == OpType.UPDATE and rng.random() < 0.4:
            continue
        if op != OpType.UPDATE and name in NULLABLE and rng.random() < 0.2:
            continue
        cols[name] = random_values(rng, name, len(keys), nulls=name in NULLABLE)
    return pa.table(cols)


# ---------------------------------------------------------------- mutations
def set_col(t: pa.Table, name: str, arr: pa.Array | pa.ChunkedArray, f=None) -> pa.Table:
    f = f if f is not None else pa.field(name, arr.type)
    if name in t.column_names:
        return t.set_column(t.column_names.index(name), f, arr)
    return t.append_column(f, arr)


def flip(rng: random.Random, data: bytes, lo_frac: float = 0.0) -> bytes:
    b = bytearray(data)
    lo = int(len(b) * lo_frac)
    for _ in range(rng.randrange(1, 5)):
        i = rng.randrange(lo, len(b))
        b[i] ^= rng.randrange(1, 256)
    return bytes(b)


def with_strings(rng: random.Random, t: pa.Table) -> tuple[pa.Table, list[str]]:
    """`t` with an `s` column of distinct lengths (its offsets are findable in the body)."""
    vals = ["x" * (3 + 2 * j) + rng.choice("abc") for j in range(t.num_rows)]
    return set_col(t, "s", pa.array(vals, pa.string())), vals


def m_none(rng, op, t):
    return ipc(t)


def m_flip(rng, op, t):
    return flip(rng, ipc(t))


def m_flip_body(rng, op, t):
    return flip(rng, ipc(t), 0.5)


def m_truncate(rng, op, t):
    data = ipc(t)
    return data[: rng.randrange(0, len(data))]


def m_empty(rng, op, t):
    choice = rng.randrange(3)
    if choice == 0:
        return b""
    if choice == 1:
        return b"\xff\xff\xff\xff\x00\x00\x00\x00"  # end of stream only, no schema
    return ipc(t.slice(0, 0))  # a schema and no rows: valid


def m_bad_offsets(rng, op, t):
    t, vals = with_strings(rng, t)
    offsets = [0]
    for v in vals:
        offsets.append(offsets[-1] + len(v.encode()))
    data = bytearray(ipc(t))
    pat = struct.pack(f"<{len(offsets)}i", *offsets)
    at = data.find(pat)
    assert at >= 0, "string offsets not found in the body"
    j = rng.randrange(0, len(offsets))
    bad = rng.choice([-1, -(2**31), offsets[-1] + 1000, 2**31 - 1, max(0, offsets[j] - 5)])
    if bad == offsets[j]:
        bad = -7
    data[at + 4 * j : at + 4 * j + 4] = struct.pack("<i", bad)
    return bytes(data)


def m_bad_utf8(rng, op, t):
    n = t.num_rows
    pool = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"ok\xfe\xff", b"\xf8\x88\x80\x80\x80", b"fine"]
    vals = [rng.choice(pool) for _ in range(n)]
    vals[rng.randrange(n)] = rng.choice(pool[:5])  # at least one invalid
    return ipc(set_col(t, "s", pa.array(vals, pa.binary()).view(pa.string())))


def _typed(rng: random.Random, t: pa.DataType, n: int) -> pa.Array:
    if pa.types.is_integer(t):
        info = (
            (0, 2 ** (t.bit_width) - 1)
            if pa.types.is_unsigned_integer(t)
            else (-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
        )
        return pa.array([rng.randint(*info) for _ in range(n)], t)
    if pa.types.is_floating(t):
        return pa.array([rng.uniform(-1e3, 1e3) for _ in range(n)], pa.float64()).cast(t)
    if pa.types.is_boolean(t):
        return pa.array([rng.random() < 0.5 for _ in range(n)], t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.array([f"v{rng.randrange(100)}" for _ in range(n)], t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.array([rng.randbytes(3) for _ in range(n)], t)
    if pa.types.is_fixed_size_binary(t):
        return pa.array([rng.randbytes(t.byte_width) for _ in range(n)], t)
    if pa.types.is_timestamp(t):
        big = rng.random() < 0.3  # seconds that overflow as microseconds
        hi = 2**62 if big else 10**9
        return pa.array([rng.randrange(0, hi) for _ in range(n)], pa.int64()).cast(t)
    if pa.types.is_date32(t):
        return pa.array([rng.randrange(0, 20000) for _ in range(n)], pa.int32()).cast(t)
    if pa.types.is_time64(t) or pa.types.is_duration(t):
        return pa.array([rng.randrange(0, 10**9) for _ in range(n)], pa.int64()).cast(t)
    if pa.types.is_decimal(t):
        return pa.array([Decimal(rng.randrange(0, 10**6)).scaleb(-2) for _ in range(n)], t)
    if pa.types.is_null(t):
        return pa.nulls(n)
    raise AssertionError(t)


WRONG_TYPES = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint32(),
    pa.uint64(),
    pa.float32(),
    pa.float64(),
    pa.bool_(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.binary(4),
    pa.date32(),
    pa.time64("us"),
    pa.duration("us"),
    pa.decimal128(12, 2),
    pa.timestamp("s"),
    pa.timestamp("ms"),
    pa.timestamp("ns"),
    pa.timestamp("us", tz="UTC"),
    pa.null(),
]


def m_wrong_type(rng, op, t):
    name = rng.choice(["id", *NONKEY])
    typ = rng.choice(WRONG_TYPES)
    return ipc(set_col(t, name, _typed(rng, typ, t.num_rows)))


def _nested(rng: random.Random, n: int) -> pa.Array:
    kind = rng.randrange(7)
    if kind == 0:
        return pa.array(
            [[rng.randrange(9)] * rng.randrange(3) for _ in range(n)], pa.list_(pa.int64())
        )
    if kind == 1:
        return pa.array([["a"] * rng.randrange(3) for _ in range(n)], pa.large_list(pa.string()))
    if kind == 2:
        return pa.array([{"a": j, "b": "x"} for j in range(n)])
    if kind == 3:
        return pa.array([[("k", j)] for j in range(n)], pa.map_(pa.string(), pa.int64()))
    if kind == 4:
        return pa.array([[j, j] for j in range(n)], pa.list_(pa.int32(), 2))
    if kind == 5:
        return pa.array([[{"a": j}] for j in range(n)])
    types = pa.array([j % 2 for j in range(n)], pa.int8())
    return pa.UnionArray.from_sparse(
        types, [pa.array(range(n), pa.int64()), pa.array([str(j) for j in range(n)])]
    )


def m_nested(rng, op, t):
    name = rng.choice(["id", *NONKEY])
    return ipc(set_col(t, name, _nested(rng, t.num_rows)))


def m_dictionary(rng, op, t):
    name = rng.choice(["id", "s", "b", "i"])
    if name not in t.column_names:
        t = set_col(t, name, random_values(rng, name, t.num_rows, nulls=False))
    col = t.column(name).combine_chunks()
    if rng.random() < 0.3:  # indices past the dictionary's end
        bad = pa.array([rng.randrange(0, 1000) for _ in range(len(col))], pa.int32())
        arr = pa.DictionaryArray.from_arrays(bad, col.slice(0, 1), safe=False)
    else:
        arr = col.dictionary_encode()
    return ipc(set_col(t, name, arr))


def m_extra_column(rng, op, t):
    name = rng.choice(["zz", "ID", "s ", "", "\u00e9t\u00e9", "__deleted", "c0", "x" * 300])
    return ipc(set_col(t, name, pa.array(range(t.num_rows), pa.int64())))


def m_duplicate_column(rng, op, t):
    name = rng.choice([n for n in t.column_names])
    return ipc(t.append_column(name, t.column(name)))


def m_missing_column(rng, op, t):
    name = rng.choice(t.column_names)
    return ipc(t.drop_columns([name]))


def m_nulls(rng, op, t):
    name = rng.choice(["id", "s", "s", *sorted(NULLABLE)])
    n = t.num_rows
    if name in t.column_names:
        vals = t.column(name).to_pylist()
    else:
        vals = random_values(rng, name, n, nulls=False).to_pylist()
    vals[rng.randrange(n)] = None
    arr = pa.array(vals, TYPES[name]) if name != "id" else pa.array(vals, pa.int64())
    return ipc(set_col(t, name, arr))


def m_null_type(rng, op, t):
    name = rng.choice(["id", "s", *sorted(NULLABLE)])
    return ipc(set_col(t, name, pa.nulls(t.num_rows)))


def m_huge_length(rng, op, t):
    data = bytearray(ipc(t))
    pat = struct.pack("<q", t.num_rows)
    huge = rng.choice([2**31 - 1, 2**40, 2**62, 2**63 - 1, -1, -(2**63), ROWS_MAX + 1])
    at = data.find(pat, 8)
    while at >= 0:
        if rng.random() < 0.7:
            data[at : at + 8] = struct.pack("<q", huge)
        at = data.find(pat, at + 8)
    return bytes(data)


def m_huge_message_length(rng, op, t):
    data = bytearray(ipc(t))
    (first,) = struct.unpack_from("<i", data, 4)
    at = rng.choice([4, 8 + first + 4])  # the schema message's, or the batch's
    data[at : at + 4] = struct.pack("<i", rng.choice([2**31 - 1, -8, 1 << 30, len(data) * 2]))
    return bytes(data)


def m_compressed(rng, op, t):
    return ipc(t, compression=rng.choice(["zstd", "lz4"]))


def m_extension(rng, op, t):
    name = rng.choice(t.column_names)
    col = t.column(name)
    ext = rng.choice([b"arrow.opaque", b"fuzz.unknown", b"arrow.json"])
    meta = {b"ARROW:extension:name": ext, b"ARROW:extension:metadata": b"{}"}
    return ipc(set_col(t, name, col, pa.field(name, col.type, metadata=meta)))


def m_registered_extension(rng, op, t):
    n = t.num_rows
    if rng.random() < 0.5 and hasattr(pa, "uuid"):
        arr = pa.ExtensionArray.from_storage(
            pa.uuid(), pa.array([rng.randbytes(16) for _ in range(n)], pa.binary(16))
        )
    else:
        arr = pa.ExtensionArray.from_storage(pa.bool8(), pa.array([1] * n, pa.int8()))
    return ipc(set_col(t, rng.choice(["id", *NONKEY]), arr))


def m_batches(rng, op, t):
    if rng.random() < 0.5:  # valid: one row per batch
        return ipc(t.to_batches(max_chunksize=1))
    empty = t.slice(0, 0).to_batches()
    if not empty:
        empty = [pa.RecordBatch.from_pylist([], schema=t.schema)]
    return ipc(empty * rng.choice([1030, 2000]) + t.to_batches())


def m_null_count_lie(rng, op, t):
    name = rng.choice(sorted(NULLABLE & set(t.column_names)) or ["b"])
    if name not in t.column_names:
        t = set_col(t, name, random_values(rng, name, t.num_rows, nulls=False))
    col = t.column(name).combine_chunks()
    vals = col.to_pylist()
    vals[0] = None
    good = pa.array(vals, col.type)
    lie = rng.choice([0, 2, len(vals)]) if good.null_count != 2 else 3
    arr = pa.Array.from_buffers(good.type, len(good), good.buffers(), null_count=lie)
    return ipc(set_col(t, name, arr))


def m_edge_values(rng, op, t):
    n = t.num_rows
    edges = {
        "s": ["", "\u0000", "x" * 70_000, "\U0010ffff"],
        "b": [b"", b"\x00\xff", rng.randbytes(50_000)],
        "d": [float("nan"), float("inf"), -float("inf"), -0.0, 5e-324, 1.7976931348623157e308],
        "f": [True, False],
        "i": [-(2**31), 2**31 - 1, 0],
        "ts": [0, -(2**63) + 1, 2**63 - 1, -1],
    }
    name = rng.choice(NONKEY)  # a DELETE may carry other columns too
    vals = [rng.choice(edges[name]) for _ in range(n)]
    arr = (
        pa.array(vals, pa.int64()).cast(pa.timestamp("us"))
        if name == "ts"
        else pa.array(vals, TYPES[name])
    )
    return ipc(set_col(t, name, arr))


def m_metadata(rng, op, t):
    t = t.replace_schema_metadata({b"note": rng.randbytes(20), b"pandas": b"{not json"})
    return ipc(t)


MUTATORS: list[tuple[str, Callable]] = [
    ("none", m_none),
    ("flip", m_flip),
    ("flip_body", m_flip_body),
    ("truncate", m_truncate),
    ("empty", m_empty),
    ("bad_offsets", m_bad_offsets),
    ("bad_utf8", m_bad_utf8),
    ("wrong_type", m_wrong_type),
    ("nested", m_nested),
    ("dictionary", m_dictionary),
    ("extra_column", m_extra_column),
    ("duplicate_column", m_duplicate_column),
    ("missing_column", m_missing_column),
    ("nulls", m_nulls),
    ("null_type", m_null_type),
    ("huge_length", m_huge_length),
    ("huge_message_length", m_huge_message_length),
    ("compressed", m_compressed),
    ("extension", m_extension),
    ("registered_extension", m_registered_extension),
    ("batches", m_batches),
    ("null_count_lie", m_null_count_lie),
    ("edge_values", m_edge_values),
    ("metadata", m_metadata),
    ("two_blocks", None),  # a valid block then a mutated one: all or nothing
]


# ---------------------------------------------------------------- the model
def _canon(col: pa.ChunkedArray, name: str) -> list:
    """Python values of a validated column in its schema type: ts as µs, d as its bits."""
    if name == "ts":
        return col.cast(pa.int64()).to_pylist()
    if name == "d":
        return [None if v is None else struct.pack("<d", v) for v in col.to_pylist()]
    return col.to_pylist()


def _allowed(given: pa.DataType, want: pa.DataType) -> bool:
    if given == want:
        return True
    if pa.types.is_timestamp(want):
        return pa.types.is_timestamp(given)
    return (want, given) in ((pa.string(), pa.large_string()), (pa.binary(), pa.large_binary()))


def model_block(op: int, data: bytes) -> tuple[int, dict[str, list]] | str:
    """(rows, column name -> canonical values) of a body valid for the schema, or why not."""
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
        table.validate(full=True)
    except Exception as e:  # noqa: BLE001 - any failure of Arrow's reader is a bad body
        return f"invalid Arrow: {type(e).__name__}: {e}"
    if table.num_rows > ROWS_MAX:
        return "too many rows"
    names = table.column_names
    if len(set(names)) != len(names):
        return "duplicate column"
    out: dict[str, list] = {}
    for f, col in zip(table.schema, table.columns, strict=True):
        want = TYPES.get(f.name)
        if want is None:
            return f"unknown column {f.name!r}"
        if f.metadata and b"ARROW:extension:name" in f.metadata:
            return "extension type"
        if f.type == pa.null():
            if f.name not in NULLABLE:
                return f"null type for {f.name}"
            col = pa.chunked_array([pa.nulls(table.num_rows, want)])
        elif not _allowed(f.type, want):
            return f"column {f.name} has type {f.type}"
        elif f.type != want:
            try:
                col = col.cast(want)
            except pa.ArrowException as e:
                return f"cast: {e}"
        if col.null_count and f.name not in NULLABLE:
            return f"nulls in {f.name}"
        out[f.name] = _canon(col, f.name)
    if "id" not in out:
        return "no key column"
    if op in (OpType.INSERT, OpType.UPSERT) and "s" not in out:
        return "no s column"
    return table.num_rows, out


def model_apply(state: dict, blocks: list[tuple[int, int, dict]]) -> dict | str:
    """The state after a write of valid blocks, or the error the server must answer."""
    new = dict(state)
    for op, _rows, cols in blocks:
        for j, k in enumerate(cols["id"]):
            if op in (OpType.INSERT, OpType.UPSERT):
                if op == OpType.INSERT and k in new:
                    return "ALREADY_EXISTS"
                new[k] = tuple(cols[c][j] if c in cols else None for c in NONKEY)
            elif op == OpType.UPDATE:
                if k not in new:
                    return "NOT_FOUND"
                row = list(new[k])
                for x, c in enumerate(NONKEY):
                    if c in cols:
                        row[x] = cols[c][j]
                new[k] = tuple(row)
            else:
                if k not in new:
                    return "NOT_FOUND"
                del new[k]
    return new


# ---------------------------------------------------------------- the cluster
class Fuzzer:
    def __init__(self, trio: TServerTrio) -> None:
        self.trio = trio
        self.rpcs: dict[int, RpcClient] = {}
        self.leader_idx = -1

    def close(self) -> None:
        for c in self.rpcs.values():
            c.close()
        self.rpcs.clear()

    def rpc(self, i: int) -> RpcClient:
        c = self.rpcs.get(i)
        if c is None:
            c = self.rpcs[i] = RpcClient(self.trio.procs[i].address, "write-fuzz")
        return c

    def drop_clients(self) -> None:
        self.close()
        for i in range(len(self.trio.procs)):
            self.trio._drop_client(i)

    def assert_alive(self, what: str) -> None:
        for p in self.trio.procs:
            if p.proc is None or p.proc.poll() is not None:
                tail = p.err_path.read_text()[-3000:] if p.err_path.exists() else ""
                code = p.proc.returncode if p.proc is not None else None
                raise AssertionError(
                    f"tablet server {p.address} died (exit {code}) {what}; stderr tail:\n{tail}"
                )

    def assert_no_failed(self) -> None:
        for i in range(len(self.trio.procs)):
            r = self.trio.report(i, TABLET)
            assert r is not None, f"server {i} lost tablet {TABLET}"
            assert r.status != "FAILED", f"server {i}: tablet FAILED: {r.error}"

    def leader(self) -> int:
        if self.leader_idx < 0:
            self.leader_idx = self.trio.leader(TABLET, timeout_s=60.0)
        return self.leader_idx

    def write(self, blocks: list[tuple[int, bytes]], what: str):
        """The server's answer: ('OK', rows) or (status name, message). Follows the leader."""
        deadline = time.monotonic() + CALL_TIMEOUT_S * 2
        while True:
            i = self.leader()
            req = WriteRequest(tablet_id=TABLET, schema_version=1, ops=[op for op, _ in blocks])
            try:
                resp, _ = self.rpc(i).call_with_sidecars(
                    self.trio.procs[i].uuid,
                    "TServer.Write",
                    req,
                    WriteResponse,
                    sidecars=[d for _, d in blocks],
                    timeout_s=CALL_TIMEOUT_S,
                )
                return "OK", resp.rows
            except (errors.NotLeader, errors.Unavailable) as e:
                self.assert_alive(f"after {what}")  # a dead leader is a failure, not a retry
                if time.monotonic() > deadline:
                    raise AssertionError(f"no leader took {what}: {e}") from e
                self.leader_idx = -1
            except errors.TimedOut as e:
                self.assert_alive(f"after {what}")
                raise AssertionError(f"{what}: outcome unknown (TIMED_OUT): {e}") from e
            except errors.RpcError as e:
                return type(e).__name__, str(e)

    def scan_rows(self) -> dict[int, tuple]:
        """Every row, at the leader (following it), checked by Arrow before it is read."""
        deadline = time.monotonic() + CALL_TIMEOUT_S * 2
        while True:
            i = self.leader()
            try:
                t = self.trio.client(i).scan_table(TABLET)
                break
            except (errors.NotLeader, errors.Unavailable) as e:
                self.assert_alive("during a scan")
                if time.monotonic() > deadline:
                    raise AssertionError(f"no leader answered the scan: {e}") from e
                self.leader_idx = -1
        t.validate(full=True)  # the server must never hand out a malformed column
        if t.num_columns == 0:
            return {}
        cols = {n: _canon(t.column(n), n) for n in ["id", *NONKEY]}
        return {k: tuple(cols[c][j] for c in NONKEY) for j, k in enumerate(cols["id"])}


def create_fuzz_tablet(trio: TServerTrio) -> None:
    config = RaftConfigPB(opid_index=-1)
    for p in trio.procs:
        config.peers.add(uuid=p.uuid, address=p.address, member_type=MemberType.VOTER)
    for p in trio.procs:
        with RpcClient(p.address, "write-fuzz") as rc:
            rc.call(
                p.uuid,
                "TServer.CreateTablet",
                CreateTabletRequest(
                    tablet_id=TABLET,
                    table_name="fuzz",
                    schema=SchemaPB(columns=COLS),
                    config=config,
                ),
                CreateTabletResponse,
                timeout_s=30.0,
            )


def wait_replicas_applied(trio: TServerTrio, timeout_s: float = 120.0) -> None:
    """Every replica RUNNING and has applied the leader's commit index (followers too)."""

    def caught_up():
        reports = [trio.report(i, TABLET) for i in range(len(trio.procs))]
        if any(r is None or r.status != "RUNNING" for r in reports):
            assert all(r is None or r.status != "FAILED" for r in reports), reports
            return False
        leaders = [r for r in reports if r.role == "LEADER"]
        if len(leaders) != 1:
            return False
        return all(r.applied_index >= leaders[0].commit_index for r in reports)

    wait_for(caught_up, timeout_s, "every replica to apply the leader's commit index", 0.1)


# ---------------------------------------------------------------- the tests
@pytest.mark.integration
@pytest.mark.timeout(1500)
def test_write_fuzz_replicated(tmp_path):
    print(f"write fuzz: seed {SEED}, {MUTATIONS} mutations (WRITE_FUZZ_SEED to replay)")
    rng = random.Random(SEED)
    trio = TServerTrio(tmp_path)
    fz = Fuzzer(trio)
    model = Model()
    counts: dict[str, int] = {}
    stricter: list[str] = []  # valid for Arrow and the schema, refused by the server
    try:
        trio.start_all()
        create_fuzz_tablet(trio)
        # Rows for UPDATE and DELETE to find.
        seed_rows = valid_table(random.Random(SEED + 1), OpType.INSERT, model)
        status, _ = fz.write([(OpType.INSERT, ipc(seed_rows))], "the seed rows")
        assert status == "OK"
        b = model_block(OpType.INSERT, ipc(seed_rows))
        model.rows = model_apply({}, [(OpType.INSERT, b[0], b[1])])

        for j in range(MUTATIONS):
            kind, fn = MUTATORS[j % len(MUTATORS)]
            op = OPS[(j // len(MUTATORS)) % len(OPS)]
            if op in (OpType.UPDATE, OpType.DELETE) and len(model.rows) < 10:
                op = OpType.INSERT
            blocks: list[tuple[int, bytes]] = []
            if fn is None:  # two blocks: the first valid, the second mutated
                blocks.append((op, ipc(valid_table(rng, op, model))))
                kind2, fn = MUTATORS[rng.randrange(1, len(MUTATORS) - 1)]
                kind = f"two_blocks+{kind2}"
                op = OpType.INSERT  # the second inserts new keys
            blocks.append((op, fn(rng, op, valid_table(rng, op, model))))
            what = f"mutation {j} ({kind}, {OpType.Name(op)})"

            decoded = [model_block(o, d) for o, d in blocks]
            bad = [x for x in decoded if isinstance(x, str)]
            expect = (
                bad[0]
                if bad
                else model_apply(
                    model.rows, [(o, x[0], x[1]) for (o, _), x in zip(blocks, decoded, strict=True)]
                )
            )
            status, detail = fz.write(blocks, what)
            counts[status] = counts.get(status, 0) + 1
            if status == "OK":
                assert isinstance(expect, dict), (
                    f"{what}: the server accepted a body the model refuses ({expect})"
                )
                assert detail == sum(x[0] for x in decoded), f"{what}: rows {detail}"
                model.rows = expect
            elif status == "BadRequest":
                assert kind != "none", f"{what}: a valid body was refused: {detail}"
                assert "Traceback" not in detail, f"{what}: {detail}"
                if isinstance(expect, dict):
                    # Valid for Arrow and the schema: only the server's own limits refuse it.
                    assert kind.split("+")[-1] in ("compressed", "batches"), (
                        f"{what}: a valid body was refused: {detail}"
                    )
                    stricter.append(f"{kind}: {detail[:160]}")
            elif status in ("AlreadyExists", "NotFound"):
                want = {"AlreadyExists": "ALREADY_EXISTS", "NotFound": "NOT_FOUND"}[status]
                assert expect == want, f"{what}: server {status} ({detail}), model {expect!r}"
            else:
                raise AssertionError(f"{what}: answered {status}: {detail}")
            fz.assert_alive(f"after {what}")
            if j % 25 == 24:
                fz.assert_no_failed()
        print(f"write fuzz answers: {sorted(counts.items())}; rows now {len(model.rows)}")
        print(f"refused though valid (compressed, > 1024 batches): {len(stricter)}")

        wait_replicas_applied(trio)
        fz.assert_no_failed()
        assert fz.scan_rows() == model.rows, "scan differs from the accepted writes"

        # Every server killed -9 and started again: each replays its WAL (every entry the
        # fuzz accepted) and the tablet serves the same rows and takes writes.
        fz.drop_clients()
        for i in range(len(trio.procs)):
            trio.kill9(i)
        for i in range(len(trio.procs)):
            trio.restart(i)
        fz.leader_idx = -1
        wait_replicas_applied(trio)
        fz.assert_no_failed()
        assert fz.scan_rows() == model.rows, "scan after restart differs"
        more = valid_table(rng, OpType.INSERT, model)
        status, _ = fz.write([(OpType.INSERT, ipc(more))], "a write after the restart")
        assert status == "OK"
        b = model_block(OpType.INSERT, ipc(more))
        model.rows = model_apply(model.rows, [(OpType.INSERT, b[0], b[1])])
        assert fz.scan_rows() == model.rows
        fz.assert_alive("at the end")
    finally:
        fz.close()
        trio.stop_all()


# ---------------------------------------------------------------- no processes
def fuzz_schema() -> schemamod.Schema:
    return schemamod.Schema(schemamod.validate_new(SchemaPB(columns=COLS)))


def test_decode_block_agrees_with_arrow_and_the_schema():
    """The validation alone, over many more mutations than the cluster test sends: it
    answers a Block or BadRequest (never another error), accepts every unmutated body, and
    accepts only bodies that Arrow's full validation and the schema's rules accept, with the
    values Arrow reads."""
    from tservers.tablet.validate import decode_block  # here: the module is new (issue 27)

    seed = SEED + 7
    print(f"decode fuzz: seed {seed}")
    rng = random.Random(seed)
    schema = fuzz_schema()
    names = [c.name for c in schema.columns]
    model = Model()
    model.rows = {k: () for k in model.new_keys(rng, 40)}
    accepted = 0
    for j in range(2000):
        kind, fn = MUTATORS[j % (len(MUTATORS) - 1)]  # not two_blocks: one block here
        op = OPS[(j // len(MUTATORS)) % len(OPS)]
        data = fn(rng, op, valid_table(rng, op, model))
        expect = model_block(op, data)
        what = f"mutation {j} ({kind}, {OpType.Name(op)})"
        try:
            block = decode_block(op, data, schema, rows_max=ROWS_MAX)
        except errors.BadRequest as e:
            assert kind != "none", f"{what}: refused a valid body: {e}"
            continue
        assert not isinstance(expect, str), f"{what}: accepted a bad body ({expect})"
        got = {names[i]: _canon(col, names[i]) for i, col in block.columns.items()}
        assert (block.num_rows, got) == expect, what
        accepted += 1
    assert accepted > 300


def test_a_column_name_of_invalid_utf8_is_a_bad_request():
    """A field name that is not UTF-8 (Arrow decodes it on access: UnicodeDecodeError) is
    refused as BAD_REQUEST naming the column's position, not answered INTERNAL (seed 777 of
    the replicated fuzz found it: a flipped byte in a name)."""
    from tservers.tablet.validate import decode_block

    schema = fuzz_schema()
    key = schema.columns[0].name
    table = pa.table({key: pa.array([1], pa.int64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    data = sink.getvalue().to_pybytes()
    assert data.count(key.encode()) == 1
    bad = data.replace(key.encode(), b"\xdc" + key.encode()[1:])
    for op in OPS:
        with pytest.raises(errors.BadRequest, match="column 0: its name is not valid UTF-8"):
            decode_block(op, bad, schema, rows_max=ROWS_MAX)


def test_poison_entry_is_corruption_on_apply_and_replay(tmp_path):
    """An entry no leader should have proposed (a string column with invalid UTF-8, as a
    leader that checked only its key columns did) fails the replica with a clear
    Corruption when applied, and again when the WAL is replayed at the next start; the
    server and its other tablets go on."""
    schema = SchemaPB(columns=COLS)
    rng = random.Random(SEED)
    model = Model()
    good = ipc(valid_table(rng, OpType.INSERT, model))
    bad = m_bad_utf8(rng, OpType.INSERT, valid_table(rng, OpType.INSERT, model))
    assert isinstance(model_block(OpType.INSERT, bad), str)
    poison = WriteOpPB(
        schema_version=1, blocks=[RowBlockPB(op=OpType.INSERT, arrow_ipc=bad)]
    ).SerializeToString()

    def failed_with_corruption(m) -> bool:
        # The tablet's own state: ListTablets reports FAILED, its reason is the tablet's.
        t = m.replicas["t1"].tablet
        return t is not None and t.status is TabletStatus.FAILED and "fails validation" in t.error

    m = open_manager(tmp_path / "root")
    try:
        t1 = create(m, "t1", schema)
        t2 = create(m, "t2", schema)
        t1.write(1, [(OpType.INSERT, good)], deadline())
        with t1.lock:  # around the leader's checks, into the log
            res = t1.group.propose(poison)
        assert res.status is ProposalStatus.OK
        t1.group.wake()
        wait_for(lambda: failed_with_corruption(m), 30.0, "t1 FAILED by the poison entry")
        assert "CORRUPTION" in t1.error and "column 's'" in t1.error, t1.error
        report = {r.tablet_id: r for r in m.reports()}["t1"]
        assert report.status == "FAILED" and "column 's'" in report.error, report
        t2.write(1, [(OpType.INSERT, good)], deadline())
    finally:
        m.close()
    m = open_manager(tmp_path / "root")
    try:
        wait_for(lambda: failed_with_corruption(m), 30.0, "t1 FAILED again by its WAL replay")
        with pytest.raises(errors.TabletFailed, match="fails validation"):
            m.tablet("t1").scan([], [], [], [], 0)
        t2 = m.tablet("t2")
        assert t2.scan([], [], [], [], 0).num_rows == pa.ipc.open_stream(good).read_all().num_rows
    finally:
        m.close()
    # The operator's dump of that WAL names the malformed block instead of crashing on it.
    r = run_cli(
        "tservers.cli", "wal", "dump", "--fs-root", str(tmp_path / "root"), "--tablet", "t1"
    )
    assert r.returncode == 0, r.stderr
    assert "INSERT MALFORMED rows" in r.stdout and "UTF8" in r.stdout, r.stdout


def test_altered_refuses_past_uint32():
    base = schemamod.validate_new(SchemaPB(columns=COLS))
    add = [ColumnSchemaPB(name="z", type=DataType.INT64, nullable=True)]
    for field_name in ("version", "next_column_id"):
        pb = SchemaPB()
        pb.CopyFrom(base)
        setattr(pb, field_name, 2**32 - 1)
        with pytest.raises(errors.BadRequest, match="exhausted"):
            schemamod.altered(pb, add, [])


# ---------------------------------------------------------------- scans and schemas
def random_value(rng: random.Random) -> ValuePB:
    return rng.choice(
        [
            ValuePB(),
            ValuePB(is_null=True),
            ValuePB(int_value=rng.choice([0, 7, -1, 2**31, 2**63 - 1, -(2**63)])),
            ValuePB(double_value=rng.choice([0.5, float("nan"), float("inf"), -0.0, 1e300])),
            ValuePB(bool_value=rng.random() < 0.5),
            ValuePB(string_value=rng.choice(["", "x", "\u00e9", "\x00", "s" * 1000])),
            ValuePB(binary_value=rng.choice([b"", b"\xff\xfe", b"x"])),
        ]
    )


NAMES = ["id", "s", "b", "d", "f", "i", "ts", "zz", "", "ID", "__deleted", "c0", "\u00e9"]
TYPES_PB = [0, 1, 2, 3, 4, 5, 6, 7, 8, 99, 2**31 - 1]


def typed_value(rng: random.Random, name: str) -> ValuePB:
    """A value of the column's kind (still possibly out of its range)."""
    if name in ("id", "i", "ts"):
        return ValuePB(int_value=rng.choice([0, 7, -1, 40, 2**31, 2**63 - 1, -(2**63)]))
    if name == "d":
        return ValuePB(double_value=rng.choice([0.5, -3e5, float("nan"), float("inf")]))
    if name == "f":
        return ValuePB(bool_value=rng.random() < 0.5)
    if name == "s":
        return ValuePB(string_value=rng.choice(["", "a", "\u00e9", "zz"]))
    return ValuePB(binary_value=rng.choice([b"", b"\xff", b"a"]))


def random_scan(rng: random.Random) -> ScanRequest:
    """Half the time well typed on known columns (mostly answered), else anything."""
    sane = rng.random() < 0.5
    known = ["id", *NONKEY]

    def predicate() -> PredicatePB:
        if not sane:
            return PredicatePB(
                column=rng.choice(NAMES),
                op=rng.choice([0, 1, 2, 6, 7, 9, 2**31 - 1]),
                values=[random_value(rng) for _ in range(rng.randrange(0, 4))],
            )
        name = rng.choice(known)
        op = rng.choice([1, 2, 3, 4, 5, 6, 7, 8])
        n = 1 if op <= 5 else 0 if op >= 7 else rng.randrange(0, 4)
        return PredicatePB(column=name, op=op, values=[typed_value(rng, name) for _ in range(n)])

    def bound() -> list[ValuePB]:
        if sane:
            return [typed_value(rng, "id")] if rng.random() < 0.4 else []
        return [random_value(rng) for _ in range(rng.randrange(0, 3))]

    return ScanRequest(
        tablet_id=TABLET,
        projection=rng.sample(known if sane else NAMES, rng.randrange(0, 4)),
        predicates=[predicate() for _ in range(rng.randrange(0, 3))],
        lower_bound=bound(),
        upper_bound=bound(),
        batch_rows_max=rng.choice([0, 1, 7, 2**32 - 1]),
        limit=rng.choice([0, 1, 5, 2**63 - 1, 2**63, 2**64 - 1]),
    )


def random_column(rng: random.Random, *, sane: bool = False) -> ColumnSchemaPB:
    """Any fields; `sane`: a new nullable column of a known type (mostly accepted)."""
    if sane:
        return ColumnSchemaPB(
            name=f"n{rng.randrange(10**6)}", type=rng.randrange(1, 8), nullable=True
        )
    return ColumnSchemaPB(
        id=rng.choice([0, 3, 2**32 - 1]),
        name=rng.choice([*NAMES, "x" * 129, "a b", "9a", "new1", "new2"]),
        type=rng.choice(TYPES_PB),
        nullable=rng.random() < 0.6,
        is_key=rng.random() < 0.3,
    )


def random_schema(rng: random.Random) -> SchemaPB:
    sane = rng.random() < 0.5
    cols = [random_column(rng, sane=sane) for _ in range(rng.randrange(0, 5))]
    if sane:
        cols.insert(0, ColumnSchemaPB(name="k", type=rng.choice([1, 2, 5, 6, 7]), is_key=True))
        if rng.random() < 0.5:  # a new table: ids and next id are assigned
            return SchemaPB(version=rng.choice([0, 1]), columns=cols)
        # A table altered since (the coordinator creates a missing replica at its version):
        # its ids are kept, so they must be unique and below its next id.
        for i, c in enumerate(cols):
            c.id = i
        return SchemaPB(
            version=rng.choice([2, 9, 2**32 - 1]),
            next_column_id=len(cols) + rng.randrange(0, 3),
            columns=cols,
        )
    return SchemaPB(
        version=rng.choice([0, 9, 2**32 - 1]),
        next_column_id=rng.choice([0, 2**32 - 1]),
        columns=cols,
    )


# Typed refusals a malformed scan, create or alter may get; INTERNAL is never one.
TYPED = (
    errors.BadRequest,
    errors.CasFailed,
    errors.AlreadyExists,
    errors.NotFound,
    errors.IllegalState,
)


class _Caller:
    """Raw calls to one server: each answer OK or a typed refusal, the server alive."""

    def __init__(self, proc: TServerProcess, ids: set[int]) -> None:
        self.proc = proc
        self.rc = RpcClient(proc.address, "scan-fuzz")
        self.ids = ids
        self.counts: dict[str, int] = {}

    def call(self, method: str, req, resp_type, what: str) -> None:
        try:
            resp, sidecars = self.rc.call_with_sidecars(
                self.proc.uuid, method, req, resp_type, timeout_s=30.0
            )
            status = "OK"
        except TYPED as e:
            status = type(e).__name__
            assert "Traceback" not in str(e), f"{what}: {e}"
        except errors.RpcError as e:
            raise AssertionError(f"{what}: answered {type(e).__name__}: {e}") from e
        self.counts[status] = self.counts.get(status, 0) + 1
        assert self.proc.proc.poll() is None, f"the server died after {what}"
        if status == "OK" and method == "TServer.Scan":
            self.check_scan(req, resp, sidecars, what)

    def check_scan(self, req: ScanRequest, resp: ScanResponse, sidecars, what: str) -> None:
        """Arrow-valid batches of the projected columns, rows of the table in key order, at
        most `limit` of them."""
        batches = [b for sc in sidecars for b in pa.ipc.open_stream(pa.py_buffer(sc))]
        t = pa.Table.from_batches(batches)
        t.validate(full=True)
        want = list(req.projection) or [c.name for c in COLS]
        assert t.column_names == want, what
        if req.limit:
            assert t.num_rows <= req.limit, what
        if resp.scanner_id:
            close = ScanRequest(scanner_id=resp.scanner_id, close=True)
            self.rc.call(self.proc.uuid, "TServer.Scan", close, ScanResponse)
        if "id" in want:
            got = t.column("id").to_pylist()
            assert set(got) <= self.ids, what
            assert got == sorted(got), what


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_scan_and_schema_fields_fuzz(tmp_path):
    """Scans with predicates and bounds of every value kind on every column (and unknown
    ones), unknown projections, absurd limits and batch sizes; CreateTablet and AlterSchema
    with random column names, types, flags and ids. Every answer is OK or a typed refusal
    (a limit of 2**63 or more had answered INTERNAL), the server lives, the tablet keeps its
    rows and serves."""
    print(f"scan/schema fuzz: seed {SEED}")
    rng = random.Random(SEED)
    root = tmp_path / "ts"
    FsLayout.format(root)
    proc = TServerProcess(root).start()
    client = TabletServerClient(proc.address, proc.uuid, timeout_s=30.0)
    caller = None
    try:
        client.create_tablet(TABLET, COLS, table_name="fuzz")
        rows = valid_table(rng, OpType.INSERT, Model())
        client.write(TABLET, [(OpType.INSERT, rows)], schema_version=1)
        caller = _Caller(proc, set(rows.column("id").to_pylist()))
        for j in range(300):
            req = random_scan(rng)
            caller.call("TServer.Scan", req, ScanResponse, f"scan {j}: {req}")
        scans = dict(caller.counts)
        for j in range(40):
            req = CreateTabletRequest(
                tablet_id=f"fz{j:04d}",
                table_name="fuzz",
                schema=random_schema(rng),
            )
            caller.call("TServer.CreateTablet", req, CreateTabletResponse, f"create {j}: {req}")
        for j in range(40):
            sane = rng.random() < 0.5
            req = AlterSchemaRequest(
                tablet_id=TABLET,
                expected_version=rng.choice([0, 0, 1, 2**32 - 1]),
                add_columns=[random_column(rng, sane=sane) for _ in range(rng.randrange(0, 3))],
                drop_columns=rng.sample([*NAMES, "new1", "new2"], rng.randrange(0, 2)),
            )
            caller.call("TServer.AlterSchema", req, AlterSchemaResponse, f"alter {j}: {req}")
        print(f"scan answers: {sorted(scans.items())}; in all: {sorted(caller.counts.items())}")
        assert scans.get("OK", 0) > 100
        assert caller.counts["OK"] - scans["OK"] > 20  # creates and alters that took
        for r in client.list_tablets().tablets:
            assert r.status == "RUNNING", f"{r.tablet_id}: {r.status} {r.error}"
        got = client.scan_table(TABLET, projection=["id"])
        assert sorted(got.column("id").to_pylist()) == sorted(caller.ids)
    finally:
        if caller is not None:
            caller.rc.close()
        client.close()
        proc.stop()
