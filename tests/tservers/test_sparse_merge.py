"""A run with a few memstore rows among its keys (design/storage.md, "Session 27"): a slab
of two parts is merged by position (`merge.two_order`), a few newer rows among many older
ones are spliced in (`merge.splice`), and with `total_rows` a slab holds about that many
rows however many sources there are (the window is only the sources that start before
its end). Pure: against `newest_versions` (a sort of the whole sources)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from tests.tservers.test_scan_fastpath import check_slabs, layout, random_case, source
from tservers.tablet.merge import (
    DIRECT_ROWS_MIN,
    SlabCounts,
    _merge_parts,
    merge_slabs,
    newest_order,
    newest_versions,
    splice,
    two_order,
)
from tservers.tablet.schema import DELETED_FIELD

KEY_TYPES = {
    "int64": (pa.int64(), lambda k: k),
    "string": (pa.string(), lambda k: f"key-{k:06d}"),
    "timestamp": (pa.timestamp("us"), lambda k: k),
    "int32": (pa.int32(), lambda k: k),
    "binary": (pa.binary(), lambda k: b"%06d" % k),
}


def parts_of(rng: random.Random, typ: str, n: int, m: int) -> tuple[pa.Table, pa.Table]:
    """An older and a newer key-sorted part with unique keys (some keys in both), a few
    tombstones in each."""
    arrow_type, conv = KEY_TYPES[typ]
    universe = rng.sample(range(100_000), n + m + rng.randrange(0, 50))
    older = sorted(rng.sample(universe, n))
    newer = sorted(rng.sample(universe, m))

    def part(keys: list[int], tag: int) -> pa.Table:
        return pa.table(
            {
                "k": pa.array([conv(k) for k in keys], arrow_type),
                "v": pa.array([tag] * len(keys), pa.int64()),
                DELETED_FIELD: pa.array([rng.random() < 0.15 for _ in keys], pa.bool_()),
            }
        )

    return part(older, 0), part(newer, 1)


def want(older: pa.Table, newer: pa.Table, drop: bool) -> list[dict]:
    t = pa.concat_tables([older, newer])
    return t.take(newest_order(t, ["k"], drop_deleted=drop)).to_pylist()


@pytest.mark.parametrize("typ", sorted(KEY_TYPES))
def test_two_order_is_the_sorts_order(typ):
    rng = random.Random(typ)
    for _ in range(300):
        older, newer = parts_of(rng, typ, rng.randrange(0, 300), rng.randrange(0, 300))
        t = pa.concat_tables([older, newer])
        for drop in (False, True):
            got = two_order(t, older.num_rows, "k", drop_deleted=drop)
            assert got.to_pylist() == newest_order(t, ["k"], drop_deleted=drop).to_pylist()


@pytest.mark.parametrize("typ", sorted(KEY_TYPES))
def test_splice_is_the_merge(typ):
    rng = random.Random(typ + "splice")
    for _ in range(300):
        older, newer = parts_of(rng, typ, rng.randrange(0, 400), rng.randrange(0, 40))
        for drop in (False, True):
            got = splice(older, newer, "k", drop_deleted=drop)
            assert got.to_pylist() == want(older, newer, drop)
            assert all(c.num_chunks <= 1 for c in got.columns)  # one chunk: no copy later


def test_a_slab_of_two_parts_is_merged_alike_whichever_way():
    """`_merge_parts` of two parts (spliced when the newer is sparse, by position
    otherwise) and of three (sorted) against newest_versions."""
    rng = random.Random(7)
    for _ in range(200):
        older, newer = parts_of(rng, "int64", rng.randrange(1, 3000), rng.randrange(1, 30))
        for drop in (False, True):
            for parts in ([older, newer], [older, newer, newer.slice(0, 0)]):
                parts = [p for p in parts if p.num_rows]
                got = _merge_parts(parts, ["k"], drop)
                expect = newest_versions(parts, ["k"], drop_deleted=drop)
                assert got.to_pylist() == expect.to_pylist()


@pytest.mark.parametrize("seed", range(4))
def test_total_rows_slabs_equal_the_newest_versions(seed):
    """With `total_rows`, whatever the sources' overlap, the slabs put together are the
    newest version of every key within the bounds, and none is much over total_rows."""
    rng = random.Random(seed)
    counts = SlabCounts()
    for _ in range(60):
        keys = layout(rng)
        if rng.random() < 0.3:  # a run of disjoint blocks and a few scattered newer keys
            keys = [*keys, rng.sample(range(3000), rng.randrange(1, 8))]
        case = random_case(rng, keys)
        if case is None:
            continue
        sources, lower, upper = case
        total = rng.choice([1, 2, 7, 50, 1000, DIRECT_ROWS_MIN, 65_536])
        got = list(
            merge_slabs(
                sources, ["k"], lambda i, t: t, lower, upper, counts=counts, total_rows=total
            )
        )
        bound = max(total + total // 8, len(sources) * min(1024, total))
        assert all(s.num_rows <= bound for s in got), ([s.num_rows for s in got], bound)
        check_slabs(got, sources, lower, upper)
    assert counts.direct > 50 and counts.merged > 50


def test_a_run_with_scattered_memstore_keys_merges_whole_slabs():
    """12 key-disjoint blocks (one run) and 200 newer rows of random keys among their
    240,000: slabs of about total_rows rows (was 65,536 / 13 sources = 5,041 a window,
    with a direct slab of the few thousand rows between two newer keys in between), the
    newer versions winning."""
    rng = random.Random(3)
    blocks = [source(list(range(b * 20_000, (b + 1) * 20_000)), 0, 4096) for b in range(12)]
    newer_keys = rng.sample(range(240_000), 200)
    newer = source(newer_keys, 1, 4096)
    counts = SlabCounts()
    total = 65_536
    got = list(
        merge_slabs([*blocks, newer], ["k"], lambda i, t: t, counts=counts, total_rows=total)
    )
    out = pa.concat_tables(got)
    assert out.column("k").to_pylist() == list(range(240_000))
    v = out.column("v").to_pylist()
    assert sorted(k for k in range(240_000) if v[k] == 1) == sorted(newer_keys)
    assert len(got) <= 240_000 // total + 12 + 2  # whole windows, a block's end cuts one
    assert counts.merged_rows >= 0.9 * 240_000
    assert max(s.num_rows for s in got) <= total + total // 8


def test_interleaved_runs_share_a_slab():
    """Three runs of random keys interleaved over one range: up to where one run alone
    would fill a slab the three hold ~3x total_rows, so they share it (each its third):
    no slab over total_rows plus an eighth."""
    rng = random.Random(11)
    keys = rng.sample(range(400_000), 90_000)
    runs = [source(keys[i::3], i, 4096) for i in range(3)]
    total = 8192
    got = list(merge_slabs(runs, ["k"], lambda i, t: t, total_rows=total))
    assert pa.concat_tables(got).column("k").to_pylist() == sorted(keys)
    assert max(s.num_rows for s in got) <= total + total // 8
    assert len(got) >= 90_000 // (total + total // 8)
