"""`tserver copy-from-remote` (seed 004): the operator's copy of one tablet onto a stopped
server's fs root, with real tablet server processes and the real command.

Server 0 is the lone voter of tablet `m1`; server 1 follows it as a NON_VOTER (copied
automatically), and is the source of every manual copy here: onto a fresh server (2), and
back onto server 0 with `--force` after its own replica is set aside, so that server 0 then
serves rows it holds only through the copy.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    ChangeConfigRequest,
    ChangeConfigResponse,
    ConfigChangeTypePB,
    DataState,
    MemberType,
    RaftPeerPB,
)
from tests.replication.helpers import TServerTrio
from tests.support.procs import free_port, wait_for
from tests.tservers.procs import REPO
from tservers.crash import CRASH_ENV, CRASH_EXIT_CODE
from tservers.fs import FsLayout
from tservers.tablet.manager import quarantine_dirs

pytestmark = pytest.mark.integration


def copy_cmd(root, tablet: str, source: str, *extra: str, env=None, stderr_fd=None):
    """Run `tserver copy-from-remote`; stderr to a pipe (not a TTY) unless given a fd."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tservers.cli",
            "copy-from-remote",
            "--fs-root",
            str(root),
            "--tablet",
            tablet,
            "--source",
            source,
            *extra,
        ],
        cwd=REPO,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=stderr_fd if stderr_fd is not None else subprocess.PIPE,
        text=True,
        timeout=120,
    )


def data_state(root, tablet: str) -> int | None:
    fs = FsLayout.open(root)
    if not fs.superblock_path(tablet).exists():
        return None
    return fs.read_superblock(tablet).data_state


def running_at(q: TServerTrio, i: int, tablet: str) -> int:
    r = q.report(i, tablet)
    return r.applied_index if r is not None and r.status == "RUNNING" else -1


@pytest.fixture
def trio(tmp_path):
    t = TServerTrio(tmp_path, n=3, extra_args=["--flush-rows", "150"])
    try:
        t.start_all()
        yield t
    finally:
        t.stop_all()


def test_copy_from_remote_onto_stopped_servers(trio: TServerTrio):
    q = trio
    q.create_tablet("m1", members=[0])
    for b in range(6):
        last = q.write(0, "m1", range(b * 100, b * 100 + 100))
    p0, p1, p2 = q.procs
    with RpcClient(p0.address, "test") as rc:
        rc.call(
            p0.uuid,
            "TServer.ChangeConfig",
            ChangeConfigRequest(
                tablet_id="m1",
                type=ConfigChangeTypePB.ADD_SERVER,
                peer=RaftPeerPB(uuid=p1.uuid, address=p1.address, member_type=MemberType.NON_VOTER),
            ),
            ChangeConfigResponse,
            timeout_s=20,
        )
    wait_for(lambda: running_at(q, 1, "m1") >= last.op_id.index, 60, "server 1 caught up")
    source = p1.address

    # Refused while the target server runs (it holds its fs root's lock).
    r = copy_cmd(p2.root, "m1", source)
    assert r.returncode == 1 and "stop the tablet server first" in r.stderr, r.stderr
    assert data_state(p2.root, "m1") is None

    q.procs[2].terminate()
    # Clear errors, nothing changed locally: an unknown tablet, an unreachable source.
    r = copy_cmd(p2.root, "nope", source)
    assert r.returncode == 1 and "tablet nope not found on the source" in r.stderr, r.stderr
    dead = f"127.0.0.1:{free_port()}"
    r = copy_cmd(p2.root, "m1", dead, "--timeout", "1")
    assert r.returncode == 1 and f"source {dead} unreachable within 1 s" in r.stderr, r.stderr
    r = copy_cmd(p2.root, "m1", source, "--source-uuid", p0.uuid)
    assert r.returncode == 1 and f"is server {p1.uuid}, not {p0.uuid}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert data_state(p2.root, "m1") is None and data_state(p2.root, "nope") is None

    # Interrupted (killed at a step) on the fresh server: COPYING is left; the server
    # deletes it at startup (a tombstone), and a later copy succeeds.
    r = copy_cmd(p2.root, "m1", source, env={CRASH_ENV: "copy.after_wal"})
    assert r.returncode == CRASH_EXIT_CODE, r.stderr
    assert data_state(p2.root, "m1") == DataState.COPYING
    q.restart(2)
    wait_for(lambda: (q.report(2, "m1") or p0).status == "TOMBSTONED", 30, "COPYING deleted")
    q.procs[2].terminate()
    # With a terminal on stderr: a progress bar redrawn in place.
    master, slave = pty.openpty()
    try:
        r = copy_cmd(p2.root, "m1", source, "--source-uuid", p1.uuid, stderr_fd=slave)
        os.close(slave)
        bar = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            bar += chunk
    finally:
        os.close(master)
    assert r.returncode == 0, bar.decode(errors="replace")
    assert b"\r[" in bar and b"B/s" in bar and b"ETA" in bar and b"(100%)" in bar
    assert "copied tablet m1" in r.stdout
    assert data_state(p2.root, "m1") == DataState.READY
    q.restart(2)

    # Not in the tablet's config: it runs, holding everything the source had in its log
    # (it applies what the source had flushed; the rest once a leader tells it the commit
    # index, which a server outside the config never hears).
    def logged_at_2() -> int:
        r = q.report(2, "m1")
        return r.last_op_id.index if r is not None and r.status == "RUNNING" else -1

    wait_for(lambda: logged_at_2() >= last.op_id.index, 30, "server 2 running m1")

    # Server 0 (the lone voter): READY is refused without --force.
    q.procs[0].terminate()
    r = copy_cmd(p0.root, "m1", source)
    assert r.returncode == 1 and "already READY" in r.stderr and "--force" in r.stderr
    # --force, killed after the WAL: its own replica is quarantined, the copy left COPYING;
    # a re-run (no --force needed now) redoes the copy. Not a TTY: plain lines.
    r = copy_cmd(p0.root, "m1", source, "--force", env={CRASH_ENV: "copy.after_wal"})
    assert r.returncode == CRASH_EXIT_CODE, r.stderr
    assert data_state(p0.root, "m1") == DataState.COPYING
    assert quarantine_dirs(FsLayout.open(p0.root), "m1"), "the old replica set aside"
    r = copy_cmd(p0.root, "m1", source)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "copying tablet m1" in r.stderr
    assert data_state(p0.root, "m1") == DataState.READY
    q.restart(0)
    # The lone voter leads again and serves the rows it now holds through the copy.
    q.leader("m1", among=[0])
    assert q.scan_ids(0, "m1") == list(range(600))
    q.write(0, "m1", [600])
    assert q.scan_ids(0, "m1") == list(range(601))
