"""More runs of one size class than a compaction merges at once (K = `run_blocks_max`) are
merged K at a time, not left alone (design/storage.md, "Full scans after the load settles").

Found by `bench/storage.py --rows 1000000 50000000 1000000`: flushes every 0.25 s outran
the merges, the size-tiered plan passed 16 runs 40 s into the load and was "left alone"
like a plan over the byte budget; every later plan was longer, and the tablet ended the
load with 350 runs (inserts at 0.15x of 1M, full scans at 0.19 of Parquet). In process:
real files, the manager's own scheduler, one round at a time."""

from __future__ import annotations

import random

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tservers.tablet.blockindex import runs_of

ROWS = 150  # a flush's rows (flush_rows=100: each write of ROWS is flushed as one run)


def _all(t):
    return t.scan([], [], [], [], 0)


def _load(t, runs: int, seed: int = 1, base: int = 0) -> list[int]:
    keys = list(range(base, base + runs * ROWS))
    random.Random(seed).shuffle(keys)
    for i in range(runs):
        t.write(1, [(OpType.INSERT, ipc(six_rows(keys[i * ROWS : (i + 1) * ROWS])))], deadline(30))
        t.flush()
    return keys


def test_a_pile_of_runs_over_k_is_merged_k_at_a_time(tmp_path):
    m = open_manager(tmp_path / "root", flush_rows=100)
    try:
        t = create(m, "t")
        k = m.compaction.opts.run_blocks_max
        keys = _load(t, k + 4)
        assert len(runs_of(list(t.blocks))) == k + 4
        assert len(t.compaction_plan(tiered=True)) > k  # one class, more than K runs
        before = _all(t)
        assert m.compaction.run_once() == 1
        assert len(runs_of(list(t.blocks))) == 5  # K of them merged into one (the oldest K)
        assert m.compaction.deferred == 0
        assert _all(t).equals(before)
        assert sorted(_all(t).column("id").to_pylist()) == sorted(keys)
    finally:
        m.close()


def test_a_pile_of_runs_merged_while_flushes_keep_coming(tmp_path):
    """Rounds of the scheduler between bursts of flushes: the runs stay bounded (each
    round leaves at most the runs of classes below K), where before they only grew."""
    m = open_manager(tmp_path / "root", flush_rows=100)
    try:
        t = create(m, "t")
        k = m.compaction.opts.run_blocks_max
        seen = []
        for burst in range(4):
            _load(t, k + 2, seed=burst, base=burst * (k + 2) * ROWS)
            for _ in range(3):
                m.compaction.run_once()
            seen.append(len(runs_of(list(t.blocks))))
        assert max(seen) <= k, seen
        assert _all(t).num_rows == 4 * (k + 2) * ROWS
    finally:
        m.close()
