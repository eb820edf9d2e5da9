"""Start-up with many replicas (issue 28): the cyclic garbage collector is off while the
tablets open, and back as it was once the open is done.

Each collection walks the live heap, which an open of thousands of tablets only grows:
at 10,000 replicas 1,396 collections took 1.29 s of a 4.2 s open. `gc_paused` counts the
opens that hold it (two managers in one process may open at once) and restores what the
process had: a process that runs with the collector off keeps it off.
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
    gc.callbacks.append(watch)
    m = TabletManager(
        FsLayout.open(root), WalOptions(segment_size_bytes_max=1 << 20), maintenance=False
    )
    try:
        m.open(wait=True)
        assert sorted(m.replicas) == ids
        assert during == 0, f"{during} collections (generations {opening}) during the open"
        assert gc.isenabled()
    finally:
        gc.callbacks.remove(watch)
        m.close()
