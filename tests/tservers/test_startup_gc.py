"""Start-up with many replicas (issue 28): the cyclic garbage collector is off while the
tablets open, and back as it was once the open is done.

Each collection walks the live heap, which an open of thousands of tablets only grows:
at 10,000 replicas 1,396 collections took 1.29 s of a 4.2 s open. `gc_paused` counts the
opens that hold it (two managers in one process may open at once) and restores what the
process had: a process that runs with the collector off keeps it off. What the open made
is frozen before the collector is back (else the first collection after it walked every
object the open made: ~1.3 s of CPU at 10,000 replicas).
"""

from __future__ import annotations

import gc
import threading

from tests.tservers.test_startup_many import _crashed_root
from tservers.fs import FsLayout
from tservers.tablet.manager import TabletManager
from tservers.wal.log import WalOptions

TABLETS = 60


def test_nested_and_concurrent_pauses_restore_the_collector():
    from tservers.tablet.manager import gc_paused

    assert gc.isenabled()
    try:
        with gc_paused():
            assert not gc.isenabled()
            entered = threading.Event()
            leave = threading.Event()

            def other() -> None:
                with gc_paused():
                    entered.set()
                    assert leave.wait(10)

            t = threading.Thread(target=other)
            t.start()
            assert entered.wait(10)
            with gc_paused():
                assert not gc.isenabled()
            assert not gc.isenabled()  # the other thread's pause still holds
        assert not gc.isenabled()  # ...after this one's ended
        leave.set()
        t.join(10)
        assert gc.isenabled()  # the last one out restores it

        gc.disable()  # a process that runs without the collector keeps it so
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_no_collection_runs_while_the_tablets_open(tmp_path):
    """Collections that start while the opening threads run: none (the old code made one
    every 700 allocations: dozens for 60 tablets). The collector is on after the open."""
    root = tmp_path / "root"
    ids = _crashed_root(root, TABLETS, peers=True)
    opening: list[str] = []
    during = 0

    def watch(phase: str, info: dict) -> None:
        nonlocal during
        if phase == "start" and any(
            t.name.startswith("tablet-open") for t in threading.enumerate()
        ):
            during += 1
            opening.append(info.get("generation"))

    assert gc.isenabled()
    gc.collect()
    frozen_before = gc.get_freeze_count()
    gc.callbacks.append(watch)
    m = TabletManager(
        FsLayout.open(root), WalOptions(segment_size_bytes_max=1 << 20), maintenance=False
    )
    try:
        m.open(wait=True)
        assert sorted(m.replicas) == ids
        assert during == 0, f"{during} collections (generations {opening}) during the open"
        assert gc.isenabled()
        # The open's objects were frozen: the next collection has little to walk.
        young = len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1))
        frozen = gc.get_freeze_count() - frozen_before
        assert frozen > 50 * TABLETS, f"only {frozen} objects frozen by the open"
        assert young < frozen / 10, f"{young} objects left to walk, {frozen} frozen"
    finally:
        gc.callbacks.remove(watch)
        m.close()


def test_the_frozen_objects_go_back_to_the_collector_after_a_while(monkeypatch):
    """Frozen for good, a cycle among them that became garbage later (a tablet deleted)
    would never be collected: they are handed back GC_THAW_AFTER_S after the pause."""
    import time

    from tservers.tablet import manager

    monkeypatch.setattr(manager, "GC_THAW_AFTER_S", 0.2)
    gc.unfreeze()
    with manager.gc_paused():
        made = [[i] for i in range(1000)]
    assert gc.get_freeze_count() >= len(made)
    deadline = time.monotonic() + 30
    while gc.get_freeze_count() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gc.get_freeze_count() == 0
