"""After a background snapshot, the pages it encoded hold no Entry objects (issue 28,
design/logstore.md "fourth round"): the writer's columns replace every dict page that did
not change since the capture, and the writer frees the dicts. Entry objects are what the
cyclic GC walks on each full pass (250k of them in small logs: 100-300 ms with every
thread stopped). What the state answers and what the next snapshot holds are unchanged."""

from __future__ import annotations

import gc
import threading

from logstore import snapshot
from logstore.api import Entry
from logstore.snapshot import SnapshotHooks, SnapshotMeta, decode_snapshot, encode_snapshot
from logstore.state import LoadedPage, LogState

DATA = ((b"l", 9, 1), (b"p", 8, 1), {"h:1"})
META = SnapshotMeta((b"l", 9, 1), (b"p", 8, 1), ("h:1",))
MARK = b"gc-probe-"


def _live_marked_entries() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is Entry and o.data.startswith(MARK))


def _fill(state: LogState) -> None:
    for i in range(3000):
        state.apply_append(f"s{i % 30}", MARK + b"%d" % i, None, ())
    state.apply_append("s0", MARK + b"inv", None, (1, 2))


def test_a_background_write_leaves_the_pages_it_encoded_without_entry_objects(tmp_path):
    state = LogState()
    _fill(state)
    reference = LogState()
    _fill(reference)
    assert _live_marked_entries() == 2 * 2999  # both states' entries, as dicts of Entry

    lock = threading.Lock()
    hooks = SnapshotHooks(state, lock, name="gc")
    path = str(tmp_path / "snapshot")
    assert hooks.start_write(path, 9, DATA)
    assert hooks.close()
    assert hooks.poll_write() == (snapshot.SERIALIZER_STATE.SUCCESS, 9)

    for name in state.log_names():
        assert all(type(p) is LoadedPage for p in state.logs[name].pages.values()), name
    assert _live_marked_entries() == 2999  # the reference's only
    with open(path, "rb") as f:
        written, _ = decode_snapshot(f.read())
    assert written.read("s0", limit=1000) == reference.read("s0", limit=1000)

    # The state answers as before, and changes as before (a page is a dict again).
    for s in (state, reference):
        assert s.read("s7", 50, limit=3) == reference.read("s7", 50, limit=3)
        s.apply_append("s7", MARK + b"new", None, ())
        s.apply_append("s8", b"", None, (9,))
    assert type(state.logs["s7"].pages[0]) is dict and type(state.logs["s8"].pages[0]) is dict
    assert type(state.logs["s9"].pages[0]) is LoadedPage
    assert state.logs["s0"][101] == Entry(101, MARK + b"inv", (1, 2))
    for name in reference.log_names():
        assert state.read(name, limit=1000) == reference.read(name, limit=1000)
    assert encode_snapshot(state, META) == encode_snapshot(reference, META)
