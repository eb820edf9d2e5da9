"""The pure parts of the data source: options, type mapping, scan predicates, batch shaping.

No Spark session, no network: plain functions over pyarrow schemas, Spark types and the
`pyspark.sql.datasource` filter values, unit-tested in tests/spark/test_mapping.py.

Type mapping (table column type -> Arrow type in the table -> Spark type):
    int64 -> int64 -> LongType;  int32 -> int32 -> IntegerType;  double -> float64 -> DoubleType
    bool -> bool -> BooleanType;  string -> string -> StringType;  binary -> binary -> BinaryType
    timestamp -> timestamp[us] (UTC, no zone) -> TimestampType (Arrow timestamp[us, tz=UTC])
"""

from __future__ import annotations

import datetime
import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

Predicate = tuple[str, str, object]

SPARK_TIMESTAMP_ARROW = pa.timestamp("us", tz="UTC")
TABLE_TIMESTAMP_ARROW = pa.timestamp("us")
TIMEOUT_S_DEFAULT = 60.0
# Read partitions: 0 = one per tablet; else the tablets are dealt into at most this many
# (not given: the session's defaultParallelism, design/spark.md "Partitions").
PARTITIONS_MAX = 100_000
FLUSH_ROWS_DEFAULT = 10_000
FLUSH_ROWS_MAX = 1_000_000
ERRORS_SHOWN_MAX = 5
IN_VALUES_MAX = 1_000
PREDICATES_MAX = 32


class Operation(enum.Enum):
    INSERT = "insert"
    UPSERT = "upsert"
    DELETE = "delete"


class OptionError(ValueError):
    """A missing or malformed data source option (a user error, reported as is)."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    # The coordinators' addresses; empty until the data source resolves `cluster` (or the
    # environment / the clusters file's default) on the driver.
    coordinators: tuple[str, ...]
    table: str
    operation: Operation
    columns: tuple[str, ...] | None  # read projection chosen by the user (None: all)
    predicates: str  # JSON scan predicates chosen by the user ("" for none)
    flush_rows_max: int
    timeout_s: float
    cluster: str = ""  # a name of the clusters file ("" when coordinators are given)
    # A credentials file (rpc/credentials.py): resolved on the driver (the option, else
    # LOGCENTRIC_CREDENTIALS, else the cluster's clusters-file entry) and checked there;
    # the workers load it from the same path. "": plaintext.
    credentials: str = ""
    # Read tasks: 0 = one per tablet; N = the tablets dealt into at most N partitions, each
    # task scanning its tablets one after another; None: not given, the data source puts
    # the session's defaultParallelism (design/spark.md, "Partitions").
    partitions: int | None = None


OPTIONS_KNOWN = (
    "coordinators",
    "cluster",
    "table",
    "operation",
    "columns",
    "predicates",
    "flush_rows_max",
    "timeout_s",
    "credentials",
    "partitions",
)


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate the data source options (keys are case-insensitive in Spark). An option
    this source does not know is refused: a misspelt one would otherwise be ignored, and
    the job run with the default (an insert for an upsert, a full scan for a narrow one)."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    if "pushdown" in opts:
        raise OptionError(
            'option "pushdown" is not supported: Spark\'s Python filter pushdown returns stale '
            'results on reused DataFrames in this Spark; use option("predicates", ...)'
        )
    unknown = sorted(k for k in opts if k not in OPTIONS_KNOWN)
    if unknown:
        what = ", ".join(f'"{k}"' for k in unknown)
        if unknown == ["path"]:
            what += ' (a path given to load() or save(); this source takes option("table"))'
        raise OptionError(f"unknown option {what}; known: {', '.join(OPTIONS_KNOWN)}")
    coordinators = tuple(a.strip() for a in opts.get("coordinators", "").split(",") if a.strip())
    for address in coordinators:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise OptionError(f'option "coordinators": {address!r} is not host:port')
    cluster = opts.get("cluster", "").strip()
    if coordinators and cluster:
        raise OptionError('give option "coordinators" or option "cluster", not both')
    table = opts.get("table", "").strip()
    if not table:
        raise OptionError('option "table" is required')
    op_text = opts.get("operation", Operation.INSERT.value).strip().lower()
    try:
        operation = Operation(op_text)
    except ValueError:
        choices = "|".join(o.value for o in Operation)
        raise OptionError(f'option "operation" must be {choices}, not {op_text!r}') from None
    columns = None
    if opts.get("columns", "").strip():
        columns = tuple(c.strip() for c in opts["columns"].split(",") if c.strip())
        if len(set(columns)) != len(columns):
            raise OptionError(f'option "columns" names a column twice: {opts["columns"]!r}')
    predicates = opts.get("predicates", "").strip()
    partitions = None
    if "partitions" in opts:
        try:
            partitions = _parse_int(opts, "partitions", 0, 0, PARTITIONS_MAX)
        except OptionError as err:
            raise OptionError(
                f"{err} (N: at most N read tasks; 0: one task per tablet; not given: "
                "the session's defaultParallelism)"
            ) from None
    flush_rows_max = _parse_int(opts, "flush_rows_max", FLUSH_ROWS_DEFAULT, 1, FLUSH_ROWS_MAX)
    try:
        timeout_s = float(opts.get("timeout_s", TIMEOUT_S_DEFAULT))
    except ValueError:
        raise OptionError(f'option "timeout_s" is not a number: {opts["timeout_s"]!r}') from None
    if not 0 < timeout_s <= 3600:
        raise OptionError('option "timeout_s" must be in (0, 3600]')
    return SourceOptions(
        coordinators,
        table,
        operation,
        columns,
        predicates,
        flush_rows_max,
        timeout_s,
        cluster,
        opts.get("credentials", "").strip(),
        partitions,
    )


def _parse_int(opts: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    text = opts.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f'option "{key}" is not an integer: {text!r}') from None
    if not low <= value <= high:
        raise OptionError(f'option "{key}" must be in [{low}, {high}]')
    return value


# ---- types ---------------------------------------------------------------------------------


def spark_type(arrow_type: pa.DataType) -> DataType:
    """The Spark type for a table column's Arrow type; ValueError for anything else."""
    if pa.types.is_int64(arrow_type):
        return LongType()
    if pa.types.is_int32(arrow_type):
        return IntegerType()
    if pa.types.is_float64(arrow_type):
        return DoubleType()
    if pa.types.is_boolean(arrow_type):
        return BooleanType()
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return StringType()
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return BinaryType()
    if pa.types.is_timestamp(arrow_type):
        return TimestampType()
    raise ValueError(f"no Spark type for table column type {arrow_type}")


def spark_arrow_type(arrow_type: pa.DataType) -> pa.DataType:
    """The Arrow type Spark expects in batches for a table column (timestamps carry UTC)."""
    if pa.types.is_timestamp(arrow_type):
        return SPARK_TIMESTAMP_ARROW
    if pa.types.is_large_string(arrow_type):
        return pa.string()
    if pa.types.is_large_binary(arrow_type):
        return pa.binary()
    return arrow_type


def project(arrow_schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """The table schema restricted to `columns` (in that order); all columns when None."""
    if columns is None:
        return arrow_schema
    missing = [c for c in columns if arrow_schema.get_field_index(c) < 0]
    if missing:
        raise OptionError(f"unknown column(s) {missing}; the table has {arrow_schema.names}")
    return pa.schema([arrow_schema.field(c) for c in columns])


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    return StructType(
        [StructField(f.name, spark_type(f.type), nullable=f.nullable) for f in arrow_schema]
    )


def spark_batch_schema(arrow_schema: pa.Schema) -> pa.Schema:
    """Exactly the Arrow schema Spark checks batches against (names, types, nullability)."""
    return pa.schema(
        [pa.field(f.name, spark_arrow_type(f.type), nullable=f.nullable) for f in arrow_schema]
    )


def to_spark_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """A scanned batch shaped for Spark: columns in `target` order, types cast without copies
    (timestamp[us] -> timestamp[us, UTC] only changes the type's metadata)."""
    arrays = []
    for field in target:
        array = batch.column(batch.schema.get_field_index(field.name))
        if array.type != field.type:
            array = array.cast(field.type)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def to_table_batch(batch: pa.RecordBatch, table_schema: pa.Schema) -> pa.RecordBatch:
    """A batch from Spark shaped for the table: the batch's columns, cast (safely) to the
    table's column types (a column with values that do not fit is left uncast: the
    session refuses those rows one by one); timestamps with a zone become UTC without a
    zone."""
    arrays = []
    names = []
    for name in batch.schema.names:
        index = table_schema.get_field_index(name)
        if index < 0:
            raise OptionError(f"column {name!r} is not in the table ({table_schema.names})")
        target = table_schema.field(index).type
        array = batch.column(batch.schema.get_field_index(name))
        if array.type != target:
            try:
                array = array.cast(target, safe=True)
            except pa.ArrowInvalid:
                # Some values do not fit (an overflow, a bad string): left as they are, so
                # that the session names those rows as row errors and writes the others.
                pass
        arrays.append(array)
        names.append(name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def check_write_columns(
    input_names: Sequence[str],
    table_schema: pa.Schema,
    key_columns: Sequence[str],
    operation: Operation,
) -> None:
    """Fail on the driver, before any task runs, when the DataFrame cannot fit the table."""
    unknown = [n for n in input_names if table_schema.get_field_index(n) < 0]
    if unknown:
        raise OptionError(
            f"DataFrame column(s) {unknown} are not in the table (table columns: "
            f"{table_schema.names})"
        )
    missing_keys = [k for k in key_columns if k not in input_names]
    if missing_keys:
        raise OptionError(f"DataFrame lacks key column(s) {missing_keys}")
    if operation is not Operation.DELETE:
        missing = [f.name for f in table_schema if not f.nullable and f.name not in input_names]
        if missing:
            raise OptionError(f"DataFrame lacks non-nullable column(s) {missing}")


# ---- scan predicates given as an option ------------------------------------------------


def parse_predicates(text: str, arrow_schema: pa.Schema) -> list[Predicate]:
    """The "predicates" option: a JSON list of [column, op, value] triples, ANDed, applied by
    the tablet servers in the scan. Part of the DataFrame's definition (like "columns"), not
    derived from Spark's filters: Spark's Python filter pushdown is stale on reused
    DataFrames in PySpark 4.3 (design/spark.md), so it is never used.

    ops: = < <= > >= (a value), in (a list of values), "is null" / "is not null" (no value).
    Values are JSON numbers, strings, booleans; timestamps are ISO-8601 strings (UTC).
    """
    try:
        items = json.loads(text)
    except json.JSONDecodeError as err:
        raise OptionError(f'option "predicates" is not JSON: {err}') from None
    if not isinstance(items, list) or len(items) > PREDICATES_MAX:
        raise OptionError(f'option "predicates" must be a list of at most {PREDICATES_MAX} items')
    out: list[Predicate] = []
    for item in items:
        if not isinstance(item, list) or len(item) not in (2, 3) or not isinstance(item[0], str):
            raise OptionError(f"predicate {item!r} is not [column, op, value] or [column, op]")
        name, op = item[0], str(item[1]).lower()
        index = arrow_schema.get_field_index(name)
        if index < 0:
            raise OptionError(f"predicate on unknown column {name!r} ({arrow_schema.names})")
        arrow_type = arrow_schema.field(index).type
        if op in ("is null", "is not null"):
            if len(item) == 3 and item[2] is not None:
                raise OptionError(f"predicate {item!r}: {op} takes no value")
            out.append((name, op, None))
            continue
        if len(item) != 3:
            raise OptionError(f"predicate {item!r} needs a value")
        if op == "in":
            if not isinstance(item[2], list) or not item[2] or len(item[2]) > IN_VALUES_MAX:
                raise OptionError(f"predicate {item!r}: in takes 1..{IN_VALUES_MAX} values")
            out.append((name, op, [_predicate_value(arrow_type, v, item) for v in item[2]]))
        elif op in ("=", "<", "<=", ">", ">="):
            out.append((name, op, _predicate_value(arrow_type, item[2], item)))
        else:
            raise OptionError(f"predicate {item!r}: unknown op {op!r}")
    return out


def _predicate_value(arrow_type: pa.DataType, value: object, item: object) -> object:
    ok = False
    if pa.types.is_integer(arrow_type):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif pa.types.is_floating(arrow_type):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value  # type: ignore[arg-type]
    elif pa.types.is_boolean(arrow_type):
        ok = isinstance(value, bool)
    elif pa.types.is_string(arrow_type):
        ok = isinstance(value, str)
    elif pa.types.is_timestamp(arrow_type) and isinstance(value, str):
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is not None:
            if parsed.tzinfo is not None:
                parsed = parsed.astimezone(datetime.UTC).replace(tzinfo=None)
            value, ok = parsed, True
    if not ok:
        raise OptionError(f"predicate {item!r}: {value!r} does not fit a {arrow_type} column")
    return value


def format_row_errors(errors: Sequence[object], table: str, operation: Operation) -> str:
    """The message of a failed write task: how many rows failed and the first few."""
    shown = "; ".join(_describe_error(e) for e in errors[:ERRORS_SHOWN_MAX])
    more = f" (and {len(errors) - ERRORS_SHOWN_MAX} more)" if len(errors) > ERRORS_SHOWN_MAX else ""
    return f"{len(errors)} row(s) failed to {operation.value} into table {table!r}: {shown}{more}"


def _describe_error(error: object) -> str:
    row = getattr(error, "row", None)
    if isinstance(row, dict):
        row = {k: _short(v) for k, v in row.items()}
    return f"{getattr(error, 'status', '?')}: {getattr(error, 'message', error)} (row {row})"


def _short(value: object) -> object:
    if isinstance(value, str | bytes) and len(value) > 40:
        return value[:40] + (b"..." if isinstance(value, bytes) else "...")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return value
