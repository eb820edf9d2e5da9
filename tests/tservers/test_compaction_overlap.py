"""The compaction policy's key-overlap term (tservers/tablet/compaction.py, design/storage.md
"Compaction of overlapping runs").

- A tablet holding 6 runs of random keys whose sizes the size-tiered policy leaves alone
  (3 of one class, 3 of a smaller one: every key covered 6 times) is merged by the
  background scheduler, with no further write, down to a height of at most 2 (1 here);
  scans return the same rows before, while and after it compacts (upserts and deletes in
  the later runs included).
- A tablet holding runs of the same sizes but sequential keys (key-disjoint runs, height
  1) is never compacted: the same rounds leave its blocks as they are.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pyarrow as pa

from rpc.protocols.tserver_pb2 import OpType
from tests.support.procs import wait_for
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tservers.tablet.blockindex import runs_of
from tservers.tablet.tablet import compaction_run

FLUSH_ROWS = 100  # the size classes' base
SIZES = [300, 300, 300, 60, 60, 40]  # classes 1, 1, 1, 0, 0, 0 at fanout 4: no tiered merge
WAIT_S = 120.0


def runs_height(t) -> int:
    """The most runs of `t` whose key ranges cover one key (from the blocks' min/max),
    counted here apart from compaction.height, the policy's own: a reference to check it by."""
    events = []
    for r in runs_of(list(t.blocks)):
        keyed = [b for b in r if b.min_key is not None]
        if keyed:
            events += [(keyed[0].min_key, 0), (keyed[-1].max_key, 1)]
    h = top = 0
    for _, end in sorted(events):
        h += -1 if end else 1
        top = max(top, h)
    return top


def rows_of(t) -> list[dict]:
    return t.scan([], [], [], [], 0).sort_by("id").to_pylist()


def load(t, keys: list[int], *, churn: bool) -> None:
    """SIZES runs of `keys` in order, one flush each; with `churn`, each later run also
    upserts and deletes a few keys written before it."""
    rng = random.Random(7)
    live: list[int] = []
    at = 0
    for size in SIZES:
        new = keys[at : at + size]
        at += size
        t.write(1, [(OpType.INSERT, ipc(six_rows(new)))], deadline(30))
        if churn and live:
            picked = rng.sample(live, 10)
            up = six_rows(picked[:7]).set_column(1, "n", pa.array([-1] * 7, pa.int32()))
            t.write(1, [(OpType.UPSERT, ipc(up))], deadline(30))
            t.write(1, [(OpType.DELETE, ipc(six_rows(picked[7:]).select(["id"])))], deadline(30))
            live = [k for k in live if k not in set(picked[7:])]
        live += new
        t.flush()


def test_overlapping_runs_are_merged_and_disjoint_runs_are_not(tmp_path):
    m = open_manager(tmp_path / "root", flush_rows=FLUSH_ROWS)
    try:
        ov, seq = create(m, "ov"), create(m, "seq")
        keys = list(range(sum(SIZES)))
        random.Random(3).shuffle(keys)
        load(ov, keys, churn=True)
        load(seq, list(range(sum(SIZES))), churn=False)
        for t in (ov, seq):  # the tiered policy alone leaves both as they are
            assert len(runs_of(list(t.blocks))) == len(SIZES)
            assert compaction_run(SIZES, 4, FLUSH_ROWS) is None
            assert m.compaction.planned_run(t) == []
        assert runs_height(ov) == len(SIZES) and runs_height(seq) == 1
        want = rows_of(ov)
        assert any(r["n"] == -1 for r in want) and len(want) < sum(SIZES)
        seq_blocks = [b.name for b in seq.blocks]
        seq_rows = rows_of(seq)

        m.compaction.start()  # the manager's background scheduler, as a server runs it

        def merged() -> bool:
            assert rows_of(ov) == want  # every scan meanwhile: the same rows
            return runs_height(ov) <= 2

        wait_for(merged, WAIT_S, "the overlapping runs merged to a height of at most 2")
        m.compaction.close()
        assert rows_of(ov) == want
        assert runs_height(ov) == 1  # the ratio bound lets every run merge here
        reasons = getattr(m.compaction, "reasons", {})
        assert reasons.get("overlap", 0) >= 1 and reasons.get("tiered", 0) == 0, reasons
        # The key-disjoint tablet: looked at by the same rounds, never rewritten; and a
        # round now (both tablets idle long since) runs nothing.
        assert m.compaction.run_once() == 0
        assert [b.name for b in seq.blocks] == seq_blocks
        assert rows_of(seq) == seq_rows
    finally:
        m.close()


def _run(lo: int, hi: int, rows: int) -> list:
    return [SimpleNamespace(min_key=lo, max_key=hi, num_rows=rows)]


def test_overlap_start_bounds_the_runs_it_merges():
    from tservers.tablet.compaction import overlap_start

    kw = {"height_min": 3, "ratio": 4.0, "runs_max": 16}
    # Six runs over the whole key range: all merged.
    six = [_run(0, 1000, r) for r in SIZES]
    assert overlap_start(six, **kw) == 0
    # A big run and two small ones over it: the small ones merge, the big one is left.
    assert overlap_start([_run(0, 1000, 10_000), _run(0, 1000, 50), _run(0, 1000, 50)], **kw) == 1
    # Key-disjoint runs, and height under the bound: nothing.
    assert overlap_start([_run(i * 10, i * 10 + 9, 100) for i in range(8)], **kw) is None
    assert overlap_start([_run(0, 1000, 100), _run(0, 1000, 100)], **kw) is None
    # An old run apart from the overlap is not merged: only the suffix that overlaps.
    runs = [_run(0, 99, 5000), _run(100, 200, 100), _run(100, 200, 100), _run(150, 160, 100)]
    assert overlap_start(runs, **kw) == 1
    # At most runs_max runs at once.
    assert overlap_start(six, **{**kw, "runs_max": 3}) == 3


def test_overlap_waits_until_writes_stop(tmp_path):
    """The overlap term runs only on a tablet that took no write for `overlap_idle_s`
    (a fake clock): a write between rounds puts it off; once writes stop, it runs."""
    from tservers.tablet.compaction import CompactionOptions, CompactionScheduler

    m = open_manager(tmp_path / "root", flush_rows=FLUSH_ROWS)
    try:
        t = create(m, "ov")
        keys = list(range(sum(SIZES)))
        random.Random(5).shuffle(keys)
        load(t, keys, churn=False)
        now = [0.0]
        sched = CompactionScheduler(
            lambda: [t], CompactionOptions(overlap_idle_s=10.0), clock=lambda: now[0]
        )
        blocks = [b.name for b in t.blocks]
        for i in range(3):  # a trickle of writes, one per 6 s: never 10 s without one
            assert sched.run_once() == 0
            t.write(1, [(OpType.INSERT, ipc(six_rows([10_000 + i])))], deadline(30))
            now[0] += 6.0
        assert [b.name for b in t.blocks] == blocks
        assert sched.run_once() == 0  # first seen unchanged now
        now[0] += 10.0
        assert sched.run_once() == 1 and sched.reasons["overlap"] == 1
        assert runs_height(t) == 1
    finally:
        m.close()
