"""Raft frames between logstore replicas are encrypted and authenticated (issue 22,
design/security.md section 6): real replicas, real sockets.

- Two replicas talk through a TCP relay that records every byte: neither a known record nor
  its log's name appears on the wire, while the recorded frames, decrypted with the group's
  password, do hold them (the capture saw the traffic).
- The relay flips one byte of the frame that carries a record: the receiver drops the
  connection, and the record still commits over the next one.
- A frame whose plaintext is a pickle that would create a directory when loaded: sent
  intact, it is loaded (so the check below can fail); with one byte flipped, the connection
  is dropped and nothing is loaded.
- A replica started with another password never joins: the two others commit, it gets
  nothing.

The relay works because pysyncobj names a connection's peer by the address it dialled: the
replica with the highest address ("A") dials the other ("B") at the relay's address, which
is B's name in A's peer list; B, lower, never dials A.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time

import pytest

from logstore.auth import FrameCipher, InvalidFrame
from logstore.replicated import WIRE_PICKLE_PROTOCOL, ReplicatedLogStore

from .helpers import FAST, PASSWORD, free_addresses, leader_of, wait_for

pytestmark = pytest.mark.integration

_HEAD = struct.Struct("i")
MARKER = b"ENTRY-PLAINTEXT-0123456789-known-bytes"
LOG_NAME = "log-name-on-the-wire"


class Relay:
    """A TCP relay from `listen` to `target` that records both directions and can flip one
    byte in the first A-to-B frame of at least `tamper_min_bytes` (armed by `tamper()`)."""

    def __init__(self, listen: str, target: str) -> None:
        host, port = listen.rsplit(":", 1)
        self._server = socket.create_server((host, int(port)))
        self._server.settimeout(0.1)  # accept() wakes up to see close()
        self._target = target
        self.a_to_b = bytearray()
        self.b_to_a = bytearray()
        self.tampered: list[bytes] = []  # the frames as sent, before the flip
        self._tamper_min = 0
        self._lock = threading.Lock()
        self._closed = False
        self._socks: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def tamper(self, min_bytes: int) -> None:
        with self._lock:
            self._tamper_min = min_bytes

    def _accept(self) -> None:
        while not self._closed:
            try:
                a, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            a.settimeout(None)
            host, port = self._target.rsplit(":", 1)
            try:
                b = socket.create_connection((host, int(port)), timeout=10)
            except OSError:
                a.close()
                continue
            b.settimeout(None)
            self._socks += [a, b]
            for fn in (self._a_to_b, self._b_to_a):
                t = threading.Thread(target=fn, args=(a, b), daemon=True)
                t.start()
                self._threads.append(t)

    def _b_to_a(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while chunk := b.recv(65536):
                with self._lock:
                    self.b_to_a += chunk
                a.sendall(chunk)
        except OSError:
            pass
        finally:
            a.close()
            b.close()

    def _a_to_b(self, a: socket.socket, b: socket.socket) -> None:
        """Frame by frame, so that a flip lands inside one frame's ciphertext."""
        buf = bytearray()
        try:
            while chunk := a.recv(65536):
                with self._lock:
                    self.a_to_b += chunk
                buf += chunk
                while len(buf) >= _HEAD.size:
                    (length,) = _HEAD.unpack_from(buf)
                    if len(buf) < _HEAD.size + length:
                        break
                    frame = bytes(buf[: _HEAD.size + length])
                    del buf[: _HEAD.size + length]
                    with self._lock:
                        if self._tamper_min and length >= self._tamper_min:
                            self._tamper_min = 0
                            self.tampered.append(frame[_HEAD.size :])
                            flipped = bytearray(frame)
                            flipped[_HEAD.size + length // 2] ^= 0x01
                            frame = bytes(flipped)
                    b.sendall(frame)
        except OSError:
            pass
        finally:
            a.close()
            b.close()

    def close(self) -> None:
        self._closed = True
        self._server.close()
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self._threads:
            t.join(10)


def frames(stream: bytes) -> list[bytes]:
    out, off = [], 0
    while off + _HEAD.size <= len(stream):
        (length,) = _HEAD.unpack_from(stream, off)
        if length <= 0 or off + _HEAD.size + length > len(stream):
            break
        out.append(bytes(stream[off + _HEAD.size : off + _HEAD.size + length]))
        off += _HEAD.size + length
    return out


@pytest.fixture
def relayed_pair(tmp_path):
    """(A, B, relay): a two-replica group whose only connection goes through the relay."""
    a_addr, relay_addr, b_addr = sorted(free_addresses(3), reverse=True)
    relay = Relay(relay_addr, b_addr)
    stores: list[ReplicatedLogStore] = []
    try:
        stores.append(
            ReplicatedLogStore(b_addr, [b_addr, a_addr], str(tmp_path / "b"), PASSWORD, config=FAST)
        )
        stores.append(
            ReplicatedLogStore(
                a_addr, [a_addr, relay_addr], str(tmp_path / "a"), PASSWORD, config=FAST
            )
        )
        b, a = stores
        leader_of(stores)
        for s in stores:
            s.barrier(timeout_s=30.0)
        yield a, b, relay
    finally:
        for s in stores:
            s.close()
        relay.close()


def _on_both(a: ReplicatedLogStore, b: ReplicatedLogStore, entry_id: int) -> None:
    for s in (a, b):
        wait_for(
            lambda s=s: any(e.id == entry_id for e in s.read(LOG_NAME, entry_id, 1)),
            timeout_s=30.0,
            what=f"entry {entry_id} on {s.self_address}",
        )


def test_a_captured_frame_shows_no_record(relayed_pair):
    a, b, relay = relayed_pair
    entry_id = a.append(LOG_NAME, MARKER, timeout_s=30.0)
    _on_both(a, b, entry_id)
    wire = bytes(relay.a_to_b) + bytes(relay.b_to_a)
    assert len(frames(bytes(relay.a_to_b))) >= 3 and len(frames(bytes(relay.b_to_a))) >= 2
    assert MARKER not in wire
    assert LOG_NAME.encode() not in wire
    assert MARKER[:16] not in wire and MARKER[-16:] not in wire
    # The capture did see the record: decrypted with the password, a frame holds it.
    cipher = FrameCipher(PASSWORD)
    plain = [cipher.decrypt(f) for f in frames(bytes(relay.a_to_b)) + frames(bytes(relay.b_to_a))]
    assert any(MARKER in p for p in plain)
    assert any(LOG_NAME.encode() in p for p in plain)


def test_a_tampered_frame_drops_the_connection_and_the_record_still_commits(relayed_pair):
    a, b, relay = relayed_pair
    if not a.is_leader():
        # A leads: the record goes A to B in AppendEntries, which A resends after the drop
        # (a command forwarded by a follower over a dropped connection is lost).
        assert b.transfer_leadership(a.self_address, timeout_s=30.0) == a.self_address
        wait_for(a.is_leader, timeout_s=30.0, what="A leads")
    dropped = [s._node._ls_transport.dropped_connections() for s in (a, b)]
    payload = MARKER * 20  # its frame is the only one this large
    relay.tamper(len(payload))
    entry_id = a.append(LOG_NAME, payload, timeout_s=60.0)
    _on_both(a, b, entry_id)
    assert len(relay.tampered) == 1
    with pytest.raises(InvalidFrame):  # the flipped copy does not authenticate
        bad = bytearray(relay.tampered[0])
        bad[len(bad) // 2] ^= 0x01
        FrameCipher(PASSWORD).decrypt(bytes(bad))
    after = [s._node._ls_transport.dropped_connections() for s in (a, b)]
    assert after[1] > dropped[1], (dropped, after)  # B, which received the flipped frame
    assert [e.data for e in b.read(LOG_NAME, entry_id, 1)] == [payload]


class _MakeDir:
    """Unpickling this creates a directory: a marker that a frame was loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _send_one_frame(address: str, frame: bytes, timeout_s: float = 15.0) -> bool:
    """Send one frame; True when the peer hangs up on it within timeout_s."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(_HEAD.pack(len(frame)) + frame)
        conn.settimeout(timeout_s)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if conn.recv(4096) == b"":
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
    return False


def test_a_tampered_frame_is_dropped_before_it_is_unpickled(tmp_path):
    address = free_addresses(1)[0]
    store = ReplicatedLogStore(address, [address], str(tmp_path / "r"), PASSWORD, config=FAST)
    try:
        store.barrier(timeout_s=30.0)
        cipher = FrameCipher(PASSWORD)
        loaded = tmp_path / "loaded"
        evil = pickle.dumps(_MakeDir(str(loaded)), WIRE_PICKLE_PROTOCOL)
        frame = cipher.encrypt_at_time(evil, int(time.monotonic()))

        # Control: the intact frame authenticates, and the replica loads it.
        with socket.create_connection(tuple(address.rsplit(":", 1)), timeout=10) as conn:
            conn.sendall(_HEAD.pack(len(frame)) + frame)
            wait_for(loaded.exists, timeout_s=30.0, what="the intact frame loaded")
        os.rmdir(loaded)

        before = store._node._ls_transport.dropped_connections()
        for pos in (0, 5, 20, len(frame) // 2, len(frame) - 1):  # header, nonce, body, tag
            bad = bytearray(frame)
            bad[pos] ^= 0x01
            assert _send_one_frame(address, bytes(bad)), pos
        # The other password's frame, and a frame cut short, are dropped the same way.
        other = FrameCipher("another password").encrypt_at_time(evil, int(time.monotonic()))
        assert _send_one_frame(address, other)
        assert _send_one_frame(address, frame[:-1])
        wait_for(
            lambda: store._node._ls_transport.dropped_connections() >= before + 7,
            timeout_s=30.0,
            what="seven dropped connections",
        )
        assert not loaded.exists()
        assert store.append("still", b"serving", timeout_s=30.0) == 1
    finally:
        store.close()


def test_a_replica_with_another_password_never_joins(tmp_path):
    addrs = free_addresses(3)
    stores: list[ReplicatedLogStore] = []
    try:
        for i, addr in enumerate(addrs):
            # The outsider in the middle: it dials the lowest replica and the highest dials
            # it, so frames under each password reach the other side.
            password = "another password" if i == 1 else PASSWORD
            stores.append(
                ReplicatedLogStore(addr, addrs, str(tmp_path / f"r{i}"), password, config=FAST)
            )
        good, outsider = [stores[0], stores[2]], stores[1]
        leader = leader_of(good)
        ids = [leader.append(LOG_NAME, b"entry %d" % i, timeout_s=30.0) for i in range(5)]
        assert ids == [1, 2, 3, 4, 5]
        for s in good:
            wait_for(lambda s=s: len(s.read(LOG_NAME)) == 5, timeout_s=30.0, what="5 entries")
        # Every connection between the outsider and the group fails authentication, on
        # the outsider and on the replica it dials.
        wait_for(
            lambda: all(s._node._ls_transport.dropped_connections() > 0 for s in stores[:2]),
            timeout_s=30.0,
            what="dropped connections on the outsider and on the lowest replica",
        )
        st = outsider.status()
        assert st["connected"] == [] and st["leader"] is None, st
        assert outsider.read(LOG_NAME) == []
        assert st["term"] == 0 and st["last_log_term"] == 0, st  # nothing of the group's log
        assert not outsider.is_leader()
    finally:
        for s in stores:
            s.close()
