"""Streaming compaction (issue 25, design/storage.md "Compaction"): the output block of a
merge made in bounded slabs and written as they come equals the whole-run merge of the same
blocks (rows, chunking, stats, filter bits), and its memory does not grow with the run."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc, open_manager
from tests.tservers.test_pruning import manager
from tests.tservers.test_storage_model import (
    INT_KEY,
    PAIR_KEY,
    Shape,
    apply_model,
    check,
    scan,
    write,
)
from tservers.tablet import bloom as bloom_mod
from tservers.tablet import stats as block_stats
from tservers.tablet.blockindex import BlockIndex, bloom_name, write_merged_block
from tservers.tablet.bloom import Bloom, hash_columns
from tservers.tablet.merge import newest_versions
from tservers.tablet.schema import DELETED_FIELD
from tservers.tablet.stats import stats_name
from tservers.tablet.tablet import compaction_run

ROOT = Path(__file__).resolve().parents[2]


def _block(rng: random.Random, keys: list[int], step: int) -> pa.Table:
    keys = sorted(set(keys))
    return pa.table(
        {
            "c0": pa.array(keys, pa.int64()),
            "c1": pa.array([step * 10_000 + i for i in range(len(keys))], pa.int64()),
            "c2": pa.array([None if rng.random() < 0.1 else f"s{step}" for _ in keys]),
            DELETED_FIELD: pa.array([rng.random() < 0.15 for _ in keys], pa.bool_()),
        }
    )


def _whole_merge(tables: list[pa.Table], drop_deleted: bool) -> pa.Table:
    t = tables[0] if len(tables) == 1 else newest_versions(tables, ["c0"])
    if drop_deleted:
        t = t.filter(pa.compute.invert(t.column(DELETED_FIELD)))
    return t


@pytest.mark.parametrize("seed", range(6))
def test_streamed_output_equals_the_whole_merge(tmp_path, monkeypatch, seed):
    """Random blocks of overlapping keys (tombstones, nulls), random slab and chunk sizes:
    the streamed block has the rows of the whole merge, batches of exactly `chunk_rows`
    (the last shorter), the stats of those batches, and the filter `build` makes from all
    keys at once, set bit by bit in Python (built a segment of SEGMENT_BITS at a time)."""
    rng = random.Random(seed)
    monkeypatch.setattr(bloom_mod, "SEGMENT_BITS", rng.choice([512, 1024 * 3, 1 << 22]))
    monkeypatch.setattr(bloom_mod, "HASHES_PER_ARRAY", rng.choice([5, 1000, 1 << 20]))
    nblocks = rng.randint(1, 6)
    tables = [
        _block(rng, [rng.randrange(3000) for _ in range(rng.randint(0, 900))], step)
        for step in range(nblocks)
    ]
    tables = [t for t in tables if t.num_rows] or [_block(rng, [1, 2, 3], 99)]
    drop = rng.random() < 0.5
    chunk_rows = rng.choice([1, 5, 64, 1000, 65536])
    slab_rows = rng.choice([None, 1, 3, 50, 4096])
    mapped = []
    for i, t in enumerate(tables):  # blocks as the tablet holds them: mapped IPC files
        path = tmp_path / f"in-{i}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
            w.write_table(t, max_chunksize=rng.choice([7, 300, 65536]))
        with pa.memory_map(str(path), "r") as src:
            mapped.append(pa.ipc.open_file(src).read_all())
    out = tmp_path / "out"
    rows = write_merged_block(
        out,
        "block-000000001.arrow",
        mapped,
        ["c0"],
        lambda _i, t: t,
        drop_deleted=drop,
        chunk_rows=chunk_rows,
        slab_rows=slab_rows,
    )
    want = _whole_merge(tables, drop)
    with pa.memory_map(str(out / "block-000000001.arrow"), "r") as src:
        reader = pa.ipc.open_file(src)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        got = reader.read_all()
    assert rows == want.num_rows == got.num_rows
    assert got.schema == want.schema
    assert got.to_pylist() == want.to_pylist()
    sizes = [b.num_rows for b in batches]
    assert all(n == chunk_rows for n in sizes[:-1]) and 0 < (sizes or [1])[-1] <= chunk_rows
    assert sum(sizes) == rows
    chunks = block_stats.from_bytes((out / stats_name("block-000000001.arrow")).read_bytes(), sizes)
    assert chunks == block_stats.compute(batches)
    b = BlockIndex.open(out, "block-000000001.arrow", ["c0"])  # writes the filter
    hashes = [h for x in batches for h in hash_columns([x.column("c0")]).to_pylist()]
    whole = _bits_by_hand(hashes, b.bloom.nwords)
    assert b.bloom.bits == whole and b.bloom.nkeys == rows
    assert Bloom.from_bytes((out / bloom_name(b.name)).read_bytes()).bits == whole
    assert Bloom.build(pa.array(hashes, pa.uint64()), rows).bits == whole


def _bits_by_hand(hashes: list[int], nwords: int) -> bytes:
    """The filter's bits (version 2), set one by one with the arithmetic of
    `Bloom.may_contain`: the word `((h >> 32) * nwords) >> 32`, bits `(h >> 6 i) & 63`."""
    bits = bytearray(nwords * bloom_mod.WORD_BYTES)
    for h in hashes:
        base = (((h >> 32) * nwords) >> 32) * bloom_mod.WORD_BITS
        for i in range(bloom_mod.PROBES):
            p = base + ((h >> (6 * i)) & 63)
            bits[p >> 3] |= 1 << (p & 7)
    return bytes(bits)


@pytest.mark.parametrize(("schema", "seed"), [(INT_KEY, 11), (PAIR_KEY, 12), (INT_KEY, 13)])
def test_tablet_compactions_equal_the_whole_merge_of_their_runs(tmp_path, schema, seed):
    """Random inserts, upserts, updates and deletes with flushes and tiered or full
    compactions: before each compaction the whole-run merge of its blocks is made with the
    tablet's own in-memory merge (`Tablet._merge`, what compaction did before), and the
    block the compaction writes holds exactly those rows; every scan equals the model."""
    rng = random.Random(seed)
    shape = Shape(schema)
    universe = [shape.key(i) for i in range(400)]
    chunk_rows = rng.choice([3, 16, 64])
    m = manager(tmp_path / "root", chunk_rows)
    t = create(m, "t1", schema)
    model: dict = {}
    compactions = 0
    for step in range(1, 160):
        op = rng.choice([OpType.INSERT, OpType.UPSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE])
        live = [k for k in universe if k in model]
        dead = [k for k in universe if k not in model]
        pool = {OpType.INSERT: dead, OpType.UPSERT: universe}.get(op, live)
        keys = rng.sample(pool, min(len(pool), rng.choice([1, 5, 30])))
        if keys:
            write(t, shape, op, keys, step)
            apply_model(model, op, keys, step)
        if rng.random() < 0.25:
            t.flush()
        if rng.random() < 0.12 and len(t.blocks) >= 2:
            tiered = rng.random() < 0.5
            blocks = list(t.blocks)
            start = 0
            if tiered:
                start = compaction_run(
                    [b.num_rows for b in blocks],
                    t.opts.compaction_blocks_min,
                    t.opts.flush_rows_threshold,
                )
            if start is None:
                continue
            run = blocks[start:]
            want = t._merge([b.table for b in run], None, keep_deleted=start != 0)
            if start == 0:
                want = want.append_column(
                    DELETED_FIELD, pa.repeat(pa.scalar(False, pa.bool_()), want.num_rows)
                )
            assert t.compact(tiered=tiered)
            compactions += 1
            new = t.blocks[-1]
            assert [b.name for b in t.blocks[:-1]] == [b.name for b in blocks[:start]]
            assert new.table.to_pylist() == want.to_pylist()
            assert new.table.schema == want.schema
            assert shape.rows(scan(t)) == model
    check(t, shape, model, rng, universe)
    assert compactions >= 3
    m.close()
    m = manager(tmp_path / "root", chunk_rows)
    check(m.tablet("t1"), shape, model, rng, universe)
    m.close()


_CHILD = textwrap.dedent(
    """
    import json, sys
    import pyarrow as pa
    sys.path.insert(0, sys.argv[2])
    from tests.tservers.helpers import open_manager
    from pathlib import Path
    m = open_manager(Path(sys.argv[1]), flush_rows=10**9)
    t = m.tablet("t1")
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    opened_peak = pool.max_memory()
    assert t.compact()
    print(json.dumps({"before": before, "opened_peak": opened_peak,
                      "peak": pool.max_memory(), "rows": t.blocks[-1].num_rows}))
    m.close()
    """
)


def _compaction_peak(root: Path, nblocks: int, rows_per_block: int) -> dict:
    """Load `nblocks` flushed blocks of interleaved keys (the last deletes some), then
    compact them all in a fresh process and return its Arrow allocation peak."""
    m = open_manager(root, flush_rows=10**9)
    t = create(m, "t1", INT_KEY)
    batch = 50_000
    for j in range(nblocks):
        keys = list(range(j, nblocks * rows_per_block, nblocks))
        for off in range(0, len(keys), batch):
            part = keys[off : off + batch]
            rows = pa.table(
                {
                    "k": pa.array(part, pa.int64()),
                    "v": pa.array(part, pa.int64()),
                    "s": pa.array([f"value-{k:012d}" for k in part]),
                }
            )
            t.write(1, [(OpType.INSERT, ipc(rows))], deadline(120))
        assert t.flush()
    gone = list(range(0, nblocks * rows_per_block, 97))
    t.write(1, [(OpType.DELETE, ipc(pa.table({"k": pa.array(gone, pa.int64())})))], deadline(60))
    assert t.flush()
    m.close()
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rows"] == nblocks * rows_per_block - len(gone)
    return got


# The compaction's own Arrow allocations, above what the process held before it: a slab
# (COMPACT_SLAB_ROWS rows, a few copies), one output batch, and the filter's build (the
# hashes, 8 bytes a key: 16 MB at 2M keys, and one segment's bit positions and scratch).
PEAK_BOUND_BYTES = 64 << 20


def test_compaction_memory_does_not_grow_with_the_run(tmp_path):
    """The same compaction of 4 blocks at 100k and at 500k rows a block: the peak of Arrow
    allocations stays under one bound and grows only by the filter's hashes (the whole-run
    merge held the run a few times over, and the filter's build ~70 bytes a key: 116 MiB
    at 2M rows of ~30 bytes)."""
    small = _compaction_peak(tmp_path / "small", 4, 100_000)
    large = _compaction_peak(tmp_path / "large", 4, 500_000)
    peaks = {}
    for name, got in (("small", small), ("large", large)):
        peaks[name] = got["peak"] - got["before"]
        print(name, got, "compaction peak MiB", peaks[name] / 2**20)
    assert peaks["large"] < PEAK_BOUND_BYTES, peaks
    assert peaks["small"] < PEAK_BOUND_BYTES, peaks
    # Five times the rows, not five times the memory: what grows is the filter's held
    # hashes (8 bytes a key of the output block) and nothing else.
    grown_rows = large["rows"] - small["rows"]
    assert peaks["large"] - peaks["small"] < 10 * grown_rows + (8 << 20), peaks
