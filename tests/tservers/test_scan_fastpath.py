"""Scans without a merge where sources do not overlap (design/storage.md, "Scans without a
merge where sources do not overlap"): `merge.merge_slabs` passes a source's rows through as
a slice (a direct slab) where they sort before every other source's next key, and merges
otherwise. Against `newest_versions` of the whole sources (pure: random sources, overlaps,
duplicates, bounds, slab sizes and batch sizes), and on a tablet: a memstore write of a key
inside a block's range still wins, and a compacted tablet scans with no merge at all."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc
from tests.tservers.test_disjoint_runs import open_small
from tests.tservers.test_storage_model import INT_KEY, Shape, apply_model, scan, write
from tservers.tablet.blockindex import runs_of
from tservers.tablet.merge import DIRECT_ROWS_MIN, SlabCounts, merge_slabs, newest_versions
from tservers.tablet.schema import DELETED_FIELD


def source(keys: list[int], tag: int, batch_rows: int) -> pa.Table:
    """A key-sorted source of `keys` in record batches of `batch_rows` rows; `v` says which
    source a row came from, a few rows are tombstones."""
    keys = sorted(keys)
    t = pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "v": pa.array([tag] * len(keys), pa.int64()),
            DELETED_FIELD: pa.array([k % 11 == 0 for k in keys], pa.bool_()),
        }
    )
    return pa.Table.from_batches(t.to_batches(max_chunksize=batch_rows), schema=t.schema)


def layout(rng: random.Random) -> list[list[int]]:
    """Keys of 1-5 sources: disjoint ranges (a run's blocks), interleaved (runs of random
    keys), a narrow range inside another's, some keys in several sources."""
    kind = rng.choice(["disjoint", "interleaved", "inside", "mixed"])
    n = rng.choice([1, 2, 3, 5])
    if kind == "disjoint":
        edges = sorted(rng.sample(range(1, 3000), n - 1)) if n > 1 else []
        bounds = list(zip([0, *edges], [*edges, 3000], strict=True))
        return [[k for k in range(lo, hi) if rng.random() < 0.7] for lo, hi in bounds]
    if kind == "interleaved":
        return [rng.sample(range(3000), rng.randrange(0, 800)) for _ in range(n)]
    if kind == "inside":
        big = rng.sample(range(3000), 2000)
        lo = rng.randrange(2700)
        small = rng.sample(range(lo, lo + 300), 40)
        return [big, small] if rng.random() < 0.5 else [small, big]
    out = []
    for _ in range(n):
        lo, width = rng.randrange(3000), rng.randrange(1, 1500)
        out.append(rng.sample(range(lo, lo + width), rng.randrange(0, min(400, width) + 1)))
    return out


def random_case(rng: random.Random, keys: list[list[int]]) -> tuple | None:
    """(sources of `keys` in record batches of a random size, a random lower and upper
    bound), or None when every source is empty."""
    batch_rows = rng.choice([1, 3, 64, 5000])
    sources = [source(ks, i, batch_rows) for i, ks in enumerate(keys)]
    sources = [s for s in sources if s.num_rows]
    if not sources:
        return None
    return sources, rng.choice([None, rng.randrange(3000)]), rng.choice([None, rng.randrange(3000)])


def check_slabs(got: list[pa.Table], sources: list[pa.Table], lower, upper) -> None:
    """The slabs are non-empty and put together the newest version of every key of the
    sources within [lower, upper), in key order."""
    want = newest_versions(sources, ["k"])
    if lower is not None:
        want = want.filter(pc.greater_equal(want.column("k"), lower))
    if upper is not None:
        want = want.filter(pc.less(want.column("k"), upper))
    assert all(s.num_rows for s in got)
    out = pa.concat_tables(got) if got else want.slice(0, 0)
    assert out.to_pylist() == want.to_pylist()


@pytest.mark.parametrize("seed", range(4))
def test_slabs_equal_the_newest_versions_of_the_whole_sources(seed):
    """Whatever the sources' overlap, the slabs put together are the newest version of every
    key within the bounds, in key order: direct slabs never hide a newer version."""
    rng = random.Random(seed)
    counts = SlabCounts()
    for _ in range(60):
        case = random_case(rng, layout(rng))
        if case is None:
            continue
        sources, lower, upper = case
        slab_rows = rng.choice([1, 2, 7, 50, DIRECT_ROWS_MIN, 16_384])
        got = list(
            merge_slabs(sources, ["k"], lambda i, t: t, lower, upper, slab_rows, counts=counts)
        )
        assert all(s.num_rows <= slab_rows * len(sources) for s in got)
        check_slabs(got, sources, lower, upper)
    # Both kinds of slabs were made along the way.
    assert counts.direct > 100 and counts.merged > 100


def test_disjoint_sources_are_passed_through_and_overlaps_merged():
    """Two blocks of one run (disjoint) and a memstore holding one key inside the second
    block: the first block and the second up to that key come out as slices, no merge."""
    a = source(list(range(0, 20_000)), 0, 64 * 1024)
    b = source(list(range(20_000, 40_000)), 1, 64 * 1024)
    mem = source([30_000], 2, 64 * 1024)
    counts = SlabCounts()
    got = list(merge_slabs([a, b, mem], ["k"], lambda i, t: t, counts=counts))
    rows = pa.concat_tables(got)
    assert rows.column("k").to_pylist() == list(range(40_000))
    assert rows.column("v")[30_000].as_py() == 2  # the memstore's version
    assert rows.column("v")[29_999].as_py() == 1
    # A slab that is a slice of a source is that source's memory, not a copy.
    assert got[0].column("k").chunk(0).buffers()[1].address == (
        a.column("k").chunk(0).buffers()[1].address
    )
    assert counts.merged == 1  # the window around key 30,000
    assert counts.direct_rows + counts.merged_rows == 40_000
    assert counts.merged_rows < 2 * 16_384


def test_an_upsert_in_the_memstore_inside_a_block_still_wins(tmp_path):
    """Blocks of one run hold keys 0..399; the memstore then holds an upsert, an update and
    a delete of keys inside the blocks' ranges, and a new key between two blocks. Every
    scan (whole, streamed in slabs of any size, ranged) shows the memstore's versions; the
    slabs around them are merged, the others passed through."""
    m = open_small(tmp_path, run_block_rows=100)
    try:
        t = create(m, "t1", INT_KEY)
        shape = Shape(INT_KEY)
        model: dict = {}
        for step, lo in enumerate(range(0, 400, 20)):
            keys = list(range(lo, lo + 20))
            write(t, shape, OpType.INSERT, keys, step)
            apply_model(model, OpType.INSERT, keys, step)
            t.flush()
        t.compact()
        assert len(runs_of(t.blocks)) == 1 and len(t.blocks) == 4
        for step, (op, keys) in enumerate(
            [
                (OpType.UPSERT, [150]),
                (OpType.UPDATE, [151, 260]),
                (OpType.DELETE, [152, 399]),
            ],
            start=100,
        ):
            write(t, shape, op, keys, step)
            apply_model(model, op, keys, step)
        assert t.memstore_rows() > 0 and not t.frozen
        for slab_rows in (1, 5, 20, 64, 16_384):
            before = (t.scan_slabs_direct, t.scan_slabs_merged)
            _, it = t.scan_pieces([], [], [], [], 0, slab_rows=slab_rows)
            got = pa.concat_tables(list(it))
            assert shape.rows(got) == model
            assert got.column("k").to_pylist() == sorted(model)
            assert t.scan_slabs_direct > before[0] and t.scan_slabs_merged > before[1]
        assert shape.rows(scan(t)) == model
        lower, upper = shape.bound(140), shape.bound(270)
        ranged = shape.rows(scan(t, lower=lower, upper=upper))
        assert ranged == {k: v for k, v in model.items() if 140 <= k < 270}
        assert model[150][1] == "UPSERT-100" and model[151][0] == -101
    finally:
        m.close()


def test_a_compacted_tablet_scans_without_a_merge(tmp_path):
    """A tablet compacted into one run of several blocks: every slab of a full scan, and of
    a ranged and a predicate scan, is a slice of a block: the merge never sorts or takes."""
    m = open_small(tmp_path, run_block_rows=64)
    try:
        t = create(m, "t1", INT_KEY)
        shape = Shape(INT_KEY)
        model: dict = {}
        rng = random.Random(5)
        keys = list(range(300))
        rng.shuffle(keys)
        for step in range(0, 300, 30):
            write(t, shape, OpType.INSERT, keys[step : step + 30], step)
            apply_model(model, OpType.INSERT, keys[step : step + 30], step)
            t.flush()
        write(t, shape, OpType.DELETE, [7, 8], 999)
        apply_model(model, OpType.DELETE, [7, 8], 999)
        t.flush()
        merged_before = t.scan_slabs_merged
        assert shape.rows(scan(t)) == model  # several runs: merged
        assert t.scan_slabs_merged > merged_before
        t.compact()
        assert len(runs_of(t.blocks)) == 1 and len(t.blocks) == 5
        direct, rows, merged = t.scan_slabs_direct, t.scan_rows_direct, t.scan_slabs_merged
        assert shape.rows(scan(t)) == model
        assert t.scan_slabs_merged == merged
        assert t.scan_rows_direct - rows == len(model)  # the compaction dropped tombstones
        assert t.scan_slabs_direct - direct >= 5  # at least a slab per block
        got = scan(t, lower=shape.bound(100), upper=shape.bound(200))
        assert shape.rows(got) == {k: v for k, v in model.items() if 100 <= k < 200}
        assert t.scan_slabs_merged == merged
    finally:
        m.close()


def test_a_memstore_beyond_the_blocks_is_passed_through(tmp_path):
    """Keys loaded in increasing order (a sequence, a time): the memstore's keys lie beyond
    every block's, so a scan of blocks and memstore merges nothing either."""
    m = open_small(tmp_path, run_block_rows=1000)
    try:
        t = create(m, "t1", INT_KEY)
        for lo in range(0, 60, 10):
            rows = pa.table({"k": pa.array(range(lo, lo + 10), pa.int64())})
            t.write(1, [(OpType.INSERT, ipc(rows))], deadline(30))
            if lo < 40:
                t.flush()
        assert t.memstore_rows() == 20 and len(t.blocks) == 4
        merged = t.scan_slabs_merged
        got = scan(t)
        assert got.column("k").to_pylist() == list(range(60))
        assert t.scan_slabs_merged == merged
    finally:
        m.close()
