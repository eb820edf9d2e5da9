"""Tablet pruning from a scan's predicates (`partition.buckets_of_predicates`) against a
model: every row that Arrow's own filter matches lives in a bucket the pruning kept."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from logcentric.partition import (
    PINNED_KEYS_MAX,
    RANGE_VALUES_MAX,
    bucket_of_key,
    bucket_of_rows,
    buckets_of_predicates,
)

ARROW_OPS = {
    "=": pc.equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


def arrow_filter(table: pa.Table, predicates) -> pa.Array:
    """The rows the predicates match, as the tablet server evaluates them (Arrow compute)."""
    mask = pa.array([True] * table.num_rows)
    for column, op, values in predicates:
        col = table.column(column)
        if op == "is null":
            m = pc.is_null(col)
        elif op == "is not null":
            m = pc.is_valid(col)
        elif op == "in":
            m = pc.is_in(col, pa.array([v for v in values if v is not None], col.type))
        else:
            m = ARROW_OPS[op](col, pa.scalar(values[0], col.type))
        mask = pc.and_kleene(mask, pc.fill_null(m, False))
    return mask


def check(table: pa.Table, keys: list[str], predicates, num_buckets: int) -> set | None:
    types = [(k, table.schema.field(k).type) for k in keys]
    kept = buckets_of_predicates(types, predicates, num_buckets)
    matched = table.filter(arrow_filter(table, predicates))
    need = (
        set(bucket_of_rows(matched, keys, num_buckets).to_pylist()) if matched.num_rows else set()
    )
    if kept is not None:
        assert need <= kept, (predicates, need, kept)
        assert len(kept) < num_buckets
    return kept


def random_predicates(
    rng: random.Random, table: pa.Table, columns: list[str], pin: bool = False
) -> list:
    out = []
    for _ in range(rng.randrange(1, 4)):
        column = rng.choice(columns)
        col = table.column(column)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())  # timestamps travel as int microseconds
        present = col.to_pylist()
        pick = lambda present=present: rng.choice(present)  # noqa: E731
        op = rng.choice(["=", "=", "in", "in", "<", "<=", ">", ">=", "is not null", "is null"])
        if pin:
            op = rng.choice(["=", "in"])
        if op in ("is null", "is not null"):
            out.append((column, op, []))
        elif op == "in":
            out.append((column, op, [pick() for _ in range(rng.randrange(0, 4))]))
        else:
            value = pick()
            if isinstance(value, int) and not isinstance(value, bool) and rng.random() < 0.5:
                value += rng.randrange(-3, 4)
            out.append((column, op, [value]))
    return out


def model_table(rng: random.Random, n: int) -> pa.Table:
    return pa.table(
        {
            "i": pa.array([rng.randrange(-50, 50) for _ in range(n)], pa.int64()),
            "j": pa.array([rng.randrange(-5, 5) for _ in range(n)], pa.int32()),
            "s": [rng.choice(["", "a", "b", "é", "ab"]) for _ in range(n)],
            "f": [rng.choice([0.0, -0.0, 1.5, -2.25]) for _ in range(n)],
            "ts": pa.array([rng.randrange(0, 20) for _ in range(n)], pa.timestamp("us")),
            "flag": [rng.random() < 0.5 for _ in range(n)],
            "v": [rng.choice([None, 1, 2]) for _ in range(n)],
        }
    )


@pytest.mark.parametrize(
    "keys", [["i"], ["j"], ["s"], ["f"], ["ts"], ["flag"], ["i", "s"], ["flag", "j", "ts"]]
)
def test_pruning_keeps_every_matching_rows_bucket(keys):
    rng = random.Random(f"{keys}")
    table = model_table(rng, 300)
    pruned = 0
    for _ in range(300):
        num_buckets = rng.choice([1, 2, 5, 16])
        predicates = random_predicates(rng, table, [*keys, "v"])
        if rng.random() < 0.5:  # pin every key column, by = or in, on top
            predicates += [
                p for k in keys for p in random_predicates(rng, table, [k], pin=True)[:1]
            ]
        kept = check(table, keys, predicates, num_buckets)
        pruned += kept is not None
    assert pruned > 30  # the random predicates do pin keys often enough to test something


def test_pinned_key_goes_to_its_bucket_alone():
    types = [("id", pa.int64())]
    for k in (0, 1, -1, 2**40, 2**63 - 1):
        assert buckets_of_predicates(types, [("id", "=", [k])], 8) == {
            bucket_of_key([k], [pa.int64()], 8)
        }
    assert buckets_of_predicates(types, [("id", "in", [1, 2, None])], 64) == {
        bucket_of_key([1], [pa.int64()], 64),
        bucket_of_key([2], [pa.int64()], 64),
    }
    # Contradictions and null keys match nothing.
    assert buckets_of_predicates(types, [("id", "=", [1]), ("id", "=", [2])], 8) == set()
    assert buckets_of_predicates(types, [("id", "is null", [])], 8) == set()
    assert buckets_of_predicates(types, [("id", "in", [1, 5]), ("id", ">", [3])], 64) == {
        bucket_of_key([5], [pa.int64()], 64)
    }


def test_what_does_not_pin_the_key_prunes_nothing():
    two = [("a", pa.int64()), ("b", pa.string())]
    assert buckets_of_predicates(two, [("a", "=", [1])], 8) is None  # b open
    assert buckets_of_predicates(two, [("b", "=", ["x"]), ("c", "=", [1])], 8) is None
    one = [("id", pa.int64())]
    assert buckets_of_predicates(one, [("id", ">=", [0])], 8) is None  # half-open
    wide = [("id", ">=", [0]), ("id", "<", [RANGE_VALUES_MAX + 1])]
    assert buckets_of_predicates(one, wide, 10_000) is None
    narrow = [("id", ">=", [10]), ("id", "<", [13])]
    assert buckets_of_predicates(one, narrow, 10_000) == {
        bucket_of_key([k], [pa.int64()], 10_000) for k in (10, 11, 12)
    }
    many = [("id", "in", list(range(PINNED_KEYS_MAX + 1)))]
    assert buckets_of_predicates(one, many, 1 << 30) is None
    # Every bucket kept is no pruning.
    assert buckets_of_predicates(one, [("id", "in", list(range(100)))], 4) is None
    # Doubles: NaN leaves the column open, ranges do not prune, 0.0 keeps -0.0's bucket.
    d = [("x", pa.float64())]
    assert buckets_of_predicates(d, [("x", "=", [float("nan")])], 8) is None
    assert buckets_of_predicates(d, [("x", ">", [1.0]), ("x", "<", [1.5])], 8) is None
    zeros = {bucket_of_key([z], [pa.float64()], 1 << 20) for z in (0.0, -0.0)}
    assert len(zeros) == 2
    assert buckets_of_predicates(d, [("x", "=", [0.0])], 1 << 20) == zeros
