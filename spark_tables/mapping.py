"""The pure parts of the data source: options, type mapping, filter translation, batch shaping.

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
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
)
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
FLUSH_ROWS_DEFAULT = 10_000
FLUSH_ROWS_MAX = 1_000_000
ERRORS_SHOWN_MAX = 5
IN_VALUES_MAX = 1_000


class Operation(enum.Enum):
    INSERT = "insert"
    UPSERT = "upsert"
    DELETE = "delete"


class OptionError(ValueError):
    """A missing or malformed data source option (a user error, reported as is)."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    coordinators: tuple[str, ...]
    table: str
    operation: Operation
    columns: tuple[str, ...] | None  # read projection chosen by the user (None: all)
    pushdown: bool  # translate Spark filters into scan predicates (needs the Spark conf too)
    flush_rows_max: int
    timeout_s: float


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate the data source options (keys are case-insensitive in Spark)."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    coordinators = tuple(a.strip() for a in opts.get("coordinators", "").split(",") if a.strip())
    if not coordinators:
        raise OptionError('option "coordinators" is required: comma-separated host:port list')
    for address in coordinators:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise OptionError(f'option "coordinators": {address!r} is not host:port')
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
    pushdown = _parse_bool(opts, "pushdown", False)
    flush_rows_max = _parse_int(opts, "flush_rows_max", FLUSH_ROWS_DEFAULT, 1, FLUSH_ROWS_MAX)
    try:
        timeout_s = float(opts.get("timeout_s", TIMEOUT_S_DEFAULT))
    except ValueError:
        raise OptionError(f'option "timeout_s" is not a number: {opts["timeout_s"]!r}') from None
    if not 0 < timeout_s <= 3600:
        raise OptionError('option "timeout_s" must be in (0, 3600]')
    return SourceOptions(
        coordinators, table, operation, columns, pushdown, flush_rows_max, timeout_s
    )


def _parse_bool(opts: Mapping[str, str], key: str, default: bool) -> bool:
    text = opts.get(key)
    if text is None:
        return default
    if text.strip().lower() in ("true", "1", "yes"):
        return True
    if text.strip().lower() in ("false", "0", "no"):
        return False
    raise OptionError(f'option "{key}" must be true or false, not {text!r}')


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
    table's column types; timestamps with a zone become UTC without a zone."""
    arrays = []
    names = []
    for name in batch.schema.names:
        index = table_schema.get_field_index(name)
        if index < 0:
            raise OptionError(f"column {name!r} is not in the table ({table_schema.names})")
        target = table_schema.field(index).type
        array = batch.column(batch.schema.get_field_index(name))
        if array.type != target:
            array = array.cast(target, safe=True)
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


# ---- filters -------------------------------------------------------------------------------

_COMPARISONS: dict[type, str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}


def _value_fits(arrow_type: pa.DataType, value: object) -> bool:
    """Whether `value` compares in the scan exactly as Spark compares it for this column."""
    if value is None:
        return False  # Spark's col = NULL is never true; leave it to Spark
    if pa.types.is_integer(arrow_type):
        return isinstance(value, int) and not isinstance(value, bool)
    if pa.types.is_boolean(arrow_type):
        return isinstance(value, bool)
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return isinstance(value, str)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return isinstance(value, bytes | bytearray)
    if pa.types.is_floating(arrow_type):
        # Spark orders NaN above every number and makes NaN = NaN true; IEEE comparisons in
        # the scan do not, so only equality with an ordinary number is pushed (caller's check).
        return (
            isinstance(value, float | int)
            and not isinstance(value, bool)
            and not (isinstance(value, float) and math.isnan(value))
        )
    return False  # timestamps: time-zone conversions are Spark's business


def _scan_value(arrow_type: pa.DataType, value: object) -> object:
    if pa.types.is_floating(arrow_type):
        return float(value)  # type: ignore[arg-type]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def translate_filter(filter_: Filter, arrow_schema: pa.Schema) -> Predicate | None:
    """The scan predicate equivalent to one Spark filter, or None when it cannot be pushed
    with exactly Spark's semantics (Not, string matching, NaN, timestamps, nested columns)."""
    attribute = getattr(filter_, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None
    name = attribute[0]
    index = arrow_schema.get_field_index(name)
    if index < 0:
        return None
    arrow_type = arrow_schema.field(index).type
    if isinstance(filter_, IsNull):
        return (name, "is null", None)
    if isinstance(filter_, IsNotNull):
        return (name, "is not null", None)
    if isinstance(filter_, In):
        values = list(filter_.value)
        if not values or len(values) > IN_VALUES_MAX:
            return None
        if not all(_value_fits(arrow_type, v) for v in values):
            return None
        return (name, "in", [_scan_value(arrow_type, v) for v in values])
    op = _COMPARISONS.get(type(filter_))
    if op is None:
        return None
    value = filter_.value
    if not _value_fits(arrow_type, value):
        return None
    if pa.types.is_floating(arrow_type) and op != "=":
        return None
    return (name, op, _scan_value(arrow_type, value))


def split_filters(
    filters: Iterable[Filter], arrow_schema: pa.Schema
) -> tuple[list[Predicate], list[Filter]]:
    """(predicates for the scan, the filters Spark must still evaluate)."""
    pushed: list[Predicate] = []
    remaining: list[Filter] = []
    for f in filters:
        predicate = translate_filter(f, arrow_schema)
        if predicate is None:
            remaining.append(f)
        else:
            pushed.append(predicate)
    return pushed, remaining


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
