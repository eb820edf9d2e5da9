"""The journal trim behind a snapshot off the tick thread (issue 28, design/logstore.md
"The journal trim off the tick thread"): `deleteEntriesTo` drops the entries from memory
and returns; a thread of its own copies the kept records into a new file, the caller's
syncs write to both files once it has switched, and the new file is renamed into place.

Each step is held through the module's `fsync_dir` (called by the trim's thread at its
start and after its rename) and observed by copying the journal's directory as a crash
would leave it: at every step the copy, opened and aligned to the snapshot as a restart
does, holds every synced record. No wall-clock assertion."""

from __future__ import annotations

import os
import shutil
import sys
import threading

import pytest

from logstore import journal
from logstore.journal import DurableJournal

from .helpers import start_cluster, wait_for

HOLD_S = 60.0  # a held step gives up after this (a failed test never hangs)
TRIM_THREAD = "logstore-journal-trim"


class _HeldDirSync:
    """Wraps journal.fsync_dir: calls from the trim's thread are counted and the armed
    ones held until released (every other thread passes)."""

    def __init__(self, monkeypatch, hold_calls: set[int]) -> None:
        self._real = journal.fsync_dir
        self._hold = hold_calls
        self.calls = 0
        self.entered = {n: threading.Event() for n in hold_calls}
        self.release = {n: threading.Event() for n in hold_calls}
        self.calls_by: list[tuple[str, str]] = []  # (thread, directory)
        monkeypatch.setattr(journal, "fsync_dir", self)

    def __call__(self, path: str) -> None:
        name = threading.current_thread().name
        self.calls_by.append((name, os.path.abspath(path)))
        if name == TRIM_THREAD:
            self.calls += 1
            n = self.calls
            if n in self._hold:
                self.entered[n].set()
                self.release[n].wait(HOLD_S)
        self._real(path)

    def release_all(self) -> None:
        for ev in self.release.values():
            ev.set()


def _inside(function: str) -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


def _fill(j: DurableJournal, first: int, last: int, term: int = 1) -> None:
    for i in range(first, last + 1):
        j.add(b"cmd-%d" % i, i, term)


def _crash_copy(src, dst) -> list[int]:
    """The journal's directory as a crash now would leave it, opened and aligned to the
    snapshot (entries 40, 41) as a restart does: the indexes it holds."""
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for name in ("journal", "journal.meta"):
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))
    k = DurableJournal(str(dst))
    try:
        k.align_to_snapshot((b"cmd-40", 40, 1), (b"cmd-41", 41, 1))
        return [e[1] for e in k[:]]
    finally:
        k.close()


def test_trim_runs_on_its_own_thread_and_every_step_keeps_every_synced_record(
    tmp_path, monkeypatch
):
    held = _HeldDirSync(monkeypatch, {1, 2})
    path = tmp_path / "j"
    j = DurableJournal(str(path))
    try:
        _fill(j, 1, 100)
        j.sync()
        held.calls_by.clear()
        j.deleteEntriesTo(39)  # the snapshot's entries are #40 and #41 (positions 39, 40)
        # Returned with the thread held at its first step: the file work is not the caller's.
        assert held.entered[1].wait(HOLD_S)
        assert [e[1] for e in j[:]] == list(range(40, 101))
        _fill(j, 101, 110)
        j.sync()
        # The old file is still the journal, prefix and all; a crash keeps every record.
        with open(path / "journal", "rb") as f:
            assert len(journal.scan_journal(f.read()).entries) == 110
        assert _crash_copy(path, tmp_path / "crash1") == list(range(40, 111))

        held.release[1].set()
        wait_for(lambda: j._trim is not None and j._trim.state == j._trim.COPIED, 30, "copied")
        _fill(j, 111, 115)
        j.sync()  # switches: what was written since the copy goes over, then both files
        assert j._trim is not None and j._trim.switched
        _fill(j, 116, 120)
        j.sync()
        assert _crash_copy(path, tmp_path / "crash2") == list(range(40, 121))

        # Held after its rename, before the directory fsync: the new file is at the name.
        assert held.entered[2].wait(HOLD_S)
        with open(path / "journal", "rb") as f:
            assert [e[1] for e in journal.scan_journal(f.read()).entries] == list(range(40, 121))
        _fill(j, 121, 125)
        j.sync()  # still written to both files
        assert _crash_copy(path, tmp_path / "crash3") == list(range(40, 126))
        held.release[2].set()
        assert j.trim_settled()
        _fill(j, 126, 130)
        j.sync()
        assert not (path / "journal.tmp").exists()
        assert _crash_copy(path, tmp_path / "crash4") == list(range(40, 131))
    finally:
        held.release_all()
        j.close()
    # Since the trim began, the journal's directory was fsynced by the trim's thread only
    # (the other calls are the opens of the crash copies, which fsync their parent).
    assert {t for t, d in held.calls_by if d == str(path)} == {TRIM_THREAD}, held.calls_by
    k = DurableJournal(str(path))
    assert [e[1] for e in k[:]] == list(range(40, 131))  # no prefix left to align
    assert k.stats().file_bytes == os.path.getsize(path / "journal")
    k.close()


def test_a_truncation_cancels_a_copying_trim_and_waits_for_a_switched_one(tmp_path):
    path = tmp_path / "j"
    j = DurableJournal(str(path))
    try:
        _fill(j, 1, 60)
        j.sync()
        j.deleteEntriesTo(39)
        wait_for(lambda: j._trim.state == j._trim.COPIED, 30, "copied")
        # A follower's conflicting suffix before the switch: the copy goes, the old
        # file (with its prefix) stays the journal and is truncated.
        j.deleteEntriesFrom(10)  # positions: entries 50.. go
        assert j._trim is None and not (path / "journal.tmp").exists()
        _fill(j, 50, 52, term=2)
        j.sync()
        assert _crash_copy(path, tmp_path / "c1") == list(range(40, 53))

        j.deleteEntriesTo(1)  # entry 41 first: a trim again, switched this time
        wait_for(lambda: j._trim.state >= j._trim.COPIED, 30, "copied")
        _fill(j, 53, 55, term=2)
        j.sync()
        j.deleteEntriesFrom(12)  # waits for the rename and truncates the new file
        assert j._trim is None
        j.add(b"x", 53, 3)
        j.sync()
    finally:
        j.close()
    k = DurableJournal(str(path))
    assert [e[1] for e in k[:]] == list(range(41, 54)) and k[-1] == (b"x", 53, 3)
    k.close()


@pytest.mark.integration
def test_appends_commit_while_the_journal_trim_is_held(tmp_path, monkeypatch):
    """A replica's trim after a snapshot, its directory fsyncs held (the trim's thread's,
    or any made inside deleteEntriesTo). Before the trim had a thread of its own, the tick
    thread made them inside deleteEntriesTo, and appends stopped with it."""
    (store,) = start_cluster(tmp_path, 1)
    armed = threading.Event()
    entered = threading.Event()
    released = threading.Event()
    seen: list[str] = []
    real = journal.fsync_dir

    def held(path: str) -> None:
        name = threading.current_thread().name
        if armed.is_set() and (name == TRIM_THREAD or _inside("deleteEntriesTo")):
            seen.append(threading.current_thread().name)
            entered.set()
            released.wait(HOLD_S)
        real(path)

    monkeypatch.setattr(journal, "fsync_dir", held)
    try:
        for i in range(300):
            store.append("k", b"%d" % i, timeout_s=30)
        armed.set()
        store.force_compaction()
        assert entered.wait(HOLD_S), "no trim after the snapshot"
        assert store.status()["snapshots_written"] == 1
        for i in range(300, 400):  # one at a time: each waits for its commit
            assert store.append("k", b"%d" % i, expected_id=i + 1, timeout_s=30) == i + 1
        assert seen == [TRIM_THREAD]
        released.set()
        j = store._node._ls_journal
        wait_for(lambda: j._trim is None, 30, "the trimmed journal in place")
        assert j.stats().first_index > 1
        with open(os.path.join(store.data_dir, "journal"), "rb") as f:
            kept = journal.scan_journal(f.read()).entries
        assert kept[0][1] == j.stats().first_index and kept[-1][1] == j.last_index()
    finally:
        released.set()
        store.close()


@pytest.mark.integration
def test_a_compaction_starts_no_thread_from_the_tick_thread(tmp_path, monkeypatch):
    """The snapshot writer and the trim are long-lived threads fed from queues: the tick
    thread starts none (Thread.start() waits for the new thread to run, a pause of the
    tick thread as long as the machine takes to schedule it)."""
    (store,) = start_cluster(tmp_path, 1)
    tick = store._node._SyncObj__thread.name
    started: list[str] = []
    real_start = threading.Thread.start

    def start(self) -> None:
        if threading.current_thread().name == tick:
            started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    try:
        for round_no in range(2):
            for i in range(200):
                store.append("k", b"%d" % i, timeout_s=30)
            store.force_compaction()
            wait_for(
                lambda n=round_no: store.status()["snapshots_written"] == n + 1, 60, "a snapshot"
            )
            j = store._node._ls_journal
            wait_for(
                lambda j=j: getattr(j, "_trim", None) is None and j.stats().first_index > 1,
                30,
                "the trim",
            )
        assert started == []
    finally:
        store.close()
