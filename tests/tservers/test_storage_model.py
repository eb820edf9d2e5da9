"""Tablet storage against a dict model (issue 25): existence checks and point reads through
block ranges, bloom filters and binary search, with flushes, compactions and reopenings at
random (seeded) moments; blocks without a filter file (today's format) or with a bad one."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from rpc.errors import AlreadyExists, NotFound
from rpc.protocols.tserver_pb2 import (
    ColumnSchemaPB,
    DataType,
    OpType,
    PredicateOp,
    PredicatePB,
    SchemaPB,
    ValuePB,
)
from tests.tservers.helpers import create, deadline, ipc, open_manager
from tservers.tablet import tablet as tablet_mod
from tservers.tablet.blockindex import bloom_name
from tservers.tablet.bloom import Bloom, hash_array, hash_columns, hash_keys, key_hash
from tservers.tablet.stats import stats_name

INT_KEY = SchemaPB(
    columns=[
        ColumnSchemaPB(name="k", type=DataType.INT64, is_key=True),
        ColumnSchemaPB(name="v", type=DataType.INT64, nullable=True),
        ColumnSchemaPB(name="s", type=DataType.STRING, nullable=True),
    ]
)
PAIR_KEY = SchemaPB(
    columns=[
        ColumnSchemaPB(name="a", type=DataType.STRING, is_key=True),
        ColumnSchemaPB(name="b", type=DataType.INT32, is_key=True),
        ColumnSchemaPB(name="v", type=DataType.INT64, nullable=True),
        ColumnSchemaPB(name="s", type=DataType.STRING, nullable=True),
    ]
)


def scan(t, projection=(), predicates=(), lower=(), upper=(), limit=0) -> pa.Table:
    return t.scan(list(projection), list(predicates), list(lower), list(upper), limit)


def val(v) -> ValuePB:
    return ValuePB(int_value=v) if isinstance(v, int) else ValuePB(string_value=v)


class Shape:
    """How keys of a schema look as Python values, columns and predicates."""

    def __init__(self, schema: SchemaPB) -> None:
        self.schema = schema
        self.key_names = [c.name for c in schema.columns if c.is_key]
        self.pair = len(self.key_names) == 2

    def key(self, i: int):
        return (f"g{i % 7}", i // 7) if self.pair else i

    def key_cols(self, keys: list) -> dict:
        if self.pair:
            return {
                "a": pa.array([k[0] for k in keys], pa.string()),
                "b": pa.array([k[1] for k in keys], pa.int32()),
            }
        return {"k": pa.array(keys, pa.int64())}

    def eq(self, k) -> list[PredicatePB]:
        parts = k if self.pair else (k,)
        return [
            PredicatePB(column=n, op=PredicateOp.EQ, values=[val(p)])
            for n, p in zip(self.key_names, parts, strict=True)
        ]

    def bound(self, k) -> list[ValuePB]:
        return [val(p) for p in (k if self.pair else (k,))]

    def rows(self, table: pa.Table) -> dict:
        cols = [table.column(n).to_pylist() for n in self.key_names]
        ks = list(zip(*cols, strict=True)) if self.pair else cols[0]
        vs = table.column("v").to_pylist()
        ss = table.column("s").to_pylist()
        return {k: (v, s) for k, v, s in zip(ks, vs, ss, strict=True)}


def write(t, shape: Shape, op: int, keys: list, step: int) -> None:
    cols = shape.key_cols(keys)
    if op in (OpType.INSERT, OpType.UPSERT):
        cols["v"] = pa.array([step * 1000 + i for i in range(len(keys))], pa.int64())
        cols["s"] = pa.array([f"{OpType.Name(op)}-{step}" for _ in keys], pa.string())
    elif op == OpType.UPDATE:
        cols["v"] = pa.array([-step] * len(keys), pa.int64())
    t.write(1, [(op, ipc(pa.table(cols)))], deadline(30))


def apply_model(model: dict, op: int, keys: list, step: int) -> None:
    for i, k in enumerate(keys):
        if op in (OpType.INSERT, OpType.UPSERT):
            model[k] = (step * 1000 + i, f"{OpType.Name(op)}-{step}")
        elif op == OpType.UPDATE:
            model[k] = (-step, model[k][1])
        else:
            del model[k]


def pieces(t, slab_rows: int, **kw) -> list[pa.Table]:
    schema, it = t.scan_pieces(
        list(kw.get("projection", ())),
        list(kw.get("predicates", ())),
        list(kw.get("lower", ())),
        list(kw.get("upper", ())),
        kw.get("limit", 0),
        slab_rows=slab_rows,
    )
    out = list(it)
    assert all(p.schema == schema and p.num_rows for p in out)
    # A slab holds at most slab_rows rows of each source (blocks and the memstore).
    assert all(p.num_rows <= slab_rows * (len(t.blocks) + 1) for p in out)
    return out


def unordered(t, projection=(), predicates=(), lower=(), upper=(), limit=0) -> pa.Table:
    """An unordered scan (`scan_pieces(ordered=False)`), its pieces put together."""
    schema, it = t.scan_pieces(
        list(projection), list(predicates), list(lower), list(upper), limit, ordered=False
    )
    parts = list(it)
    assert all(p.schema == schema and p.num_rows for p in parts)
    return pa.concat_tables(parts) if parts else schema.empty_table()


def check_unordered(t, shape: Shape, model: dict, rng: random.Random, universe: list) -> None:
    """Unordered scans: every live row once (the unmerged blocks' rows and the merge's
    together), with bounds, predicates and a limit as the ordered scan has them."""
    r = unordered(t)
    assert r.num_rows == len(model) and shape.rows(r) == model
    lo, hi = sorted(rng.sample(universe, 2))
    r = unordered(t, lower=shape.bound(lo), upper=shape.bound(hi))
    want = {k: v for k, v in model.items() if lo <= k < hi}
    assert r.num_rows == len(want) and shape.rows(r) == want
    thr = rng.randrange(-20, 20_000)
    r = unordered(t, predicates=[PredicatePB(column="v", op=PredicateOp.GE, values=[val(thr)])])
    want = {k: v for k, v in model.items() if v[0] is not None and v[0] >= thr}
    assert r.num_rows == len(want) and shape.rows(r) == want
    r = unordered(t, limit=5)
    got = shape.rows(r)
    assert r.num_rows == len(got) == min(5, len(model))
    assert all(model[k] == v for k, v in got.items())


def check(t, shape: Shape, model: dict, rng: random.Random, universe: list) -> None:
    assert shape.rows(scan(t)) == model
    check_unordered(t, shape, model, rng, universe)
    # Streamed in small slabs: the same rows, in key order.
    slab = rng.choice([1, 7, 50])
    got = pieces(t, slab)
    assert len(got) >= min(1, len(model))
    streamed = pa.concat_tables(got) if got else scan(t).slice(0, 0)
    assert shape.rows(streamed) == model
    assert list(shape.rows(streamed)) == sorted(model)
    # Point reads: keys live, deleted, never written.
    for k in rng.sample(universe, 12):
        r = scan(t, predicates=shape.eq(k))
        assert shape.rows(r) == ({k: model[k]} if k in model else {}), k
        # A point read with another predicate and a projection.
        r = scan(
            t,
            projection=["v"],
            predicates=[*shape.eq(k), PredicatePB(column="v", op=PredicateOp.IS_NOT_NULL)],
        )
        want = [model[k][0]] if k in model and model[k][0] is not None else []
        assert r.column("v").to_pylist() == want
    if not shape.pair:
        some = rng.sample(universe, 20)
        r = scan(t, predicates=[PredicatePB(column="k", op=PredicateOp.IN, values=map(val, some))])
        assert shape.rows(r) == {k: model[k] for k in some if k in model}
        assert r.column("k").to_pylist() == sorted(k for k in some if k in model)
    lo, hi = sorted(rng.sample(universe, 2))
    r = scan(t, lower=shape.bound(lo), upper=shape.bound(hi))
    assert shape.rows(r) == {k: v for k, v in model.items() if lo <= k < hi}
    r = scan(t, limit=5)
    assert list(shape.rows(r)) == sorted(model)[:5]
    # Projection pushdown: the merge carries only the projected and predicate columns (and
    # the keys it merges by); a predicate on a column not projected, streamed in slabs.
    thr = rng.randrange(-20, 20_000)
    got = pieces(
        t,
        slab,
        projection=["s"],
        predicates=[PredicatePB(column="v", op=PredicateOp.GE, values=[val(thr)])],
    )
    assert all(p.column_names == ["s"] for p in got)
    want = [model[k][1] for k in sorted(model) if model[k][0] is not None and model[k][0] >= thr]
    assert [x for p in got for x in p.column("s").to_pylist()] == want


@pytest.mark.parametrize(
    ("schema", "seed", "vector_min"),
    [(INT_KEY, 1, 1), (INT_KEY, 2, 64), (INT_KEY, 4, 1), (PAIR_KEY, 3, 64)],
)
def test_random_writes_flushes_compactions_against_a_model(
    tmp_path, monkeypatch, schema, seed, vector_min
):
    # vector_min 1: every block lookup of an int key through the Arrow kernels
    # (BlockIndex.locate_many); 64 (the default): writes of up to 40 keys one by one.
    monkeypatch.setattr(tablet_mod, "VECTOR_KEYS_MIN", vector_min)
    rng = random.Random(seed)
    shape = Shape(schema)
    universe = [shape.key(i) for i in range(600)]
    root = tmp_path / "root"
    m = open_manager(root)
    t = create(m, "t1", schema)
    model: dict = {}
    step = 0
    for _round in range(10):
        for _ in range(rng.randint(4, 14)):
            step += 1
            op = rng.choice(
                [OpType.INSERT, OpType.INSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE]
            )
            n = rng.choice([1, 3, 40])
            live = [k for k in universe if k in model]
            dead = [k for k in universe if k not in model]
            if op == OpType.INSERT:
                bad = bool(live) and rng.random() < 0.2
                keys = rng.sample(dead, min(n, len(dead)))
                if bad:  # one key that exists: nothing of the write may apply
                    keys.insert(rng.randrange(len(keys) + 1), rng.choice(live))
            elif op == OpType.UPSERT:
                keys, bad = rng.sample(universe, n), False
            else:
                bad = bool(dead) and rng.random() < 0.2
                keys = rng.sample(live, min(n, len(live)))
                if bad:
                    keys.append(rng.choice(dead))
            if not keys:
                continue
            if bad:
                with pytest.raises(AlreadyExists if op == OpType.INSERT else NotFound):
                    write(t, shape, op, keys, step)
                continue
            write(t, shape, op, keys, step)
            apply_model(model, op, keys, step)
            event = rng.random()
            if event < 0.15:
                t.flush()
            elif event < 0.2:
                t.compact(tiered=rng.random() < 0.5)
        check(t, shape, model, rng, universe)
        if rng.random() < 0.4:
            m.close()  # reopen: blocks with their filters, then the WAL above the flush
            m = open_manager(root)
            t = m.tablet("t1")
            check(t, shape, model, rng, universe)
    t.flush()
    assert len(t.blocks) >= 2
    t.compact()
    check(t, shape, model, rng, universe)
    m.close()


def test_blocks_without_or_with_a_bad_filter_file_still_open(tmp_path):
    """A block written before filters existed has no `.bloom` file; a torn or foreign one
    fails its checks: both are rebuilt from the block at open, and reads stay exact."""
    shape = Shape(INT_KEY)
    root = tmp_path / "root"
    m = open_manager(root)
    t = create(m, "t1", INT_KEY)
    model: dict = {}
    for step, keys in enumerate([list(range(0, 300, 2)), list(range(1, 300, 4))]):
        write(t, shape, OpType.INSERT, keys, step)
        apply_model(model, OpType.INSERT, keys, step)
        assert t.flush()
    data_dir = m.fs.data_dir("t1")
    names = [b.name for b in t.blocks]
    m.close()
    (data_dir / bloom_name(names[0])).unlink()  # today's format: no filter file
    good = (data_dir / bloom_name(names[1])).read_bytes()
    (data_dir / bloom_name(names[1])).write_bytes(good[:-3] + b"\x00\x00\x00")  # bad crc
    m = open_manager(root)
    t = m.tablet("t1")
    assert (data_dir / bloom_name(names[0])).exists()
    assert (data_dir / bloom_name(names[1])).read_bytes() == good
    check(t, shape, model, random.Random(5), list(range(320)))
    with pytest.raises(AlreadyExists):
        write(t, shape, OpType.INSERT, [5], 9)
    m.close()


def test_orphan_filters_are_removed_and_compaction_removes_old_ones(tmp_path):
    shape = Shape(INT_KEY)
    root = tmp_path / "root"
    m = open_manager(root)
    t = create(m, "t1", INT_KEY)
    for step in range(3):
        write(t, shape, OpType.INSERT, list(range(step * 10, step * 10 + 10)), step)
        assert t.flush()
    data_dir = m.fs.data_dir("t1")
    assert t.compact()
    (only,) = [b.name for b in t.blocks]
    files = [only, bloom_name(only), stats_name(only)]
    assert sorted(p.name for p in data_dir.iterdir()) == files
    m.close()
    (data_dir / "block-000000099.arrow.bloom").write_bytes(b"stray")
    (data_dir / "block-000000099.arrow.stats").write_bytes(b"stray")
    m = open_manager(root)
    assert sorted(p.name for p in data_dir.iterdir()) == files
    assert len(scan(m.tablet("t1"))) == 30
    m.close()


def test_bloom_has_no_false_negatives_and_few_false_positives():
    keys = list(range(0, 40_000, 2))
    f = Bloom.build((key_hash(k) for k in keys), len(keys))
    assert all(f.may_contain(key_hash(k)) for k in keys)
    false = sum(f.may_contain(key_hash(k)) for k in range(1, 40_000, 2))
    assert false < 0.03 * len(keys)  # ~1% at 10 bits a key; hashes are deterministic
    again = Bloom.from_bytes(f.to_bytes())
    assert again is not None and again.bits == f.bits
    assert Bloom.from_bytes(f.to_bytes()[:-1]) is None
    strs = [f"user-{i}" for i in range(5000)]
    g = Bloom.build((key_hash(s) for s in strs), len(strs))
    assert all(g.may_contain(key_hash(s)) for s in strs)


def test_key_hash_is_stable_across_processes_and_releases():
    # Filters are persisted: the hash of a key is part of the file format (version 1).
    assert key_hash(0) == 0xE220A8397B1DCDAF
    assert key_hash(("x", 1)) == key_hash(("x", 1)) != key_hash(("x", 2))
    assert key_hash("a") != key_hash(b"a")


def test_vectorized_hash_build_and_probe_equal_the_one_key_functions():
    """The Arrow-kernel hash, filter build and probe (used by blocks and writes) give the
    very bits and answers of the per-key functions: the file format is unchanged."""
    rng = random.Random(7)
    ints = [rng.randrange(-(2**63), 2**63) for _ in range(3000)] + list(range(-40, 40))
    assert hash_keys(ints).to_pylist() == [key_hash(k) for k in ints]
    assert hash_array(pa.array(ints, pa.int64())).to_pylist() == [key_hash(k) for k in ints]
    small = list(range(-40, 40))
    want = [key_hash(k) for k in small]
    assert hash_array(pa.array(small, pa.int32())).to_pylist() == want
    assert hash_array(pa.array(small, pa.timestamp("us"))).to_pylist() == want
    strs = ["", "a", "é", "user-17"]
    assert hash_array(pa.array(strs)).to_pylist() == [key_hash(s) for s in strs]
    pair = [pa.array(["a", "b"]), pa.array([1, 2], pa.int32())]
    assert hash_columns(pair).to_pylist() == [key_hash(("a", 1)), key_hash(("b", 2))]
    for n in (1, 7, 3000):
        scalar = Bloom.build((key_hash(k) for k in ints[:n]), n)
        vector = Bloom.build(hash_keys(ints[:n]), n)
        assert vector.bits == scalar.bits
        probe = ints[: n + 50] + [rng.randrange(-(2**63), 2**63) for _ in range(2000)]
        got = vector.may_contain_many(hash_keys(probe)).to_pylist()
        assert got == [scalar.may_contain(key_hash(k)) for k in probe]
        assert all(got[:n])


def _three_runs(tmp_path, n: int):
    """A tablet of three flushed runs of interleaved keys below n (every third key each),
    and its model."""
    shape = Shape(INT_KEY)
    m = open_manager(tmp_path / "root")
    t = create(m, "t1", INT_KEY)
    model: dict = {}
    for step in range(3):
        keys = list(range(step, n, 3))
        write(t, shape, OpType.INSERT, keys, step)
        apply_model(model, OpType.INSERT, keys, step)
        assert t.flush()
    return m, t, shape, model


def _change_everything(t, shape: Shape, n: int) -> None:
    """Upserts and deletes over the whole key range, flushed, then one compaction of every
    block (which unlinks the blocks an open scan holds)."""
    write(t, shape, OpType.UPSERT, list(range(0, n, 7)), 4)
    write(t, shape, OpType.DELETE, list(range(1, n, 30)), 5)
    assert t.flush()
    assert t.compact()
    assert len(t.blocks) == 1


def test_a_streamed_scan_is_a_snapshot_through_writes_flushes_and_compactions(tmp_path):
    """Pieces made after writes, a flush and a compaction (which unlinks the blocks the
    scan holds) still show the tablet as it was when the scan opened."""
    m, t, shape, model = _three_runs(tmp_path, 3000)
    write(t, shape, OpType.DELETE, list(range(0, 3000, 10)), 3)
    apply_model(model, OpType.DELETE, list(range(0, 3000, 10)), 3)
    before = dict(model)
    schema, it = t.scan_pieces([], [], [], [], 0, slab_rows=100)
    first = next(it)
    _change_everything(t, shape, 3000)
    rest = list(it)
    got = shape.rows(pa.concat_tables([first, *rest]))
    assert got == before and list(got) == sorted(before)
    assert len(rest) > 10  # made in slabs, not at once
    m.close()


def test_an_unordered_scan_is_a_snapshot_through_writes_flushes_and_compactions(tmp_path):
    """The same for an unordered scan: its unmerged blocks' chunks and its merge, made after
    writes that hide their rows, a flush and a compaction, show the tablet as it was."""
    m, t, shape, model = _three_runs(tmp_path, 30_000)
    assert [b.shadows_nothing for b in t.blocks] == [True] * 3
    write(t, shape, OpType.INSERT, list(range(30_000, 30_500)), 3)  # the memstore's
    apply_model(model, OpType.INSERT, list(range(30_000, 30_500)), 3)
    before = dict(model)
    schema, it = t.scan_pieces([], [], [], [], 0, ordered=False)
    first = next(it)
    _change_everything(t, shape, 30_000)
    rest = list(it)
    got = pa.concat_tables([first, *rest])
    assert got.num_rows == len(before) and shape.rows(got) == before
    assert len(rest) >= 3  # made a chunk at a time, not at once
    m.close()
