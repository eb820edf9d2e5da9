"""A scan's merged slab holds about SCAN_SLAB_ROWS rows in all, however many runs overlap
(merge.shared_slab_rows). Each source gave 16,384 rows a slab before: just after a 50M-row
load (48-63 runs of random keys) a full scan merged slabs of ~1M rows, and the server's heap
went from ~210 to ~610 MiB while it scanned (design/storage.md)."""

from __future__ import annotations

import random

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tservers.tablet.blockindex import runs_of
from tservers.tablet.merge import SCAN_SLAB_ROWS, shared_slab_rows

RUNS = 40
ROWS = 2000  # 80,000 rows of random keys in 40 overlapping runs


def test_shares():
    assert shared_slab_rows(65_536, 1) == 65_536
    assert shared_slab_rows(65_536, 4) == 16_384
    assert shared_slab_rows(65_536, 40) == 1638
    assert shared_slab_rows(65_536, 1000) == 1024  # at least SOURCE_ROWS_MIN a source
    assert shared_slab_rows(50, 3) == 50 and shared_slab_rows(1, 9) == 1


def test_a_scan_of_many_overlapping_runs_merges_bounded_slabs(tmp_path):
    m = open_manager(tmp_path / "root", flush_rows=1_000_000)
    try:
        t = create(m, "t")
        keys = list(range(RUNS * ROWS))
        random.Random(5).shuffle(keys)
        for i in range(RUNS):
            t.write(
                1, [(OpType.INSERT, ipc(six_rows(keys[i * ROWS : (i + 1) * ROWS])))], deadline(30)
            )
            t.flush()
        assert len(runs_of(list(t.blocks))) == RUNS
        before = t.scan_rows_merged
        _, pieces = t.scan_pieces([], [], [], [], 0)
        sizes = [p.num_rows for p in pieces]
        assert sum(sizes) == RUNS * ROWS
        assert t.scan_rows_merged - before > 0.99 * RUNS * ROWS  # merged: overlapping runs
        bound = RUNS * shared_slab_rows(SCAN_SLAB_ROWS, RUNS)
        assert bound <= SCAN_SLAB_ROWS
        assert max(sizes) <= bound, (max(sizes), bound)
        assert len(sizes) >= RUNS * ROWS // SCAN_SLAB_ROWS + 1
        got = t.scan([], [], [], [], 0).column("id").to_pylist()
        assert got == sorted(keys)
    finally:
        m.close()
