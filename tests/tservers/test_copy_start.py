"""The follower's checks before a tablet copy (seed 000, StartTabletCopy), on a real manager
and its files: expected state, caller term, last op id, unreadable consensus metadata, and
the same checks again when a queued job starts."""

from __future__ import annotations

import pytest

from rpc.errors import IllegalState, InvalidTerm, TabletFailed
from rpc.protocols.tserver_pb2 import DataState, OpIdPB, OpType, StartTabletCopyRequest
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tservers.tablet.manager import TabletDataState
from tservers.tablet_copy import _LiveTarget, check_copy_start


def req(expected=DataState.DATA_STATE_UNKNOWN, term=5, last=None) -> StartTabletCopyRequest:
    r = StartTabletCopyRequest(
        tablet_id="t1", source_uuid="src", source_address="127.0.0.1:1", caller_term=term,
        expected_state=expected,
    )  # fmt: skip
    if last is not None:
        r.last_op_id.CopyFrom(OpIdPB(term=last[0], index=last[1]))
    return r


@pytest.fixture
def manager(tmp_path):
    m = open_manager(tmp_path / "r")
    try:
        yield m
    finally:
        m.close()


def tombstone(m, terms: int = 1):
    """t1 created, written and deleted `terms` times (each re-create raises the term)."""
    for _ in range(terms):
        t = create(m)
        t.write(1, [(OpType.INSERT, ipc(six_rows(range(10))))], deadline())
        m.delete_tablet("t1")
    assert m.data_state("t1") is TabletDataState.DELETED
    return m.last_op_id("t1")


def test_does_not_exist(manager):
    check_copy_start(manager, req())
    check_copy_start(manager, req(last=(0, 0)))  # "no last op id" is what it has
    with pytest.raises(IllegalState, match="no last op id"):
        check_copy_start(manager, req(last=(1, 3)))
    with pytest.raises(IllegalState, match="is DOES_NOT_EXIST, not DELETED"):
        check_copy_start(manager, req(DataState.DELETED))


def test_a_state_a_copy_cannot_start_from_is_refused(manager):
    with pytest.raises(IllegalState, match="cannot start from state"):
        check_copy_start(manager, req(DataState.COPYING))


def test_tombstone_term_and_last_op_id(manager):
    last = tombstone(manager)
    term = manager.fs.read_cmeta("t1").current_term
    assert term >= 1
    check_copy_start(manager, req(DataState.DELETED, term=term))
    check_copy_start(manager, req(DataState.DELETED, term=term, last=(last.term, last.index)))
    with pytest.raises(InvalidTerm):
        check_copy_start(manager, req(DataState.DELETED, term=term - 1))
    with pytest.raises(IllegalState, match="last op id here is"):
        check_copy_start(
            manager, req(DataState.DELETED, term=term, last=(last.term, last.index + 1))
        )
    with pytest.raises(IllegalState, match="is DELETED, not READY"):
        check_copy_start(manager, req(DataState.READY, term=term))


def test_unreadable_or_missing_consensus_metadata_is_refused(manager):
    """Adopting the source's metadata would forget this replica's vote (amnesia)."""
    tombstone(manager)
    path = manager.fs.cmeta_path("t1")
    good = path.read_bytes()
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    path.write_bytes(bytes(bad))
    with pytest.raises(TabletFailed, match="unreadable"):
        check_copy_start(manager, req(DataState.DELETED, term=99))
    path.unlink()
    with pytest.raises(TabletFailed, match="missing"):
        check_copy_start(manager, req(DataState.DELETED, term=99))
    path.write_bytes(good)
    check_copy_start(manager, req(DataState.DELETED, term=99))


def test_queued_job_checks_again_when_it_starts(manager):
    """A copy asked for while the tablet did not exist, whose job starts after the tablet
    was created here, is refused: nothing deleted, nothing copied over it."""
    r = req()
    check_copy_start(manager, r)  # when asked: DOES_NOT_EXIST, as expected
    create(manager).write(1, [(OpType.INSERT, ipc(six_rows(range(5))))], deadline())
    with pytest.raises(IllegalState, match="is READY, not DOES_NOT_EXIST"):
        _LiveTarget(manager).prepare(r)
    assert manager.data_state("t1") is TabletDataState.READY
    assert manager.tablet("t1").scan([], [], [], [], 0).num_rows == 5


def test_begin_copy_refuses_an_older_leader_than_the_tombstones_last_entry(manager):
    last = tombstone(manager, terms=2)
    assert last.term >= 2
    with pytest.raises(IllegalState, match="older leader"):
        manager.begin_copy("t1", caller_term=last.term - 1)
    assert manager.data_state("t1") is TabletDataState.DELETED
    manager.begin_copy("t1", caller_term=last.term)
    assert manager.data_state("t1") is TabletDataState.COPYING
    assert manager.last_op_id("t1") == last  # kept, so that it can still vote


def test_no_create_while_a_copy_of_the_tablet_is_queued_or_running(manager):
    """Between StartTabletCopy and its step 1 the replica is still DOES_NOT_EXIST: a
    CreateTablet meanwhile is refused, not overwritten by the copy (or the copy by it)."""
    import threading

    from rpc.errors import NotFound
    from rpc.protocols.tserver_pb2 import BeginCopySessionRequest
    from rpc.server import RpcServer

    asked, release = threading.Event(), threading.Event()

    def begin(_request, _ctx):  # the source: holds the session's opening until released
        asked.set()
        release.wait(30)
        raise NotFound("tablet t1 not found")

    source = RpcServer("src", service="tserver")
    source.register("TServer.BeginCopySession", BeginCopySessionRequest, begin)
    source.start()
    try:
        r = req()
        r.source_address = source.address
        manager.copy_jobs.start(r)
        assert asked.wait(30), "the job never asked the source"
        assert manager.copy_jobs.pending("t1")
        with pytest.raises(IllegalState, match="tablet copy of it is queued or running"):
            create(manager)
        assert manager.data_state("t1") is TabletDataState.DOES_NOT_EXIST
        release.set()
        from tests.support.procs import wait_for

        wait_for(lambda: not manager.copy_jobs.pending("t1"), 30, "the job failed")
        assert [j.state for j in manager.copy_jobs.jobs()] == ["FAILED"]
        create(manager)  # now it may
        assert manager.data_state("t1") is TabletDataState.READY
    finally:
        release.set()
        source.close()
