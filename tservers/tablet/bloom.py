"""A blocked bloom filter over primary keys, its stable key hash and its versioned file.

A key (the Python value a tablet uses: int, str, bytes, bool, or a tuple of them for a
composite key; timestamps as int64 microseconds) hashes to 64 bits that never depend on the
process (no `hash()`): splitmix64 of an integer, blake2b-64 of the bytes of anything else.
The filter is an array of 512-bit blocks; a key sets PROBES bits in the one block its high
32 hash bits pick, so a lookup touches one 64-byte block. About BITS_PER_KEY bits a key
(~1% false positives).

Vectorized: a column of integer keys is hashed with Arrow kernels (`hash_array`,
`hash_keys`), a batch of hashes probed against a filter in one pass (`may_contain_many`)
and a filter built from hash arrays by a scatter of their bit positions, a segment of the
filter at a time (`build`, `build_batches`: memory bounded by the segment, not the block).
The bit layout is the same as the one-key functions (`key_hash`, `may_contain`): a bit p
is bit p & 7 of byte p >> 3, which is also how Arrow packs a boolean array.

File (`<block>.bloom`, little endian): magic b"LCBF", u16 version, u16 probes, u32 filter
blocks, u64 keys, u32 crc32 of the bits, then the bits. Derived data: a file that is
missing, torn, of another version or whose checksum fails is rebuilt from its block.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

MAGIC = b"LCBF"
VERSION = 1
PROBES = 6
BITS_PER_KEY = 10
BLOCK_BITS = 512
BLOCK_BYTES = BLOCK_BITS // 8
BLOCKS_MAX = 1 << 26  # 4 GiB of filter: far past any block's size
# A filter is built SEGMENT_BITS filter bits at a time (`build_batches`): the scatter's
# scratch and the bit positions of the keys of one segment (~100k keys, ~10 MB).
SEGMENT_BITS = 1 << 20
HASHES_PER_ARRAY = 1 << 18  # hashes held in arrays of about this many
_HEADER = struct.Struct("<4sHHIQI")
_MASK64 = (1 << 64) - 1
_U64 = pa.uint64()


def _u(v: int) -> pa.Scalar:
    return pa.scalar(v, _U64)


_GOLDEN, _M1, _M2 = _u(0x9E3779B97F4A7C15), _u(0xBF58476D1CE4E5B9), _u(0x94D049BB133111EB)
_S30, _S27, _S31, _S32 = _u(30), _u(27), _u(31), _u(32)
_LOW32 = _u(0xFFFFFFFF)


def i64(v: int) -> pa.Scalar:
    return pa.scalar(v, pa.int64())


_I1, _I17, _I511 = i64(1), i64(17), i64(511)
_BLOCK_BITS = i64(BLOCK_BITS)


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


def is_int_type(t: pa.DataType) -> bool:
    """Keys of this Arrow type are Python ints (hashed by splitmix64)."""
    return pa.types.is_integer(t) or pa.types.is_timestamp(t) or pa.types.is_boolean(t)


def _splitmix(z: pa.Array) -> pa.Array:
    """splitmix64 of every value of a uint64 array (Arrow's unchecked kernels wrap)."""
    z = pc.add(z, _GOLDEN)
    z = pc.multiply(pc.bit_wise_xor(z, pc.shift_right(z, _S30)), _M1)
    z = pc.multiply(pc.bit_wise_xor(z, pc.shift_right(z, _S27)), _M2)
    return pc.bit_wise_xor(z, pc.shift_right(z, _S31))


def _as_u64(a: pa.Array) -> pa.Array:
    """An integer, timestamp or boolean array as uint64 two's complement (Python's
    `key & (2**64 - 1)`)."""
    if pa.types.is_timestamp(a.type):
        a = a.view(pa.int64())
    elif not pa.types.is_int64(a.type) and not pa.types.is_uint64(a.type):
        a = a.cast(pa.int64())
    return a if pa.types.is_uint64(a.type) else a.view(_U64)


def hash_array(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    """`key_hash` of every value of a one-column key array, as a uint64 array (vectorized
    for integer, timestamp and boolean keys)."""
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    if is_int_type(a.type):
        return _splitmix(_as_u64(a))
    if pa.types.is_timestamp(a.type):
        a = a.view(pa.int64())
    return pa.array([key_hash(k) for k in a.to_pylist()], _U64)


def hash_columns(arrays: Sequence[pa.Array]) -> pa.Array:
    """`key_hash` of every key of a key given as its columns (one or more arrays)."""
    if len(arrays) == 1:
        return hash_array(arrays[0])
    lists = [
        (a.view(pa.int64()) if pa.types.is_timestamp(a.type) else a).to_pylist() for a in arrays
    ]
    return pa.array([key_hash(k) for k in zip(*lists, strict=True)], _U64)


def hash_keys(keys: Sequence) -> pa.Array:
    """`key_hash` of Python keys, as a uint64 array (vectorized when they are ints)."""
    if keys and all(type(k) is int for k in keys):
        try:
            return _splitmix(pa.array(keys, pa.int64()).view(_U64))
        except (OverflowError, pa.ArrowInvalid):
            pass
    return pa.array([key_hash(k) for k in keys], _U64)


def _probe_bits(hashes: pa.Array, nblocks: int) -> list[pa.Array]:
    """The PROBES bit positions of every hash, as PROBES int64 arrays (the arithmetic of
    `may_contain`: every term fits int64, and only the low 9 bits of h2 are used)."""
    hi = pc.shift_right(hashes, _S32).view(pa.int64())
    h2 = pc.bit_wise_and(hashes, _LOW32).view(pa.int64())
    # Typed scalars throughout: a bare Python int makes pyarrow try to import numpy at
    # every call (~0.5 ms when numpy is not installed, as here).
    base = pc.multiply(pc.modulo(hi, i64(nblocks)), _BLOCK_BITS)
    step = pc.bit_wise_or(pc.shift_right(h2, _I17), _I1)
    out = []
    for _ in range(PROBES):
        out.append(pc.add(base, pc.bit_wise_and(h2, _I511)))
        h2 = pc.add(h2, step)
    return out


class Bloom:
    """An immutable filter: `may_contain(key_hash(k))` is False only for keys never added."""

    __slots__ = ("bits", "nblocks", "nkeys", "_bools")

    def __init__(self, bits: bytes, nblocks: int, nkeys: int) -> None:
        assert len(bits) == nblocks * BLOCK_BYTES
        self.bits = bits
        self.nblocks = nblocks
        self.nkeys = nkeys
        # The bits as an Arrow boolean array over the same memory (for vectorized probes):
        # Arrow packs booleans LSB first, bit p in byte p >> 3 at bit p & 7, as the filter.
        self._bools = pa.Array.from_buffers(pa.bool_(), len(bits) * 8, [None, pa.py_buffer(bits)])

    @classmethod
    def build(cls, hashes: pa.Array | Iterable[int], nkeys: int) -> Bloom:
        """The filter of `hashes` (a uint64 array, or Python ints) sized for `nkeys` keys."""
        if not isinstance(hashes, pa.Array):
            hashes = pa.array(list(hashes), _U64)
        return cls.build_batches([hashes], nkeys)

    @classmethod
    def build_batches(cls, batches: Iterable[pa.Array], nkeys: int) -> Bloom:
        """The filter of the hashes of `batches` (uint64 arrays), sized for `nkeys` keys: the
        bits of one scatter of every key's bit positions, made a segment of SEGMENT_BITS
        filter bits at a time. A scatter over the whole filter costs ~2 bytes of scratch a
        filter bit (20 a key) on top of 48 bytes a key of positions: ~700 MB for a block of
        10M keys. Here the hashes are held (8 bytes a key) and each segment scatters only
        the positions of its keys: the rest is bounded by the segment, whatever `nkeys`."""
        nblocks = min(BLOCKS_MAX, max(1, (nkeys * BITS_PER_KEY + BLOCK_BITS - 1) // BLOCK_BITS))
        nbits = nblocks * BLOCK_BITS
        held: list[pa.Array] = []
        group: list[pa.Array] = []
        for h in batches:
            if isinstance(h, pa.ChunkedArray):
                h = h.combine_chunks() if h.num_chunks != 1 else h.chunk(0)
            if len(h):
                group.append(h)
            if sum(len(x) for x in group) >= HASHES_PER_ARRAY:
                held.append(pa.concat_arrays(group))
                group = []
        if group:
            held.append(pa.concat_arrays(group) if len(group) > 1 else group[0])
        if not held:
            return cls(bytes(nbits // 8), nblocks, nkeys)
        seg_blocks = max(1, SEGMENT_BITS // BLOCK_BITS)
        whole = seg_blocks >= nblocks
        out = bytearray()
        for b0 in range(0, nblocks, seg_blocks):
            b1 = min(nblocks, b0 + seg_blocks)
            if whole:
                mine = held
            else:  # the keys whose filter block is in [b0, b1)
                mine = []
                for h in held:
                    blk = pc.modulo(pc.shift_right(h, _S32).view(pa.int64()), i64(nblocks))
                    sel = pc.and_(pc.greater_equal(blk, i64(b0)), pc.less(blk, i64(b1)))
                    mine.append(pc.filter(h, sel))
            hashes = pa.concat_arrays(mine) if len(mine) > 1 else mine[0]
            seg_bits = (b1 - b0) * BLOCK_BITS
            if not len(hashes):
                out += bytes(seg_bits // 8)
                continue
            positions = pa.concat_arrays(_probe_bits(hashes, nblocks))
            if b0:
                positions = pc.subtract(positions, i64(b0 * BLOCK_BITS))
            # Written positions are valid, the rest null: the result's validity bitmap has
            # bit p in byte p >> 3 at bit p & 7 (LSB first), the filter's own layout.
            mark = pc.scatter(
                pa.repeat(pa.scalar(True, pa.bool_()), len(positions)),
                positions,
                max_index=seg_bits - 1,
            )
            assert mark.offset == 0 and len(mark) == seg_bits
            validity = mark.buffers()[0]
            if validity is None:  # every bit set
                out += b"\xff" * (seg_bits // 8)
            else:
                out += validity.to_pybytes()[: seg_bits // 8]
        assert len(out) == nbits // 8
        return cls(bytes(out), nblocks, nkeys)

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

    def may_contain_many(self, hashes: pa.Array) -> pa.Array:
        """`may_contain` of every hash of a uint64 array, as a boolean array: one `take` of
        the filter's bits at every probe position of every hash (a boolean array over the
        bits), then the PROBES hits of each hash and-ed. Each Arrow call costs a few µs
        whatever its length, and an insert batch probes every block its keys' range
        overlaps: 13 calls a block where the byte-and-shift probe took 50."""
        n = len(hashes)
        hits = pc.take(self._bools, pa.concat_arrays(_probe_bits(hashes, self.nblocks)))
        ok = hits.slice(0, n)
        for i in range(1, PROBES):
            ok = pc.and_(ok, hits.slice(i * n, n))
        return ok

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
