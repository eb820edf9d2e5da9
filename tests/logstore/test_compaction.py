"""Compaction (snapshot + journal trim) followed by a restart of every replica keeps every
live entry; invalidated entries never reach a snapshot."""

from __future__ import annotations

import pytest

from logstore.journal import FORMAT_VERSION, HEADER, JOURNAL_MAGIC, encode_record, scan_journal
from logstore.replicated import ReplicatedLogStore

from .helpers import FAST, PASSWORD, leader_of, start_cluster, wait_for

pytestmark = pytest.mark.integration


def _expected_after_workload(store) -> dict[str, list]:
    ids = [store.append("k", b"v%d" % i) for i in range(300)]
    # Lease-style: each renewal invalidates the one before.
    lease = store.append("lease", b"l0")
    for i in range(1, 200):
        lease = store.append("lease", b"l%d" % i, expected_id=lease + 1, invalidates=[lease])
    store.append("k", b"", invalidates=ids[:100])
    store.barrier()
    return {"k": store.read("k", limit=10_000), "lease": store.read("lease", limit=10_000)}


def test_compaction_then_full_restart_keeps_live_entries(tmp_path):
    stores = start_cluster(tmp_path, 3)
    addrs = [s.self_address for s in stores]
    try:
        leader = leader_of(stores)
        expected = _expected_after_workload(leader)
        assert len(expected["lease"]) == 1 and len(expected["k"]) == 200
        for s in stores:
            s.barrier(timeout_s=20.0)
            s.force_compaction()
        for s in stores:
            wait_for(lambda s=s: s.status()["snapshots_written"] >= 1, what="a snapshot")
            wait_for(
                lambda s=s: s.status()["journal_first_index"] > 100, what="the journal trimmed"
            )
        # More entries after the snapshot live only in the journal tail.
        tail_id = leader.append("k", b"after-snapshot")
        for s in stores:
            s.barrier(timeout_s=20.0)
    finally:
        for s in stores:
            s.close()
    stores = [
        ReplicatedLogStore(a, addrs, str(tmp_path / f"r{i}"), PASSWORD, config=FAST)
        for i, a in enumerate(addrs)
    ]
    try:
        for s in stores:
            s.barrier(timeout_s=30.0)
            assert s.status()["snapshots_loaded"] >= 1
            got_k = s.read("k", limit=10_000)
            assert got_k[:-1] == expected["k"]
            assert got_k[-1].id == tail_id and got_k[-1].data == b"after-snapshot"
            assert s.read("lease", limit=10_000) == expected["lease"]
            assert s.last_id("lease") == 200
        # Conditional appends keep working after the restart.
        leader = leader_of(stores)
        assert leader.append("lease", b"new", expected_id=201, invalidates=[200]) == 201
    finally:
        for s in stores:
            s.close()


def test_snapshot_holds_only_live_data(tmp_path):
    (store,) = stores = start_cluster(tmp_path, 1)
    try:
        lease = store.append("lease", b"x" * 1000)
        for _ in range(2000):
            lease = store.append("lease", b"x" * 1000, expected_id=lease + 1, invalidates=[lease])
        store.force_compaction()
        wait_for(lambda: store.status()["snapshots_written"] >= 1, what="a snapshot")
        st = store.status()
        assert st["live_entries"] == 1
        # One live 1000-byte entry: the snapshot is far smaller than the 2 MB of history.
        assert st["snapshot_bytes"] < 4000
    finally:
        for s in stores:
            s.close()


def test_command_encoding_is_stable(tmp_path):
    """Offline readers (the log tool) decode journal commands: type byte, then a pickle of
    (method id, args) with _ls_append = 0, _ls_barrier = 1 and _ls_batch = 2
    (design/logstore.md; batches are checked in test_batch.py)."""
    import pickle

    (store,) = stores = start_cluster(tmp_path, 1)
    try:
        assert store._node._methodToID == {
            "_ls_append_v0": 0,
            "_ls_barrier_v0": 1,
            "_ls_batch_v0": 2,
        }
        store.append("enc", b"payload", expected_id=1, invalidates=())
        store.barrier()
        commands = [c for c, _idx, _term in store._journal[:] if c[:1] == b"\x00"]
        decoded = [pickle.loads(c[1:]) for c in commands]
        assert (0, ("enc", b"payload", 1, ())) in decoded
        assert 1 in decoded
    finally:
        for s in stores:
            s.close()


def test_crash_between_snapshot_rename_and_journal_trim_keeps_the_journal_tail(tmp_path):
    """kill -9 after pysyncobj renamed a new snapshot into place but before the next tick
    trimmed the journal: the journal still starts before the snapshot and holds entries
    after it (acknowledged: this replica may have counted toward their commit). pysyncobj
    clears a journal whose first two entries are not the snapshot's; logstore trims the
    covered prefix first, so the tail survives. The crash state is built byte for byte:
    the untrimmed journal prefix from before the compaction + the entries after it."""

    (store,) = start_cluster(tmp_path, 1)
    addr = store.self_address
    data_dir = tmp_path / "r0"
    try:
        before = [store.append("k", b"a%d" % i) for i in range(40)]
        store.barrier()
        untrimmed = scan_journal((data_dir / "journal").read_bytes()).entries
        store.force_compaction()
        wait_for(lambda: store.status()["snapshots_written"] >= 1, what="a snapshot")
        wait_for(
            lambda: store.status()["journal_first_index"] > untrimmed[0][1],
            what="the journal trimmed",
        )
        after = [store.append("k", b"b%d" % i) for i in range(30)]
        store.barrier()
    finally:
        store.close()
    trimmed = scan_journal((data_dir / "journal").read_bytes()).entries
    first_kept = trimmed[0][1]
    assert untrimmed[0][1] < first_kept <= untrimmed[-1][1]
    # The journal as it was at the crash: nothing trimmed, every entry since appended.
    crash = [e for e in untrimmed if e[1] < first_kept] + trimmed
    assert [e[1] for e in crash] == list(range(crash[0][1], crash[-1][1] + 1))
    image = HEADER.pack(JOURNAL_MAGIC, FORMAT_VERSION) + b"".join(
        encode_record(c, i, t) for c, i, t in crash
    )
    (data_dir / "journal").write_bytes(image)

    with ReplicatedLogStore(addr, [], str(data_dir), PASSWORD, config=FAST) as store:
        store.barrier(timeout_s=30.0)
        assert [e.id for e in store.read("k", limit=1000)] == before + after
        assert store.append("k", b"c", expected_id=after[-1] + 1) == after[-1] + 1
