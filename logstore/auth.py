"""Authentication of Raft traffic between logstore replicas.

pysyncobj pickles its network messages, so a replica must never unpickle bytes that do not
come from a replica holding the cluster password. pysyncobj's own `password` option needs
the third-party `cryptography` package (Fernet), which this project does not install; this
module provides an object with the same three methods pysyncobj's TCP connection calls
(`encrypt_at_time`, `extract_timestamp`, `decrypt`) built on the standard library:
HMAC-SHA256 with a key derived from the password by PBKDF2 (100k iterations).

Every frame is authenticated before it is unpickled; pysyncobj's handshake puts a random
per-connection key in every message, so frames cannot be replayed across connections.
Frames are NOT encrypted: run the Raft port on a trusted network (design/logstore.md).
"""

from __future__ import annotations

import hashlib
import hmac
import struct

_SALT = b"logstore-raft-auth-v1"
_TAG_BYTES = 32
_TS = struct.Struct("<q")
_GIL_FREE_BYTES_MIN = 2048  # CPython's hashlib releases the GIL from this input size on
_PIECE_BYTES = _GIL_FREE_BYTES_MIN - 64


class InvalidFrame(Exception):
    """A frame without a valid tag; pysyncobj drops the connection."""


class HmacAuthenticator:
    def __init__(self, password: str | bytes) -> None:
        if isinstance(password, str):
            password = password.encode()
        if not password:
            raise ValueError("empty password")
        self._key = hashlib.pbkdf2_hmac("sha256", password, _SALT, 100_000)
        # pysyncobj calls extract_timestamp and then decrypt on the same frame: the second
        # call reuses the first one's verification (same bytes object, checked by identity
        # and content). One tuple, assigned at once, so concurrent callers stay correct.
        self._last: tuple[bytes, bytes] | None = None

    def _tag(self, signed: bytes) -> bytes:
        # hashlib releases the GIL while it hashes an input of _GIL_FREE_BYTES_MIN bytes or
        # more (and the one-shot hmac.digest always does). On pysyncobj's tick thread, the
        # bottleneck under load, every release means waiting for the GIL behind the caller
        # threads afterwards, which costs far more than hashing a few KiB: so the input is
        # fed in pieces below that size and the GIL is kept.
        if len(signed) < _GIL_FREE_BYTES_MIN:
            return hmac.new(self._key, signed, hashlib.sha256).digest()
        h = hmac.new(self._key, None, hashlib.sha256)
        view = memoryview(signed)
        for off in range(0, len(view), _PIECE_BYTES):
            h.update(view[off : off + _PIECE_BYTES])
        return h.digest()

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        signed = _TS.pack(int(current_time)) + bytes(data)
        return signed + self._tag(signed)

    def _verify(self, token: bytes) -> bytes:
        token = bytes(token)
        last = self._last
        if last is not None and (last[0] is token or last[0] == token):
            return last[1]
        if len(token) < _TS.size + _TAG_BYTES:
            raise InvalidFrame("short frame")
        signed, tag = token[:-_TAG_BYTES], token[-_TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(signed)):
            raise InvalidFrame("bad tag")
        self._last = (token, signed)
        return signed

    def extract_timestamp(self, token: bytes) -> int:
        return _TS.unpack_from(self._verify(token), 0)[0]

    def decrypt(self, token: bytes) -> bytes:
        return self._verify(token)[_TS.size :]
