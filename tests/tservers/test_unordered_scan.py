"""Unordered scans (Kudu's UNORDERED read mode): the newest blocks that hide no row of an
older source are handed out as they are, the rest merged (design/storage.md, "Unordered
scans"). What marks a block so (`BlockIndex.shadows_nothing`, from its file's metadata) and
what must not: a memstore that took an update, a delete or an upsert, a delete and the same
key inserted again, rows a failed flush put back, a compaction of a marked run with an
unmarked one."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from logcentric.tablets import TabletServerClient
from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, open_manager
from tests.tservers.procs import TServerProcess
from tests.tservers.test_service import COLS, rows
from tests.tservers.test_storage_model import (
    INT_KEY,
    PAIR_KEY,
    Shape,
    apply_model,
    scan,
    unordered,
    write,
)
from tservers.fs import FsLayout
from tservers.tablet.blockindex import BlockIndex, block_metadata, write_block


class Loaded:
    """A tablet, the rows it should hold and what its scans counted."""

    def __init__(self, root, schema=INT_KEY) -> None:
        self.root = root
        self.m = open_manager(root)
        self.t = create(self.m, "t1", schema)
        self.shape = Shape(schema)
        self.model: dict = {}
        self.step = 0

    def do(self, op: int, keys: list) -> None:
        self.step += 1
        write(self.t, self.shape, op, keys, self.step)
        apply_model(self.model, op, keys, self.step)

    def counted(self, **kw) -> tuple[pa.Table, int, int]:
        """An unordered scan, and the rows it handed out unmerged and merged."""
        t = self.t
        d0, m0 = t.scan_rows_unmerged, t.scan_rows_merged
        r = unordered(t, **kw)
        return r, t.scan_rows_unmerged - d0, t.scan_rows_merged - m0

    def check(self) -> pa.Table:
        """Ordered and unordered scans both hold each live row once, as the model has it."""
        r = unordered(self.t)
        assert r.num_rows == len(self.model), (r.num_rows, len(self.model))
        assert self.shape.rows(r) == self.model
        assert self.shape.rows(scan(self.t)) == self.model
        return r

    def marks(self) -> list[bool]:
        return [b.shadows_nothing for b in self.t.blocks]

    def reopen(self) -> None:
        self.m.close()
        self.m = open_manager(self.root)
        self.t = self.m.tablet("t1")


@pytest.fixture
def loaded(tmp_path):
    made: list[Loaded] = []

    def make(schema=INT_KEY) -> Loaded:
        x = Loaded(tmp_path / f"root{len(made)}", schema)
        made.append(x)
        return x

    yield make
    for x in made:
        x.m.close()


def test_runs_of_new_keys_are_handed_out_unmerged_and_say_so_after_a_reopen(loaded):
    x = loaded()
    rng = random.Random(7)
    keys = rng.sample(range(1_000_000), 2_200)
    for i in range(4):  # four runs of random keys: each overlaps every other
        x.do(OpType.INSERT, keys[i * 500 : (i + 1) * 500])
        x.t.flush()
    x.do(OpType.INSERT, keys[2_000:])  # and 200 in the memstore
    assert x.marks() == [True] * 4
    x.check()
    r, direct, merged = x.counted()
    assert (direct, merged) == (2_000, 0)  # the memstore alone is a direct slab of the merge
    # The ordered scan merges the same runs.
    m0 = x.t.scan_rows_merged
    assert x.shape.rows(scan(x.t)) == x.model
    assert x.t.scan_rows_merged - m0 > 1_000
    # The mark is the files': read back at open.
    x.reopen()
    assert x.marks() == [True] * 4
    x.check()
    r, direct, merged = x.counted()
    assert direct == 2_000 and merged == 0 and r.num_rows == 2_200
    # Bounds, predicates and a limit apply to the unmerged rows too.
    lo, hi = sorted(rng.sample(keys, 2))
    r, direct, _ = x.counted(lower=x.shape.bound(lo), upper=x.shape.bound(hi))
    want = {k: v for k, v in x.model.items() if lo <= k < hi}
    assert r.num_rows == len(want) and x.shape.rows(r) == want


def test_a_memstore_with_updates_deletes_or_upserts_marks_nothing_and_hides_rows(loaded):
    x = loaded()
    x.do(OpType.INSERT, list(range(1_000)))
    x.t.flush()
    x.do(OpType.INSERT, list(range(1_000, 2_000)))
    x.t.flush()
    assert x.marks() == [True, True]
    # The memstore now hides rows of both runs.
    x.do(OpType.UPDATE, [5, 1_005])
    x.do(OpType.DELETE, [6, 1_006])
    x.do(OpType.UPSERT, [7, 1_007, 9_999])
    x.do(OpType.INSERT, [10_000, 10_001])
    r = x.check()
    assert sorted(x.shape.rows(r)) == sorted(x.model)
    _, direct, _ = x.counted()
    assert direct == 2_000 - 6  # the six keys the memstore holds are left out of the runs
    x.t.flush()
    assert x.marks() == [True, True, False]
    x.check()
    _, direct, _ = x.counted()
    assert direct == 0  # every run is older than a hiding one: all through the merge
    # Runs of new keys after it are unmerged again.
    x.do(OpType.INSERT, list(range(20_000, 20_300)))
    x.t.flush()
    assert x.marks() == [True, True, False, True]
    x.check()
    _, direct, _ = x.counted()
    assert direct == 300


def test_a_key_deleted_and_inserted_again_in_one_memstore_marks_its_block(loaded):
    # The insert takes the tombstone out of the memstore's dict (`_apply_batch`): what the
    # flush writes then looks like new keys only, but its key 5 hides the older run's.
    x = loaded()
    x.do(OpType.INSERT, list(range(100)))
    x.t.flush()
    x.do(OpType.DELETE, [5])
    x.do(OpType.INSERT, [5, 200])
    x.t.flush()
    assert x.marks() == [True, False]
    r = x.check()
    assert r.column("k").to_pylist().count(5) == 1


def test_a_compaction_keeps_the_mark_only_when_every_run_has_it(loaded):
    x = loaded()
    x.do(OpType.INSERT, list(range(100)))
    x.t.flush()
    x.do(OpType.UPDATE, [3])  # hides the first run's key 3
    x.t.flush()
    x.do(OpType.INSERT, list(range(100, 200)))
    x.t.flush()
    assert x.marks() == [True, False, True]
    # Only the update's run and the run after it: the output still hides key 3.
    assert x.t.compact(tiered=True, pick=lambda runs: 1)
    assert len(x.t.blocks) == 2 and x.marks() == [True, False]
    x.check()
    x.do(OpType.INSERT, list(range(200, 300)))
    x.t.flush()
    x.do(OpType.INSERT, list(range(300, 400)))
    x.t.flush()
    assert x.marks() == [True, False, True, True]
    assert x.t.compact(tiered=True, pick=lambda runs: 2)  # two runs of new keys
    assert x.marks() == [True, False, True]
    x.check()
    _, direct, _ = x.counted()
    assert direct == 200
    x.t.compact()  # everything: hides nothing of anything older (there is nothing older)
    assert x.marks() == [False]
    x.check()


def test_rows_a_failed_flush_put_back_keep_their_mark(loaded, monkeypatch):
    x = loaded()
    x.do(OpType.INSERT, list(range(100)))
    x.t.flush()
    x.do(OpType.UPDATE, [3])
    real = x.t._write_block

    def fail(*a, **kw):
        raise OSError("disk went away")

    monkeypatch.setattr(x.t, "_write_block", fail)
    with pytest.raises(OSError, match="went away"):
        x.t.flush()
    monkeypatch.setattr(x.t, "_write_block", real)
    x.check()
    x.do(OpType.INSERT, [500])
    x.t.flush()
    assert x.marks() == [True, False]
    r = x.check()
    assert r.column("k").to_pylist().count(3) == 1


def test_a_composite_key_with_a_hiding_memstore_is_merged_whole(loaded):
    x = loaded(PAIR_KEY)
    ks = [x.shape.key(i) for i in range(300)]
    x.do(OpType.INSERT, ks[:200])
    x.t.flush()
    x.do(OpType.UPDATE, ks[:3])
    x.do(OpType.INSERT, ks[200:])
    x.check()
    _, direct, _ = x.counted()
    assert direct == 0  # merged whole
    assert x.marks() == [True]


def test_a_block_file_says_whether_it_hides_rows(tmp_path):
    t = pa.table(
        {"c0": pa.array([1, 2, 3], pa.int64()), "__deleted": pa.array([False] * 3, pa.bool_())}
    )
    write_block(tmp_path, "plain.arrow", t.schema, [t], 2)
    write_block(tmp_path, "marked.arrow", t.schema, [t], 2, block_metadata(True))
    plain = BlockIndex.open(tmp_path, "plain.arrow", ["c0"])
    marked = BlockIndex.open(tmp_path, "marked.arrow", ["c0"])
    assert not plain.shadows_nothing and marked.shadows_nothing
    # The mark does not reach the table the scans and merges read.
    assert marked.table.schema.metadata is None and marked.table.equals(plain.table)
    assert block_metadata(False) is None


@pytest.mark.integration
def test_an_unordered_scan_through_the_server(tmp_path):
    root = tmp_path / "root"
    FsLayout.format(root)
    p = TServerProcess(root, extra_args=["--flush-rows", "1000"]).start()
    try:
        with TabletServerClient(p.address) as c:
            c.create_tablet("t1", COLS)
            rng = random.Random(3)
            ids = rng.sample(range(10**6), 5_000)
            for i in range(0, 5_000, 500):  # runs of interleaved keys
                c.write("t1", [(OpType.INSERT, rows(ids[i : i + 500]))])
            got = c.scan_table("t1", ordered=False)
            assert sorted(got["id"].to_pylist()) == sorted(ids)
            ordered = c.scan_table("t1")
            assert ordered["id"].to_pylist() == sorted(ids)
            assert got.sort_by("id").equals(ordered)
            some = c.scan_table(
                "t1", ordered=False, projection=["s"], predicates=[("id", ">=", 500_000)]
            )
            assert sorted(some["s"].to_pylist()) == sorted(f"s{i}" for i in ids if i >= 500_000)
    finally:
        p.stop()
