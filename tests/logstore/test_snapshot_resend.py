"""A follower that gets the leader's snapshot again, after it applied entries past it, keeps
its state and its journal (design/logstore.md, "pysyncobj behaviours logstore corrects").

A leader sends its snapshot on every `reset` answer, and answers to AppendEntries sent
before the first snapshot went out arrive after it: the same snapshot can reach a follower
twice, with the entries after it in between. pysyncobj loaded it again: the state went back
to the snapshot point (a read after a barrier missed entries: the rare failure of
test_kill9_every_replica_under_concurrent_appends) and the journal lost the entries after
it, although they were durable and acknowledged."""

from __future__ import annotations

import os
import threading

import pytest

from logstore.replicated import SNAPSHOT_FILE
from logstore.snapshot import snapshot_last_index

from .helpers import leader_of, start_cluster, wait_for

pytestmark = pytest.mark.integration


def test_snapshot_last_index_reads_the_head_only(tmp_path):
    assert snapshot_last_index(str(tmp_path / "none")) is None
    (tmp_path / "short").write_bytes(b"LSSNAP01")
    assert snapshot_last_index(str(tmp_path / "short")) is None


def test_a_snapshot_sent_again_does_not_undo_what_the_follower_applied(tmp_path):
    stores = start_cluster(tmp_path, 3)
    try:
        leader = leader_of(stores)
        follower = next(s for s in stores if s is not leader)
        for i in range(50):
            leader.append("k", b"before-%d" % i)
        leader.force_compaction()
        wait_for(lambda: leader.status()["snapshots_written"] >= 1, what="the leader's snapshot")
        with open(os.path.join(leader.data_dir, SNAPSHOT_FILE), "rb") as f:
            blob = f.read()
        snapshot_index = snapshot_last_index(os.path.join(leader.data_dir, SNAPSHOT_FILE))
        assert snapshot_index is not None
        for i in range(20):
            leader.append("k", b"after-%d" % i)
        follower.barrier(timeout_s=20.0)
        before = follower.status()
        assert before["applied_index"] > snapshot_index
        assert before["logs"]["k"] == 70

        node = follower._node
        peer = next(n for n in node.otherNodes if n.id == leader.self_address)
        seen: dict = {}
        done = threading.Event()

        def resend() -> None:  # on the follower's tick thread, as the transport delivers
            try:
                msg = {"type": "append_entries", "term": node.raftCurrentTerm}
                for piece in ((blob, True, False), (b"", False, True)):
                    msg = dict(msg, commit_index=node.raftCommitIndex, serialized=piece)
                    node._ls_transport._onMessageReceived(peer, msg)
                with follower._lock:
                    seen["last_id"] = follower._state.last_id("k")
                seen["applied"] = node.raftLastApplied
                seen["journal_last"] = follower._journal.last_index()
            finally:
                done.set()

        node.ls_run_on_tick(resend)
        assert done.wait(20.0)
        assert seen["last_id"] == 70, seen  # was 50: the state went back to the snapshot
        assert seen["applied"] >= before["applied_index"], seen
        assert seen["journal_last"] >= before["last_log_index"], seen
        assert not os.path.exists(os.path.join(follower.data_dir, SNAPSHOT_FILE + ".1.tmp"))
        # The follower goes on with the leader.
        new_id = leader.append("k", b"later")
        follower.barrier(timeout_s=20.0)
        got = follower.read("k", limit=1000)
        assert [e.id for e in got] == list(range(1, new_id + 1))
        assert got[-1].data == b"later"
    finally:
        for s in stores:
            s.close()
