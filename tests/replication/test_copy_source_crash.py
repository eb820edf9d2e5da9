"""Tablet copy when the source side fails (seed 000), with real processes: the source killed
-9 in the middle of a copy, and a copy session abandoned by a follower killed mid-copy."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    DataState,
    FetchCopyChunkRequest,
    FetchCopyChunkResponse,
    StatusRequest,
    StatusResponse,
)
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for
from tests.tservers.procs import REPO
from tservers.crash import CRASH_ENV, CRASH_EXIT_CODE

pytestmark = pytest.mark.integration


def copy_jobs(q: TServerTrio, i: int) -> list:
    p = q.procs[i]
    try:
        with RpcClient(p.address, "test") as rc:
            return list(rc.call(p.uuid, "TServer.Status", StatusRequest(), StatusResponse).copies)
    except errors.RpcError:
        return []


def running_at(q: TServerTrio, i: int, tablet: str) -> int:
    r = q.report(i, tablet)
    return r.applied_index if r is not None and r.status == "RUNNING" else -1


def test_source_killed_mid_copy_then_copied_again(throttled: TServerTrio):
    q = throttled
    q.create_tablet("s1")
    lead = q.leader("s1")
    for b in range(40):
        last = q.write(lead, "s1", range(b * 1000, b * 1000 + 1000))
    f = next(i for i in range(3) if i != lead)
    q.client(f).delete_tablet("s1")  # the leader (the source) copies it back, throttled
    running = wait_for(
        lambda: next((j for j in copy_jobs(q, f) if j.state == "RUNNING" and j.bytes_done), None),
        30,
        "a copy onto the follower in progress",
    )
    assert running.source_uuid == q.procs[lead].uuid and running.bytes_done < running.bytes_total
    q.kill9(lead)

    # The follower's job fails cleanly (bounded resends to a dead source), visible as
    # FAILED; the replica goes back to a tombstone that keeps voting.
    failed = wait_for(
        lambda: next((j for j in copy_jobs(q, f) if j.state == "FAILED"), None),
        60,
        "the copy from the dead source to fail",
    )
    assert "connect" in failed.error and failed.bytes_done < failed.bytes_total, failed
    out = subprocess.run(
        [sys.executable, "-m", "tservers.cli", "copies", "--address", q.procs[f].address],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0 and re.search(r"^s1\tFAILED\t", out.stdout, re.M), out.stdout
    # The replica the failed job leaves is a tombstone (a restart would keep it deleted),
    # unless the other server, leading now, already asked for a copy again: the tombstone
    # votes, so that server may win its election at once and copy the tablet back (0.7 MB
    # at 0.5 MB/s) before this poll runs; a copy from it queued, running or done counts.
    dead = q.procs[lead].uuid

    def tombstone_or_retried() -> str | None:
        r = q.report(f, "s1")
        if r is not None and r.status == "TOMBSTONED" and r.data_state == DataState.DELETED:
            return "tombstone"
        again = [
            j
            for j in copy_jobs(q, f)
            if j.source_uuid != dead and j.state in ("QUEUED", "RUNNING", "DONE")
        ]
        if again:
            return f"copy {again[0].state} from {again[0].source_uuid}"
        return None

    wait_for(tombstone_or_retried, 90, "the replica deleted, or copied again")

    # The source comes back; a leader copies the tablet again, completely.
    q.restart(lead)
    done = wait_for(
        lambda: next((j for j in copy_jobs(q, f) if j.state == "DONE"), None),
        90,
        "a later copy to complete",
    )
    assert done.files_done == done.files_total and done.bytes_done == done.bytes_total
    wait_for(lambda: running_at(q, f, "s1") >= last.op_id.index, 60, "the copy serving")
    # The data is intact: with the current leader gone, the copy and the third server
    # elect a leader (each write needs both of them) and serve every row.
    now = q.leader("s1")
    q.kill9(now)
    q.write_anywhere("s1", [100_000])
    survivors = [i for i in range(3) if i != now]
    new = q.leader("s1", among=survivors)
    assert q.scan_ids(new, "s1") == list(range(40_000)) + [100_000]


@pytest.fixture
def short_sessions(tmp_path):
    # Small flushes (so that blocks pile up while compaction is anchored), and copy
    # sessions that expire after 15 s without a fetch.
    t = TServerTrio(
        tmp_path, n=3, extra_args=["--flush-rows", "150", "--copy-session-idle-s", "15"]
    )
    try:
        t.start_all()
        yield t
    finally:
        t.stop_all()


def test_abandoned_copy_session_expires_and_releases_its_anchor(short_sessions: TServerTrio):
    q = short_sessions
    q.create_tablet("s2")
    lead = q.leader("s2")
    for b in range(3):
        q.write(lead, "s2", range(b * 200, b * 200 + 200))
    f = next(i for i in range(3) if i != lead)
    q.restart(f, env={CRASH_ENV: "copy.after_wal"})
    source = q.leader("s2")  # the leader copies the deleted replica from itself
    q.client(f).delete_tablet("s2")
    # The follower dies mid-copy (after the WAL, before the data): it never ends its session.
    p = q.procs[f]
    wait_for(lambda: p.proc.poll() is not None, 60, "the follower to crash mid-copy")
    assert p.proc.returncode == CRASH_EXIT_CODE
    source_log = q.procs[source].err_path

    def expired() -> str | None:
        m = re.search(r"copy session (\w+) expired", source_log.read_text())
        return m.group(1) if m else None

    def blocks() -> int:
        r = q.report(source, "s2")
        assert r is not None and r.status == "RUNNING", r
        return r.blocks

    # While the session lives, the source's replica is anchored: each flush adds a block
    # and compaction (which merges them into one from 4 blocks on) waits. Blocks are read
    # before the log, so a count seen while the log shows no expiry was under the anchor.
    for b in range(3, 8):
        before = blocks()
        q.write_anywhere("s2", range(b * 200, b * 200 + 200))

        def flushed(before=before) -> bool:
            n = blocks()
            assert not expired(), "the session expired before the anchor was seen holding"
            assert n >= before, f"compaction ran under the anchor ({before} -> {n} blocks)"
            return n > before

        wait_for(flushed, 30, "a flush at the source under the anchor")
    assert blocks() >= 5
    # Idle past its limit, the session expires; the anchor goes and compaction runs.
    sid = wait_for(expired, 60, "the abandoned session to expire")
    wait_for(lambda: blocks() == 1, 30, "compaction at the source after the release")
    src = q.procs[source]
    with RpcClient(src.address, "test") as rc, pytest.raises(errors.NotFound):
        rc.call(
            src.uuid,
            "TServer.FetchCopyChunk",
            FetchCopyChunkRequest(session_id=sid, kind="wal", name="x", offset=0),
            FetchCopyChunkResponse,
        )
    leader = q.leader("s2", among=[i for i in range(3) if i != f])
    assert q.scan_ids(leader, "s2") == list(range(1600))
