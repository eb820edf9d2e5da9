"""A revocation holds across a coordinator failover (design/security.md section 4,
"Revocation bound"), real processes: a secure local cluster of three coordinator nodes and
one tablet server. A reader scans on an open connection to the tablet server; the tablet
server is paused so that the leader that commits the revoke can never push it; the revoke
commits and that leader is killed; the tablet server resumes and must learn the revocation
from the next leader's heartbeat answer. Every coordinator node refuses the reader too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pytest

import logcentric
from logcentric import Column
from logcentric.tablets import TabletServerClient
from optools.localcluster import LocalCluster
from rpc import credentials
from rpc.errors import PermissionDenied, RpcError, Unauthenticated
from tests.support.cli import REPO
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

WAIT_S = 90.0


def coordinator_cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != credentials.CREDENTIALS_ENV}
    out = subprocess.run(
        [sys.executable, "-m", "optools.coordinator_cli", "--log-level", "WARNING", *args],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out


def refused(call) -> str:
    """'' while `call` succeeds; the refusal's text once it is refused for who calls."""
    try:
        call()
    except (Unauthenticated, PermissionDenied) as e:
        return f"{type(e).__name__}: {e}"
    except RpcError:
        return ""  # unavailable, timed out: not a refusal
    return ""


def test_a_revoke_committed_just_before_the_leader_dies_holds_everywhere(tmp_path):
    cluster = LocalCluster.create(tmp_path / "c", 3, 1, 1.0, secure=True)
    admin_file = str(cluster.spec.admin_credentials)
    rita_file = tmp_path / "rita.credentials"
    tserver = cluster.spec.tservers[0]
    paused = False
    try:
        cluster.up(timeout_s=120)
        coordinator_cli(
            "users", "add", "rita", "--role", "reader", "--out", str(rita_file),
            "--credentials", admin_file,
        )  # fmt: skip
        with logcentric.connect(credentials=admin_file, timeout_s=60) as admin:
            admin.create_table(
                "t", [Column("id", "int64", key=True), Column("v", "string")],
                num_tablets=1, replication_factor=1,
            )  # fmt: skip
            with admin.new_session() as session:
                session.insert(admin.table("t"), pa.table({"id": [1, 2, 3], "v": ["a"] * 3}))
            (tablet,) = admin.table("t").tablets()
            (replica,) = tablet.replicas
        rita = credentials.load(rita_file)
        with TabletServerClient(
            replica.address,
            replica.server_uuid,
            timeout_s=10,
            keypair=rita.keypair,
            server_key=replica.public_key,
        ) as rita_ts:

            def rita_scans() -> int:
                return rita_ts.scan_table(tablet.tablet_id).num_rows

            # The reader scans once the principals table with her reached the server.
            wait_for(
                lambda: not _raises(rita_scans) and rita_scans() == 3, WAIT_S, "rita's first scan"
            )
            with cluster.client(timeout_s=30) as cc:
                leader = wait_for(lambda: cluster.leader(cc), WAIT_S, "a leader")
            # The tablet server hears nothing from here until the revoke's leader is dead.
            os.kill(tserver.pid, signal.SIGSTOP)
            paused = True
            coordinator_cli("users", "revoke", "rita", "--credentials", admin_file)
            cluster.kill(leader)
            os.kill(tserver.pid, signal.SIGCONT)
            paused = False
            resumed_at = time.monotonic()
            why = wait_for(lambda: refused(rita_scans), WAIT_S, "the tablet server refuses rita")
            delay_s = time.monotonic() - resumed_at
            print(f"\nrita refused by the tablet server {delay_s:.2f} s after it resumed: {why}")
        # Every coordinator node still up refuses her too (a new connection: the handshake).
        with logcentric.connect(credentials=str(rita_file), timeout_s=10) as rita_client:
            assert refused(rita_client.list_tables), "a coordinator node served revoked rita"
        # The tablet server itself serves: the admin still scans (the refusal was rita's).
        with logcentric.connect(credentials=admin_file, timeout_s=60) as admin:
            assert admin.table("t").count() == 3
    finally:
        if paused:
            os.kill(tserver.pid, signal.SIGCONT)
        cluster.down()


def _raises(call) -> bool:
    try:
        call()
    except RpcError:
        return True
    return False
