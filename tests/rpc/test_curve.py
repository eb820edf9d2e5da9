"""CURVE on the rpc layer (design/security.md §2): key files, the ZAP handshake, the key of
each call's UUID, per-call authorization, and what a wrong, unknown or missing key gets.

Real zmq sockets throughout; the server is a process of its own (tests/rpc/curve_echo_server)
except where a test changes the authorizer's answers while it runs."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from rpc import errors
from rpc.addresses import free_port
from rpc.client import HandshakeFailed, KeyRefused, NoServerKey, RpcClient, Transport
from rpc.keys import (
    ClientCurve,
    KeyFileError,
    KeyPair,
    ServerCurve,
    create_keypair,
    load_keypair,
    load_or_create_keypair,
    load_public_key,
    public_path,
    secret_path,
)
from rpc.rpc_pb2 import PingResponse, RequestHeader
from rpc.server import CallContext, Reply, RpcServer
from tests.support.relay import Relay

UUID = "curve-server-1"
ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0


# -- key files ---------------------------------------------------------------------------


def test_key_pair_files_secret_0600_public_z85(tmp_path):
    old_umask = os.umask(0)  # even a permissive umask gives a private secret file
    try:
        pair = create_keypair(tmp_path / "keys", "tserver")
    finally:
        os.umask(old_umask)
    sec, pub = secret_path(tmp_path / "keys", "tserver"), public_path(tmp_path / "keys", "tserver")
    assert os.stat(sec).st_mode & 0o777 == 0o600
    assert os.stat(tmp_path / "keys").st_mode & 0o777 == 0o700
    assert pair.secret not in pub.read_text()  # the public file holds no secret
    assert load_public_key(pub) == pair.public and len(pair.public) == 40
    assert zmq.curve_public(pair.secret.encode()).decode() == pair.public
    loaded = load_keypair(tmp_path / "keys", "tserver")
    assert loaded == pair and loaded.secret == pair.secret
    assert load_or_create_keypair(tmp_path / "keys", "tserver") == pair  # loads, never replaces
    with pytest.raises(KeyFileError, match="never replaced"):
        create_keypair(tmp_path / "keys", "tserver")
    # A bare z85 public key file is read too (a key handed over as text).
    (tmp_path / "bare.key").write_text(pair.public + "\n")
    assert load_public_key(tmp_path / "bare.key") == pair.public


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_secret_file_readable_by_others_is_refused(tmp_path, mode):
    create_keypair(tmp_path, "node")
    os.chmod(secret_path(tmp_path, "node"), mode)
    with pytest.raises(KeyFileError, match=f"mode {mode:04o}.*chmod 600"):
        load_keypair(tmp_path, "node")
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_or_create_keypair(tmp_path, "node")


def test_broken_key_files_are_refused(tmp_path):
    create_keypair(tmp_path, "node")
    sec = secret_path(tmp_path, "node")
    text = sec.read_text()
    other = KeyPair.generate()
    sec.write_text(text.replace(text.split('public-key = "')[1][:40], other.public))
    with pytest.raises(KeyFileError, match="not the secret key's"):
        load_keypair(tmp_path, "node")
    with pytest.raises(KeyFileError, match="no secret key file"):
        load_keypair(tmp_path, "missing")
    with pytest.raises(KeyFileError, match="not a CURVE public key"):
        KeyPair("too short")


# -- a CURVE server process --------------------------------------------------------------


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            raise AssertionError(f"no line from the server within {timeout_s}s")
    return proc.stdout.readline()


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Key pairs: alice (admitted as writer), bob (admitted as reader), mallory (unknown)."""
    base = tmp_path_factory.mktemp("curve")
    pairs = {name: create_keypair(base / "clients", name) for name in ("alice", "bob", "mallory")}
    admitted = base / "admitted"
    admitted.write_text(f"{pairs['alice'].public} writer\n{pairs['bob'].public} reader\n")
    return base, pairs, admitted


@pytest.fixture(scope="module")
def server(keys):
    """(address, server public key) of a CURVE echo server process."""
    base, _pairs, admitted = keys
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.rpc.curve_echo_server",
            UUID,
            f"127.0.0.1:{port}",
            str(base / "server-keys"),
            str(admitted),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        line = _readline(proc, READY_TIMEOUT_S)
        assert line.startswith("READY"), line
        _, address, public = line.split()
        assert load_public_key(public_path(base / "server-keys", "server")) == public
        yield address, public
    finally:
        proc.terminate()
        proc.wait(10)


def client_of(pairs, name: str, server_key: str, address: str) -> RpcClient:
    curve = ClientCurve(pairs[name], {UUID: server_key})
    return RpcClient(address, name, curve=curve)


def handled(pairs, server) -> tuple[int, int]:
    """(Test.Echo handlers run, requests read) as the server counts them, asked by alice."""
    address, public = server
    with client_of(pairs, "alice", public, address) as c:
        r = c.call(UUID, "Test.Handled", PingResponse(), PingResponse, timeout_s=10)
    return int(r.methods[0]), int(r.methods[1])


def test_authenticated_call_sees_peer_key_and_principal(keys, server):
    _base, pairs, _ = keys
    address, public = server
    with client_of(pairs, "alice", public, address) as c:
        body = b"s" * 8192
        r, sidecars = c.call_with_sidecars(
            UUID, "Test.Echo", PingResponse(uuid="hi"), PingResponse, sidecars=[body]
        )
        assert (r.uuid, r.service, list(r.methods)) == ("hi", pairs["alice"].public, ["writer"])
        assert bytes(sidecars[0]) == body
        # Through the I/O thread (many calls in flight) as well as the caller's own socket.
        pending = [
            c.call_async(UUID, "Test.Echo", PingResponse(uuid=str(i)), PingResponse)
            for i in range(20)
        ]
        assert [p.result().uuid for p in pending] == [str(i) for i in range(20)]
    with client_of(pairs, "bob", public, address) as c:
        r = c.call(UUID, "Test.Echo", PingResponse(uuid="b"), PingResponse)
        assert (r.service, list(r.methods)) == (pairs["bob"].public, ["reader"])
    # A Ping names no UUID: the client's key for the address is used.
    with RpcClient(address, "p", curve=ClientCurve(pairs["bob"]), server_key=public) as c:
        assert c.ping().uuid == UUID


@pytest.mark.parametrize("path", ["direct", "io-thread"])
def test_unknown_client_key_is_refused_at_the_handshake(keys, server, path):
    _base, pairs, _ = keys
    address, public = server
    before = handled(pairs, server)
    started = time.monotonic()
    with client_of(pairs, "mallory", public, address) as c:
        # KeyRefused: this client's key, not a stale location (logcentric.client).
        with pytest.raises(KeyRefused, match="refused this client's key"):
            if path == "direct":
                c.call(UUID, "Test.Echo", PingResponse(uuid="x"), PingResponse, timeout_s=10)
            else:
                c.call_async(UUID, "Test.Echo", PingResponse(), PingResponse, timeout_s=10).result()
        # Not a configuration that time mends: an idempotent call does not retry it either.
        with pytest.raises(HandshakeFailed):
            c.call(UUID, "Test.Echo", PingResponse(), PingResponse, timeout_s=10, idempotent=True)
    assert time.monotonic() - started < 10
    after = handled(pairs, server)
    # No handler ran and the server read no request of mallory's (only alice's Test.Handled).
    assert after == (before[0], before[1] + 1)


@pytest.mark.parametrize("path", ["direct", "io-thread"])
def test_wrong_server_key_fails_clearly_within_the_deadline(keys, server, path):
    """A client given key K for UUID U does not talk to a server presenting another key."""
    _base, pairs, _ = keys
    address, _public = server
    impostor_key = KeyPair.generate().public  # what the client believes U's key is
    before = handled(pairs, server)
    started = time.monotonic()
    with client_of(pairs, "alice", impostor_key, address) as c:
        with pytest.raises(HandshakeFailed, match="does not hold the key expected") as info:
            if path == "direct":
                c.call(UUID, "Test.Echo", PingResponse(), PingResponse, timeout_s=5)
            else:
                c.call_async(UUID, "Test.Echo", PingResponse(), PingResponse, timeout_s=5).result()
        # Another identity at the address, not a refusal of ours: clients refresh locations.
        assert not isinstance(info.value, KeyRefused)
    assert time.monotonic() - started < 5  # failed at the handshake, not at the deadline
    assert handled(pairs, server) == (before[0], before[1] + 1)


def test_key_goes_with_the_uuid_the_call_names(keys, server):
    """One transport, keys by UUID: the key used is the named UUID's, never another's."""
    _base, pairs, _ = keys
    address, public = server
    curve = ClientCurve(pairs["alice"], {UUID: public, "other-server": KeyPair.generate().public})
    with Transport(curve=curve) as transport, RpcClient(address, "a", transport=transport) as c:
        assert c.call(UUID, "Test.Echo", PingResponse(uuid="ok"), PingResponse).uuid == "ok"
        # The same address asked as another UUID: that UUID's key is used, and this server
        # does not hold it.
        with pytest.raises(HandshakeFailed):
            c.call("other-server", "Test.Echo", PingResponse(), PingResponse, timeout_s=5)
        with pytest.raises(NoServerKey, match="no public key known for unknown-server"):
            c.call("unknown-server", "Test.Echo", PingResponse(), PingResponse, timeout_s=5)
        assert c.call(UUID, "Test.Echo", PingResponse(uuid="still"), PingResponse).uuid == "still"


def test_plaintext_client_gets_nothing_through(keys, server):
    _base, pairs, _ = keys
    address, _public = server
    before = handled(pairs, server)
    # A bare zmq socket sending a well-formed request: no answer, nothing read.
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"tcp://{address}")
        header = RequestHeader(method="Test.Echo", recipient_uuid=UUID, call_id=1, timeout_ms=5000)
        sock.send_multipart(
            [header.SerializeToString(), PingResponse(uuid="x").SerializeToString()]
        )
        assert not sock.poll(1000), "a plaintext request was answered"
    finally:
        sock.close()
        ctx.term()
    # The rpc client without keys: a clear refusal, well within its deadline.
    started = time.monotonic()
    with RpcClient(address, "plain") as c:
        with pytest.raises(HandshakeFailed, match="requires? CURVE"):
            c.call(UUID, "Test.Echo", PingResponse(), PingResponse, timeout_s=10)
    assert time.monotonic() - started < 10
    assert handled(pairs, server) == (before[0], before[1] + 1)


def test_secret_file_others_may_read_stops_the_server(tmp_path):
    create_keypair(tmp_path / "keys", "server")
    os.chmod(secret_path(tmp_path / "keys", "server"), 0o644)
    (tmp_path / "admitted").write_text("")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.rpc.curve_echo_server",
            UUID,
            f"127.0.0.1:{free_port()}",
            str(tmp_path / "keys"),
            str(tmp_path / "admitted"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "READY" not in proc.stdout
    assert "mode 0644" in proc.stderr and "chmod 600" in proc.stderr


# -- in-process servers --------------------------------------------------------------------


def test_authorizer_is_asked_at_every_call_revocation_without_reconnect():
    server_pair, alice = KeyPair.generate(), KeyPair.generate()
    admitted = {alice.public: "writer"}
    ran: list[str] = []

    def echo(request: PingResponse, ctx: CallContext) -> PingResponse:
        ran.append(ctx.principal)
        return PingResponse(uuid=request.uuid, service=ctx.peer_key)

    server = RpcServer(UUID, curve=ServerCurve(server_pair, admitted.get))
    server.register("Test.Echo", PingResponse, echo)
    server.register("Test.EchoInline", PingResponse, echo, inline=True)
    with server, client_of({"a": alice}, "a", server_pair.public, server.address) as c:
        for method in ("Test.Echo", "Test.EchoInline"):
            assert c.call(UUID, method, PingResponse(uuid="1"), PingResponse).uuid == "1"
        del admitted[alice.public]  # revoked: the open connection's next call is refused
        for method in ("Test.Echo", "Test.EchoInline"):
            with pytest.raises(errors.Unauthenticated, match="not admitted"):
                c.call(UUID, method, PingResponse(uuid="2"), PingResponse)
        assert ran == ["writer", "writer"] and server.stats()["unauthenticated"] == 2
        admitted[alice.public] = "reader"  # a changed role holds from the next call
        assert c.call(UUID, "Test.Echo", PingResponse(uuid="3"), PingResponse).uuid == "3"
        assert ran[-1] == "reader"


def test_failing_authorizer_refuses():
    server_pair, alice = KeyPair.generate(), KeyPair.generate()

    def authorizer(key: str):
        raise RuntimeError("broken authorizer")

    server = RpcServer(UUID, curve=ServerCurve(server_pair, authorizer))
    server.register("Test.Echo", PingResponse, lambda r, ctx: r)
    with server, client_of({"a": alice}, "a", server_pair.public, server.address) as c:
        with pytest.raises(HandshakeFailed, match="refused this client's key"):
            c.call(UUID, "Test.Echo", PingResponse(), PingResponse, timeout_s=5)


def test_curve_client_refuses_a_plaintext_server():
    alice = KeyPair.generate()
    server = RpcServer(UUID)
    server.register("Test.Echo", PingResponse, lambda r, ctx: r)
    with server, client_of({"a": alice}, "a", KeyPair.generate().public, server.address) as c:
        with pytest.raises(HandshakeFailed, match="does not use CURVE"):  # or a wrong key
            c.call(UUID, "Test.Echo", PingResponse(), PingResponse, timeout_s=5)
        assert server.stats()["requests"] == 0


def test_server_key_without_a_key_pair_is_a_usage_error():
    with pytest.raises(errors.BadRequest, match="no key pair"):
        RpcClient("127.0.0.1:1", "c", server_key=KeyPair.generate().public)


# -- what the network sees -----------------------------------------------------------------


@pytest.mark.parametrize("secure", [False, True])
def test_relay_sees_no_plaintext(secure):
    """A probe between client and server: with CURVE, no method name, body or sidecar byte
    shows on the wire; without it (the control) all of them do."""
    server_pair, alice = KeyPair.generate(), KeyPair.generate()
    curve = ServerCurve(server_pair, {alice.public: "writer"}.get) if secure else None
    server = RpcServer(UUID, curve=curve)
    server.register(
        "Test.SecretEcho",
        PingResponse,
        lambda r, ctx: Reply(PingResponse(uuid=r.uuid + "-answered"), list(ctx.sidecars)),
    )
    with server:
        relay = Relay(server.address)
        try:
            client_curve = ClientCurve(alice, {UUID: server_pair.public}) if secure else None
            with RpcClient(relay.address, "c", curve=client_curve) as c:
                r, sidecars = c.call_with_sidecars(
                    UUID,
                    "Test.SecretEcho",
                    PingResponse(uuid="row-value-4711"),
                    PingResponse,
                    sidecars=[b"sidecar-bytes-0815" * 100],
                    timeout_s=10,
                )
            assert r.uuid == "row-value-4711-answered"
            assert bytes(sidecars[0]) == b"sidecar-bytes-0815" * 100
        finally:
            relay.close()
    with relay.lock:
        seen = bytes(relay.seen)
    markers = [b"Test.SecretEcho", b"row-value-4711", b"sidecar-bytes-0815", UUID.encode()]
    visible = [m for m in markers if m in seen]
    assert len(seen) > 1000
    assert visible == ([] if secure else markers)


def test_failed_bind_of_a_curve_server_stops_its_zap_handler():
    def zap_threads() -> int:
        return sum(type(t).__name__ == "AuthenticationThread" for t in threading.enumerate())

    pair = KeyPair.generate()
    with RpcServer(UUID, curve=ServerCurve(pair, {}.get)) as first:
        running = zap_threads()
        assert running >= 1
        second = RpcServer("other", first.address, curve=ServerCurve(pair, {}.get))
        with pytest.raises(OSError, match="cannot bind"):
            second.start()
        started = time.monotonic()
        second.close()  # zmq's Context.term() would wait forever for a socket left open
        assert time.monotonic() - started < 5
        assert zap_threads() == running
    assert zap_threads() == running - 1
