"""Scan pruning by per-chunk min/max (issue 25, tservers/tablet/stats.py): a pruned scan
returns what an unpruned one and a dict model return (random data, random predicates,
flushes, compactions, reopenings), chunks and blocks are really skipped, a newer version
that misses a predicate is not skipped while an older version of its key is read, and the
stats files are derived data rebuilt when missing or bad."""

from __future__ import annotations

import json
import random

import pyarrow as pa

from rpc.protocols.tserver_pb2 import (
    ColumnSchemaPB,
    DataType,
    OpType,
    PredicateOp,
    PredicatePB,
    SchemaPB,
    ValuePB,
)
from tests.tservers.helpers import create, deadline, ipc
from tservers.fs import FsLayout
from tservers.tablet.manager import TabletManager
from tservers.tablet.stats import stats_name
from tservers.tablet.tablet import TabletOptions
from tservers.wal.log import WalOptions

SCHEMA = SchemaPB(
    columns=[
        ColumnSchemaPB(name="k", type=DataType.INT64, is_key=True),
        ColumnSchemaPB(name="v", type=DataType.INT64, nullable=True),
        ColumnSchemaPB(name="s", type=DataType.STRING, nullable=True),
        ColumnSchemaPB(name="x", type=DataType.DOUBLE, nullable=True),
    ]
)
OPS = [PredicateOp.EQ, PredicateOp.LT, PredicateOp.LE, PredicateOp.GT, PredicateOp.GE]


def manager(root, chunk_rows: int) -> TabletManager:
    fs = FsLayout.open(root) if (root / "instance").exists() else FsLayout.format(root)
    m = TabletManager(
        fs,
        WalOptions(segment_size_bytes_max=1 << 20),
        TabletOptions(flush_rows_threshold=1 << 40, block_chunk_rows=chunk_rows),
        maintenance=False,
    )
    m.open()
    return m


def write(t, op: int, rows: dict) -> None:
    """rows: key -> (v, s, x) (INSERT/UPSERT), key -> v (UPDATE), key -> None (DELETE)."""
    ks = sorted(rows)
    cols = {"k": pa.array(ks, pa.int64())}
    if op in (OpType.INSERT, OpType.UPSERT):
        cols["v"] = pa.array([rows[k][0] for k in ks], pa.int64())
        cols["s"] = pa.array([rows[k][1] for k in ks], pa.string())
        cols["x"] = pa.array([rows[k][2] for k in ks], pa.float64())
    elif op == OpType.UPDATE:
        cols["v"] = pa.array([rows[k] for k in ks], pa.int64())
    t.write(1, [(op, ipc(pa.table(cols)))], deadline(30))


def val(col: str, v) -> ValuePB:
    if col == "s":
        return ValuePB(string_value=v)
    if col == "x":
        return ValuePB(double_value=v)
    return ValuePB(int_value=v)


def holds(op: int, have, values) -> bool:
    if op == PredicateOp.IS_NULL:
        return have is None
    if op == PredicateOp.IS_NOT_NULL:
        return have is not None
    if have is None:
        return False
    if op == PredicateOp.IN:
        return have in values
    v = values[0]
    return {
        PredicateOp.EQ: have == v,
        PredicateOp.LT: have < v,
        PredicateOp.LE: have <= v,
        PredicateOp.GT: have > v,
        PredicateOp.GE: have >= v,
    }[op]


def scan(t, preds, *, prune: bool = True, lower=None, upper=None, slab_rows: int = 64):
    schema, it = t.scan_pieces(
        [],
        [PredicatePB(column=c, op=op, values=[val(c, v) for v in vs]) for c, op, vs in preds],
        [ValuePB(int_value=lower)] if lower is not None else [],
        [ValuePB(int_value=upper)] if upper is not None else [],
        0,
        slab_rows=slab_rows,
        prune=prune,
    )
    parts = list(it)
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    ks = table.column("k").to_pylist()
    return dict(
        zip(
            ks,
            zip(
                table.column("v").to_pylist(),
                table.column("s").to_pylist(),
                table.column("x").to_pylist(),
                strict=True,
            ),
            strict=True,
        )
    ), ks


def expect(model: dict, preds, lower=None, upper=None) -> dict:
    idx = {"k": None, "v": 0, "s": 1, "x": 2}
    out = {}
    for k in sorted(model):
        if (lower is not None and k < lower) or (upper is not None and k >= upper):
            continue
        row = model[k]
        if all(holds(op, k if c == "k" else row[idx[c]], vs) for c, op, vs in preds):
            out[k] = row
    return out


def random_pred(rng: random.Random, step: int, universe: int):
    col = rng.choice(["k", "v", "v", "s", "x"])
    if col == "k":
        pick = lambda: rng.randrange(universe)  # noqa: E731
    elif col == "v":
        pick = lambda: rng.randrange(-5, step + 2)  # noqa: E731
    elif col == "s":
        pick = lambda: f"s{rng.randrange(step + 2):04d}"  # noqa: E731
    else:
        pick = lambda: rng.randrange(step + 2) * 0.5  # noqa: E731
    r = rng.random()
    if r < 0.1:
        return (col, rng.choice([PredicateOp.IS_NULL, PredicateOp.IS_NOT_NULL]), [])
    if r < 0.25:
        return (col, PredicateOp.IN, [pick() for _ in range(rng.randint(0, 4))])
    return (col, rng.choice(OPS), [pick()])


def test_pruned_scans_equal_unpruned_scans_and_the_model(tmp_path):
    """Values follow the write step (a block's chunks hold narrow ranges, so min/max prunes
    a lot), keys are random over a small universe (versions of a key spread over blocks),
    with upserts, updates (v to an old or new value), deletes, flushes, tiered and full
    compactions and reopenings at random; every scan with random predicates and key bounds
    equal with and without pruning and to the model."""
    rng = random.Random(25)
    universe = 400
    root = tmp_path / "root"
    m = manager(root, chunk_rows=rng.choice([4, 16]))
    t = create(m, "t1", SCHEMA)
    model: dict = {}
    skipped = [0, 0]  # chunks and blocks skipped by tablets closed along the way
    for step in range(1, 140):
        op = rng.choice([OpType.INSERT, OpType.UPSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE])
        live = sorted(model)
        dead = [k for k in range(universe) if k not in model]
        n = rng.choice([1, 5, 30])

        def row(step=step):
            v = step if rng.random() < 0.9 else None
            s = f"s{step:04d}" if rng.random() < 0.9 else None
            x = step * 0.5 if rng.random() < 0.9 else None
            return (v, s, x)

        if op == OpType.INSERT and dead:
            rows = {k: row() for k in rng.sample(dead, min(n, len(dead)))}
        elif op == OpType.UPSERT:
            rows = {k: row() for k in rng.sample(range(universe), n)}
        elif op == OpType.UPDATE and live:
            # Sometimes back to an old value: a newer version with a smaller v.
            rows = {
                k: rng.choice([step, rng.randrange(step)])
                for k in rng.sample(live, min(n, len(live)))
            }
        elif op == OpType.DELETE and live:
            rows = {k: None for k in rng.sample(live, min(n, len(live)))}
        else:
            continue
        write(t, op, rows)
        for k, r in rows.items():
            if op == OpType.DELETE:
                del model[k]
            elif op == OpType.UPDATE:
                model[k] = (r, *model[k][1:])
            else:
                model[k] = r
        event = rng.random()
        if event < 0.3:
            t.flush()
        elif event < 0.36:
            t.compact(tiered=True)
        elif event < 0.39:
            t.compact()
        elif event < 0.41:
            skipped = [skipped[0] + t.scan_chunks_skipped, skipped[1] + t.scan_blocks_skipped]
            m.close()
            m = manager(root, chunk_rows=rng.choice([4, 16]))
            t = m.tablet("t1")
            t.wait_leader_ready(deadline(30))
        if step % 3:
            continue
        for _ in range(6):
            preds = [random_pred(rng, step, universe) for _ in range(rng.randint(1, 3))]
            lower = upper = None
            if rng.random() < 0.3:
                lower, upper = sorted(rng.sample(range(universe + 1), 2))
            want = expect(model, preds, lower, upper)
            got, order = scan(t, preds, lower=lower, upper=upper)
            plain, _ = scan(t, preds, prune=False, lower=lower, upper=upper)
            assert got == plain == want, (step, preds, lower, upper)
            assert order == sorted(order)
    assert len(t.blocks) >= 2
    # Pruning did happen along the way (values follow the write step).
    assert skipped[0] + t.scan_chunks_skipped > 100
    assert skipped[1] + t.scan_blocks_skipped > 10
    m.close()


def test_blocks_and_chunks_are_skipped_by_min_max_and_key_predicates(tmp_path):
    m = manager(tmp_path / "root", chunk_rows=10)
    t = create(m, "t1", SCHEMA)
    for step in range(4):  # block `step`: keys [100 step, 100 step + 100), v = step
        write(
            t,
            OpType.INSERT,
            {k: (step, f"s{step}", 0.5) for k in range(step * 100, step * 100 + 100)},
        )
        assert t.flush()
    assert [len(b.chunk_stats) for b in t.blocks] == [10, 10, 10, 10]

    def counts():
        return t.scan_chunks_total, t.scan_chunks_skipped, t.scan_blocks_skipped

    before = counts()
    got, _ = scan(t, [("v", PredicateOp.EQ, [2])])
    assert sorted(got) == list(range(200, 300))
    total, chunks, blocks = (a - b for a, b in zip(counts(), before, strict=True))
    assert (total, chunks, blocks) == (40, 30, 3)
    # A key predicate skips chunks inside a block; IN and a range of two predicates too.
    before = counts()
    got, _ = scan(t, [("k", PredicateOp.GE, [135]), ("k", PredicateOp.LT, [150])])
    assert sorted(got) == list(range(135, 150))
    assert counts()[1] - before[1] == 38
    before = counts()
    got, _ = scan(t, [("v", PredicateOp.IN, [0, 3]), ("s", PredicateOp.GE, ["s3"])])
    assert sorted(got) == list(range(300, 400))
    assert counts()[2] - before[2] == 3
    # Key bounds skip chunks and blocks likewise (those outside are not even counted).
    before = counts()
    got, _ = scan(t, [], lower=5, upper=12)
    assert sorted(got) == list(range(5, 12))
    assert counts()[0] - before[0] == 10 and counts()[1] - before[1] == 8
    # IS NULL: no chunk holds a null v.
    before = counts()
    assert scan(t, [("v", PredicateOp.IS_NULL, [])])[0] == {}
    assert counts()[2] - before[2] == 4
    m.close()


def test_a_newer_version_missing_the_predicate_is_read_while_an_older_one_is(tmp_path):
    """Key 5 has v=100 in the older block and v=1 in the newer one: `v >= 50` must not
    return it. Skipping the newer block by its min/max alone would let v=100 through."""
    m = manager(tmp_path / "root", chunk_rows=10)
    t = create(m, "t1", SCHEMA)
    write(t, OpType.INSERT, {k: (100, "old", 1.0) for k in range(10)})
    assert t.flush()
    write(t, OpType.UPSERT, {5: (1, "new", 1.0), 7: (1, "new", 1.0)})
    assert t.flush()
    want = {k: (100, "old", 1.0) for k in range(10) if k not in (5, 7)}
    got, _ = scan(t, [("v", PredicateOp.GE, [50])])
    assert got == want
    # With a third, newer block whose keys no older block holds, that one is skipped.
    write(t, OpType.INSERT, {k: (1, "x", 1.0) for k in range(500, 510)})
    assert t.flush()
    before = t.scan_blocks_skipped
    got, _ = scan(t, [("v", PredicateOp.GE, [50])])
    assert got == want
    assert t.scan_blocks_skipped - before == 1
    # Once the old versions are gone (a full compaction), v=1 rows skip with their chunk.
    assert t.compact()
    got, _ = scan(t, [("v", PredicateOp.GE, [50])])
    assert got == want
    m.close()


def test_stats_files_are_rebuilt_when_missing_or_bad(tmp_path):
    root = tmp_path / "root"
    m = manager(root, chunk_rows=10)
    t = create(m, "t1", SCHEMA)
    for step in range(3):
        write(t, OpType.INSERT, {k: (step, "s", 0.5) for k in range(step * 50, step * 50 + 50)})
        assert t.flush()
    names = [b.name for b in t.blocks]
    data_dir = m.fs.data_dir("t1")
    good = (data_dir / stats_name(names[0])).read_bytes()
    m.close()
    (data_dir / stats_name(names[0])).unlink()
    (data_dir / stats_name(names[1])).write_bytes(b'{"format": "lcst", "version": 99}')
    (data_dir / stats_name(names[2])).write_bytes(b"\x00torn")
    m = manager(root, chunk_rows=10)
    t = m.tablet("t1")
    t.wait_leader_ready(deadline(30))
    assert (data_dir / stats_name(names[0])).read_bytes() == good
    for n in names:
        assert (data_dir / stats_name(n)).read_bytes().startswith(b'{"format":"lcst"')
    before = t.scan_blocks_skipped
    got, _ = scan(t, [("v", PredicateOp.EQ, [1])])
    assert sorted(got) == list(range(50, 100))
    assert t.scan_blocks_skipped - before == 2
    m.close()


def test_a_stats_file_whose_values_were_changed_is_rebuilt(tmp_path):
    """A stats file that is valid JSON of the right shape but whose numbers changed (a bit
    flip in a digit, an edit) fails its checksum and is rebuilt: before the checksum, a max
    lowered to the min made `v == 1` skip the chunk that holds those rows (rows lost)."""
    root = tmp_path / "root"
    m = manager(root, chunk_rows=10)
    t = create(m, "t1", SCHEMA)
    write(t, OpType.INSERT, {k: (k % 3, "s", 0.5) for k in range(30)})  # v in 0..2 per chunk
    assert t.flush()
    name = t.blocks[0].name
    data_dir = m.fs.data_dir("t1")
    good = (data_dir / stats_name(name)).read_bytes()
    m.close()
    doc = json.loads(good)
    for chunk in doc["chunks"]:
        for col in chunk["cols"].values():
            if col[0] == 0 and col[1] == 2:  # the v column: [0, 2, 0] -> [0, 0, 0]
                col[1] = 0
    edited = json.dumps(doc, separators=(",", ":")).encode()
    assert edited != good
    (data_dir / stats_name(name)).write_bytes(edited)
    m = manager(root, chunk_rows=10)
    t = m.tablet("t1")
    t.wait_leader_ready(deadline(30))
    got, _ = scan(t, [("v", PredicateOp.EQ, [1])])
    assert sorted(got) == [k for k in range(30) if k % 3 == 1]
    assert (data_dir / stats_name(name)).read_bytes() == good
    m.close()
