"""New terms and votes of many tablets persisted together (issue 28): a restarted tablet
server's followers take their leaders' new terms within a round or two, and writing and
fsyncing each tablet's consensus metadata one after another on the Raft driver thread made
a restart of a server with 10,000 replicas take 326 s (bench/scale.py). The driver then
persisted a round's hard states as one batch of files (`metafile.write_meta_many`); now as
one record of the hard-state journal with one fdatasync (tservers/hardstate.py), before any
message of those groups goes out, and no consensus metadata file is written for them.

In process, real files: an in-process manager with TABLETS follower replicas (their two
other voters absent), and one delivery of append requests of a higher term for all of them
(one driver round)."""

from __future__ import annotations

import threading

from rpc.protocols.tserver_pb2 import CreateTabletRequest, MemberType, RaftConfigPB
from tests.support.procs import wait_for
from tests.tservers.helpers import SIX, open_manager
from tservers import hardstate, metafile
from tservers.consensus.types import AppendRequest

TABLETS = 24
TERM = 7


def _followers(m, n: int) -> list[str]:
    ids = []
    for i in range(n):
        cfg = RaftConfigPB()
        for uuid, port in ((m.fs.uuid, 1), ("peer-a", 2), ("peer-b", 3)):
            cfg.peers.add(uuid=uuid, member_type=MemberType.VOTER, address=f"127.0.0.1:{port}")
        tid = f"f{i:03d}"
        m.create_tablet(CreateTabletRequest(tablet_id=tid, table_name="t", schema=SIX, config=cfg))
        ids.append(tid)
    return ids


class _Recorder:
    def __init__(self, fn) -> None:
        self.fn = fn
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, items, **kw):
        with self.lock:
            self.batches.append(len(items))
        return self.fn(items, **kw)


def test_a_rounds_new_terms_are_persisted_in_one_batch(tmp_path, monkeypatch):
    m = open_manager(tmp_path / "fs")
    try:
        ids = _followers(m, TABLETS)
        journal = m.fs.hard_states
        rec = _Recorder(journal.append)
        monkeypatch.setattr(journal, "append", rec)
        files = _Recorder(lambda items, **kw: None)
        real_write_meta = metafile.write_meta
        real_write_many = metafile.write_meta_many

        def write_meta(path, magic, msg, **kw):
            if magic == metafile.MAGIC_CMETA and msg.current_term == TERM:
                files([path])
            return real_write_meta(path, magic, msg, **kw)

        def write_meta_many(items, **kw):
            files(items)
            return real_write_many(items, **kw)

        monkeypatch.setattr(metafile, "write_meta", write_meta)
        monkeypatch.setattr(metafile, "write_meta_many", write_meta_many)
        msgs = [
            AppendRequest(tid, "peer-a", m.fs.uuid, TERM, 0, 0, (), 0)
            for tid in ids
        ]  # fmt: skip
        assert m.driver.deliver(msgs, {"peer-a": "127.0.0.1:2"}) == TABLETS

        def persisted() -> bool:  # on disk, then in memory (set once the batch is durable)
            return all(
                m.fs.read_cmeta(t).current_term == TERM
                and m.replicas[t].tablet.cmeta.current_term == TERM
                for t in ids
            )

        wait_for(persisted, 30, "every follower's new term on disk")
        # One round took them all: one record of every tablet, no file written for them.
        assert rec.batches == [TABLETS], rec.batches
        assert files.batches == []
        reread = hardstate.read(journal.path)[0]  # what a restart reads
        assert all(reread[t] == (TERM, "") for t in ids)
        for t in ids:
            cm = m.fs.read_cmeta(t)
            assert cm.voted_for == "" and len(cm.committed_config.peers) == 3
        assert not list((tmp_path / "fs" / "consensus-meta").glob("*.tmp"))
    finally:
        m.close()


def test_write_meta_many_leaves_each_file_as_write_meta_does(tmp_path):
    from rpc.protocols.tserver_pb2 import ConsensusMetaPB

    d = tmp_path / "cm"
    d.mkdir()
    items = [
        (d / f"t{i}", metafile.MAGIC_CMETA, ConsensusMetaPB(tablet_id=f"t{i}", current_term=i))
        for i in range(20)
    ]
    (d / "t3.tmp").write_bytes(b"left by a crash")
    metafile.write_meta_many(items)
    for path, magic, msg in items:
        assert metafile.read_meta(path, magic, ConsensusMetaPB) == msg
    assert sorted(p.name for p in d.iterdir()) == sorted(f"t{i}" for i in range(20))
