"""Tablet copy (seed 000) with real processes: a leader copies its tablet onto a replica
that was deleted, and onto a server added to the config that never had it."""

from __future__ import annotations

import pytest

from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    ChangeConfigRequest,
    ChangeConfigResponse,
    ConfigChangeTypePB,
    MemberType,
    RaftPeerPB,
)
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def quartet(tmp_path):
    # Small flushes, so that copies carry data blocks as well as WAL segments.
    t = TServerTrio(tmp_path, n=4, extra_args=["--flush-rows", "150"])
    try:
        t.start_all()
        yield t
    finally:
        t.stop_all()


def _rows_at(q: TServerTrio, i: int, tablet_id: str) -> int:
    r = q.report(i, tablet_id)
    if r is None or r.status != "RUNNING":
        return -1
    return r.applied_index


def _log_has(proc, text: str) -> bool:
    return proc.err_path.exists() and text in proc.err_path.read_text(errors="replace")


def test_deleted_follower_is_copied_again(quartet: TServerTrio):
    q = quartet
    q.create_tablet("k1", members=[0, 1, 2])
    lead = q.leader("k1")
    for b in range(6):
        last = q.write(lead, "k1", range(b * 100, b * 100 + 100))
    wait_for(lambda: (q.report(lead, "k1").blocks or 0) >= 1, 30, "a flush at the leader")
    f = next(i for i in (0, 1, 2) if i != lead)
    q.client(f).delete_tablet("k1")
    # Deleted (the copy back may have begun already: the tombstone tells its members).
    assert _log_has(q.procs[f], "tablet k1: deleted (tombstone at")
    # The leader's next append gets TABLET_DELETED: it asks f to copy the tablet from it.
    wait_for(lambda: _rows_at(q, f, "k1") >= last.op_id.index, 60, "the copied replica")
    r = q.report(f, "k1")
    assert r.data_state == 1 and r.role == "FOLLOWER"  # READY
    # The copy is a full replica: with the leader gone it serves every row.
    q.kill9(lead)
    q.write_anywhere("k1", [10_000])
    other = next(i for i in (0, 1, 2) if i not in (lead, f))
    new = q.leader("k1", among=[f, other])
    assert q.scan_ids(new, "k1") == list(range(600)) + [10_000]


def test_deleted_follower_of_a_quiet_group_is_copied_again(tmp_path):
    """The same with the group quiet first (issue 28): a quiet leader sends nothing, so no
    append of its ever meets the tombstone; the deleted follower must tell its leader. The
    CI failure this guards against: the leader went quiet before the delete and the copy
    never came (60 s)."""
    q = TServerTrio(tmp_path, n=3, extra_args=["--log-level", "debug"])
    try:
        q.start_all()
        q.create_tablet("kq")
        lead = q.leader("kq")
        last = q.write(lead, "kq", range(100))
        p = q.procs
        f = next(i for i in (0, 1, 2) if i != lead)
        quiet_at = f"kq/{p[lead].uuid} quiet at {last.op_id.index}"
        wait_for(lambda: _log_has(p[lead], quiet_at), 30, "a quiet leader")
        wait_for(lambda: _log_has(p[f], f"kq/{p[f].uuid} quiet, following"), 30, "quiet")
        q.client(f).delete_tablet("kq")
        assert _log_has(p[f], "tablet kq: deleted (tombstone at")  # (it may be COPYING now)
        wait_for(lambda: _rows_at(q, f, "kq") >= last.op_id.index, 60, "the copied replica")
        r = q.report(f, "kq")
        assert r.data_state == 1 and r.role == "FOLLOWER"  # READY
    finally:
        q.stop_all()


def test_added_server_without_the_tablet_is_copied_and_promoted(quartet: TServerTrio):
    q = quartet
    q.create_tablet("k2", members=[0, 1, 2])
    lead = q.leader("k2")
    for b in range(4):
        q.write(lead, "k2", range(b * 100, b * 100 + 100))
    new = q.procs[3]
    p = q.procs[lead]
    with RpcClient(p.address, "test") as rc:
        rc.call(
            p.uuid,
            "TServer.ChangeConfig",
            ChangeConfigRequest(
                tablet_id="k2",
                type=ConfigChangeTypePB.ADD_SERVER,
                peer=RaftPeerPB(
                    uuid=new.uuid,
                    address=new.address,
                    member_type=MemberType.NON_VOTER,
                    promote=True,
                ),
                cas_config_index=0,
            ),
            ChangeConfigResponse,
            timeout_s=20,
        )

    def promoted():
        r = q.report(lead, "k2")
        peers = {x.uuid: x.member_type for x in r.committed_config.peers}
        return peers.get(new.uuid) == MemberType.VOTER

    wait_for(promoted, 60, "server 3 copied, caught up and promoted")
    r3 = q.report(3, "k2")
    assert r3.status == "RUNNING" and r3.memstore_rows + 0 >= 0


@pytest.mark.parametrize(
    "point",
    [
        "copy.after_copying_superblock",
        "copy.after_cmeta",
        "copy.after_wal",
        "copy.after_data",
        "copy.after_ready_superblock",
    ],
)
def test_crash_during_a_copy_then_copied_again(quartet: TServerTrio, point):
    from tservers.crash import CRASH_ENV, CRASH_EXIT_CODE

    q = quartet
    q.restart(3, env={CRASH_ENV: point})
    q.create_tablet("k3", members=[0, 1, 2])
    lead = q.leader("k3")
    for b in range(3):
        q.write(lead, "k3", range(b * 100, b * 100 + 100))
    new = q.procs[3]
    p = q.procs[lead]
    with RpcClient(p.address, "test") as rc:
        rc.call(
            p.uuid,
            "TServer.ChangeConfig",
            ChangeConfigRequest(
                tablet_id="k3",
                type=ConfigChangeTypePB.ADD_SERVER,
                peer=RaftPeerPB(
                    uuid=new.uuid,
                    address=new.address,
                    member_type=MemberType.NON_VOTER,
                    promote=True,
                ),
            ),
            ChangeConfigResponse,
            timeout_s=20,
        )
    wait_for(lambda: new.proc.poll() is not None, 60, f"server 3 to crash at {point}")
    assert new.proc.returncode == CRASH_EXIT_CODE
    q.restart(3)  # not armed: COPYING at startup deletes itself, then it is copied again

    def promoted():
        r = q.report(lead, "k3")
        peers = {x.uuid: x.member_type for x in r.committed_config.peers}
        return peers.get(new.uuid) == MemberType.VOTER

    wait_for(promoted, 60, "server 3 copied again and promoted")
    r3 = q.report(3, "k3")
    assert r3.status == "RUNNING"
    # It holds the data: with two of the original voters gone, it and the last one serve.
    others = [i for i in (0, 1, 2) if i != lead]
    q.kill9(lead)
    q.kill9(others[0])
    # Four voters, two alive: no majority. Bring one back to make three of four.
    q.restart(others[0])
    q.write_anywhere("k3", [5000])
    leader = q.leader("k3", among=[3, others[0], others[1]])
    assert q.scan_ids(leader, "k3") == list(range(300)) + [5000]


def test_copy_progress_cancel_and_throttle(throttled: TServerTrio):
    import subprocess
    import sys

    from rpc.protocols.tserver_pb2 import StatusRequest, StatusResponse
    from tests.tservers.procs import REPO

    q = throttled
    q.create_tablet("k4")
    lead = q.leader("k4")
    # Enough bytes that the throttled copy (0.5 MB/s) outlasts two CLI calls on a loaded
    # machine (the WAL is no longer preallocated whole, so the rows make the bytes).
    for b in range(150):
        q.write(lead, "k4", range(b * 1000, b * 1000 + 1000))
    f = next(i for i in range(3) if i != lead)
    p = q.procs[f]

    def jobs():
        with RpcClient(p.address, "test") as rc:
            return list(rc.call(p.uuid, "TServer.Status", StatusRequest(), StatusResponse).copies)

    def cli(*args) -> str:
        r = subprocess.run(
            [sys.executable, "-m", "tservers.cli", *args, "--address", p.address],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        return r.stdout

    q.client(f).delete_tablet("k4")
    running = wait_for(
        lambda: next(
            (j for j in jobs() if j.state == "RUNNING" and j.bytes_done > 0),
            None,
        ),
        30,
        f"a throttled copy in progress (jobs: {jobs()})",
    )
    assert running.rate_limit_bytes_s == 500_000 and running.bytes_total > 1_000_000
    listed = cli("copies")
    assert "RUNNING" in listed and "limit 500.0 kB/s" in listed, listed
    assert "cancelling" in cli("copy-cancel", "--tablet", "k4")
    wait_for(lambda: any(j.state == "CANCELLED" for j in jobs()), 30, "the copy cancelled")
    # The leader asks again (with backoff); the next copy runs to the end, at about 0.5 MB/s.
    done = wait_for(lambda: next((j for j in jobs() if j.state == "DONE"), None), 60, "a copy done")
    assert done.files_done == done.files_total and done.bytes_done == done.bytes_total
    assert done.rate_bytes_s <= 550_000  # throttled
    wait_for(lambda: (q.report(f, "k4") or done).status == "RUNNING", 30, "the copy running")
    assert "DONE" in cli("copies")
