"""Exactly-once writes: a resent write (same request id) is applied at most once.

The dedup table's rules as plain calls (tservers/tablet/dedup.py), then real tablet server
processes: a write is sent, the key overwritten by another write, and the very same request
(same request id) sent again: it must not be applied (the value stays the overwrite) and its
answer must be the first one; an INSERT resent must not come back ALREADY_EXISTS. Also after
a leader change, a restart (WAL replay), a flush and a restart (the persisted table) and a
tablet copy (the table travels in the superblock). design/tservers.md, "Exactly-once writes".
"""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

from rpc import errors
from rpc.protocols.tserver_pb2 import LogEntryPB, OpType, RequestIdPB, WriteResponse
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for
from tservers.fs import FsLayout
from tservers.tablet.dedup import STALE, DedupTable, Done, RequestId, check_pb
from tservers.wal.log import Appender, TabletLog, WalOptions

A = b"a" * 16
B = b"b" * 16


def rid(client: bytes, seq: int, fis: int | None = None) -> RequestId:
    return RequestId(client, seq, seq if fis is None else fis)


# ---------------------------------------------------------------- the table (pure)
def test_lookup_and_record():
    t = DedupTable()
    assert t.lookup(rid(A, 1)) is None
    t.record(rid(A, 1, 1), Done(1, 10, 3))
    assert t.lookup(rid(A, 1)) == Done(1, 10, 3)
    assert t.lookup(rid(A, 2)) is None
    assert t.lookup(rid(B, 1)) is None


def test_first_incomplete_seq_forgets_finished_writes():
    t = DedupTable()
    t.record(rid(A, 1, 1), Done(1, 10, 1))
    t.record(rid(A, 2, 1), Done(1, 11, 1))  # write 1 not finished yet at the client
    assert t.lookup(rid(A, 1)) == Done(1, 10, 1)
    t.record(rid(A, 3, 3), Done(1, 12, 1))  # 1 and 2 finished: forgotten
    assert t.lookup(rid(A, 1)) is STALE
    assert t.lookup(rid(A, 2)) is STALE
    assert t.lookup(rid(A, 3)) == Done(1, 12, 1)
    assert t.entries() == 1


def test_entries_per_client_are_bounded():
    t = DedupTable(entries_per_client_max=4)
    for s in range(1, 11):
        t.record(rid(A, s, 1), Done(1, 100 + s, 1))  # the client never finishes any
        assert t.entries() <= 4
    assert [t.lookup(rid(A, s)) for s in range(1, 7)] == [STALE] * 6
    assert t.lookup(rid(A, 10)) == Done(1, 110, 1)
    assert t.lookup(rid(A, 11)) is None


def test_clients_are_bounded_least_recently_applied_evicted():
    t = DedupTable(clients_max=3)
    ids = [bytes([i]) * 16 for i in range(5)]
    for i, c in enumerate(ids[:3]):
        t.record(rid(c, 1), Done(1, 10 + i, 1))
    t.record(rid(ids[0], 2), Done(1, 20, 1))  # client 0 applied again: most recent
    t.record(rid(ids[3], 1), Done(1, 21, 1))  # a fourth client: client 1 goes
    assert len(t) == 3
    assert t.lookup(rid(ids[1], 1)) is None  # forgotten entirely (a resend would apply)
    assert t.lookup(rid(ids[0], 2)) == Done(1, 20, 1)
    assert t.lookup(rid(ids[2], 1)) == Done(1, 12, 1)


def test_persisted_table_round_trips_with_its_eviction_order():
    t = DedupTable(clients_max=3)
    ids = [bytes([i]) * 16 for i in range(4)]
    for i, c in enumerate(ids[:3]):
        t.record(rid(c, 5, 4), Done(2, 10 + i, 7))
    t.record(rid(ids[0], 6, 4), Done(2, 20, 1))
    back = DedupTable.from_pb(list(reversed(t.to_pb())), clients_max=3)
    assert back.to_pb() == t.to_pb()
    # The same next step evicts the same client in both (the order is by log index).
    for table in (t, back):
        table.record(rid(ids[3], 1), Done(2, 21, 1))
    assert back.to_pb() == t.to_pb()
    assert back.lookup(rid(ids[1], 5)) is None and back.lookup(rid(ids[0], 5)) == Done(2, 10, 7)


def test_bad_persisted_tables_are_refused():
    good = DedupTable()
    good.record(rid(A, 3, 2), Done(1, 5, 1))
    assert check_pb(good.to_pb()) is None
    short = good.to_pb()
    short[0].client_id = b"abc"
    assert "malformed" in check_pb(short)
    below = good.to_pb()
    below[0].floor_seq = 4
    assert "below its floor" in check_pb(below)
    assert "clients" in check_pb(good.to_pb() * 2, clients_max=1)
    with pytest.raises(errors.Corruption):
        DedupTable.from_pb(good.to_pb() * 2)  # the same client twice


def test_malformed_request_ids():
    assert RequestId(A, 1, 1).problem() is None
    assert "bytes" in RequestId(b"x", 1, 1).problem()
    assert "at least 1" in RequestId(A, 0, 0).problem()
    assert "above" in RequestId(A, 2, 3).problem()


# ---------------------------------------------------------------- real tablet servers
SCHEMA_VERSION = 1


def _row(key: int, value: str) -> pa.Table:
    return pa.table({"id": pa.array([key], pa.int64()), "v": pa.array([value], pa.string())})


def _request_id(seq: int = 1) -> RequestIdPB:
    return RequestIdPB(client_id=os.urandom(16), seq=seq, first_incomplete_seq=seq)


def _send(t: TServerTrio, i: int, tablet_id: str, op: int, key: int, value: str, request_id=None):
    return t.client(i).write(
        tablet_id, [(op, _row(key, value))], schema_version=SCHEMA_VERSION, request_id=request_id
    )


def _value(t: TServerTrio, i: int, tablet_id: str, key: int):
    table = t.client(i).scan_table(tablet_id)
    found = [
        v for k, v in zip(table["id"].to_pylist(), table["v"].to_pylist(), strict=True) if k == key
    ]
    assert len(found) <= 1
    return found[0] if found else None


def _same_answer(a: WriteResponse, b: WriteResponse) -> None:
    assert (b.op_id.term, b.op_id.index, b.rows) == (a.op_id.term, a.op_id.index, a.rows)


@pytest.fixture
def solo(tmp_path):
    # One replica; small flushes (the flush test fills the memstore past 40 rows).
    t = TServerTrio(tmp_path, n=1, extra_args=["--flush-rows", "40"])
    try:
        t.start_all()
        t.create_tablet("d1", members=[0])
        t.leader("d1")
        yield t
    finally:
        t.stop_all()


@pytest.mark.integration
def test_resent_upsert_after_an_overwrite_is_not_applied_again(solo: TServerTrio):
    request = _request_id()
    first = _send(solo, 0, "d1", OpType.UPSERT, 7, "old", request)
    _send(solo, 0, "d1", OpType.UPSERT, 7, "new")  # another client's overwrite
    again = _send(solo, 0, "d1", OpType.UPSERT, 7, "old", request)  # the resend
    assert _value(solo, 0, "d1", 7) == "new"
    _same_answer(first, again)
    # A write without a request id has no dedup: sent twice, applied twice.
    a = _send(solo, 0, "d1", OpType.UPSERT, 7, "plain")
    b = _send(solo, 0, "d1", OpType.UPSERT, 7, "plain")
    assert b.op_id.index > a.op_id.index


@pytest.mark.integration
def test_resent_insert_that_landed_is_answered_not_already_exists(solo: TServerTrio):
    request = _request_id()
    first = _send(solo, 0, "d1", OpType.INSERT, 8, "ins", request)
    again = _send(solo, 0, "d1", OpType.INSERT, 8, "ins", request)
    _same_answer(first, again)
    with pytest.raises(errors.AlreadyExists):  # a new insert of the key is still refused
        _send(solo, 0, "d1", OpType.INSERT, 8, "ins", _request_id())
    assert _value(solo, 0, "d1", 8) == "ins"


@pytest.mark.integration
def test_resend_after_a_restart_is_not_applied_again(solo: TServerTrio):
    """The table is rebuilt by WAL replay (nothing flushed)."""
    request = _request_id()
    first = _send(solo, 0, "d1", OpType.UPSERT, 9, "old", request)
    _send(solo, 0, "d1", OpType.UPSERT, 9, "new")
    assert solo.report(0, "d1").flushed_index == 0
    solo.kill9(0)
    solo.restart(0)
    solo.leader("d1")
    again = _send(solo, 0, "d1", OpType.UPSERT, 9, "old", request)
    assert _value(solo, 0, "d1", 9) == "new"
    _same_answer(first, again)


@pytest.mark.integration
def test_resend_after_a_flush_and_a_restart_is_not_applied_again(solo: TServerTrio):
    """The table is persisted with the flush (entries at or below the flushed index are not
    replayed at start-up)."""
    request = _request_id()
    first = _send(solo, 0, "d1", OpType.UPSERT, 10, "old", request)
    over = _send(solo, 0, "d1", OpType.UPSERT, 10, "new")
    solo.client(0).write(
        "d1", [(OpType.INSERT, _rows(range(1000, 1100)))], schema_version=SCHEMA_VERSION
    )
    wait_for(lambda: solo.report(0, "d1").flushed_index >= over.op_id.index, 60, "a flush")
    solo.kill9(0)
    solo.restart(0)
    solo.leader("d1")
    again = _send(solo, 0, "d1", OpType.UPSERT, 10, "old", request)
    assert _value(solo, 0, "d1", 10) == "new"
    _same_answer(first, again)


@pytest.mark.integration
def test_a_duplicate_entry_in_the_log_is_not_applied_at_replay(solo: TServerTrio):
    """Apply time is the rule: a second entry of the same request id in the log (as a resend
    proposed by another leader while the first was not yet known to it would leave) is a
    no-op when applied, here at WAL replay. Put in the log offline, after the overwrite."""
    request = _request_id()
    _send(solo, 0, "d1", OpType.UPSERT, 14, "old", request)
    _send(solo, 0, "d1", OpType.UPSERT, 14, "new")
    solo.kill9(0)
    fs = FsLayout.open(solo.roots[0])
    opts = WalOptions()
    wal, entries = TabletLog.open(fs.wal_dir("d1"), "d1", opts)
    first = next(e for e in entries if e.write.HasField("request_id"))
    dup = LogEntryPB()
    dup.CopyFrom(first)
    dup.term, dup.index = entries[-1].term, entries[-1].index + 1
    app = Appender(opts)
    done = threading.Event()
    errs: list = []
    app.append(wal, [dup], lambda err: (errs.append(err), done.set()))
    assert done.wait(30) and errs == [None]
    wal.close()
    app.close()
    solo.restart(0)
    solo.leader("d1")
    wait_for(lambda: solo.report(0, "d1").applied_index > dup.index, 30, "the replay")
    assert _value(solo, 0, "d1", 14) == "new"
    assert f"entry {dup.index} is write 1 of client" in solo.procs[0].err_path.read_text()


def _rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


@pytest.fixture
def trio(tmp_path):
    t = TServerTrio(tmp_path, extra_args=["--flush-rows", "40"])
    try:
        t.start_all()
        yield t
    finally:
        t.stop_all()


@pytest.mark.integration
def test_resend_to_a_new_leader_is_not_applied_again(trio: TServerTrio):
    """The followers built the same table by applying the log: the new leader knows."""
    trio.create_tablet("d2")
    lead = trio.leader("d2")
    request = _request_id()
    first = _send(trio, lead, "d2", OpType.UPSERT, 11, "old", request)
    _send(trio, lead, "d2", OpType.UPSERT, 11, "new")
    trio.kill9(lead)
    new = trio.leader("d2", among=[i for i in range(3) if i != lead])
    again = _send(trio, new, "d2", OpType.UPSERT, 11, "old", request)
    assert _value(trio, new, "d2", 11) == "new"
    _same_answer(first, again)


@pytest.mark.integration
def test_resend_to_a_copied_replica_is_not_applied_again(trio: TServerTrio):
    """The table travels with a tablet copy (in the superblock, as of the flush): the
    copied replica, made leader, answers the resend without applying it."""
    trio.create_tablet("d3")
    lead = trio.leader("d3")
    f, g = [i for i in range(3) if i != lead]
    request = _request_id()
    first = _send(trio, lead, "d3", OpType.UPSERT, 12, "old", request)
    over = _send(trio, lead, "d3", OpType.UPSERT, 12, "new")
    trio.client(lead).write(
        "d3", [(OpType.INSERT, _rows(range(1000, 1100)))], schema_version=SCHEMA_VERSION
    )
    wait_for(lambda: trio.report(lead, "d3").flushed_index >= over.op_id.index, 60, "a flush")
    # f is deleted and copied again from the leader: a write wakes the group (a quiet leader
    # sends nothing) and its append to f, refused TABLET_DELETED, starts the copy.
    trio.client(f).delete_tablet("d3")
    woke = _send(trio, lead, "d3", OpType.UPSERT, 13, "w")

    def copied() -> bool:
        r = trio.report(f, "d3")
        return r is not None and r.status == "RUNNING" and r.applied_index >= woke.op_id.index

    wait_for(copied, 60, "the copied replica")
    # g goes down, one more write (the leader and f): g's log is now behind, so with the
    # leader gone only f can be elected.
    trio.kill9(g)
    last = _send(trio, lead, "d3", OpType.UPSERT, 13, "x")
    wait_for(lambda: trio.report(f, "d3").applied_index >= last.op_id.index, 30, "f caught up")
    trio.kill9(lead)
    trio.restart(g)
    assert trio.leader("d3", among=[f, g]) == f
    again = _send(trio, f, "d3", OpType.UPSERT, 12, "old", request)
    assert _value(trio, f, "d3", 12) == "new"
    _same_answer(first, again)
