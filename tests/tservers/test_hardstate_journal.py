"""The hard-state journal (tservers/hardstate.py, design/consensus.md "The hard-state
journal"): the terms and votes of a server's replicas appended to one file with one
fdatasync a driver round, read back merged with the consensus metadata files.

Real files throughout; the power-loss cases on the project's FUSE file system that drops
what was not synced (tests/nemesis/lazyfs.py), each first against a journal that does not
sync (it must lose states there) and then against the real one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rpc.protocols.tserver_pb2 import ConsensusMetaPB, MemberType, RaftConfigPB
from tests.support.procs import wait_for
from tests.tservers.helpers import SIX, open_manager
from tservers import hardstate, metafile
from tservers.consensus.types import AppendRequest
from tservers.fs import INSTANCE_VERSION_FILES, INSTANCE_VERSION_JOURNAL, FsError, FsLayout

REPO = Path(__file__).resolve().parents[2]


def _journal(tmp_path: Path) -> hardstate.HardStateJournal:
    j = hardstate.HardStateJournal(tmp_path / hardstate.NAME)
    j.open_for_append()
    return j


def test_appends_read_back_last_state_wins_and_forget(tmp_path):
    j = _journal(tmp_path)
    j.append([("a", 1, ""), ("b", 1, "")])
    j.append([("a", 2, "x"), ("c", 5, "c")])
    j.forget(["b"])
    j.close()
    states, size, records = hardstate.read(j.path)
    assert states == {"a": (2, "x"), "c": (5, "c")}
    assert records == 3 and size == j.path.stat().st_size
    again = _journal(tmp_path)  # opened again: appends go after the three records
    again.append([("c", 6, "")])
    again.close()
    assert hardstate.read(j.path)[0] == {"a": (2, "x"), "c": (6, "")}


def test_newer_and_merge():
    assert hardstate.newer((3, ""), (2, "x"))
    assert hardstate.newer((2, "x"), (2, ""))  # a vote given in the same term
    assert not hardstate.newer((2, ""), (2, "x"))
    assert not hardstate.newer((2, "x"), (2, "x"))
    assert not hardstate.newer((1, "y"), (2, ""))
    cm = ConsensusMetaPB(tablet_id="t", current_term=4, voted_for="")
    assert hardstate.merge(cm, (5, "z")).current_term == 5 and cm.voted_for == "z"
    cm = ConsensusMetaPB(tablet_id="t", current_term=7, voted_for="f")
    hardstate.merge(cm, (6, "j"))  # the file is newer (a later config write, say)
    assert (cm.current_term, cm.voted_for) == (7, "f")
    hardstate.merge(cm, None)
    assert (cm.current_term, cm.voted_for) == (7, "f")


def test_a_torn_or_corrupt_tail_is_cut_and_appends_go_on(tmp_path):
    j = _journal(tmp_path)
    j.append([("a", 1, "")])
    j.append([("a", 2, "")])
    j.close()
    good = j.path.stat().st_size
    with open(j.path, "ab") as f:  # a record cut short by a crash mid-write
        f.write(b"\x40\x00\x00\x00\x11\x22")
    assert hardstate.read(j.path)[:2] == ({"a": (2, "")}, good)
    again = _journal(tmp_path)
    assert j.path.stat().st_size == good  # cut off (and synced) before any append
    again.append([("a", 3, "v")])
    again.close()
    # A record whose bytes are damaged ends the journal there too (its CRC).
    data = bytearray(j.path.read_bytes())
    data[-1] ^= 0xFF
    j.path.write_bytes(bytes(data))
    assert hardstate.read(j.path)[0] == {"a": (2, "")}


def test_compaction_keeps_every_state_in_a_bounded_file(tmp_path, monkeypatch):
    monkeypatch.setattr(hardstate, "COMPACT_BYTES", 8 << 10)
    j = _journal(tmp_path)
    want: dict[str, hardstate.State] = {}
    for term in range(1, 301):
        states = [(f"t{i:02d}", term, "") for i in range(term % 7, 20, 3)]
        before = j.compactions
        j.append(states)
        want.update({t: (tm, v) for t, tm, v in states})
        if j.compactions != before:  # the record that made it compact is in the new file
            assert hardstate.read(j.path)[0] == want
    assert j.states == want
    assert j.compactions >= 1
    assert j.path.stat().st_size < 16 << 10
    j.close()
    assert hardstate.read(j.path)[0] == want
    assert not list(tmp_path.glob("*.tmp"))


def test_a_journal_of_another_format_is_refused_by_name(tmp_path):
    root = tmp_path / "fs"
    FsLayout.format(root)
    (root / "consensus-meta" / hardstate.NAME).write_bytes(b"XXXX\x01\x00\x00\x00")
    with pytest.raises(FsError, match="not a hard-state journal"):
        FsLayout.open(root)


def _followers(m, n: int, term_from: str = "peer-a") -> list[str]:
    from rpc.protocols.tserver_pb2 import CreateTabletRequest

    ids = []
    for i in range(n):
        cfg = RaftConfigPB()
        for uuid, port in ((m.fs.uuid, 1), (term_from, 2), ("peer-b", 3)):
            cfg.peers.add(uuid=uuid, member_type=MemberType.VOTER, address=f"127.0.0.1:{port}")
        tid = f"f{i:03d}"
        m.create_tablet(CreateTabletRequest(tablet_id=tid, table_name="t", schema=SIX, config=cfg))
        ids.append(tid)
    return ids


def _raw_cmeta(root: Path, tablet_id: str) -> ConsensusMetaPB:
    return metafile.read_meta(
        root / "consensus-meta" / tablet_id, metafile.MAGIC_CMETA, ConsensusMetaPB
    )


def test_terms_survive_a_restart_from_the_journal_and_downgrade_folds_them(tmp_path):
    """A manager's followers take a new term (one driver round): the terms are in the
    journal, not the files; a new manager on the root reads them back; `tserver fs
    downgrade` writes them into the files, removes the journal and marks the root for older
    code, which refused it before (metafile version 2)."""
    root = tmp_path / "fs"
    term = 9
    m = open_manager(root)
    try:
        ids = _followers(m, 12)
        msgs = [AppendRequest(t, "peer-a", m.fs.uuid, term, 0, 0, (), 0) for t in ids]
        assert m.driver.deliver(msgs, {"peer-a": "127.0.0.1:2"}) == len(ids)
        wait_for(
            lambda: all(m.replicas[t].tablet.cmeta.current_term == term for t in ids),
            30,
            "every follower's new term",
        )
    finally:
        m.close()
    assert all(_raw_cmeta(root, t).current_term < term for t in ids)  # the files: stale
    assert FsLayout.instance_version(root) == INSTANCE_VERSION_JOURNAL
    with pytest.raises(metafile.MetaFileCorrupt, match="unsupported version 2"):
        # What older code (metafile version 1 only) says of this root's instance file.
        metafile.read_meta(
            root / "instance", metafile.MAGIC_INSTANCE, type(FsLayout.read_instance(root))
        )
    m = open_manager(root)
    try:
        assert all(m.replicas[t].tablet.cmeta.current_term == term for t in ids)
        assert all(m.fs.read_cmeta(t).current_term == term for t in ids)
    finally:
        m.close()
    r = subprocess.run(
        [sys.executable, "-m", "tservers.cli", "fs", "downgrade", "--fs-root", str(root), "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert sorted(__import__("json").loads(r.stdout)["cmeta_written"]) == ids
    assert not (root / "consensus-meta" / hardstate.NAME).exists()
    assert FsLayout.instance_version(root) == INSTANCE_VERSION_FILES
    assert all(_raw_cmeta(root, t).current_term == term for t in ids)  # older code reads this


def test_cmeta_rewrite_lowers_a_term_the_journal_holds(tmp_path):
    """`tserver cmeta rewrite --term N --force` below the journal's term: the file holds
    (the journal forgets the tablet), here and after a restart."""
    root = tmp_path / "fs"
    m = open_manager(root)
    try:
        (tid,) = _followers(m, 1)
        msgs = [AppendRequest(tid, "peer-a", m.fs.uuid, 5, 0, 0, (), 0)]
        m.driver.deliver(msgs, {"peer-a": "127.0.0.1:2"})
        wait_for(lambda: m.replicas[tid].tablet.cmeta.current_term == 5, 30, "term 5")
    finally:
        m.close()
    r = subprocess.run(
        [sys.executable, "-m", "tservers.cli", "cmeta", "rewrite", "--fs-root", str(root),
         "--tablet", tid, "--term", "2", "--force"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert FsLayout.open(root).read_cmeta(tid).current_term == 2
    m = open_manager(root)
    try:
        assert m.replicas[tid].tablet.cmeta.current_term == 2
    finally:
        m.close()


# ------------------------------------------------------------------------ power loss


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator:
    if not os.path.exists("/dev/fuse"):
        pytest.skip("needs /dev/fuse")
    from tests.nemesis.lazyfs import LazyFS

    with LazyFS(tmp_path / "store", tmp_path / "mnt") as fs:
        yield fs


def _storm(j: hardstate.HardStateJournal, rounds: int) -> dict[str, hardstate.State]:
    """Rounds of new terms and votes as an election storm makes them; returns what each
    append acknowledged (returned from) last, per tablet."""
    acked: dict[str, hardstate.State] = {}
    for r in range(1, rounds + 1):
        states = [(f"t{i:03d}", r, f"v{r % 3}" if i % 2 else "") for i in range(r % 5, 200, 4)]
        j.append(states)
        acked.update({t: (term, v) for t, term, v in states})
    return acked


@pytest.mark.integration
@pytest.mark.parametrize("build", ["no fdatasync", "real"])
def test_every_acknowledged_state_survives_a_power_loss(lazy, monkeypatch, build):
    """Each state an append returned from is there after the power goes (a torn last
    write included); a journal that does not sync loses some: the test catches it."""
    path = lazy.mount / hardstate.NAME
    j = hardstate.HardStateJournal(path)
    j.open_for_append()  # (made with its header, synced and named)
    if build == "no fdatasync":
        monkeypatch.setattr(hardstate, "_datasync", lambda fd: None)
    acked = _storm(j, 40)
    lazy.power_loss(torn=True)
    got = hardstate.read(path)[0]
    lost = [t for t, s in acked.items() if got.get(t) != s]
    if build == "no fdatasync":
        assert lost, "a journal that does not sync lost nothing: the test cannot catch it"
        return
    assert lost == []
    again = hardstate.HardStateJournal(path)
    again.open_for_append()
    again.append([("t000", 1000, "")])
    again.close()
    assert hardstate.read(path)[0]["t000"] == (1000, "")


@pytest.mark.integration
def test_states_survive_compactions_and_a_power_loss(lazy, monkeypatch):
    monkeypatch.setattr(hardstate, "COMPACT_BYTES", 16 << 10)
    path = lazy.mount / hardstate.NAME
    j = hardstate.HardStateJournal(path)
    j.open_for_append()
    acked = _storm(j, 300)
    assert j.compactions >= 2
    lazy.power_loss()
    assert hardstate.read(path)[0] == acked
    assert sorted(os.listdir(lazy.mount)) == [hardstate.NAME]
