"""`logstore serve` on keys (design/security.md section 2, issue 22), real processes.

A replica runs CURVE by default with its key pair made in <data-dir>/keys at its first
start; it answers only the public keys it was given (`--client-keys`: the server role,
`--admin-keys`: the admin role), each call checked against the role table; a plaintext
client and an unknown key get nothing and change nothing. `--insecure` runs plaintext and
says so. The `logstore` tools call with `--credentials` (and `--server-keys`), and a
coordinator node runs on a secure group with `--logstore-keys`.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import pytest
import zmq

from logstore.remote import RemoteLogStore
from rpc import credentials, privileged
from rpc.addresses import free_port
from rpc.errors import PermissionDenied, Unauthenticated
from rpc.keys import ClientCurve, KeyPair
from tests.support.cli import REPO, run_cli

from .helpers import PASSWORD, wait_for
from .procs import make_replicas, remote, write_credentials

pytestmark = pytest.mark.integration

COORDINATOR_LOG = "coordinator"  # coordinator.leases.driver.LOG_NAME


def _logstore(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return run_cli("logstore.cli", *args, timeout_s=timeout_s)


def _credentials_file(path, pair: KeyPair, entries=()) -> str:
    credentials.write(path, credentials.document("someone", "user", ["admin"], pair, entries))
    return str(path)


def _last_id(replica, log: str) -> int:
    with remote([replica]) as store:
        return store.last_id(log, timeout_s=10.0)


def test_a_default_replica_runs_curve_and_answers_only_the_keys_it_was_given(tmp_path):
    server_only, admin_only, stranger = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()
    (r,) = make_replicas(tmp_path, 1, secure=True)
    r.client_keys, r.admin_keys = [server_only.public], [admin_only.public]
    r.start()
    try:
        assert " curve-key=" in r.start_line and " clients=2 admins=2" in r.start_line
        # The key pair: made at the first start, the secret 0600 in a 0700 directory, and
        # what `show-key` prints.
        keys_dir = os.path.join(r.data_dir, "keys")
        assert stat.S_IMODE(os.stat(keys_dir).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(os.path.join(keys_dir, "logstore.key_secret")).st_mode) == (
            0o600
        )
        out = _logstore("show-key", "--data-dir", r.data_dir)
        assert out.returncode == 0 and out.stdout.strip() == r.public_key, out

        with remote([r]) as store:
            store.barrier(timeout_s=20.0)
            assert store.append("t", b"first", timeout_s=20.0) == 1

        # A plaintext zmq socket: its bytes never reach the rpc layer, no answer comes.
        ctx = zmq.Context()
        try:
            sock = ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.connect(f"tcp://{r.rpc_address}")
            sock.send_multipart([b"", b"\x0a\x08rpc.Ping", b""])
            assert sock.poll(2000) == 0
            sock.close()
        finally:
            ctx.term()
        # A plaintext rpc client and an unknown key: refused at the handshake, well
        # before the deadline, and nothing appended.
        for options in (
            {},
            {"curve": ClientCurve(stranger), "server_keys": {r.rpc_address: r.public_key}},
        ):
            with RemoteLogStore([r.rpc_address], **options) as store:
                started = time.monotonic()
                with pytest.raises(Unauthenticated):
                    store.append("t", b"intruder", timeout_s=30.0)
                assert time.monotonic() - started < 20.0
        out = _logstore("status", "--servers", r.rpc_address, "--timeout-s", "10")
        assert out.returncode == 1 and "refused" in out.stdout and "--credentials" in out.stdout
        stranger_file = _credentials_file(
            tmp_path / "stranger.credentials", stranger, [(r.rpc_address, r.public_key)]
        )
        out = _logstore("append", "--servers", r.rpc_address, "--credentials", stranger_file,
                        "--timeout-s", "10", "t", "intruder")  # fmt: skip
        assert out.returncode == 1 and "UNAUTHENTICATED" in out.stderr, out
        assert "Traceback" not in out.stderr
        assert _last_id(r, "t") == 1

        # The admitted key with the tools: its credentials file lists the replica's address
        # and key; or a file without entries and the key from --server-keys (a key file).
        creds = write_credentials(tmp_path / "operator.credentials", [r])
        out = _logstore("append", "--servers", r.rpc_address, "--credentials", creds, "t", "two")
        assert out.returncode == 0 and out.stdout.strip() == "2", out
        bare = _credentials_file(tmp_path / "bare.credentials", r.caller)
        key_file = os.path.join(keys_dir, "logstore.key")
        out = _logstore("read", "--servers", r.rpc_address, "--credentials", bare,
                        f"--server-keys={key_file}", "t")  # fmt: skip
        assert out.returncode == 0 and "1\tb'first'" in out.stdout and "2\tb'two'" in out.stdout
        out = _logstore("status", "--servers", r.rpc_address, "--credentials", creds)
        assert out.returncode == 0 and "logs (last id): t=2" in out.stdout, out
        # Without a key for the replica: refused unsent, one line.
        out = _logstore("last-id", "--servers", r.rpc_address, "--credentials", bare, "t")
        assert out.returncode == 1 and "Traceback" not in out.stderr, out
        assert len(out.stderr.strip().splitlines()) == 1

        # Roles (rpc/authz.py): the server role appends but may not move leadership (even
        # with the group's password); the admin role reads but may not append.
        signed = privileged.derive_key(PASSWORD)
        for pair, allowed, denied in (
            (server_only, "append", "transfer"),
            (admin_only, "status", "append"),
        ):
            with RemoteLogStore(
                [r.rpc_address],
                curve=ClientCurve(pair),
                server_keys={r.rpc_address: r.public_key},
                privileged_key=signed,
            ) as store:
                calls = {
                    "append": lambda s: s.append("t", b"by role", timeout_s=20.0),
                    "status": lambda s: s.status(timeout_s=20.0),
                    "transfer": lambda s: s.transfer_leadership(timeout_s=20.0),
                }
                calls[allowed](store)
                with pytest.raises(PermissionDenied, match="needs"):
                    calls[denied](store)
        assert _last_id(r, "t") == 3  # the server role's append, not the admin's
        with open(r.log_path, encoding="utf-8", errors="replace") as f:
            assert "INSECURE" not in f.read()

        # The key pair is never replaced: a restart serves the same key.
        key = r.public_key
        r.stop()
        r.start()
        assert r.public_key == key
        assert _last_id(r, "t") == 3
    finally:
        r.kill()


def test_a_secret_others_may_read_refuses_the_start(tmp_path):
    data_dir = str(tmp_path / "d")
    out = _logstore("show-key", "--data-dir", data_dir, "--json")
    assert out.returncode == 0 and '"made": true' in out.stdout, out
    os.chmod(os.path.join(data_dir, "keys", "logstore.key_secret"), 0o640)
    out = _logstore("serve", "--raft-address", f"127.0.0.1:{free_port()}", "--insecure-dev",
                    "--data-dir", data_dir)  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "cannot serve" in out.stderr and "mode 0640" in out.stderr and "chmod 600" in out.stderr


def test_insecure_runs_plaintext_and_says_so(tmp_path):
    (r,) = make_replicas(tmp_path, 1)  # secure=False: --insecure
    r.start()
    try:
        assert r.start_line.endswith("INSECURE (plaintext, unauthenticated: --insecure)")
        with RemoteLogStore([r.rpc_address]) as store:  # no keys
            store.barrier(timeout_s=20.0)
            assert store.append("t", b"plain", timeout_s=20.0) == 1
        out = _logstore("read", "--servers", r.rpc_address, "t")
        assert out.returncode == 0 and "1\tb'plain'" in out.stdout
        assert not os.path.exists(os.path.join(r.data_dir, "keys"))
    finally:
        r.stop()
    with open(r.log_path, encoding="utf-8", errors="replace") as f:
        warnings = [line for line in f if "WARNING" in line and "INSECURE (--insecure)" in line]
    assert len(warnings) == 1, warnings
    # Keys are for CURVE: with --insecure they are refused, one line, nothing served.
    out = _logstore("serve", "--raft-address", f"127.0.0.1:{free_port()}", "--insecure-dev",
                    "--data-dir", str(tmp_path / "other"), "--insecure",
                    "--client-keys=" + KeyPair.generate().public)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--insecure runs plaintext" in out.stderr and len(out.stderr.splitlines()) == 1


def test_a_coordinator_node_runs_on_a_secure_logstore_group(tmp_path):
    """`coordinator start --logstore A,B,C --logstore-keys KA,KB,KC`: the node calls the
    replicas with CURVE as its own key pair (`coordinator show-key`), which they admit with
    --client-keys; it leads and logs its lease there. A node whose key they do not admit
    logs nothing."""
    node_dir = tmp_path / "c1"
    out = run_cli("optools.coordinator_cli", "show-key", "--data-dir", str(node_dir))
    assert out.returncode == 0, out.stderr
    node_key = out.stdout.strip()
    replicas = make_replicas(tmp_path, 3, secure=True)
    for r in replicas:
        r.client_keys = [node_key]
    procs: list[subprocess.Popen] = []

    def start_node(name: str) -> subprocess.Popen:
        log = open(tmp_path / f"{name}.log", "wb")
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "optools.coordinator_cli", "start",
                "--id", name, "--data-dir", str(tmp_path / name),
                "--bind", f"127.0.0.1:{free_port()}",
                "--logstore", ",".join(r.rpc_address for r in replicas),
                "--logstore-keys=" + ",".join(r.public_key for r in replicas),
                "--insecure",  # its own client rpc: this test is about its logstore link
                "--lease-timeout-s", "1.0",
            ],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        procs.append(proc)
        return proc

    try:
        for r in replicas:
            r.start()
        # A node the replicas do not admit (its key pair is made at its start): refused.
        stranger = start_node("c2")
        with remote(replicas) as store:
            store.barrier(timeout_s=30.0)

            def stranger_refused() -> bool:
                text = (tmp_path / "c2.log").read_text(errors="replace")
                assert stranger.poll() is None, text[-3000:]
                return "refused this client's key at the CURVE handshake" in text

            wait_for(stranger_refused, 60.0, "the unadmitted node's refusal")
            assert store.last_id(COORDINATOR_LOG, timeout_s=10.0) == 0
            stranger.send_signal(signal.SIGTERM)
            stranger.wait(30)
            node = start_node("c1")

            def logged() -> bool:
                assert node.poll() is None, (tmp_path / "c1.log").read_text()[-3000:]
                return store.last_id(COORDINATOR_LOG, timeout_s=10.0) > 0

            wait_for(logged, 90.0, "the node's lease records in the secure logstore")
            entries = store.read(COORDINATOR_LOG, 1, 100, timeout_s=10.0)
            assert entries
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
        for r in replicas:
            r.stop()
