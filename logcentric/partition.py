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
