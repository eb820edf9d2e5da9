"""The `logstore` command against real `logstore serve` processes, and leadership transfer."""

from __future__ import annotations

import subprocess

import pytest

from rpc.client import ConnectionLost
from tests.support.cli import assert_usage_error, run_cli

from .helpers import PASSWORD, leader_of, start_cluster, wait_for
from .procs import make_replicas, remote, write_credentials

pytestmark = pytest.mark.integration


def _logstore(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return run_cli("logstore.cli", *args, timeout_s=timeout_s)


def test_status_append_read_transfer(tmp_path):
    replicas = make_replicas(tmp_path, 3, secure=True)
    try:
        for r in replicas:
            r.start()
        servers = ",".join(r.rpc_address for r in replicas)
        creds = write_credentials(tmp_path / "operator.credentials", replicas)

        def ls(*args: str) -> subprocess.CompletedProcess:
            return _logstore(*args, "--credentials", creds)

        out = ls("append", "--servers", servers, "--timeout-s", "30", "demo", "hello")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "1"
        out = ls("read", "--servers", servers, "--barrier", "demo")
        assert out.returncode == 0 and "1\tb'hello'" in out.stdout
        out = ls("status", "--servers", servers)
        assert out.returncode == 0, out.stderr
        assert out.stdout.count("role=") == 3 and "role=leader" in out.stdout
        assert "logs (last id): demo=1" in out.stdout
        assert out.stdout.splitlines()[-1].startswith("OK: 3 replicas answered, leader 127.")
        out = ls("transfer-leadership", "--servers", servers, "--timeout-s", "20")
        assert out.returncode == 1 and "UNAUTHENTICATED" in out.stderr, out  # no password
        password = tmp_path / "password"
        password.write_text(PASSWORD + "\n")
        out = ls(
            "transfer-leadership", "--servers", servers, "--timeout-s", "20",
            "--password-file", str(password),
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("leader: 127.0.0.1:")
        out = ls("append", "--servers", servers, "--expected-id", "5", "demo", "x")
        assert out.returncode == 1 and "CONDITION_FAILED" in out.stderr
        assert "Traceback" not in out.stderr
    finally:
        for r in replicas:
            r.kill()


def test_a_dead_first_replica_costs_a_share_of_the_deadline_not_all_of_it(tmp_path):
    """kill -9 of the replica a client talks to (a follower: the leader's death would leave
    an append in flight unknown): its appends go to the live ones; the CLI with the dead one
    first in --servers works within its default deadline; `status` says UNHEALTHY with exit
    1. An append sent at once after the kill may go out before zmq has seen the connection
    drop: its outcome is then unknown and it is not sent again (ConnectionLost, as it must
    be; that race failed this test once in a loaded CI run), so the test does what a careful
    caller does: it reads where the log is and sends the conditional append again."""
    replicas = make_replicas(tmp_path, 3, secure=True)
    try:
        for r in replicas:
            r.start()
        creds = write_credentials(tmp_path / "operator.credentials", replicas)
        with remote(replicas) as store:
            assert store.append("d", b"0", timeout_s=30.0) == 1
            leader = store.status(timeout_s=10.0).leader
        replicas.sort(key=lambda r: r.raft_address == leader)  # a follower first
        servers = ",".join(r.rpc_address for r in replicas)
        with remote(replicas) as store:
            assert store.last_id("d", timeout_s=10.0) == 1  # it talks to the follower
            replicas[0].kill()
            lost = 0
            for i in range(1, 7):
                try:
                    got = store.append("d", str(i).encode(), expected_id=i + 1, timeout_s=10.0)
                except ConnectionLost:  # sent to the dead replica as it died: unknown
                    lost += 1
                    if store.last_id("d", timeout_s=10.0) == i:  # not appended: again
                        got = store.append("d", str(i).encode(), expected_id=i + 1, timeout_s=10.0)
                    else:
                        got = i + 1
                assert got == i + 1
            assert lost <= 1  # only an append racing the death
        out = _logstore("append", "--servers", servers, "--credentials", creds, "d", "cli")
        assert out.returncode == 0, out.stderr  # within the default --timeout-s
        assert out.stdout.strip() == "8"
        out = _logstore("read", "--servers", servers, "--credentials", creds, "--barrier", "d")
        assert out.returncode == 0, out.stderr
        assert [line.split("\t")[0] for line in out.stdout.splitlines()] == [
            str(i) for i in range(1, 9)
        ]
        out = _logstore("status", "--servers", servers, "--credentials", creds)
        assert out.returncode == 1, out.stdout
        assert "UNHEALTHY: 1 of 3 replicas did not answer" in out.stdout
        assert out.stdout.count("role=") == 2
    finally:
        for r in replicas:
            r.kill()


def test_status_of_unreachable_server_is_an_error():
    out = _logstore("status", "--servers", "127.0.0.1:1", "--timeout-s", "0.5")
    assert out.returncode == 1 and "unreachable" in out.stdout
    assert "Traceback" not in out.stderr


BAD_USAGE = [
    (["status", "--servers", ""], "at least one HOST:PORT"),
    (["status", "--servers", " , "], "at least one HOST:PORT"),
    (["status", "--servers", "127.0.0.1"], "--servers"),
    (["status", "--servers", "127.0.0.1:0"], "--servers"),
    (["status", "--servers", "127.0.0.1:1", "--timeout-s", "0"], "--timeout-s"),
    (["add-member", "--servers", "127.0.0.1:1", "garbage"], "raft_address"),
    (["serve", "--raft-address", "x", "--data-dir", "/nonexistent"], "--raft-address"),
    (["serve", "--raft-address", "127.0.0.1:5", "--peers", "127.0.0.1",
      "--data-dir", "/nonexistent"], "--peers"),
    (["serve", "--raft-address", "127.0.0.1:5", "--data-dir", "/nonexistent",
      "--election-min-s", "0.1", "--election-max-s", "0.2"], "three heartbeats"),
    (["serve", "--raft-address", "127.0.0.1:5", "--data-dir", "/nonexistent",
      "--election-min-s", "1", "--election-max-s", "0.5"], "--election-max-s"),
    (["serve", "--raft-address", "127.0.0.1:5", "--data-dir", "/nonexistent",
      "--heartbeat-s", "0"], "--heartbeat-s"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "words"), BAD_USAGE, ids=[" ".join(a) for a, _ in BAD_USAGE])
def test_bad_usage_is_one_line_and_exit_2(argv, words):
    assert_usage_error(_logstore(*argv), "logstore", words)


def test_serve_refuses_to_run_without_password(tmp_path):
    out = _logstore(
        "serve",
        "--raft-address",
        "127.0.0.1:1",
        "--peers",
        "127.0.0.1:2",
        "--data-dir",
        str(tmp_path / "d"),
    )
    assert out.returncode == 1 and "password" in out.stderr
    assert "Traceback" not in out.stderr


def test_in_process_transfer_leadership(tmp_path):
    stores = start_cluster(tmp_path, 3)
    try:
        leader = leader_of(stores)
        target = next(s for s in stores if s is not leader)
        assert leader.transfer_leadership(target.self_address) == target.self_address
        wait_for(lambda: all(s.leader() == target.self_address for s in stores), what="new leader")
        assert target.is_leader()
        target.append("t", b"x")
    finally:
        for s in stores:
            s.close()


def test_serve_on_a_raft_port_in_use_fails_at_once(tmp_path):
    """Not after the start timeout, silently: at once, with the reason."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = _logstore(
            "serve", "--raft-address", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "d"),
            "--insecure-dev",
        )  # fmt: skip
    assert out.returncode == 1, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert f"cannot bind Raft address 127.0.0.1:{port}: Address already in use" in last, last
