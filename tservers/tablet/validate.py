"""Full validation of a write's row blocks (Arrow IPC streams) against a tablet's schema.

Every row block of every write passes here at the leader before it is proposed to Raft, and
again wherever a committed entry is applied (a follower, a new leader's older entries, WAL
replay): nothing that fails it is written to the WAL by a leader, and a replica is never
handed one to apply (there a failure is corruption, never a crash).

Arrow's IPC reader checks only the framing: `read_all()` succeeds on a string column with
negative offsets or invalid UTF-8, or a batch declaring 2**40 rows over 300 bytes, and
`to_pylist()` then reads out of bounds (a segfault took down every replica's server). Arrow's
own fuzz targets read and then `ValidateFull`; so does this module, after checking what
decoding cannot be trusted with: the messages (a schema then record batches only: no
dictionary batches, no compressed bodies, whose declared uncompressed size is allocated and
filled before any check, no big-endian streams), the row and batch counts before a batch is
decoded, and the stream's schema against the tablet's (known names, each once, exactly the
column's type or a lossless one, no nested, dictionary or extension types, key columns
present, no nulls where the schema has none).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa

from rpc.errors import BadRequest
from rpc.protocols.tserver_pb2 import DataType, OpType
from tservers.tablet.schema import Schema

# A block is one client batch cut into record batches by its writer; many tiny ones only
# cost (each is a Python object on every replica).
IPC_BATCHES_MAX = 1024
OP_TYPES = frozenset((OpType.INSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE))
_EXTENSION_KEY = b"ARROW:extension:name"
# Message header kinds (Arrow's Message.fbs).
_HEADER_SCHEMA = 1
_HEADER_RECORD_BATCH = 3
_BIG_ENDIAN = 1


@dataclass(frozen=True, slots=True)
class Block:
    """A validated row block: the columns it gives, each of its column's exact type."""

    op: int
    num_rows: int
    columns: dict[int, pa.ChunkedArray]  # position in `schema` -> column
    schema: Schema  # the schema it was validated against


class _Flat:
    """Bounds-checked reads of a flatbuffer (an IPC message's metadata). Arrow verifies the
    metadata when it opens a message; these reads still trust nothing."""

    __slots__ = ("buf",)

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def _read(self, fmt: str, pos: int) -> int:
        if pos < 0 or pos + struct.calcsize(fmt) > len(self.buf):
            raise BadRequest("malformed Arrow IPC message metadata (offset out of bounds)")
        return struct.unpack_from(fmt, self.buf, pos)[0]

    def root(self) -> int:
        return self._read("<I", 0)

    def field(self, table: int, index: int) -> int:
        """Position of field `index` of the table at `table`, or 0 when absent."""
        vtable = table - self._read("<i", table)
        vtable_bytes = self._read("<H", vtable)
        slot = 4 + 2 * index
        if slot + 2 > vtable_bytes:
            return 0
        off = self._read("<H", vtable + slot)
        return table + off if off else 0

    def scalar(self, table: int, index: int, fmt: str, default: int = 0) -> int:
        pos = self.field(table, index)
        return self._read(fmt, pos) if pos else default

    def table(self, table: int, index: int) -> int:
        pos = self.field(table, index)
        return pos + self._read("<I", pos) if pos else 0


def _batch_header(metadata: bytes) -> tuple[int, int, bool]:
    """(header kind, declared rows or endianness, compressed) of a message's metadata."""
    fb = _Flat(metadata)
    message = fb.root()
    kind = fb.scalar(message, 1, "<B")
    header = fb.table(message, 2)
    if not header:
        raise BadRequest("malformed Arrow IPC message (no header)")
    if kind == _HEADER_SCHEMA:
        return kind, fb.scalar(header, 0, "<h"), False
    if kind == _HEADER_RECORD_BATCH:
        return kind, fb.scalar(header, 0, "<q"), fb.field(header, 3) != 0
    return kind, 0, False


def _allowed(given: pa.DataType, want: pa.DataType) -> bool:
    """`given` is the column's type or converts to it losslessly (checked by the cast)."""
    if given == want:
        return True
    if pa.types.is_timestamp(want):
        return pa.types.is_timestamp(given)
    if want == pa.string():
        return given == pa.large_string()
    if want == pa.binary():
        return given == pa.large_binary()
    return False


def _flat_type(t: pa.DataType) -> bool:
    """One of the types a column may be sent as (any schema version's): no nesting."""
    return (
        t in (pa.int64(), pa.int32(), pa.float64(), pa.bool_(), pa.null())
        or t in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())
        or pa.types.is_timestamp(t)
    )


def _check_fields(stream_schema: pa.Schema, schema: Schema, lenient: bool) -> list[int | None]:
    """The schema position of each field of the stream (None: a column dropped since, in a
    lenient read). Raises BadRequest naming the column."""
    out: list[int | None] = []
    seen: set[int] = set()
    for n, field in enumerate(stream_schema):
        try:
            name = field.name
            meta = field.metadata or {}
        except UnicodeDecodeError as e:  # Arrow decodes a field's name as UTF-8 on access
            raise BadRequest(f"column {n}: its name is not valid UTF-8 ({e.reason})") from None
        if _EXTENSION_KEY in meta:
            raise BadRequest(f"column {name!r}: extension types are not accepted")
        t = field.type
        i = schema.by_name.get(name)
        if i is None:
            if lenient and _flat_type(t):
                out.append(None)
                continue
            raise BadRequest(f"unknown column {name!r} (schema version {schema.version})")
        c = schema.columns[i]
        if i in seen:
            raise BadRequest(f"column {name!r} given twice")
        seen.add(i)
        if not (_allowed(t, c.arrow_type) or (t == pa.null() and c.nullable)):
            raise BadRequest(
                f"column {name!r} is {DataType.Name(c.type)} ({c.arrow_type}), write has {t}"
            )
        out.append(i)
    for i in range(schema.num_keys):
        if i not in seen:
            raise BadRequest(f"key column {schema.columns[i].name!r} missing from write")
    return out


def _arrow_error(what: str, err: Exception) -> BadRequest:
    return BadRequest(f"{what}: {type(err).__name__}: {err}")


# What a malformed stream may raise from Arrow's reader (every pyarrow error is an
# ArrowException; some map to builtins: ValueError, TypeError, IndexError, MemoryError...).
_DECODE_ERRORS = (pa.ArrowException, OSError, ValueError, TypeError, IndexError, MemoryError)


def decode_block(
    op: int, data: bytes, schema: Schema, *, lenient: bool = False, rows_max: int
) -> Block:
    """Decode and fully validate one row block against `schema`; raise BadRequest naming the
    column and the fault. `lenient`: a committed entry of an older schema version (columns
    dropped since are read, validated and left out). At most `rows_max` rows."""
    if op not in OP_TYPES:
        raise BadRequest(f"unknown operation type {op}")
    if not data:
        raise BadRequest("empty Arrow IPC row block")
    try:
        reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(data))
    except _DECODE_ERRORS as e:
        raise _arrow_error("undecodable Arrow IPC rows", e) from None
    stream_schema: pa.Schema | None = None
    positions: list[int | None] = []
    batches: list[pa.RecordBatch] = []
    rows = 0
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        except _DECODE_ERRORS as e:
            raise _arrow_error("undecodable Arrow IPC rows", e) from None
        kind, value, compressed = _batch_header(message.metadata.to_pybytes())
        if stream_schema is None:
            if kind != _HEADER_SCHEMA:
                raise BadRequest("Arrow IPC rows do not start with a schema")
            if value == _BIG_ENDIAN:
                raise BadRequest("big-endian Arrow IPC rows are not accepted")
            try:
                stream_schema = pa.ipc.read_schema(message)
            except _DECODE_ERRORS as e:
                raise _arrow_error("undecodable Arrow IPC schema", e) from None
            positions = _check_fields(stream_schema, schema, lenient)
            continue
        if kind != _HEADER_RECORD_BATCH:
            raise BadRequest(
                f"Arrow IPC message of kind {kind} in a row block (record batches only)"
            )
        if compressed:
            raise BadRequest("compressed Arrow IPC rows are not accepted")
        if value < 0 or value > rows_max - rows:
            raise BadRequest(
                f"row block declares a record batch of {value} rows after {rows}: a write "
                f"exceeds its row limit (at most {rows_max} rows left for this block)"
            )
        if len(batches) >= IPC_BATCHES_MAX:
            raise BadRequest(f"row block has more than {IPC_BATCHES_MAX} record batches")
        try:
            batch = pa.ipc.read_record_batch(message, stream_schema)
            batch.validate()
        except _DECODE_ERRORS as e:
            raise _arrow_error("undecodable Arrow IPC record batch", e) from None
        for field, col in zip(stream_schema, batch.columns, strict=True):
            try:
                col.validate(full=True)
            except _DECODE_ERRORS as e:
                raise _arrow_error(f"column {field.name!r}", e) from None
        assert batch.num_rows == value, "decoded rows differ from the declared length"
        rows += batch.num_rows
        batches.append(batch)
    if stream_schema is None:
        raise BadRequest("Arrow IPC rows have no schema")
    return _columns(op, pa.Table.from_batches(batches, schema=stream_schema), positions, schema)


def _columns(op: int, table: pa.Table, positions: list[int | None], schema: Schema) -> Block:
    """Each given column in its column's type (lossless casts, null-typed columns as nulls);
    no nulls in a key or non-nullable column; an INSERT or UPSERT gives every non-nullable
    column."""
    n = table.num_rows
    given: dict[int, pa.ChunkedArray] = {}
    for field, col, i in zip(table.schema, table.columns, positions, strict=True):
        if i is None:
            continue
        c = schema.columns[i]
        if field.type != c.arrow_type:
            if field.type == pa.null():
                col = pa.chunked_array([pa.nulls(n, c.arrow_type)])
            else:
                try:
                    col = col.cast(c.arrow_type)
                except _DECODE_ERRORS as e:
                    raise BadRequest(
                        f"column {c.name!r}: cannot convert {field.type} to {c.arrow_type}: {e}"
                    ) from None
        if col.null_count and (c.is_key or not c.nullable):
            raise BadRequest(f"column {c.name!r} is not nullable but the write has nulls")
        given[i] = col
    if op in (OpType.INSERT, OpType.UPSERT):
        for i, c in enumerate(schema.columns):
            if not c.nullable and i not in given:
                raise BadRequest(f"non-nullable column {c.name!r} missing from {OpType.Name(op)}")
    return Block(op, n, given, schema)
