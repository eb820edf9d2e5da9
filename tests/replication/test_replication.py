"""Per-tablet Raft with real processes: three tablet servers, one tablet with three replicas.

Majority acknowledgement, NOT_LEADER from followers, wrong recipients refused, kill -9 of
the leader under write load (no acknowledged row lost), a follower restarted catching up.
"""

from __future__ import annotations

import threading
import time

import pytest

from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    AppendRequestPB,
    ConsensusMessagePB,
    ConsensusRequest,
    ConsensusResponse,
)
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration


def _caught_up(trio: TServerTrio, i: int, tablet_id: str, index: int) -> bool:
    r = trio.report(i, tablet_id)
    return r is not None and r.applied_index >= index


def test_majority_ack_not_leader_and_recipients(trio: TServerTrio):
    trio.create_tablet("r1")
    lead = trio.leader("r1")
    followers = [i for i in range(3) if i != lead]
    acked = trio.write(lead, "r1", range(100))
    assert acked.rows == 100
    # Acknowledged means committed: every replica applies it (followers via the commit index).
    for i in range(3):
        wait_for(lambda i=i: _caught_up(trio, i, "r1", acked.op_id.index), 20, f"replica {i}")
    reports = {i: trio.report(i, "r1") for i in range(3)}
    leader_uuid = trio.procs[lead].uuid
    for i, r in reports.items():
        assert r.leader_uuid == leader_uuid and r.memstore_rows == 100
        assert r.role == ("LEADER" if i == lead else "FOLLOWER")
        assert len(r.committed_config.peers) == 3

    # Followers refuse writes and scans with a hint naming the leader.
    for f in followers:
        with pytest.raises(errors.NotLeader) as e:
            trio.write(f, "r1", [1000])
        assert e.value.leader_hint.uuid == leader_uuid
        assert e.value.leader_hint.address == trio.procs[lead].address
        with pytest.raises(errors.NotLeader):
            trio.scan_ids(f, "r1")
    assert trio.scan_ids(lead, "r1") == list(range(100))

    # Every consensus message names its recipient: a wrong one is refused.
    msg = ConsensusMessagePB(
        tablet_id="r1",
        sender=trio.procs[followers[0]].uuid,
        recipient="someone-else",
        term=99,
        append_request=AppendRequestPB(),
    )
    target = trio.procs[lead]
    with RpcClient(target.address, "test") as rc:
        with pytest.raises(errors.InvalidName):  # the rpc layer: the call names another server
            rc.call(
                "someone-else",
                "TServer.Consensus",
                ConsensusRequest(messages=[msg]),
                ConsensusResponse,
            )
        with pytest.raises(errors.InvalidName):  # the call is right, a message inside is not
            rc.call(
                target.uuid,
                "TServer.Consensus",
                ConsensusRequest(messages=[msg]),
                ConsensusResponse,
            )
    # ... and nothing happened: the leader is still the leader of the same term.
    r = trio.report(lead, "r1")
    assert r.role == "LEADER" and r.current_term == reports[lead].current_term

    # Without a majority nothing is acknowledged: both followers killed, the write times out.
    for f in followers:
        trio.kill9(f)
    c = trio.client(lead)
    c.timeout_s = 3.0
    with pytest.raises((errors.TimedOut, errors.NotLeader, errors.Unavailable)):
        trio.write(lead, "r1", [5000])
    # One follower back: a majority again, writes are acknowledged again.
    trio.restart(followers[0])
    c.timeout_s = 10.0
    ok = trio.write_anywhere("r1", [6000])
    assert ok.rows == 1
    lead2 = trio.leader("r1", among=[lead, followers[0]])
    ids = trio.scan_ids(lead2, "r1")
    assert 6000 in ids and set(range(100)) <= set(ids)


def test_kill_leader_under_write_load_loses_no_acknowledged_row(trio: TServerTrio):
    trio.create_tablet("r2")
    first = trio.leader("r2")
    acked: list[int] = []
    stop = threading.Event()
    errors_seen: list[str] = []
    next_id = [0]

    def writer() -> None:
        while not stop.is_set():
            ids = list(range(next_id[0], next_id[0] + 20))
            next_id[0] += 20  # fresh keys per attempt: a retried batch never collides
            for i in trio.alive():
                try:
                    trio.write(i, "r2", ids)
                    acked.extend(ids)
                    break
                except errors.RpcError as e:
                    errors_seen.append(type(e).__name__)
            else:
                time.sleep(0.05)

    t = threading.Thread(target=writer, name="test-writer", daemon=True)
    t.start()
    try:
        wait_for(lambda: len(acked) >= 400, 60, "writes before the kill")
        trio.kill9(first)
        before = len(acked)
        wait_for(lambda: len(acked) >= before + 400, 60, "writes after the kill")
    finally:
        stop.set()
        t.join(30)
    new = trio.leader("r2", among=[i for i in range(3) if i != first])
    assert new != first
    ids = set(trio.scan_ids(new, "r2"))
    lost = set(acked) - ids
    assert not lost, f"{len(lost)} acknowledged rows lost, e.g. {sorted(lost)[:5]}"
    assert errors_seen, "the kill went unnoticed by the writer"


def test_restarted_follower_catches_up_from_the_leaders_log(trio: TServerTrio):
    trio.create_tablet("r3")
    lead = trio.leader("r3")
    f, other = [i for i in range(3) if i != lead]
    trio.write(lead, "r3", range(0, 50))
    trio.kill9(f)
    for b in range(1, 11):  # a majority of two still commits
        last = trio.write(lead, "r3", range(b * 50, b * 50 + 50))
    trio.restart(f)
    wait_for(lambda: _caught_up(trio, f, "r3", last.op_id.index), 30, "the follower to catch up")
    assert trio.report(f, "r3").memstore_rows == 550
    # It is a full replica: with the leader gone it and the other elect one and serve it all.
    trio.kill9(lead)
    trio.write_anywhere("r3", [9999])
    new = trio.leader("r3", among=[f, other])
    assert trio.scan_ids(new, "r3") == list(range(550)) + [9999]
    # The new leader applied those rows as a follower (their keys listed, not indexed); its
    # validation still knows every one of them, and a refused write changes nothing.
    for dup in ([7], [549, 10_000], [9999]):
        with pytest.raises(errors.AlreadyExists):
            trio.write(new, "r3", dup)
    trio.write(new, "r3", [10_000])
    assert trio.scan_ids(new, "r3") == list(range(550)) + [9999, 10_000]


def test_more_concurrent_writers_than_rpc_workers(trio: TServerTrio):
    """Writers waiting for a commit hold rpc workers; the consensus messages that commit
    them must still get through (TServer.Consensus never waits for a worker)."""
    trio.create_tablet("r4")
    lead = trio.leader("r4")
    p = trio.procs[lead]
    from logcentric.tablets import TabletServerClient

    clients = [TabletServerClient(p.address, p.uuid, timeout_s=20.0) for _ in range(16)]
    failures: list[BaseException] = []

    def body(k: int) -> None:
        try:
            for j in range(5):
                start = (k * 5 + j) * 10
                clients[k].write("r4", [(1, rows_for(range(start, start + 10)))], 1)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=body, args=(k,), name=f"w{k}") for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for c in clients:
        c.close()
    assert not failures, failures[:3]
    assert trio.scan_ids(lead, "r4") == list(range(800))


def rows_for(ids):
    from tests.replication.helpers import rows

    return rows(ids)


def test_alter_schema_one_replica_at_a_time(trio: TServerTrio):
    """The coordinator alters replicas one after the other: entries of the other version
    reach a replica in between, and every replica applies them."""
    from logcentric.tablets import column

    trio.create_tablet("r5")
    lead = trio.leader("r5")
    followers = [i for i in range(3) if i != lead]
    trio.write(lead, "r5", range(10))
    # Followers first: the leader still takes version-1 writes, followers are at version 2.
    for f in followers:
        trio.client(f).alter_schema("r5", add=[column("extra", "int32", nullable=True)])
    trio.write(lead, "r5", range(10, 20))
    # Then the leader; a version-2 write; then a drop, leader first this time.
    trio.client(lead).alter_schema("r5", add=[column("extra", "int32", nullable=True)])
    c = trio.client(lead)
    import pyarrow as pa

    t2 = pa.table(
        {
            "id": pa.array([20, 21], pa.int64()),
            "v": ["a", "b"],
            "extra": pa.array([7, 8], pa.int32()),
        }
    )
    last = c.write("r5", [(1, t2)], schema_version=2)
    trio.client(lead).alter_schema("r5", drop=["v"])
    t3 = pa.table({"id": pa.array([22], pa.int64()), "extra": pa.array([9], pa.int32())})
    last = c.write("r5", [(1, t3)], schema_version=3)
    for f in followers:
        trio.client(f).alter_schema("r5", drop=["v"])
    for i in range(3):
        wait_for(lambda i=i: _caught_up(trio, i, "r5", last.op_id.index), 30, f"replica {i}")
        r = trio.report(i, "r5")
        assert r.status == "RUNNING" and r.schema_version == 3  # alters flush: rows in blocks
    # Any replica can take over with the same data.
    trio.kill9(lead)
    new = trio.leader("r5", among=followers)
    data = trio.client(new).scan_table("r5")
    assert sorted(data.column("id").to_pylist()) == list(range(23))
    assert data.column_names == ["id", "extra"]


def test_tombstoned_replica_keeps_voting(trio: TServerTrio):
    """A DELETED replica still votes with its last op id (seed 000): with the leader dead
    and one replica tombstoned, the last one is elected with the tombstone's vote; then,
    as leader, it copies the tablet back onto the tombstone."""
    trio.create_tablet("r6")
    lead = trio.leader("r6")
    last = trio.write(lead, "r6", range(10))
    a, b = [i for i in range(3) if i != lead]
    wait_for(lambda: _caught_up(trio, a, "r6", last.op_id.index), 20, "replica a")
    wait_for(lambda: _caught_up(trio, b, "r6", last.op_id.index), 20, "replica b")
    term_before = trio.report(b, "r6").current_term
    trio.kill9(lead)
    tomb = trio.client(a).delete_tablet("r6")
    assert tomb.index >= last.op_id.index
    # b needs a's vote: a grants it from the tombstone (b's log is as up to date).
    wait_for(lambda: (trio.report(b, "r6") or last).role == "LEADER", 30, "b elected")
    assert trio.report(b, "r6").current_term > term_before
    # The new leader's appends get TABLET_DELETED: it copies the tablet back onto a, and
    # the two of them commit again.
    wait_for(lambda: (trio.report(a, "r6") or last).status == "RUNNING", 30, "a copied back")
    trio.write_anywhere("r6", [99])
    assert trio.scan_ids(trio.leader("r6", among=[a, b]), "r6") == list(range(10)) + [99]
