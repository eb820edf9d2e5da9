"""The merge of overlapping sorted runs (design/storage.md, "Merged slabs: one take"): what
`merge.merge_slabs`, `compaction_slabs` and `newest_versions` make from 2-8 runs of random
keys with updates (a key in several runs) and deletes (tombstones), against a reference
that applies the runs to a dict oldest first. Seeded; the mutants at the end show that the
check fails when the merge is broken (the newest version lost, a tombstone kept, versions
out of age order). On a tablet: scans of several overlapping flushed runs and a memstore
against a model, and a scan's snapshot kept while writes and flushes go on."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, open_manager
from tests.tservers.test_storage_model import INT_KEY, PAIR_KEY, Shape, apply_model, write
from tservers.tablet import merge
from tservers.tablet.merge import compaction_slabs, merge_slabs, newest_versions
from tservers.tablet.schema import DELETED_FIELD

UNIVERSE = 3000


def key_of(i: int, pair: bool):
    return (f"g{i % 7}", i // 7) if pair else i


def run_table(rows: dict, pair: bool, batch_rows: int) -> pa.Table:
    """A sorted run: `rows` maps key -> (v, s, deleted); tombstones have null values."""
    keys = sorted(rows)
    cols: dict = {}
    if pair:
        cols["a"] = pa.array([k[0] for k in keys], pa.string())
        cols["b"] = pa.array([k[1] for k in keys], pa.int32())
    else:
        cols["k"] = pa.array(keys, pa.int64())
    cols["v"] = pa.array([rows[k][0] for k in keys], pa.int64())
    cols["s"] = pa.array([rows[k][1] for k in keys], pa.string())
    cols[DELETED_FIELD] = pa.array([rows[k][2] for k in keys], pa.bool_())
    t = pa.table(cols)
    return pa.Table.from_batches(t.to_batches(max_chunksize=batch_rows), schema=t.schema)


def random_runs(rng: random.Random, pair: bool) -> list[dict]:
    """2-8 runs, oldest first: big and small, some keys in several runs (updates), a few
    tombstones (deletes, of keys older runs hold or not), some runs covering a narrow range."""
    out = []
    for r in range(rng.randint(2, 8)):
        size = rng.choice([0, 1, 30, 400, 1500, 2500])
        if rng.random() < 0.3:  # a narrow range (a run of keys written in order)
            lo = rng.randrange(UNIVERSE)
            pool = range(lo, min(UNIVERSE, lo + rng.randint(1, 600)))
        else:
            pool = range(UNIVERSE)
        ids = rng.sample(pool, min(size, len(pool)))
        dead = rng.choice([0.0, 0.05, 0.3])
        rows = {}
        for i in ids:
            if rng.random() < dead:
                rows[key_of(i, pair)] = (None, None, True)
            else:
                rows[key_of(i, pair)] = (r * 100_000 + i, f"r{r}-{i}", False)
        out.append(rows)
    return out


def reference(runs: list[dict], lower, upper, *, keep_deleted: bool) -> list[tuple]:
    """The newest version of every key in [lower, upper), in key order: runs applied to a
    dict oldest first; a tombstone removes the key (or, `keep_deleted`, stays as one)."""
    model: dict = {}
    for rows in runs:
        for k, row in rows.items():
            if row[2] and not keep_deleted:
                model.pop(k, None)
            else:
                model[k] = row
    keys = [
        k for k in sorted(model) if (lower is None or k >= lower) and (upper is None or k < upper)
    ]
    return [(k, *model[k]) for k in keys]


def rows_of(tables: list[pa.Table], pair: bool, *, live_only: bool) -> list[tuple]:
    if not tables:
        return []
    t = pa.concat_tables(tables)
    if live_only:
        t = t.filter(pc.invert(t.column(DELETED_FIELD)))
    ks = (
        list(zip(t.column("a").to_pylist(), t.column("b").to_pylist(), strict=True))
        if pair
        else t.column("k").to_pylist()
    )
    return list(
        zip(
            ks,
            t.column("v").to_pylist(),
            t.column("s").to_pylist(),
            t.column(DELETED_FIELD).to_pylist(),
            strict=True,
        )
    )


def mismatches(seed: int, cases: int = 25, *, first: bool = False) -> list[str]:
    """Every way the merges of `cases` random layouts differ from the reference (`first`:
    up to the first layout that differs)."""
    rng = random.Random(seed)
    bad: list[str] = []
    for case in range(cases):
        pair = rng.random() < 0.25
        key_names = ["a", "b"] if pair else ["k"]
        runs = random_runs(rng, pair)
        batch_rows = rng.choice([1, 7, 64, 5000])
        sources = [run_table(rows, pair, batch_rows) for rows in runs if rows]
        if not sources:
            continue
        lower = rng.choice([None, key_of(rng.randrange(UNIVERSE), pair)])
        upper = rng.choice([None, key_of(rng.randrange(UNIVERSE), pair)])
        slab_rows = rng.choice([1, 7, 50, 1024, 16_384])
        live = reference(runs, lower, upper, keep_deleted=False)
        newest = reference(runs, lower, upper, keep_deleted=True)

        def slabs(
            drop: bool,
            lower=lower,
            upper=upper,
            slab_rows=slab_rows,
            sources=sources,
            key_names=key_names,
        ):
            it = merge_slabs(
                sources, key_names, lambda i, t: t, lower, upper, slab_rows, drop_deleted=drop
            )
            return list(it)

        where = f"case {case} ({len(sources)} runs, slab {slab_rows}, [{lower}, {upper}))"
        # A scan: tombstones dropped by the merge, the direct slabs' by the caller.
        if rows_of(slabs(True), pair, live_only=True) != live:
            bad.append(f"{where}: scan (drop_deleted)")
        # Tombstones kept: each key's newest version, a tombstone where that is one.
        if rows_of(slabs(False), pair, live_only=False) != newest:
            bad.append(f"{where}: merge keeping tombstones")
        all_live = reference(runs, None, None, keep_deleted=False)
        all_newest = reference(runs, None, None, keep_deleted=True)
        for drop, want in ((True, all_live), (False, all_newest)):
            got = list(
                compaction_slabs(
                    sources, key_names, lambda i, t: t, drop_deleted=drop, slab_rows=slab_rows
                )
            )
            if rows_of(got, pair, live_only=False) != want:
                bad.append(f"{where}: compaction drop_deleted={drop}")
            got = newest_versions(sources, key_names, drop_deleted=drop)
            if rows_of([got], pair, live_only=False) != want:
                bad.append(f"{where}: newest_versions drop_deleted={drop}")
        if first and bad:
            break
    return bad


@pytest.mark.parametrize("seed", range(4))
def test_merges_of_overlapping_runs_equal_the_reference(seed):
    assert mismatches(seed) == []


def _oldest_wins(t, key_names, *, drop_deleted=False):
    """A broken merge: the first (oldest) version of each key kept."""
    n = t.num_rows
    order = pc.sort_indices(t.select(key_names), sort_keys=[(k, "ascending") for k in key_names])
    if n < 2:
        return order
    keep = None
    for k in key_names:
        col = t.column(k).take(order)
        neq = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        keep = neq if keep is None else pc.or_(keep, neq)
    keep = pa.concat_arrays([pa.array([True]), keep.combine_chunks()])
    return order.filter(keep)


def _tombstones_kept(t, key_names, *, drop_deleted=False):
    """A broken merge: `drop_deleted` ignored (a deleted key's tombstone reaches a scan as
    a row where the caller trusts the merge to have dropped it, or a compaction keeps it)."""
    return _REAL_ORDER(t, key_names, drop_deleted=False)


def _unstable(t, key_names, *, drop_deleted=False):
    """A broken merge: a key's versions not kept in age order (newest first), so the
    oldest is taken for the newest."""
    gen = pa.array(range(t.num_rows), pa.int64())
    order = pc.sort_indices(
        t.select(key_names).append_column("__gen", gen),
        sort_keys=[*((k, "ascending") for k in key_names), ("__gen", "descending")],
    )
    return order.take(_REAL_ORDER(t.take(order), key_names, drop_deleted=drop_deleted))


def _keep_all(t, key_names, *, drop_deleted=False):
    """A broken merge: every version kept."""
    return pc.sort_indices(t.select(key_names), sort_keys=[(k, "ascending") for k in key_names])


_REAL_ORDER = merge.newest_order


@pytest.mark.parametrize("mutant", [_oldest_wins, _tombstones_kept, _unstable, _keep_all])
def test_a_broken_merge_fails_the_check(monkeypatch, mutant):
    """The check above is not vacuous: with `merge.newest_order` replaced by a broken one
    (by this parameter, for this test only) it finds differences."""
    monkeypatch.setattr(merge, "newest_order", mutant)
    assert mismatches(0, first=True)


@pytest.mark.parametrize(("schema", "seed"), [(INT_KEY, 1), (INT_KEY, 2), (PAIR_KEY, 3)])
def test_scans_of_overlapping_flushed_runs_equal_a_model(tmp_path, schema, seed):
    """A tablet written as users write (random keys, upserts, updates and deletes of keys of
    older runs, a flush every few hundred rows; no compaction): 4-8 overlapping runs and a
    memstore, scanned in several slab sizes and ranges against a dict model. A scan opened
    before more writes and a flush sees none of them (its snapshot)."""
    rng = random.Random(seed)
    shape = Shape(schema)
    m = open_manager(tmp_path, flush_rows=10**9)
    try:
        create(m, "t1", schema)
        t = m.tablet("t1")
        model: dict = {}
        universe = [shape.key(i) for i in range(4000)]
        step = 0

        def some_writes(n_ops: int) -> None:
            nonlocal step
            for _ in range(n_ops):
                step += 1
                live = list(model)
                op = rng.choice([OpType.INSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE])
                if op == OpType.INSERT:
                    free = [k for k in rng.sample(universe, 300) if k not in model]
                    keys = free[: rng.randint(1, 200)]
                elif op == OpType.UPSERT:
                    keys = list(set(rng.sample(universe, rng.randint(1, 150))))
                elif not live:
                    continue
                else:
                    keys = rng.sample(live, min(len(live), rng.randint(1, 80)))
                if not keys:
                    continue
                write(t, shape, op, keys, step)
                apply_model(model, op, keys, step)

        runs = rng.randint(4, 8)
        for _ in range(runs):
            some_writes(rng.randint(3, 8))
            assert t.flush()
        some_writes(3)  # a memstore over the runs
        assert len(t.blocks) == runs

        def scanned(slab_rows: int, lower=(), upper=()) -> dict:
            _, it = t.scan_pieces([], [], list(lower), list(upper), 0, slab_rows=slab_rows)
            got = [p for p in it]
            return shape.rows(pa.concat_tables(got)) if got else {}

        for slab_rows in (1, 50, 1024, 16_384):
            got = scanned(slab_rows)
            assert got == model
            assert list(got) == sorted(model)
        for _ in range(4):
            lo, hi = sorted(rng.sample(universe, 2))
            want = {k: v for k, v in model.items() if lo <= k < hi}
            assert scanned(rng.choice([7, 16_384]), shape.bound(lo), shape.bound(hi)) == want

        # The snapshot: a scan opened (one piece read) before writes and a flush.
        before = dict(model)
        _, it = t.scan_pieces([], [], [], [], 0, slab_rows=64)
        first = next(it)
        some_writes(6)
        assert t.flush()
        rest = [first, *it]
        assert shape.rows(pa.concat_tables(rest)) == before
        assert scanned(16_384) == model
    finally:
        m.close()
