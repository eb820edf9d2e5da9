"""Hash partitioning of rows into tablets: bucket = hash(primary key) % num_buckets.

The coordinator decides how many buckets a table has and which tablet holds each bucket;
this module is the one definition of the hash, used by every writer (the client library and
through it Spark). It must never change for an existing table: rows already written live in
the tablet their hash chose.

The hash of a key is a 64-bit mix (splitmix64's finalizer) folded over the key columns in key
order. Integer-like columns (int64, int32, timestamp, bool) are hashed vectorized with Arrow
compute; strings, binaries and doubles hash their canonical bytes with CRC32C first.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence

import crc32c
import pyarrow as pa
import pyarrow.compute as pc

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_U64 = pa.uint64()
# Every operand uint64, so that Arrow never widens or narrows (and multiply wraps mod 2**64).
_S27, _S30, _S31 = (pa.scalar(n, _U64) for n in (27, 30, 31))
_M1_S, _M2_S, _GOLDEN_S = (pa.scalar(n, _U64) for n in (_M1, _M2, _GOLDEN))


def _mix_arrow(z: pa.Array) -> pa.Array:
    """splitmix64 finalizer on a uint64 array (Arrow's unchecked multiply wraps)."""
    z = pc.multiply(pc.bit_wise_xor(z, pc.shift_right(z, _S30)), _M1_S)
    z = pc.multiply(pc.bit_wise_xor(z, pc.shift_right(z, _S27)), _M2_S)
    return pc.bit_wise_xor(z, pc.shift_right(z, _S31))


def _mix_int(z: int) -> int:
    z &= _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def _column_words(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One uint64 per value, before mixing."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        raise ValueError("a primary key column holds a null")
    t = column.type
    if pa.types.is_timestamp(t):
        column = column.cast(pa.int64())
        t = column.type
    if pa.types.is_boolean(t):
        return column.cast(pa.uint8()).cast(_U64)
    if pa.types.is_integer(t):
        # Two's complement: -1 becomes 2**64 - 1, identical for int32 and int64 values.
        return column.cast(pa.int64()).cast(_U64, safe=False)
    if pa.types.is_floating(t):
        values = [crc32c.crc32c(struct.pack("<d", v)) for v in column.to_pylist()]
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        values = [crc32c.crc32c(v.encode()) for v in column.to_pylist()]
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        values = [crc32c.crc32c(v) for v in column.to_pylist()]
    else:
        raise ValueError(f"cannot hash a key column of type {t}")
    return pa.array(values, _U64)


def bucket_of_rows(
    table: pa.Table | pa.RecordBatch, key_columns: Sequence[str], num_buckets: int
) -> pa.Array:
    """The bucket (uint64 array) of every row of `table`."""
    assert num_buckets >= 1 and key_columns
    h = pa.array([0] * table.num_rows, _U64) if table.num_rows else pa.array([], _U64)
    for name in key_columns:
        words = _mix_arrow(_column_words(table.column(name)))
        h = _mix_arrow(pc.bit_wise_xor(pc.multiply(h, _GOLDEN_S), words))
    return _mod(h, num_buckets)


def _mod(h: pa.Array, n: int) -> pa.Array:
    # Unsigned modulo from unsigned integer division: h - (h // n) * n.
    n_s = pa.scalar(n, _U64)
    return pc.subtract(h, pc.multiply(pc.divide(h, n_s), n_s))


def bucket_of_key(key: Sequence, key_types: Sequence[pa.DataType], num_buckets: int) -> int:
    """The bucket of one key given as Python values (same result as bucket_of_rows)."""
    h = 0
    for value, t in zip(key, key_types, strict=True):
        if value is None:
            raise ValueError("a primary key value is null")
        if pa.types.is_timestamp(t):
            value = pa.scalar(value, t).cast(pa.int64()).as_py()
            word = value & _MASK64
        elif pa.types.is_boolean(t):
            word = int(bool(value))
        elif pa.types.is_integer(t):
            word = int(value) & _MASK64
        elif pa.types.is_floating(t):
            word = crc32c.crc32c(struct.pack("<d", float(value)))
        elif pa.types.is_string(t):
            word = crc32c.crc32c(value.encode())
        elif pa.types.is_binary(t):
            word = crc32c.crc32c(bytes(value))
        else:
            raise ValueError(f"cannot hash a key value of type {t}")
        h = _mix_int(((h * _GOLDEN) & _MASK64) ^ _mix_int(word))
    return h % num_buckets


# ---- pruning: the buckets a scan's predicates can match -----------------------------------

# A scan's predicates may pin the key to at most this many whole keys (the product of each key
# column's values) before pruning gives up and the scan reads every tablet.
PINNED_KEYS_MAX = 4096
# An integer key column bounded on both sides (`>=`/`>`, `<=`/`<`) by a range this narrow or
# narrower is pinned to each value of the range.
RANGE_VALUES_MAX = 1024
# Ops of `buckets_of_predicates`, as `tablets.predicate` spells them.
_RANGE_OPS = ("<", "<=", ">", ">=")


def _int_like(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_timestamp(t)


def _key_words(value, t: pa.DataType) -> list:
    """The values to hash for one predicate value: a double 0 matches both zeros (equal as
    IEEE doubles, different bytes, so different buckets)."""
    if pa.types.is_floating(t) and value == 0.0:
        return [0.0, -0.0]
    return [value]


def _column_values(name: str, t: pa.DataType, predicates) -> set | None:
    """The values of key column `name` that every predicate on it allows; None when they
    leave it open (or pruning cannot be sure of the server's answer: NaN)."""
    values: set | None = None
    lower: tuple | None = None  # (value, inclusive)
    upper: tuple | None = None
    for column, op, given in predicates:
        if column != name:
            continue
        if op == "is null":
            return set()  # a key is never null
        if op == "is not null":
            continue
        if pa.types.is_floating(t) and any(v != v for v in given):
            return None  # NaN: leave the column open rather than guess Arrow's NaN rules
        if op in ("=", "=="):
            allowed = set(given)
        elif op == "in":
            allowed = {v for v in given if v is not None}
        elif op in _RANGE_OPS:
            if pa.types.is_floating(t):
                continue  # doubles: equality only (±0, NaN); ranges do not prune
            (v,) = given
            if op in (">", ">="):
                if lower is None or v > lower[0] or (v == lower[0] and op == ">"):
                    lower = (v, op == ">=")
            elif upper is None or v < upper[0] or (v == upper[0] and op == "<"):
                upper = (v, op == "<=")
            continue
        else:
            return None  # an op this module does not know: no pruning on this column
        values = allowed if values is None else values & allowed
    if values is None:
        if pa.types.is_boolean(t):
            values = {False, True}
        elif _int_like(t) and lower is not None and upper is not None:
            lo = lower[0] if lower[1] else lower[0] + 1
            hi = upper[0] if upper[1] else upper[0] - 1
            if hi - lo + 1 > RANGE_VALUES_MAX:
                return None
            values = set(range(lo, hi + 1))
        else:
            return None
    if lower is not None:
        values = {v for v in values if v > lower[0] or (lower[1] and v == lower[0])}
    if upper is not None:
        values = {v for v in values if v < upper[0] or (upper[1] and v == upper[0])}
    return values


def buckets_of_predicates(
    key_columns: Sequence[tuple[str, pa.DataType]],
    predicates: Sequence[tuple[str, str, Sequence]],
    num_buckets: int,
) -> set[int] | None:
    """The buckets that can hold a row matching every one of `predicates` (ANDed), or None
    when the predicates do not narrow the key enough to tell (every bucket can).

    `key_columns`: the table's key columns in key order, (name, Arrow type). `predicates`:
    (column, op, values) with op one of = in < <= > >= "is null" "is not null" and the
    values as the tablet server reads them for the column's type (ints for int32, int64 and
    timestamp columns, in microseconds; floats for doubles; nulls of an IN list included,
    they match nothing). Values must already fit their column: the caller checks that, and
    prunes nothing when they do not (the tablet servers then refuse the scan as before).

    Every key column must be pinned to a finite set of values: by =, IN, a bool column's
    two values, or an integer range of at most RANGE_VALUES_MAX values; range predicates
    narrow those sets; at most PINNED_KEYS_MAX whole keys in all. An empty set means no row
    can match (a contradiction, or `is null` on a key column)."""
    assert num_buckets >= 1 and key_columns
    per_column: list[list] = []
    combos = 1
    for name, t in key_columns:
        values = _column_values(name, t, predicates)
        if values is None:
            return None
        # Deduplicated by repr, not by equality: 0.0 and -0.0 are equal but hash apart.
        words = {repr(w): w for v in values for w in _key_words(v, t)}
        per_column.append(list(words.values()))
        combos *= len(per_column[-1])
        if combos > PINNED_KEYS_MAX:
            return None
    types = [t for _, t in key_columns]
    # Timestamps hash as their int64 microseconds (bucket_of_key casts them the same way).
    hash_types = [pa.int64() if pa.types.is_timestamp(t) else t for t in types]
    buckets: set[int] = set()
    for key in itertools.product(*per_column):
        buckets.add(bucket_of_key(key, hash_types, num_buckets))
        if len(buckets) == num_buckets:
            return None
    return buckets
