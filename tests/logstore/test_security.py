"""Password rules of a replica and the HMAC authentication of Raft frames (no sockets)."""

from __future__ import annotations

import pytest

from logstore.auth import HmacAuthenticator, InvalidFrame
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
    a = HmacAuthenticator("secret")
    token = a.encrypt_at_time(b"payload", 1234)
    assert a.extract_timestamp(token) == 1234
    assert a.decrypt(token) == b"payload"


def test_tampered_or_foreign_frames_are_rejected():
    a = HmacAuthenticator("secret")
    token = bytearray(a.encrypt_at_time(b"payload", 7))
    for pos in (0, 9, len(token) - 1):
        bad = bytearray(token)
        bad[pos] ^= 1
        with pytest.raises(InvalidFrame):
            a.decrypt(bytes(bad))
        with pytest.raises(InvalidFrame):
            a.extract_timestamp(bytes(bad))
    with pytest.raises(InvalidFrame):
        HmacAuthenticator("other").decrypt(bytes(token))
    with pytest.raises(InvalidFrame):
        a.decrypt(b"short")
    with pytest.raises(ValueError):
        HmacAuthenticator("")


@pytest.mark.parametrize("size", [0, 2000, 2039, 2040, 4000, 100_000])
def test_large_frames_are_tagged_like_one_shot_hmac(size):
    """Frames of 2 KiB and more are hashed in pieces (the tick thread keeps the GIL); the
    tag is still HMAC-SHA256 of the whole frame, and any flipped byte is caught."""
    import hashlib
    import hmac

    a = HmacAuthenticator("secret")
    payload = bytes(i % 251 for i in range(size))
    token = a.encrypt_at_time(payload, 99)
    assert token[-32:] == hmac.digest(a._key, token[:-32], hashlib.sha256)
    assert a.decrypt(token) == payload
    for pos in {0, len(token) // 2, len(token) - 33}:
        bad = bytearray(token)
        bad[pos] ^= 0x40
        with pytest.raises(InvalidFrame):
            HmacAuthenticator("secret").decrypt(bytes(bad))
