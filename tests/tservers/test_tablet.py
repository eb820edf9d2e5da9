"""Tablet storage: operations, atomic batches, scans, flush, compaction, replay, schema change."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from rpc.errors import (
    AlreadyExists,
    BadRequest,
    NotFound,
    SchemaVersionMismatch,
    TabletNotFound,
)
from rpc.protocols.tserver_pb2 import (
    ColumnSchemaPB,
    DataType,
    OpType,
    PredicateOp,
    PredicatePB,
    SchemaPB,
    ValuePB,
)
from tests.tservers.helpers import create, deadline, ipc, keys, open_manager, six_rows
from tservers.tablet.tablet import compaction_run


def scan(t, projection=(), predicates=(), lower=(), upper=(), limit=0) -> pa.Table:
    return t.scan(list(projection), list(predicates), list(lower), list(upper), limit)


def P(col, op, *vals) -> PredicatePB:
    vp = []
    for v in vals:
        if isinstance(v, bool):
            vp.append(ValuePB(bool_value=v))
        elif isinstance(v, int):
            vp.append(ValuePB(int_value=v))
        elif isinstance(v, float):
            vp.append(ValuePB(double_value=v))
        else:
            vp.append(ValuePB(string_value=v))
    return PredicatePB(column=col, op=op, values=vp)


@pytest.fixture
def mgr(tmp_path):
    m = open_manager(tmp_path / "root")
    yield m
    m.close()


def test_insert_upsert_update_delete(mgr):
    t = create(mgr)
    t.write(1, [(OpType.INSERT, ipc(six_rows(range(10))))], deadline())
    with pytest.raises(AlreadyExists, match="key 3"):
        t.write(1, [(OpType.INSERT, ipc(six_rows([3])))], deadline())
    t.write(1, [(OpType.UPSERT, ipc(six_rows([3, 10])))], deadline())
    t.write(
        1,
        [(OpType.UPDATE, ipc(pa.table({"id": pa.array([4], pa.int64()), "s": ["four"]})))],
        deadline(),
    )
    with pytest.raises(NotFound, match="key 99"):
        t.write(1, [(OpType.UPDATE, ipc(pa.table({"id": pa.array([99], pa.int64())})))], deadline())
    t.write(1, [(OpType.DELETE, ipc(pa.table({"id": pa.array([5], pa.int64())})))], deadline())
    with pytest.raises(NotFound):
        t.write(1, [(OpType.DELETE, ipc(pa.table({"id": pa.array([5], pa.int64())})))], deadline())
    r = scan(t)
    assert keys(r) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]
    row4 = r.filter(pa.compute.equal(r["id"], 4)).to_pylist()[0]
    assert row4["s"] == "four" and row4["n"] == 4  # update kept the other columns


def test_batch_is_atomic(mgr):
    t = create(mgr)
    t.write(1, [(OpType.INSERT, ipc(six_rows([5])))], deadline())
    before = scan(t)
    # The duplicate is in the middle of the second block: nothing of the batch may apply.
    with pytest.raises(AlreadyExists):
        t.write(
            1,
            [(OpType.UPSERT, ipc(six_rows([100]))), (OpType.INSERT, ipc(six_rows([1, 2, 5, 7])))],
            deadline(),
        )
    assert scan(t).equals(before)
    # Rows of one batch see each other, in order.
    t.write(
        1,
        [
            (OpType.INSERT, ipc(six_rows([1]))),
            (OpType.DELETE, ipc(pa.table({"id": pa.array([1], pa.int64())}))),
            (OpType.INSERT, ipc(six_rows([1]))),
        ],
        deadline(),
    )
    assert keys(scan(t)) == [1, 5]


def test_bad_writes_change_nothing(mgr):
    t = create(mgr)
    t.write(1, [(OpType.INSERT, ipc(six_rows([1])))], deadline())
    before = scan(t)
    cases = [
        (1, [(OpType.INSERT, ipc(pa.table({"id": pa.array(["x"])})))], "write has string"),
        (
            1,
            [(OpType.INSERT, ipc(pa.table({"id": pa.array([2], pa.int64()), "zz": [1]})))],
            "unknown column",
        ),
        (
            1,
            [(OpType.INSERT, ipc(pa.table({"n": pa.array([2], pa.int32())})))],
            "key column 'id' missing",
        ),
        (
            1,
            [(OpType.INSERT, ipc(pa.table({"id": pa.array([None, 3], pa.int64())})))],
            "not nullable",
        ),
        (1, [(OpType.INSERT, b"garbage")], "undecodable"),
        (1, [(99, ipc(six_rows([3])))], "unknown operation"),
        (1, [], "no rows"),
    ]
    with pytest.raises(SchemaVersionMismatch, match="schema mismatch"):
        t.write(2, [(OpType.INSERT, ipc(six_rows([2])))], deadline())
    for version, blocks, msg in cases:
        with pytest.raises(BadRequest, match=msg):
            t.write(version, blocks, deadline())
    with pytest.raises(BadRequest, match="exceeds"):
        t.write(1, [(OpType.INSERT, ipc(six_rows(range(2, 100_003))))], deadline())
    assert scan(t).equals(before)
    with pytest.raises(TabletNotFound):
        mgr.tablet("nope")


def test_scans(mgr):
    t = create(mgr)
    t.write(1, [(OpType.INSERT, ipc(six_rows(range(100))))], deadline())
    t.write(
        1,
        [
            (
                OpType.UPDATE,
                ipc(
                    pa.table(
                        {
                            "id": pa.array([7, 8], pa.int64()),
                            "s": pa.array([None, None], pa.string()),
                        }
                    )
                ),
            )
        ],
        deadline(),
    )
    t.flush()
    t.write(1, [(OpType.INSERT, ipc(six_rows(range(100, 120))))], deadline())
    assert keys(scan(t, predicates=[P("id", PredicateOp.LT, 3)])) == [0, 1, 2]
    # A value the column's type cannot hold: BAD_REQUEST, not an internal error.
    with pytest.raises(BadRequest, match="does not fit column 'n'"):
        scan(t, predicates=[P("n", PredicateOp.LT, 2**40)])
    with pytest.raises(BadRequest, match="do not fit column 'n'"):
        scan(t, predicates=[P("n", PredicateOp.IN, 1, 2**40)])
    assert keys(scan(t, predicates=[P("id", PredicateOp.LE, 3)])) == [0, 1, 2, 3]
    assert keys(scan(t, predicates=[P("id", PredicateOp.GT, 117)])) == [118, 119]
    assert keys(scan(t, predicates=[P("id", PredicateOp.GE, 118)])) == [118, 119]
    assert keys(scan(t, predicates=[P("id", PredicateOp.EQ, 50)])) == [50]
    assert keys(scan(t, predicates=[P("s", PredicateOp.IN, "s3", "s105", "zz")])) == [3, 105]
    assert keys(scan(t, predicates=[P("s", PredicateOp.IS_NULL)])) == [7, 8]
    assert len(scan(t, predicates=[P("s", PredicateOp.IS_NOT_NULL)])) == 118
    both = scan(
        t,
        predicates=[
            P("id", PredicateOp.GE, 10),
            P("b", PredicateOp.EQ, True),
            P("x", PredicateOp.LT, 8.0),
        ],
    )
    assert keys(both) == [10, 12, 14]
    r = scan(
        t, projection=["s", "id"], lower=[ValuePB(int_value=98)], upper=[ValuePB(int_value=101)]
    )
    assert r.column_names == ["s", "id"] and keys(r) == [98, 99, 100]
    assert len(scan(t, limit=5)) == 5
    ts = scan(t, projection=["ts"], predicates=[P("id", PredicateOp.EQ, 1)])
    assert ts.column("ts").cast(pa.int64()).to_pylist() == [1_700_000_000_000_001]
    with pytest.raises(BadRequest, match="unknown column"):
        scan(t, projection=["nope"])
    with pytest.raises(BadRequest, match="integer"):
        scan(t, predicates=[P("id", PredicateOp.EQ, "x")])


def test_composite_key_ranges(mgr):
    schema = SchemaPB(
        columns=[
            ColumnSchemaPB(name="a", type=DataType.STRING, is_key=True),
            ColumnSchemaPB(name="b", type=DataType.INT32, is_key=True),
            ColumnSchemaPB(name="v", type=DataType.BINARY, nullable=True),
        ]
    )
    t = create(mgr, "c1", schema)
    rows = pa.table(
        {
            "a": ["x", "x", "x", "y", "y"],
            "b": pa.array([1, 2, 3, 1, 2], pa.int32()),
            "v": [b"1", b"2", b"3", b"4", None],
        }
    )
    t.write(1, [(OpType.INSERT, ipc(rows))], deadline())
    with pytest.raises(AlreadyExists, match="'x', 2"):
        t.write(1, [(OpType.INSERT, ipc(rows.slice(1, 1)))], deadline())
    r = scan(
        t,
        lower=[ValuePB(string_value="x"), ValuePB(int_value=2)],
        upper=[ValuePB(string_value="y"), ValuePB(int_value=2)],
    )
    assert list(zip(r["a"].to_pylist(), r["b"].to_pylist(), strict=True)) == [
        ("x", 2),
        ("x", 3),
        ("y", 1),
    ]
    t.flush()
    t.write(
        1,
        [(OpType.DELETE, ipc(pa.table({"a": ["x"], "b": pa.array([3], pa.int32())})))],
        deadline(),
    )
    assert len(scan(t)) == 4


def delete_ids(t, ids: list[int], model: dict) -> None:
    t.write(1, [(OpType.DELETE, ipc(pa.table({"id": pa.array(ids, pa.int64())})))], deadline())
    for i in ids:
        del model[i]


def write_valid(t, op, ids: list[int], model: dict, step: int) -> bool:
    """Write `op` for those of `ids` it is valid for (INSERT: absent; UPDATE and DELETE:
    present), to the tablet and the model; False when none is."""
    if op == OpType.INSERT:
        ids = [i for i in ids if i not in model]
    elif op in (OpType.UPDATE, OpType.DELETE):
        ids = [i for i in ids if i in model]
    if not ids:
        return False
    if op == OpType.DELETE:
        delete_ids(t, ids, model)
        return True
    vals = [f"v{step}-{i}" for i in ids]
    t.write(1, [(op, ipc(pa.table({"id": pa.array(ids, pa.int64()), "s": vals})))], deadline())
    model.update(zip(ids, vals, strict=True))
    return True


def test_model_check_across_flush_compaction_restart(tmp_path):
    """Random operations against a dict model; state must match after every stage."""
    rng = random.Random(7)
    root = tmp_path / "root"
    m = open_manager(root)
    t = create(m)
    model: dict[int, str] = {}
    for step in range(60):
        ids = rng.sample(range(400), 15)
        op = rng.choice([OpType.INSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE])
        if not write_valid(t, op, ids, model, step):
            continue
        if step % 15 == 14:
            t.flush()
        if step == 50:
            assert t.compact()

    def check(tab) -> None:
        r = scan(tab, projection=["id", "s"])
        assert dict(zip(r["id"].to_pylist(), r["s"].to_pylist(), strict=True)) == model

    check(t)
    m.close()
    m = open_manager(root)  # blocks + WAL replay of what was not flushed
    t = m.tablet("t1")
    check(t)
    t.flush()
    t.compact()
    m.close()
    m = open_manager(root)
    check(m.tablet("t1"))
    m.close()


def test_compaction_run_is_size_tiered():
    base = 100
    assert compaction_run([100, 100, 100], 4, base) is None
    assert compaction_run([100, 100, 100, 100], 4, base) == 0
    # A big old block is not rewritten for a few small new ones...
    assert compaction_run([400, 100, 100, 100], 4, base) is None
    assert compaction_run([400, 100, 100, 100, 100], 4, base) == 1
    # ...until its own class has piled up, small ones newer than them joining in.
    assert compaction_run([1600, 400, 400, 400, 400, 50], 4, base) == 1
    assert compaction_run([1600, 1600, 1600, 1600], 4, base) == 0
    # Smaller classes go first.
    assert compaction_run([400, 400, 400, 400, 10, 20, 30, 40], 4, base) == 4
    # Out of order (a merge that shrank by tombstones) still terminates in a merge.
    assert compaction_run([400, 10, 400, 400, 400], 4, base) == 0


def test_tiered_compaction_rewrites_rows_a_logarithmic_number_of_times():
    """Simulated flushes of `base` rows: rows rewritten by compactions stay within
    log_fanout(rows / base) passes, and the blocks stay few."""
    base, fanout, flushes = 100, 4, 4**4
    blocks: list[int] = []
    rewritten = 0
    for _ in range(flushes):
        blocks.append(base)
        while (start := compaction_run(blocks, fanout, base)) is not None:
            rewritten += sum(blocks[start:])
            blocks[start:] = [sum(blocks[start:])]
        assert len(blocks) <= (fanout - 1) * 5
    assert blocks == [base * flushes]
    assert rewritten == 4 * base * flushes  # one pass per class: 4 classes above the base


def test_model_check_of_tiered_compaction(tmp_path):
    """Random writes, a flush every few, a tiered compaction after each: partial runs keep
    the tombstones that hide rows of older blocks. Checked against a dict model after every
    compaction and across restarts."""
    rng = random.Random(11)
    root = tmp_path / "root"
    m = open_manager(root, flush_rows=30)
    t = create(m)
    model: dict[int, str] = {}
    partial = full = 0

    def check(tab) -> None:
        r = scan(tab, projection=["id", "s"])
        assert dict(zip(r["id"].to_pylist(), r["s"].to_pylist(), strict=True)) == model
        lo, hi = sorted(rng.sample(range(300), 2))
        r = scan(
            tab, projection=["id"], lower=[ValuePB(int_value=lo)], upper=[ValuePB(int_value=hi)]
        )
        assert r["id"].to_pylist() == sorted(k for k in model if lo <= k < hi)

    for step in range(240):
        ids = rng.sample(range(300), rng.randint(1, 12))
        op = rng.choice([OpType.INSERT, OpType.UPSERT, OpType.DELETE, OpType.DELETE])
        if not write_valid(t, op, ids, model, step):
            continue
        if step % 3 == 2:
            t.flush()
            before = len(t.blocks)
            while t.compact(tiered=True):
                if len(t.blocks) == 1:
                    full += 1
                else:
                    partial += 1
                check(t)
            assert len(t.blocks) <= before
        if step % 80 == 79:
            m.close()
            m = open_manager(root, flush_rows=30)
            t = m.tablet("t1")
            check(t)
    assert partial >= 5 and full >= 1, (partial, full)
    check(t)
    m.close()


def test_model_check_of_memstore_row_blocks(tmp_path):
    """An INSERT-only write whose keys are all new is kept as Arrow row blocks under the
    memstore dict, at the leader and when applied as a follower (here: replayed at start-up).
    Updates reading rows from such blocks, deletes, re-inserts of deleted keys, multi-block
    writes, scans, flushes (one failing half-way) and restarts over them must match a dict
    model at every stage."""
    rng = random.Random(11)
    root = tmp_path / "root"
    m = open_manager(root)
    t = create(m)
    model: dict[int, tuple] = {}  # id -> (s, n)
    seen_blocks = 0
    unindexed_seen = 0

    def check(tab) -> None:
        r = scan(tab, projection=["id", "s", "n"])
        assert r["id"].to_pylist() == sorted(model), set(r["id"].to_pylist()) ^ set(model)
        got = zip(r["id"].to_pylist(), r["s"].to_pylist(), r["n"].to_pylist(), strict=True)
        assert {i: (s, n) for i, s, n in got} == model
        lo, hi = 100, 300
        r = scan(
            tab, projection=["id"], lower=[ValuePB(int_value=lo)], upper=[ValuePB(int_value=hi)]
        )
        assert r["id"].to_pylist() == [k for k in sorted(model) if lo <= k < hi]

    def write(tab, step: int) -> None:
        op = rng.choice([OpType.INSERT] * 3 + [OpType.UPSERT, OpType.UPDATE, OpType.DELETE])
        pool = rng.sample(range(400), 30)
        if op == OpType.INSERT:
            ids = [i for i in pool if i not in model][:20]
            if not ids:
                return
            half = len(ids) // 2
            vals = [f"i{step}-{i}" for i in ids]
            blocks = [
                (
                    OpType.INSERT,
                    ipc(
                        pa.table(
                            {
                                "id": pa.array(part, pa.int64()),
                                "s": v,
                                "n": pa.array([step] * len(part), pa.int32()),
                            }
                        )
                    ),
                )
                for part, v in ((ids[:half], vals[:half]), (ids[half:], vals[half:]))
                if part
            ]
            tab.write(1, blocks, deadline())
            model.update((i, (v, step)) for i, v in zip(ids, vals, strict=True))
            return
        ids = [i for i in pool if i in model][:10] if op != OpType.UPSERT else pool[:10]
        if not ids:
            return
        if op == OpType.DELETE:
            delete_ids(tab, ids, model)
            return
        vals = [f"{OpType.Name(op)[0]}{step}-{i}" for i in ids]
        tab.write(
            1, [(op, ipc(pa.table({"id": pa.array(ids, pa.int64()), "s": vals})))], deadline()
        )
        for i, v in zip(ids, vals, strict=True):
            # UPDATE keeps the row's other columns; UPSERT replaces the row (n null).
            model[i] = (v, model[i][1] if op == OpType.UPDATE else None)

    for stage in range(8):
        for step in range(12):
            write(t, stage * 100 + step)
        check(t)
        m.close()
        m = open_manager(root)  # replay: the entries above the flushed index, as a follower
        t = m.tablet("t1")
        seen_blocks += len(t.mem_batches)
        # Replayed as a follower applies: row blocks of new keys, indexed only when a
        # lookup needs them; every key of the model found live, a deleted one not.
        with t.lock:
            unindexed_seen += len(t.mem_batches.tables) - t.mem_batches._indexed
            probe = set(model) | set(range(-3, 0))
            found = t._locate_locked(probe)
            assert {k for k, v in found.items() if v is not None} == set(model)
        check(t)
        if model:
            again = min(model)
            row = pa.table({"id": pa.array([again], pa.int64()), "s": ["dup"]})
            with pytest.raises(AlreadyExists):
                t.write(1, [(OpType.INSERT, ipc(row))], deadline())
        for step in range(6):  # now at the leader, over the row blocks
            write(t, stage * 100 + 50 + step)
        check(t)
        if stage == 4:
            real = t._write_block
            gone = next(iter(model))
            t.write(
                1,
                [(OpType.DELETE, ipc(pa.table({"id": pa.array([gone], pa.int64())})))],
                deadline(),
            )
            del model[gone]

            def broken(name, table, tab=t, gone=gone):
                # A follower's entry applied while the flush runs: re-inserts a key whose
                # tombstone is in the dict being flushed.
                again = [
                    (
                        OpType.INSERT,
                        ipc(pa.table({"id": pa.array([gone], pa.int64()), "s": ["again"]})),
                    )
                ]
                with tab.lock:
                    [(ks, block)] = tab._insert_blocks(again, lenient=False)
                    assert tab._all_new([(ks, block)], {})
                    tab._apply_batch(ks, block)
                model[gone] = ("again", None)
                raise OSError("disk full (test)")

            t._write_block = broken
            with pytest.raises(OSError, match="disk full"):
                t.flush()
            t._write_block = real
            check(t)
            # That insert was not logged (the test applied it by hand): log the key's row.
            up = pa.table({"id": pa.array([gone], pa.int64()), "s": ["logged"]})
            t.write(1, [(OpType.UPSERT, ipc(up))], deadline())
            model[gone] = ("logged", None)
            write(t, 999)
            check(t)
        if stage % 3 == 2:
            assert t.flush()
            check(t)
    assert seen_blocks > 10
    assert unindexed_seen > 10
    assert t.compact()
    check(t)
    m.close()
    m = open_manager(root)
    check(m.tablet("t1"))
    m.close()


def test_writes_over_an_insert_still_in_flight(tmp_path):
    """An INSERT of new keys waits, as a row block, for its WAL write (held here); writes
    proposed meanwhile validate against it: an UPDATE reads the row from the block, an
    INSERT of one of its keys is refused, a DELETE then an INSERT of a key goes through."""
    import threading

    root = tmp_path / "root"
    m = open_manager(root)
    t = create(m)
    gate = threading.Event()
    real_append = m.appender.append

    def held_append(tablet_log, entries, callback, **kw):
        def done(err):
            gate.wait(30)  # the appender thread waits: every later WAL write waits too
            callback(err)

        real_append(tablet_log, entries, done, **kw)

    m.appender.append = held_append
    errors: list[BaseException] = []

    def bg(fn) -> threading.Thread:
        def run():
            try:
                fn()
            except BaseException as e:  # reported by the test
                errors.append(e)

        th = threading.Thread(target=run)
        th.start()
        return th

    def pending(k) -> object:
        with t.lock:
            p = t.pending.get(k, (None, "absent"))
            return p[1]

    def wait_pending(k, pred) -> None:
        for _ in range(2000):
            if pred(pending(k)):
                return
            gate.wait(0.005)
        raise AssertionError(f"key {k} never pending as expected: {pending(k)!r}")

    rows = pa.table(
        {
            "id": pa.array(range(10), pa.int64()),
            "n": pa.array(range(10), pa.int32()),
            "s": [f"a{i}" for i in range(10)],
        }
    )
    threads = [bg(lambda: t.write(1, [(OpType.INSERT, ipc(rows))], deadline(30)))]
    wait_pending(5, lambda v: isinstance(v, pa.Table))  # in flight, as a row block
    upd = pa.table({"id": pa.array([5], pa.int64()), "s": ["u5"]})
    threads.append(bg(lambda: t.write(1, [(OpType.UPDATE, ipc(upd))], deadline(30))))
    wait_pending(5, lambda v: isinstance(v, tuple))  # the UPDATE's row, n from the block
    assert pending(5)[1] == 5 and pending(5)[3] == "u5"
    with pytest.raises(AlreadyExists, match="key 3"):
        t.write(1, [(OpType.INSERT, ipc(six_rows([3])))], deadline())
    dele = pa.table({"id": pa.array([7], pa.int64())})
    threads.append(bg(lambda: t.write(1, [(OpType.DELETE, ipc(dele))], deadline(30))))
    wait_pending(7, lambda v: v is None)
    again = pa.table({"id": pa.array([7], pa.int64()), "n": pa.array([70], pa.int32())})
    threads.append(bg(lambda: t.write(1, [(OpType.INSERT, ipc(again))], deadline(30))))
    wait_pending(7, lambda v: isinstance(v, tuple))
    assert scan(t).num_rows == 0  # nothing durable, nothing applied
    gate.set()
    for th in threads:
        th.join(60)
    assert not errors, errors
    want = {i: (i, f"a{i}") for i in range(10)}
    want[5] = (5, "u5")
    want[7] = (70, None)

    def check(tab) -> None:
        r = scan(tab, projection=["id", "n", "s"])
        got = zip(r["id"].to_pylist(), r["n"].to_pylist(), r["s"].to_pylist(), strict=True)
        assert {i: (n, s) for i, n, s in got} == want

    check(t)
    assert not t.pending
    m.close()
    m = open_manager(root)
    check(m.tablet("t1"))
    m.close()


def test_row_blocks_with_a_composite_key(tmp_path):
    schema = SchemaPB(
        columns=[
            ColumnSchemaPB(name="a", type=DataType.STRING, is_key=True),
            ColumnSchemaPB(name="b", type=DataType.INT32, is_key=True),
            ColumnSchemaPB(name="v", type=DataType.INT64, nullable=True),
            ColumnSchemaPB(name="ts", type=DataType.TIMESTAMP, nullable=True),
        ]
    )
    root = tmp_path / "root"
    m = open_manager(root)
    t = create(m, "c1", schema)
    rows = pa.table({"a": ["y", "x", "x"], "b": pa.array([1, 2, 1], pa.int32())})
    t.write(1, [(OpType.INSERT, ipc(rows))], deadline())
    m.close()
    m = open_manager(root)
    t = m.tablet("c1")
    assert len(t.mem_batches) == 1  # replayed as one row block: v and ts null
    with t.lock:  # its keys read from the row block when a lookup needs them
        assert t.mem_batches._indexed == 0
        found = t._locate_locked({("y", 1), ("x", 2), ("x", 1), ("x", 3)})
        assert {k for k, v in found.items() if v is not None} == {("y", 1), ("x", 2), ("x", 1)}
        assert t.mem_batches._indexed == 1
    r = scan(t)
    assert list(zip(r["a"].to_pylist(), r["b"].to_pylist(), strict=True)) == [
        ("x", 1),
        ("x", 2),
        ("y", 1),
    ]
    with pytest.raises(AlreadyExists, match="'x', 1"):
        t.write(1, [(OpType.INSERT, ipc(rows.slice(2, 1)))], deadline())
    upd = pa.table({"a": ["x"], "b": pa.array([2], pa.int32()), "v": pa.array([7], pa.int64())})
    t.write(1, [(OpType.UPDATE, ipc(upd))], deadline())
    r = scan(t)
    assert list(zip(r["a"].to_pylist(), r["b"].to_pylist(), r["v"].to_pylist(), strict=True)) == [
        ("x", 1, None),
        ("x", 2, 7),
        ("y", 1, None),
    ]
    assert t.flush()
    r = scan(t, lower=[ValuePB(string_value="x"), ValuePB(int_value=2)])
    assert r["v"].to_pylist() == [7, None]
    m.close()
    m = open_manager(root)  # a flush of one row block alone: a block sorted by key
    t = m.tablet("c1")
    more = pa.table({"a": ["z", "w"], "b": pa.array([1, 1], pa.int32())})
    t.write(1, [(OpType.INSERT, ipc(more))], deadline())
    m.close()
    m = open_manager(root)
    t = m.tablet("c1")
    assert len(t.mem_batches) == 1 and not t.memstore
    assert t.flush()
    r = scan(t, upper=[ValuePB(string_value="y"), ValuePB(int_value=0)])
    assert list(zip(r["a"].to_pylist(), r["b"].to_pylist(), strict=True)) == [
        ("w", 1),
        ("x", 1),
        ("x", 2),
    ]
    m.close()


def test_flush_deletes_old_wal_segments(tmp_path):
    m = open_manager(tmp_path / "root", segment_bytes=64 << 10)
    t = create(m)
    for b in range(20):
        t.write(1, [(OpType.INSERT, ipc(six_rows(range(b * 500, (b + 1) * 500))))], deadline())
    n_before = t.wal.segment_count()
    assert n_before > 3
    t.flush()
    assert t.wal.segment_count() < n_before
    assert t.sb.flushed_index == t.applied_index
    m.close()


def test_alter_schema(tmp_path):
    root = tmp_path / "root"
    m = open_manager(root)
    t = create(m)
    t.write(1, [(OpType.INSERT, ipc(six_rows(range(5))))], deadline())
    new = m.alter_schema(
        "t1",
        1,
        [ColumnSchemaPB(name="extra", type=DataType.STRING, nullable=True)],
        ["s"],
        deadline(),
    )
    assert new.version == 2
    with pytest.raises(SchemaVersionMismatch, match="schema mismatch"):
        t.write(1, [(OpType.INSERT, ipc(six_rows([9])))], deadline())
    t.write(
        2,
        [(OpType.UPSERT, ipc(pa.table({"id": pa.array([1], pa.int64()), "extra": ["e"]})))],
        deadline(),
    )
    r = scan(t)
    assert "s" not in r.column_names and r["extra"].to_pylist() == [None, "e", None, None, None]
    with pytest.raises(BadRequest, match="key"):
        m.alter_schema("t1", 2, [], ["id"], deadline())
    with pytest.raises(BadRequest, match="nothing to alter"):
        m.alter_schema("t1", 0, [], [], deadline())
    assert t.sb.schema.version == 2
    with pytest.raises(BadRequest, match="nullable"):
        m.alter_schema("t1", 2, [ColumnSchemaPB(name="q", type=DataType.INT64)], [], deadline())
    # Re-adding a dropped name does not bring the old data back.
    m.alter_schema(
        "t1", 2, [ColumnSchemaPB(name="s", type=DataType.STRING, nullable=True)], [], deadline()
    )
    assert scan(t, projection=["s"])["s"].null_count == 5
    m.close()
    m = open_manager(root)
    r = scan(m.tablet("t1"))
    assert r["extra"].to_pylist()[1] == "e" and m.tablet("t1").schema.version == 3
    m.close()


def test_concurrent_writers_see_in_flight_writes(mgr):
    """Validation sees writes queued to the WAL but not yet durable: one insert of a key wins."""
    import threading

    t = create(mgr)
    outcomes: list[str] = []
    lock = threading.Lock()

    def writer(k: int) -> None:
        for b in range(20):
            try:
                t.write(
                    1, [(OpType.INSERT, ipc(six_rows(range(b * 50, b * 50 + 50))))], deadline(30)
                )
                res = "ok"
            except AlreadyExists:
                res = "dup"
            t.write(
                1,
                [
                    (
                        OpType.INSERT,
                        ipc(
                            six_rows(
                                range(10_000 + k * 1000 + b * 10, 10_000 + k * 1000 + b * 10 + 10)
                            )
                        ),
                    )
                ],
                deadline(30),
            )
            with lock:
                outcomes.append(res)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert outcomes.count("ok") == 20 and outcomes.count("dup") == 100
    assert len(scan(t)) == 20 * 50 + 6 * 20 * 10


@pytest.mark.parametrize("seed", range(4))
def test_newest_versions_keeps_the_last_part_of_each_key(seed):
    """The merge of flushes, compactions and scans against a dict model: parts oldest first,
    keys unique within a part and repeated across parts, single and composite keys."""
    from tservers.tablet.tablet import newest_versions

    rng = random.Random(seed)
    composite = seed % 2 == 1
    model: dict = {}
    parts = []
    for g in range(rng.randint(1, 12)):
        ks = rng.sample(range(60), rng.randint(0, 25))
        if composite:
            ks = [(f"k{k % 7}", k // 7) for k in ks]
        for k in ks:
            model[k] = g
        cols = {"g": pa.array([g] * len(ks), pa.int32())}
        if composite:
            cols = {"a": [k[0] for k in ks], "b": pa.array([k[1] for k in ks], pa.int32()), **cols}
        else:
            cols = {"id": pa.array(ks, pa.int64()), **cols}
        parts.append(pa.table(cols))
    key_names = ["a", "b"] if composite else ["id"]
    got = newest_versions(parts, key_names).to_pylist()
    got_keys = [(r["a"], r["b"]) if composite else r["id"] for r in got]
    assert got_keys == sorted(model)
    assert [r["g"] for r in got] == [model[k] for k in got_keys]
