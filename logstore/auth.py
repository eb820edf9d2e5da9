"""Encryption and authentication of Raft traffic between logstore replicas.

pysyncobj pickles its network messages, so a replica must never unpickle bytes that do not
come from a replica holding the cluster password, and the messages (every appended record)
must not be readable on the wire. pysyncobj calls three methods of the object a SyncObj
names as its `encryptor` (the Fernet API): `encrypt_at_time`, `extract_timestamp` and
`decrypt`. `FrameCipher` provides them with an AEAD, ChaCha20-Poly1305 from `cryptography`
(design/logstore.md, "Raft frames on the wire"):

- the master key is derived from the password by PBKDF2-HMAC-SHA256 (100k iterations, a
  fixed salt: every replica of a group derives the same key);
- each sender draws a random 16-byte key id and encrypts under HMAC-SHA256(master, label +
  key id); it draws a new one every KEY_FRAMES_MAX frames, so random 96-bit nonces never
  come near their collision bound, however long the group runs;
- each frame gets a fresh random 96-bit nonce; its plaintext is the sender's timestamp (8
  bytes, which pysyncobj checks never goes backwards on a connection) and the pickle;
- the frame header (version, key id) is authenticated as associated data.

A frame is: version (1) | key id (16) | nonce (12) | ciphertext | tag (16). Nothing of a
frame is used before its tag is verified: a tampered, truncated or foreign frame raises
InvalidFrame, on which pysyncobj drops the connection, before anything is unpickled.
pysyncobj's handshake puts a random per-connection key in every message, so frames cannot be
replayed across connections.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import struct
import threading

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

VERSION = b"\x01"
_SALT = b"logstore-raft-aead-v1"  # PBKDF2 salt of the master key (fixed: same on every replica)
_KEY_LABEL = b"logstore-raft-frame-key-v1"
PBKDF2_ITERATIONS = 100_000
KEY_ID_BYTES = 16
NONCE_BYTES = 12
TAG_BYTES = 16
_TS = struct.Struct("<q")
HEADER_BYTES = len(VERSION) + KEY_ID_BYTES + NONCE_BYTES
FRAME_OVERHEAD_BYTES = HEADER_BYTES + _TS.size + TAG_BYTES  # 61
# Frames encrypted under one key id before the sender draws another: with random 96-bit
# nonces the chance that two frames of one key share a nonce stays below 2**-49.
KEY_FRAMES_MAX = 1 << 24
# Receiving keys (one per sender and key id) kept; a key is cached only once a frame under it
# was authenticated, so forged key ids cannot push out the good ones.
RECEIVE_KEYS_MAX = 256


class InvalidFrame(Exception):
    """A frame that does not authenticate; pysyncobj drops the connection."""


class FrameCipher:
    def __init__(self, password: str | bytes) -> None:
        if isinstance(password, str):
            password = password.encode()
        if not password:
            raise ValueError("empty password")
        self._master = hashlib.pbkdf2_hmac("sha256", password, _SALT, PBKDF2_ITERATIONS)
        self._lock = threading.Lock()  # the sending key's rotation; the tick thread and _probe
        self._send: tuple[bytes, ChaCha20Poly1305] = self._new_send_key()
        self._sent = itertools.count(1)  # atomic under the GIL
        self._receive: dict[bytes, ChaCha20Poly1305] = {}
        # pysyncobj calls extract_timestamp and then decrypt on the same frame: the second
        # call reuses the first one's plaintext (same bytes object, checked by identity and
        # content). One tuple, assigned at once, so concurrent callers stay correct.
        self._last: tuple[bytes, bytes] | None = None

    def _key(self, key_id: bytes) -> ChaCha20Poly1305:
        return ChaCha20Poly1305(hmac.digest(self._master, _KEY_LABEL + key_id, hashlib.sha256))

    def _new_send_key(self) -> tuple[bytes, ChaCha20Poly1305]:
        key_id = os.urandom(KEY_ID_BYTES)
        return VERSION + key_id, self._key(key_id)

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        if next(self._sent) % KEY_FRAMES_MAX == 0:
            with self._lock:
                self._send = self._new_send_key()
        head, aead = self._send
        nonce = os.urandom(NONCE_BYTES)
        sealed = aead.encrypt(nonce, _TS.pack(int(current_time)) + bytes(data), head)
        return head + nonce + sealed

    def _open(self, token: bytes) -> bytes:
        """The plaintext (timestamp + data) of an authenticated frame, else InvalidFrame."""
        token = bytes(token)
        last = self._last
        if last is not None and (last[0] is token or last[0] == token):
            return last[1]
        if len(token) < FRAME_OVERHEAD_BYTES or token[:1] != VERSION:
            raise InvalidFrame("short frame or unknown version")
        head = token[: 1 + KEY_ID_BYTES]
        key_id = head[1:]
        aead = self._receive.get(key_id)
        known = aead is not None
        if aead is None:
            aead = self._key(key_id)
        try:
            plain = aead.decrypt(token[1 + KEY_ID_BYTES : HEADER_BYTES], token[HEADER_BYTES:], head)
        except InvalidTag:
            raise InvalidFrame("frame failed authentication") from None
        if not known:
            with self._lock:
                while len(self._receive) >= RECEIVE_KEYS_MAX:
                    del self._receive[next(iter(self._receive))]
                self._receive[key_id] = aead
        self._last = (token, plain)
        return plain

    def extract_timestamp(self, token: bytes) -> int:
        return _TS.unpack_from(self._open(token), 0)[0]

    def decrypt(self, token: bytes) -> bytes:
        return self._open(token)[_TS.size :]
