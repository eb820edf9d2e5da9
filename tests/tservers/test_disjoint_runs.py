"""Key-disjoint runs (design/storage.md, "Key-disjoint runs"): a compaction writes its output
as a sorted run of blocks of at most `run_block_rows` rows with disjoint key ranges, and an
existence check or point read asks one block per run. Against the dict model of
test_storage_model with runs of many blocks; today's superblocks (a block per run) open and
read; a batch of keys is checked against about one block per run."""

from __future__ import annotations

import random
import threading
import time

import pytest

from rpc.errors import TabletFailed
from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create
from tests.tservers.test_storage_model import (
    INT_KEY,
    PAIR_KEY,
    Shape,
    apply_model,
    check,
    scan,
    write,
)
from tservers.fs import FsLayout
from tservers.tablet import blockindex
from tservers.tablet import tablet as tablet_mod
from tservers.tablet.blockindex import BlockIndex, check_runs, run_of, runs_of
from tservers.tablet.compaction import CompactionOptions, CompactionScheduler
from tservers.tablet.manager import TabletManager
from tservers.tablet.tablet import TabletOptions, TabletStatus
from tservers.wal.log import WalOptions


def open_small(root, *, run_block_rows: int = 17, fanout: int = 3) -> TabletManager:
    """A manager whose tablets write runs of blocks of `run_block_rows` rows (chunks of 5)."""
    fs = FsLayout.open(root) if (root / "instance").exists() else FsLayout.format(root)
    m = TabletManager(
        fs,
        WalOptions(segment_size_bytes_max=1 << 20),
        TabletOptions(
            flush_rows_threshold=20,
            compaction_blocks_min=fanout,
            block_chunk_rows=5,
            run_block_rows=run_block_rows,
        ),
        maintenance=False,
    )
    m.open()
    return m


@pytest.mark.parametrize(
    ("schema", "seed", "vector_min", "py_max"),
    [
        (INT_KEY, 11, 1, 512),
        (INT_KEY, 12, 64, 512),
        (PAIR_KEY, 13, 64, 512),
        (INT_KEY, 14, 1, 0),
    ],
)
def test_runs_of_many_blocks_against_a_model(
    tmp_path, monkeypatch, schema, seed, vector_min, py_max
):
    """Random inserts, upserts, updates and deletes (some refused), flushes, tiered and full
    compactions and reopenings; compactions write runs of up to 17 rows a block, so newest
    versions and tombstones sit in runs of many blocks over older runs. Every scan, streamed
    scan, point read, IN read and range equals the model; the runs stay key-disjoint."""
    # vector_min 1: every block lookup of an int key through `locate_many` (64: writes of
    # fewer keys one by one); py_max 0: its candidates confirmed with kernels per batch,
    # 512: one by one in Python.
    monkeypatch.setattr(tablet_mod, "VECTOR_KEYS_MIN", vector_min)
    monkeypatch.setattr(blockindex, "LOCATE_PY_MAX", py_max)
    rng = random.Random(seed)
    shape = Shape(schema)
    universe = [shape.key(i) for i in range(400)]
    root = tmp_path / "root"
    m = open_small(root)
    t = create(m, "t1", schema)
    model: dict = {}
    step = 0
    widest = 0  # the most blocks of one run seen
    most_runs = 0
    for _round in range(12):
        for _ in range(rng.randint(6, 16)):
            step += 1
            op = rng.choice(
                [OpType.INSERT, OpType.INSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE]
            )
            n = rng.choice([1, 5, 30, 80])
            live = [k for k in universe if k in model]
            dead = [k for k in universe if k not in model]
            bad = False
            if op == OpType.INSERT:
                keys = rng.sample(dead, min(n, len(dead)))
                if live and rng.random() < 0.15:
                    bad = True
                    keys.insert(rng.randrange(len(keys) + 1), rng.choice(live))
            elif op == OpType.UPSERT:
                keys = rng.sample(universe, n)
            else:
                keys = rng.sample(live, min(n, len(live)))
                if dead and rng.random() < 0.15:
                    bad = True
                    keys.append(rng.choice(dead))
            if not keys:
                continue
            if bad:  # one key exists (INSERT) or not (UPDATE, DELETE): nothing applies
                with pytest.raises(Exception) as e:
                    write(t, shape, op, keys, step)
                assert type(e.value).__name__ in ("AlreadyExists", "NotFound"), e.value
                continue
            write(t, shape, op, keys, step)
            apply_model(model, op, keys, step)
            event = rng.random()
            if event < 0.3:
                t.flush()
            elif event < 0.45:
                t.compact(tiered=True)
            elif event < 0.48:
                t.compact()
            assert check_runs(t.blocks) is None
            runs = runs_of(t.blocks)
            widest = max([widest] + [len(r) for r in runs])
            most_runs = max(most_runs, len(runs))
        check(t, shape, model, rng, universe)
        if rng.random() < 0.35:
            m.close()
            m = open_small(root)
            t = m.tablet("t1")
            check(t, shape, model, rng, universe)
    assert widest >= 4 and most_runs >= 3, (widest, most_runs)
    t.flush()
    t.compact()
    (run,) = runs_of(t.blocks)
    assert all(0 < b.num_rows <= 17 for b in run)
    assert sum(b.num_rows for b in run) == len(model)  # a full compaction drops tombstones
    check(t, shape, model, rng, universe)
    m.close()


def test_a_batch_is_checked_against_one_block_per_run(tmp_path, monkeypatch):
    """With a run of many blocks, an INSERT of random new keys sends each key to the one
    block of the run whose range holds it: the keys handed to `locate_many` are at most the
    batch's size per run (not per block)."""
    monkeypatch.setattr(tablet_mod, "VECTOR_KEYS_MIN", 1)
    shape = Shape(INT_KEY)
    rng = random.Random(7)
    root = tmp_path / "root"
    m = open_small(root, run_block_rows=25)
    t = create(m, "t1", INT_KEY)
    keys = rng.sample(range(0, 100_000, 2), 600)  # even keys
    for i in range(0, 600, 100):
        write(t, shape, OpType.INSERT, keys[i : i + 100], i)
        t.flush()
    assert t.compact()
    (run,) = runs_of(t.blocks)
    assert len(run) == 24  # 600 rows in blocks of 25, key-disjoint
    write(t, shape, OpType.INSERT, [1], 1000)  # a second run: one flushed block
    t.flush()
    assert len(runs_of(t.blocks)) == 2

    asked: list[tuple[str, int]] = []
    real = BlockIndex.locate_many

    def counting(self, ks, hs):
        asked.append((self.name, len(ks)))
        return real(self, ks, hs)

    monkeypatch.setattr(BlockIndex, "locate_many", counting)
    new = rng.sample(range(3, 100_000, 2), 200)  # odd keys: none exists
    write(t, shape, OpType.INSERT, new, 2000)
    # Each key to at most one block of each of the two runs; the flushed block's range
    # [1, 1] holds none of them.
    assert sum(n for _, n in asked) <= len(new)
    in_a_block = [k for k in new if any(b.min_key <= k <= b.max_key for b in run)]
    assert sum(n for name, n in asked if run_of(name) == run_of(run[0].name)) == len(in_a_block)
    assert len(in_a_block) > 150
    # And a key that exists is still found: ALREADY_EXISTS from the right block.
    with pytest.raises(Exception) as e:
        write(t, shape, OpType.INSERT, [*new[:0], 3_000_001, keys[300]], 3000)
    assert type(e.value).__name__ == "AlreadyExists"
    m.close()


def test_todays_superblock_opens_each_block_its_own_run(tmp_path):
    """A superblock written before runs lists `block-<id>.arrow` names only (flushes and
    today's compactions): each is a run of its own, reads are exact, and the next compaction
    turns them into one run of key-disjoint blocks. A superblock whose run is broken (its
    blocks overlapping) fails the tablet at open instead of answering wrong."""
    shape = Shape(INT_KEY)
    root = tmp_path / "root"
    m = open_small(root, run_block_rows=10)
    t = create(m, "t1", INT_KEY)
    model: dict = {}
    for step, keys in enumerate([list(range(0, 60, 2)), list(range(1, 60, 4)), [3, 7, 8]]):
        op = OpType.DELETE if step == 2 else OpType.INSERT
        if op == OpType.DELETE:
            keys = [k for k in keys if k in model]
        write(t, shape, op, keys, step)
        apply_model(model, op, keys, step)
        assert t.flush()
    names = [b.name for b in t.blocks]
    assert all(run_of(n) == n for n in names)  # today's names
    m.close()
    m = open_small(root, run_block_rows=10)
    t = m.tablet("t1")
    assert len(runs_of(t.blocks)) == 3
    check(t, shape, model, random.Random(1), list(range(70)))
    assert t.compact()
    (run,) = runs_of(t.blocks)
    assert [b.num_rows for b in run] == [10, 10, 10, 10, len(model) - 40]
    check(t, shape, model, random.Random(2), list(range(70)))
    m.close()
    # Break the run: list its blocks out of key order.
    sb = FsLayout.open(root).read_superblock("t1")
    sb.blocks[0], sb.blocks[1] = sb.blocks[1], sb.blocks[0]
    FsLayout.open(root).write_superblock(sb)
    m = open_small(root)
    with pytest.raises(TabletFailed, match="overlap or are out of order"):
        m.tablet("t1")
    m.close()


def test_the_newest_run_wins_over_older_runs(tmp_path):
    """Updates and deletes of keys that sit in an older run of many blocks, then a tiered
    compaction that keeps their tombstones in a newer run (not the oldest): scans and point
    reads show the newest version, and after a full compaction the deleted keys are gone."""
    shape = Shape(INT_KEY)
    root = tmp_path / "root"
    m = open_small(root, run_block_rows=8, fanout=2)
    t = create(m, "t1", INT_KEY)
    model: dict = {}
    keys = list(range(100))
    write(t, shape, OpType.INSERT, keys, 1)
    apply_model(model, OpType.INSERT, keys, 1)
    t.flush()
    for step in range(2, 5):  # three more blocks, then one run of all four
        ks = list(range(100 + step, 400, 7))
        write(t, shape, OpType.INSERT, ks, step)
        apply_model(model, OpType.INSERT, ks, step)
        t.flush()
    assert t.compact()
    old_runs = runs_of(t.blocks)
    assert len(old_runs) == 1 and len(old_runs[0]) > 10
    for step, (op, ks) in enumerate(
        [
            (OpType.UPDATE, list(range(0, 100, 3))),
            (OpType.DELETE, list(range(1, 100, 3))),
            (OpType.UPSERT, list(range(1, 100, 9))),
            (OpType.DELETE, list(range(0, 100, 6))),
        ],
        start=10,
    ):
        write(t, shape, op, ks, step)
        apply_model(model, op, ks, step)
        t.flush()
    # Four runs of one block over the big one; tiered (fanout 2) merges the two newest,
    # of size class 0 (tombstones kept: the older runs still hold the rows they hide).
    assert t.compact(tiered=True)
    runs = runs_of(t.blocks)
    assert len(runs) == 4 and len(runs[-1]) >= 2, [len(r) for r in runs]
    assert any(b.table.column("__deleted").to_pylist().count(True) for b in runs[-1])
    check(t, shape, model, random.Random(3), list(range(420)))
    assert shape.rows(scan(t)) == model
    t.compact()
    check(t, shape, model, random.Random(4), list(range(420)))
    m.close()


def _three_runs(m, shape, model) -> object:
    t = create(m, "t1", INT_KEY)
    for step in range(3):
        keys = list(range(step, 300, 3))
        write(t, shape, OpType.INSERT, keys, step)
        apply_model(model, OpType.INSERT, keys, step)
        assert t.flush()
    return t


def test_flushes_go_on_while_a_compaction_merges(tmp_path, monkeypatch):
    """A compaction holds the flush lock only to pick its runs and to commit: a write and a
    flush made while it merges finish at once (before, a merge of a large tablet held every
    flush back and the memstore grew for its whole length), and the flushed block stays
    newer than the new run."""
    shape = Shape(INT_KEY)
    root = tmp_path / "root"
    m = open_small(root, run_block_rows=40)
    model: dict = {}
    t = _three_runs(m, shape, model)
    real = tablet_mod.write_merged_run
    flushed: list = []

    def merging(*a, **kw):
        def meanwhile() -> None:
            keys = list(range(0, 300, 2))
            write(t, shape, OpType.UPSERT, keys, 50)
            apply_model(model, OpType.UPSERT, keys, 50)
            write(t, shape, OpType.DELETE, [3, 9], 51)
            apply_model(model, OpType.DELETE, [3, 9], 51)
            flushed.append(t.flush())

        th = threading.Thread(target=meanwhile)
        th.start()
        th.join(30)
        assert flushed == [True], "the flush waited for the compaction"
        return real(*a, **kw)

    monkeypatch.setattr(tablet_mod, "write_merged_run", merging)
    before = [b.name for b in t.blocks]
    assert t.compact()
    runs = runs_of(t.blocks)
    assert len(runs) == 2 and len(runs[0]) == 8 and len(runs[1]) == 1
    assert runs[1][0].name not in before  # the flush's block, after the new run
    check(t, shape, model, random.Random(8), list(range(320)))
    m.close()
    m = open_small(root, run_block_rows=40)
    check(m.tablet("t1"), shape, model, random.Random(9), list(range(320)))
    m.close()


@pytest.mark.parametrize("event", ["copy", "shutdown"])
def test_a_copy_or_shutdown_during_a_merge_drops_its_output(tmp_path, monkeypatch, event):
    """A tablet copy session that begins while a compaction merges lists the old blocks, so
    the compaction must not unlink them: it drops its output instead. A shutdown meanwhile
    stops the merge at its next slab (shutdown waits for it, and nothing is written in the
    tablet's directory afterwards)."""
    shape = Shape(INT_KEY)
    root = tmp_path / "root"
    m = open_small(root, run_block_rows=40)
    model: dict = {}
    t = _three_runs(m, shape, model)
    data_dir = m.fs.data_dir("t1")
    files = sorted(p.name for p in data_dir.iterdir())
    real = tablet_mod.write_merged_run
    stopper: list[threading.Thread] = []

    def merging(*a, **kw):
        if event == "copy":
            with t.lock:
                t.copy_anchors += 1
        else:
            th = threading.Thread(target=t.shutdown)
            th.start()
            stopper.append(th)
            deadline_s = time.monotonic() + 30
            while t.status is not TabletStatus.SHUTDOWN and time.monotonic() < deadline_s:
                time.sleep(0.01)
        return real(*a, **kw)

    monkeypatch.setattr(tablet_mod, "write_merged_run", merging)
    assert t.compact() is False
    assert sorted(p.name for p in data_dir.iterdir()) == files
    if event == "copy":
        assert len(runs_of(t.blocks)) == 3
        check(t, shape, model, random.Random(10), list(range(320)))
        with t.lock:
            t.copy_anchors -= 1
        monkeypatch.setattr(tablet_mod, "write_merged_run", real)
        assert t.compact() and len(runs_of(t.blocks)) == 1
    else:
        stopper[0].join(30)
        assert not stopper[0].is_alive()
    m.close()
    m = open_small(root, run_block_rows=40)
    check(m.tablet("t1"), shape, model, random.Random(11), list(range(320)))
    m.close()


def test_a_compaction_of_newer_runs_goes_on_beside_a_long_one(tmp_path, monkeypatch):
    """While a compaction merges the older runs, flushes add runs and a second compaction
    merges those newer ones (never the runs the first one merges) and commits first; the
    first then commits its run where its inputs are listed. Newest versions win
    throughout: updates and deletes of keys of the old runs sit in the newer ones."""
    shape = Shape(INT_KEY)
    root = tmp_path / "root"
    m = open_small(root, run_block_rows=40, fanout=3)
    model: dict = {}
    t = _three_runs(m, shape, model)
    real = tablet_mod.write_merged_run
    second: list = []
    nested: list = []

    def merging(*a, **kw):
        if nested:  # the second compaction itself
            return real(*a, **kw)
        nested.append(1)
        busy = set(t.compacting)
        assert len(busy) == 3
        for step, (op, keys) in enumerate(
            [
                (OpType.UPDATE, list(range(0, 300, 5))),
                (OpType.DELETE, list(range(1, 300, 7))),
                (OpType.INSERT, list(range(300, 330))),
            ],
            start=60,
        ):
            if op == OpType.DELETE:
                keys = [k for k in keys if k in model]
            write(t, shape, op, keys, step)
            apply_model(model, op, keys, step)
            assert t.flush()
        plan = t.compaction_plan(tiered=True)
        assert len(plan) == 3 and not busy & {b.name for r in plan for b in r}
        assert t.compaction_plan(tiered=False) == []  # no full compaction beside one
        th = threading.Thread(target=lambda: second.append(t.compact(tiered=True)))
        th.start()
        th.join(30)
        assert second == [True]
        runs = runs_of(t.blocks)
        assert len(runs) == 4 and {b.name for r in runs[:3] for b in r} == busy
        return real(*a, **kw)

    monkeypatch.setattr(tablet_mod, "write_merged_run", merging)
    assert t.compact()
    runs = runs_of(t.blocks)
    assert len(runs) == 2 and check_runs(t.blocks) is None
    assert any(b.table.column("__deleted").to_pylist().count(True) for b in runs[1])
    check(t, shape, model, random.Random(12), list(range(340)))
    m.close()
    m = open_small(root, run_block_rows=40, fanout=3)
    t = m.tablet("t1")
    check(t, shape, model, random.Random(13), list(range(340)))
    assert t.compact()
    (run,) = runs_of(t.blocks)
    assert sum(b.num_rows for b in run) == len(model)
    check(t, shape, model, random.Random(14), list(range(340)))
    m.close()


def test_the_scheduler_merges_new_runs_during_a_big_compaction(tmp_path, monkeypatch):
    """The scheduler's second thread wakes while the first runs a compaction over
    `small_rows_max` flushes of rows and merges the runs flushed meanwhile."""
    shape = Shape(INT_KEY)
    root = tmp_path / "root"
    m = open_small(root, run_block_rows=40, fanout=3)
    model: dict = {}
    t = _three_runs(m, shape, model)  # 300 rows: over 2 x 20
    real = tablet_mod.write_merged_run
    calls: list = []

    def merging(*a, **kw):
        calls.append(1)
        if len(calls) == 1:  # the big one: three small flushes, merged beside it
            for step in range(3):
                keys = list(range(400 + step * 5, 405 + step * 5))
                write(t, shape, OpType.INSERT, keys, 70 + step)
                apply_model(model, OpType.INSERT, keys, 70 + step)
                assert t.flush()
            deadline_s = time.monotonic() + 30
            while len(runs_of(t.blocks)) != 4 and time.monotonic() < deadline_s:
                time.sleep(0.01)
            assert len(runs_of(t.blocks)) == 4  # 3 old runs (busy) + 1 merged beside
        return real(*a, **kw)

    monkeypatch.setattr(tablet_mod, "write_merged_run", merging)
    sched = CompactionScheduler(
        lambda: [t], CompactionOptions(rate_bytes_s=0, blocks_min=3, small_rows_max=2, threads=2)
    ).start()
    try:
        deadline_s = time.monotonic() + 30
        while len(runs_of(t.blocks)) != 2 and time.monotonic() < deadline_s:
            time.sleep(0.01)
    finally:
        sched.close()
    assert len(runs_of(t.blocks)) == 2 and sched.compactions == 2 and len(calls) == 2
    check(t, shape, model, random.Random(15), list(range(420)))
    m.close()


def test_a_plan_within_rows_max_takes_the_newest_runs(tmp_path):
    """Runs of one class that piled up (during a long merge) are merged a few at a time by
    a compaction bounded in rows: the newest that fit, at least two."""
    shape = Shape(INT_KEY)
    m = open_small(tmp_path / "root", fanout=3)
    t = create(m, "t1", INT_KEY)
    for step in range(6):  # six runs of 10 rows: class 0 (flush threshold 20)
        write(t, shape, OpType.INSERT, list(range(step * 10, step * 10 + 10)), step)
        t.flush()
    runs = runs_of(t.blocks)
    assert t.compaction_plan(tiered=True) == runs
    assert t.compaction_plan(tiered=True, rows_max=35) == runs[-3:]
    assert t.compaction_plan(tiered=True, rows_max=15) == []  # one run is not a merge
    assert t.compact(tiered=True, rows_max=35)
    assert [sum(b.num_rows for b in r) for r in runs_of(t.blocks)] == [10, 10, 10, 30]
    m.close()
