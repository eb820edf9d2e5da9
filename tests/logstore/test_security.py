"""Password rules of a replica and the AEAD encryption of Raft frames (no sockets)."""

from __future__ import annotations

import os

import pytest

from logstore import auth
from logstore.auth import FrameCipher, InvalidFrame
from logstore.replicated import ReplicatedLogStore
from rpc.errors import IllegalState


@pytest.mark.parametrize(
    "address,peers,allow",
    [
        ("127.0.0.1:1", ["127.0.0.1:2"], True),  # a cluster: never without a password
        ("0.0.0.0:1", [], True),  # not loopback
        ("10.1.2.3:1", [], True),
        ("127.0.0.1:1", [], False),  # loopback single node, but not asked explicitly
    ],
)
def test_no_password_is_refused(tmp_path, address, peers, allow):
    with pytest.raises(IllegalState, match="password"):
        ReplicatedLogStore(address, peers, str(tmp_path / "d"), allow_insecure_dev=allow)
    assert not (tmp_path / "d").exists()  # refused before touching the disk


def test_a_store_without_a_password_takes_no_member(tmp_path):
    """A development store (no password) stays one node: adding a member is refused before
    anything changes, even with something listening at the new member's address."""
    import socket

    from rpc.addresses import free_port

    address = f"127.0.0.1:{free_port()}"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        other = f"127.0.0.1:{listener.getsockname()[1]}"
        store = ReplicatedLogStore(address, [], str(tmp_path / "d"), allow_insecure_dev=True)
        try:
            with pytest.raises(IllegalState, match="without a password"):
                store.add_member(other, timeout_s=5.0)
            assert store.status()["members"] == [address]
            assert store.append("l", b"x", timeout_s=30.0) == 1  # still leads on its own
        finally:
            store.close()


def test_frames_round_trip_and_carry_their_timestamp():
    a = FrameCipher("secret")
    token = a.encrypt_at_time(b"payload", 1234)
    assert a.extract_timestamp(token) == 1234
    assert a.decrypt(token) == b"payload"
    # Another replica of the group (same password, its own sending key) reads it too.
    assert FrameCipher("secret").decrypt(token) == b"payload"
    assert len(token) == len(b"payload") + auth.FRAME_OVERHEAD_BYTES


def test_frames_are_encrypted_under_a_fresh_nonce():
    a = FrameCipher("secret")
    data = b"known plaintext of a record " * 4
    tokens = [a.encrypt_at_time(data, 5) for _ in range(100)]
    assert len(set(tokens)) == 100
    nonces = {t[1 + auth.KEY_ID_BYTES : auth.HEADER_BYTES] for t in tokens}
    assert len(nonces) == 100
    for t in tokens:
        assert b"known plaintext" not in t
        assert a.decrypt(t) == data


def test_tampered_or_foreign_frames_are_rejected():
    a = FrameCipher("secret")
    token = bytearray(a.encrypt_at_time(b"payload", 7))
    for pos in (0, 1, 17, 29, 35, len(token) - 1):  # version, key id, nonce, body, tag
        bad = bytearray(token)
        bad[pos] ^= 1
        with pytest.raises(InvalidFrame):
            FrameCipher("secret").decrypt(bytes(bad))
        with pytest.raises(InvalidFrame):
            a.extract_timestamp(bytes(bad))
    with pytest.raises(InvalidFrame):
        FrameCipher("other").decrypt(bytes(token))
    with pytest.raises(InvalidFrame):
        a.decrypt(bytes(token[:-1]))
    with pytest.raises(InvalidFrame):
        a.decrypt(b"short")
    with pytest.raises(ValueError):
        FrameCipher("")


def test_the_sending_key_changes_after_its_frame_budget(monkeypatch):
    monkeypatch.setattr(auth, "KEY_FRAMES_MAX", 4)
    a, b = FrameCipher("secret"), FrameCipher("secret")
    tokens = [a.encrypt_at_time(b"x%d" % i, i) for i in range(12)]
    key_ids = [t[1 : 1 + auth.KEY_ID_BYTES] for t in tokens]
    assert len(set(key_ids)) == 4  # frames 1-3, 4-7, 8-11, 12
    assert [b.decrypt(t) for t in tokens] == [b"x%d" % i for i in range(12)]


def test_forged_key_ids_do_not_evict_the_group_keys(monkeypatch):
    monkeypatch.setattr(auth, "RECEIVE_KEYS_MAX", 3)
    sender, receiver = FrameCipher("secret"), FrameCipher("secret")
    token = sender.encrypt_at_time(b"payload", 1)
    assert receiver.decrypt(token) == b"payload"
    key_id = token[1 : 1 + auth.KEY_ID_BYTES]
    for _ in range(10):
        forged = bytearray(token)
        forged[1 : 1 + auth.KEY_ID_BYTES] = os.urandom(auth.KEY_ID_BYTES)
        with pytest.raises(InvalidFrame):
            receiver.decrypt(bytes(forged))
    assert list(receiver._receive) == [key_id]
    senders = [FrameCipher("secret") for _ in range(5)]
    for s in senders:
        assert receiver.decrypt(s.encrypt_at_time(b"y", 2)) == b"y"
    assert len(receiver._receive) == 3  # bounded: the oldest went first


@pytest.mark.parametrize("size", [0, 1, 4000, 100_000, 2_200_000])
def test_frames_of_every_size_round_trip_and_catch_any_flip(size):
    a = FrameCipher("secret")
    payload = bytes(i % 251 for i in range(size))
    token = a.encrypt_at_time(payload, 99)
    assert FrameCipher("secret").decrypt(token) == payload
    for pos in {0, len(token) // 2, len(token) - 17, len(token) - 1}:
        bad = bytearray(token)
        bad[pos] ^= 0x40
        with pytest.raises(InvalidFrame):
            FrameCipher("secret").decrypt(bytes(bad))
