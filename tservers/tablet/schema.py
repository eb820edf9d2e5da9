"""Tablet schemas: typed columns with a primary key, Arrow mapping, validation and alteration.

Columns carry ids that are never reused, so a dropped column that is added again under the
same name does not bring old data back: data blocks name their columns `c<id>`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from rpc.errors import BadRequest
from rpc.protocols.tserver_pb2 import ColumnSchemaPB, DataType, SchemaPB, ValuePB
from rpc.schema_rules import COLUMNS_MAX, column_name_problem

ARROW_TYPES: dict[int, pa.DataType] = {
    DataType.INT64: pa.int64(),
    DataType.INT32: pa.int32(),
    DataType.DOUBLE: pa.float64(),
    DataType.BOOL: pa.bool_(),
    DataType.STRING: pa.string(),
    DataType.BINARY: pa.binary(),
    DataType.TIMESTAMP: pa.timestamp("us"),
}

# Arrow types a client may send for a column, cast losslessly to the column's type.
COMPATIBLE: dict[int, tuple[pa.DataType, ...]] = {
    DataType.STRING: (pa.large_string(),),
    DataType.BINARY: (pa.large_binary(),),
    DataType.TIMESTAMP: (pa.timestamp("us", tz="UTC"), pa.timestamp("ms"), pa.timestamp("s")),
}

DELETED_FIELD = "__deleted"
UINT32_MAX = 2**32 - 1


def block_name(column_id: int) -> str:
    return f"c{column_id}"


@dataclass(frozen=True, slots=True)
class Column:
    id: int
    name: str
    type: int
    nullable: bool
    is_key: bool

    @property
    def arrow_type(self) -> pa.DataType:
        return ARROW_TYPES[self.type]


class Schema:
    """An immutable view of a SchemaPB with lookups the data path needs."""

    __slots__ = (
        "pb",
        "version",
        "columns",
        "by_name",
        "key_columns",
        "num_keys",
        "_arrow",
        "_block",
    )

    def __init__(self, pb: SchemaPB) -> None:
        self.pb = pb
        self.version = pb.version
        self.columns = tuple(Column(c.id, c.name, c.type, c.nullable, c.is_key) for c in pb.columns)
        self.by_name = {c.name: i for i, c in enumerate(self.columns)}
        self.key_columns = tuple(c for c in self.columns if c.is_key)
        self.num_keys = len(self.key_columns)
        self._arrow = pa.schema(
            [pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in self.columns]
        )
        fields = [pa.field(block_name(c.id), c.arrow_type) for c in self.columns]
        self._block = pa.schema([*fields, pa.field(DELETED_FIELD, pa.bool_())])

    def arrow_schema(self, names: list[str] | None = None) -> pa.Schema:
        if not names:
            return self._arrow
        return pa.schema([self._arrow.field(n) for n in names])

    def block_schema(self) -> pa.Schema:
        return self._block

    def column(self, name: str) -> Column:
        i = self.by_name.get(name)
        if i is None:
            raise BadRequest(f"unknown column {name!r}")
        return self.columns[i]


def validate_new(pb: SchemaPB) -> SchemaPB:
    """Check a schema given to CreateTablet; assign ids and version 1. Raises BadRequest.

    A version above 1 is a table altered since its creation whose replica never came to
    exist, created fresh by the coordinator (issue 27): its version, column ids and next
    column id are kept as given (checked), so that it matches the other replicas."""
    if not pb.columns:
        raise BadRequest("schema has no columns")
    if len(pb.columns) > COLUMNS_MAX:
        raise BadRequest(f"schema has {len(pb.columns)} columns, at most {COLUMNS_MAX}")
    out = SchemaPB(version=1)
    seen: set[str] = set()
    keys_done = False
    for i, c in enumerate(pb.columns):
        if (problem := column_name_problem(c.name)) is not None:
            raise BadRequest(problem)
        if c.name in seen:
            raise BadRequest(f"duplicate column {c.name!r}")
        seen.add(c.name)
        if c.type not in ARROW_TYPES:
            raise BadRequest(f"column {c.name!r}: unknown type {c.type}")
        if c.is_key:
            if keys_done:
                raise BadRequest("key columns must come first")
            if c.nullable:
                raise BadRequest(f"key column {c.name!r} cannot be nullable")
            if c.type in (DataType.DOUBLE,):
                raise BadRequest(f"key column {c.name!r} cannot be a double")
        else:
            keys_done = True
        cid = c.id if pb.version > 1 else i
        out.columns.add(id=cid, name=c.name, type=c.type, nullable=c.nullable, is_key=c.is_key)
    if not pb.columns[0].is_key:
        raise BadRequest("schema has no primary key column")
    out.next_column_id = len(pb.columns)
    if pb.version > 1:
        ids = [c.id for c in pb.columns]
        if len(set(ids)) != len(ids) or max(ids) >= pb.next_column_id:
            raise BadRequest("schema version above 1 with column ids not unique or not below next")
        out.version = pb.version
        out.next_column_id = pb.next_column_id
    return out


def altered(
    current: SchemaPB,
    add: list[ColumnSchemaPB],
    drop: list[str],
    new_version: int = 0,
    next_column_id: int = 0,
) -> SchemaPB:
    """The altered schema: add nullable non-key columns, drop non-key columns (drops first:
    a column dropped and added again in one alter takes a new id). Raises BadRequest.

    `new_version` 0: version + 1; else the version to take (the table's, as the coordinator
    says), above the current one. `next_column_id` 0: the added columns are numbered from
    next_column_id; else (with `new_version`) each keeps the id given, which must be unused
    (at or above the current next_column_id, below the new one, once), and the schema's
    next_column_id becomes the one given. The coordinator gives ids in this replica's own
    numbering: it brings a replica that missed alters to the table's schema in one step,
    ids included, so that its later alters number their columns as the others do."""
    if new_version and new_version <= current.version:
        raise BadRequest(
            f"new schema version {new_version} not above the replica's {current.version}"
        )
    if next_column_id and not new_version:
        raise BadRequest("next_column_id without new_version")
    if next_column_id and not current.next_column_id <= next_column_id <= UINT32_MAX:
        raise BadRequest(
            f"next column id {next_column_id} below the replica's {current.next_column_id}"
        )
    if current.version >= UINT32_MAX or current.next_column_id + len(add) > UINT32_MAX:
        # uint32 on the wire and on disk: raising past it fails in protobuf, not here.
        raise BadRequest("schema version or column ids exhausted; recreate the table")
    out = SchemaPB()
    out.CopyFrom(current)
    names = {c.name: c for c in current.columns}
    for name in drop:
        c = names.get(name)
        if c is None:
            raise BadRequest(f"cannot drop unknown column {name!r}")
        if c.is_key:
            raise BadRequest(f"cannot drop key column {name!r}")
    kept = [c for c in out.columns if c.name not in set(drop)]
    del out.columns[:]
    out.columns.extend(kept)
    present = {c.name for c in out.columns}
    given: set[int] = set()
    for c in add:
        if (problem := column_name_problem(c.name)) is not None:
            raise BadRequest(problem)
        if c.name in present:
            raise BadRequest(f"column {c.name!r} already exists")
        if c.is_key or not c.nullable:
            raise BadRequest(f"added column {c.name!r} must be nullable and not part of the key")
        if c.type not in ARROW_TYPES:
            raise BadRequest(f"column {c.name!r}: unknown type {c.type}")
        if next_column_id:
            if not current.next_column_id <= c.id < next_column_id or c.id in given:
                raise BadRequest(
                    f"added column {c.name!r}: id {c.id} used or out of range (replica's "
                    f"next column id {current.next_column_id}, new {next_column_id})"
                )
            given.add(c.id)
            out.columns.add(id=c.id, name=c.name, type=c.type, nullable=True)
        else:
            out.columns.add(id=out.next_column_id, name=c.name, type=c.type, nullable=True)
            out.next_column_id += 1
        present.add(c.name)
    if len(out.columns) > COLUMNS_MAX:
        raise BadRequest(f"schema would have more than {COLUMNS_MAX} columns")
    if next_column_id:
        out.next_column_id = next_column_id
    out.version = new_version or current.version + 1
    return out


def value_from_pb(v: ValuePB, col: Column):
    """A Python value of the column's type from a ValuePB (None for null)."""
    kind = v.WhichOneof("v")
    if kind is None or kind == "is_null":
        return None
    t = col.type
    try:
        if t in (DataType.INT64, DataType.INT32, DataType.TIMESTAMP):
            if kind != "int_value":
                raise BadRequest(f"column {col.name!r} needs an integer value, got {kind}")
            return v.int_value
        if t == DataType.DOUBLE:
            if kind == "int_value":
                return float(v.int_value)
            if kind != "double_value":
                raise BadRequest(f"column {col.name!r} needs a double value, got {kind}")
            return v.double_value
        if t == DataType.BOOL:
            if kind != "bool_value":
                raise BadRequest(f"column {col.name!r} needs a bool value, got {kind}")
            return v.bool_value
        if t == DataType.STRING:
            if kind != "string_value":
                raise BadRequest(f"column {col.name!r} needs a string value, got {kind}")
            return v.string_value
        if t == DataType.BINARY:
            if kind != "binary_value":
                raise BadRequest(f"column {col.name!r} needs a binary value, got {kind}")
            return v.binary_value
    except ValueError as e:
        raise BadRequest(str(e)) from e
    raise BadRequest(f"column {col.name!r}: unsupported type")
