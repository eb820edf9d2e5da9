"""A blocked bloom filter over primary keys, its stable key hash and its versioned file.

A key (the Python value a tablet uses: int, str, bytes, bool, or a tuple of them for a
composite key; timestamps as int64 microseconds) hashes to 64 bits that never depend on the
process (no `hash()`): splitmix64 of an integer, blake2b-64 of the bytes of anything else.
The filter is an array of 512-bit blocks; a key sets PROBES bits in the one block its high
32 hash bits pick, so a lookup touches one 64-byte block. About BITS_PER_KEY bits a key
(~1% false positives).

File (`<block>.bloom`, little endian): magic b"LCBF", u16 version, u16 probes, u32 filter
blocks, u64 keys, u32 crc32 of the bits, then the bits. Derived data: a file that is
missing, torn, of another version or whose checksum fails is rebuilt from its block.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable

MAGIC = b"LCBF"
VERSION = 1
PROBES = 6
BITS_PER_KEY = 10
BLOCK_BITS = 512
BLOCK_BYTES = BLOCK_BITS // 8
BLOCKS_MAX = 1 << 26  # 4 GiB of filter: far past any block's size
_HEADER = struct.Struct("<4sHHIQI")
_MASK64 = (1 << 64) - 1


def key_hash(key) -> int:
    """A 64-bit hash of a key, the same in every process and release."""
    if isinstance(key, int):  # int64, int32, timestamp (µs), bool
        z = (key + 0x9E3779B97F4A7C15) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)
    return int.from_bytes(hashlib.blake2b(_encode(key), digest_size=8).digest(), "little")


def _encode(key) -> bytes:
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, bytes):
        return b"b" + key
    if isinstance(key, int):
        return b"i" + (key & _MASK64).to_bytes(8, "little")
    if isinstance(key, tuple):
        out = bytearray(b"t")
        for part in key:
            e = _encode(part)
            out += len(e).to_bytes(4, "little")
            out += e
        return bytes(out)
    raise TypeError(f"cannot hash key of type {type(key).__name__}")


class Bloom:
    """An immutable filter: `may_contain(key_hash(k))` is False only for keys never added."""

    __slots__ = ("bits", "nblocks", "nkeys")

    def __init__(self, bits: bytes, nblocks: int, nkeys: int) -> None:
        assert len(bits) == nblocks * BLOCK_BYTES
        self.bits = bits
        self.nblocks = nblocks
        self.nkeys = nkeys

    @classmethod
    def build(cls, hashes: Iterable[int], nkeys: int) -> Bloom:
        nblocks = min(BLOCKS_MAX, max(1, (nkeys * BITS_PER_KEY + BLOCK_BITS - 1) // BLOCK_BITS))
        bits = bytearray(nblocks * BLOCK_BYTES)
        for h in hashes:
            base = ((h >> 32) % nblocks) * BLOCK_BITS
            h2 = h & 0xFFFFFFFF
            step = (h2 >> 17) | 1
            for _ in range(PROBES):
                p = base + (h2 & 511)
                bits[p >> 3] |= 1 << (p & 7)
                h2 += step
        return cls(bytes(bits), nblocks, nkeys)

    def may_contain(self, h: int) -> bool:
        bits = self.bits
        base = ((h >> 32) % self.nblocks) * BLOCK_BITS
        h2 = h & 0xFFFFFFFF
        step = (h2 >> 17) | 1
        for _ in range(PROBES):
            p = base + (h2 & 511)
            if not (bits[p >> 3] >> (p & 7)) & 1:
                return False
            h2 += step
        return True

    @property
    def size_bytes(self) -> int:
        return len(self.bits)

    def to_bytes(self) -> bytes:
        header = _HEADER.pack(
            MAGIC, VERSION, PROBES, self.nblocks, self.nkeys, zlib.crc32(self.bits)
        )
        return header + self.bits

    @classmethod
    def from_bytes(cls, data: bytes) -> Bloom | None:
        """The filter in `data`, or None when it is not a whole filter of this version."""
        if len(data) < _HEADER.size:
            return None
        magic, version, probes, nblocks, nkeys, crc = _HEADER.unpack_from(data)
        if magic != MAGIC or version != VERSION or probes != PROBES:
            return None
        if not 1 <= nblocks <= BLOCKS_MAX:
            return None
        bits = data[_HEADER.size :]
        if len(bits) != nblocks * BLOCK_BYTES or zlib.crc32(bits) != crc:
            return None
        return cls(bytes(bits), nblocks, nkeys)
