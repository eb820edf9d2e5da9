"""The compaction scheduler looks at changed tablets only (tservers/tablet/compaction.py,
"Changed tablets only"; issue 28): an idle round over N idle tablets reads none of them,
whatever N; a new tablet, a flush, a compaction given up and the backstop sweep bring
tablets back into a round. Work is counted (reads of a tablet's status and blocks, and the
scheduler's `examined`), never timed."""

from __future__ import annotations

import weakref

import pytest

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tservers.tablet import compaction as compaction_mod
from tservers.tablet import tablet as tablet_mod
from tservers.tablet.compaction import CompactionOptions, CompactionScheduler
from tservers.tablet.tablet import TabletStatus


class IdleTablet:
    """An empty RUNNING tablet that counts how often its status and blocks are read."""

    def __init__(self, i: int, reads: list[int]) -> None:
        self.tablet_id = f"t{i:05d}"
        self.on_blocks: list = []
        self._reads = reads
        self._status = TabletStatus.RUNNING

    def made(self) -> IdleTablet:
        """As a Tablet made now (tablet.UNLISTED until a scheduler lists it)."""
        with tablet_mod.UNLISTED_LOCK:
            tablet_mod.UNLISTED.add(self)
        return self

    def shutdown(self) -> None:
        self._status = TabletStatus.SHUTDOWN
        for fn in list(self.on_blocks):
            fn(self)

    @property
    def status(self) -> TabletStatus:
        self._reads[0] += 1
        return self._status

    @property
    def blocks(self) -> list:
        self._reads[0] += 1
        return []


@pytest.mark.parametrize("n", [10, 1000])
def test_an_idle_round_reads_no_idle_tablet(n, monkeypatch):
    # Only this test's tablets: a RUNNING tablet another test of this process left in
    # tablet.UNLISTED would make every round list again (and a listing forgets the shut
    # down tablet before the round looks at it), so the counts below would not be these.
    monkeypatch.setattr(tablet_mod, "UNLISTED", weakref.WeakSet())
    reads = [0]
    tablets = [IdleTablet(i, reads) for i in range(n)]
    now = [0.0]
    sched = CompactionScheduler(lambda: list(tablets), clock=lambda: now[0])
    assert sched.run_once() == 0  # the first round looks at every tablet, new to it
    assert reads[0] >= n
    reads[0] = 0
    for _ in range(3):
        assert sched.run_once() == 0
    assert reads[0] == 0, f"{reads[0]} reads of {n} idle tablets in 3 idle rounds"
    assert sched.examined_last == 0
    # A new tablet: looked at once, alone.
    tablets.append(IdleTablet(n, reads).made())
    assert sched.run_once() == 0 and sched.examined_last == 1
    assert sched.run_once() == 0 and sched.examined_last == 0
    # A tablet told changed (what a flush or a compaction's end does): looked at once.
    tablets[3].on_blocks[0](tablets[3])
    assert sched.run_once() == 0 and sched.examined_last == 1
    assert sched.run_once() == 0 and sched.examined_last == 0
    # A tablet shut down (deleted) is unhooked and forgotten, the others not read.
    gone = tablets.pop(5)
    gone.shutdown()
    reads[0] = 0
    assert sched.run_once() == 0 and sched.examined_last == 1 and gone.on_blocks == []
    assert reads[0] <= 3 and gone not in sched._known
    # The backstop: every FULL_SWEEP_S, one round looks at all of them.
    now[0] += compaction_mod.FULL_SWEEP_S
    assert sched.run_once() == 0 and sched.examined_last == n
    assert sched.run_once() == 0 and sched.examined_last == 0


def _fill(t, flushes: int, at: int = 0) -> None:
    for b in range(flushes):
        ids = range(at + b * 10, at + b * 10 + 10)
        t.write(1, [(OpType.INSERT, ipc(six_rows(ids)))], deadline())
        assert t.flush()


def test_a_flushed_tablet_among_idle_ones_is_compacted(tmp_path):
    """Real tablets: after the first round, rounds look at the tablet that flushed (its
    `on_blocks`) and at nothing else; it is compacted once it has blocks_min runs."""
    m = open_manager(tmp_path / "root", flush_rows=10)
    try:
        tablets = [create(m, f"t{i:02d}") for i in range(30)]
        now = [0.0]
        sched = CompactionScheduler(
            m.running_tablets,
            CompactionOptions(rate_bytes_s=0, blocks_min=4, overlap_idle_s=10.0),
            clock=lambda: now[0],
        )
        assert sched.run_once() == 0 and sched.examined_last == 30
        assert sched.run_once() == 0 and sched.examined_last == 0
        t = tablets[7]
        _fill(t, 3)
        # 3 runs: no tiered merge; the overlap term (height 3 at least) waits until the
        # tablet has stayed unchanged for overlap_idle_s, so it is looked at every round
        # meanwhile; then, its runs key-disjoint (height 1), never again.
        assert sched.run_once() == 0 and sched.examined_last == 1
        assert sched.run_once() == 0 and sched.examined_last == 1
        now[0] += 10.0
        assert sched.run_once() == 0 and sched.examined_last == 1
        assert sched.run_once() == 0 and sched.examined_last == 0
        _fill(t, 1, at=30)
        assert sched.run_once() == 1 and sched.examined_last == 1
        assert len(t.blocks) == 1 and sched.reasons["tiered"] == 1
        assert sched.run_once() == 0 and sched.examined_last == 1  # after a compaction
        assert sched.run_once() == 0 and sched.examined_last == 0
        assert all(len(o.blocks) == 0 for o in tablets if o is not t)
    finally:
        m.close()


def test_a_compaction_given_up_is_tried_again(tmp_path):
    """A compaction given up (a copy session reads the blocks) changes no block: the
    tablet is looked at again next round all the same, and compacted once the copy ends."""
    m = open_manager(tmp_path / "root", flush_rows=10)
    try:
        t = create(m, "t1")
        _fill(t, 4)
        sched = CompactionScheduler(lambda: [t], CompactionOptions(rate_bytes_s=0))
        with t.lock:
            t.copy_anchors += 1
        assert sched.run_once() == 0 and sched.run_once() == 0
        assert sched.examined_last == 1 and len(t.blocks) == 4
        with t.lock:
            t.copy_anchors -= 1
        assert sched.run_once() == 1 and len(t.blocks) == 1
    finally:
        m.close()
