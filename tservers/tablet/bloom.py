"""A register-blocked bloom filter over primary keys, its stable key hash and its versioned file.

A key (the Python value a tablet uses: int, str, bytes, bool, or a tuple of them for a
composite key; timestamps as int64 microseconds) hashes to 64 bits that never depend on the
process (no `hash()`): splitmix64 of an integer, blake2b-64 of the bytes of anything else.

The filter (format version 2) is an array of 64-bit words; a key sets PROBES bits in the one
word its high 32 hash bits pick (word `((h >> 32) * nwords) >> 32`), the bit numbers being
the 6-bit fields at bits 0, 6, 12, 18 and 24 of the hash (its low 32 bits, disjoint from the
word's: a field may repeat, the key then sets fewer bits). A key's bits are thus one 64-bit
mask that depends on its hash only, not on the filter, and a lookup reads one word:
`word & mask == mask`. BITS_PER_KEY bits a key (1.5 bytes): a word-blocked filter needs more
bits than a 512-bit-blocked one for the same rate (words hold uneven numbers of keys);
measured on 1M random keys, 12 bits and 5 probes give ~1.04% false positives, as the
version-1 filter's 10 bits and 6 probes give ~1.08% (`bench/bloom.py`).

Vectorized: a column of integer keys is hashed with Arrow kernels (`hash_array`,
`hash_keys`). A batch of hashes is probed against many filters (an insert batch against the
filter of every run): `Probe(hashes)` computes once what every filter needs (the masks and
the high hash bits) and `may_contain_many(probe)` is then 5 Arrow calls a filter: the word
index (multiply, shift), ONE `take` of the words (a uint64 array over the bits), `and` and
`equal` with the masks. `may_contain_many(hashes)` takes bare hashes too (it makes the
Probe). A filter is built from hash arrays by a scatter of their bit positions, a segment of
the filter at a time (`build`, `build_batches`: memory bounded by the segment, not the
block). The bit layout is the one of the one-key functions (`key_hash`, `may_contain`): bit
b of word w is bit p = 64 w + b, bit p & 7 of byte p >> 3, which is both the little-endian
uint64 view of the bytes and how Arrow packs a boolean array.

Version 1 (`BloomV1`, still read and probed; no longer written): 512-bit blocks, the block
picked by `(h >> 32) % nblocks`, V1_PROBES = 6 bits a key in it by double hashing of the low
32 bits, V1_BITS_PER_KEY = 10. `Bloom.from_bytes` returns a `Bloom` for a version-2 file, a
`BloomV1` for a version-1 one: both probe (scalar, vectorized, with a Probe or hashes) alike.

File (`<block>.bloom`, little endian): magic b"LCBF", u16 version, u16 probes, u32 count,
u64 keys, u32 crc, then the bits. Version 2: count is 64-bit words (2 at least), probes 5,
the crc is crc32 of the header's first 20 bytes (magic to keys) then the bits, and the bits
are 8 bytes a word. Version 1: count is 512-bit blocks, probes 6, the crc is crc32 of the
bits alone, the bits 64 bytes a block. Neither is read as the other: the version, the probes,
the length the count implies and the crc all differ (a version-2 crc covers the version).
Derived data: a file that is missing, torn, of an unknown version or whose checks fail is
rebuilt from its block (at version 2).
"""

from __future__ import annotations

import hashlib
import struct
import sys
import zlib
from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

MAGIC = b"LCBF"
# Version 2 (written): one 64-bit word a key.
VERSION = 2
PROBES = 5  # bit numbers a key: the 6-bit fields of the low 30 hash bits
BITS_PER_KEY = 12
WORD_BITS = 64
WORD_BYTES = WORD_BITS // 8
WORDS_MIN = 2
WORDS_MAX = 1 << 29  # 4 GiB of filter: far past any block's size
# Version 1 (read only): 512-bit blocks.
V1_VERSION = 1
V1_PROBES = 6
V1_BITS_PER_KEY = 10
BLOCK_BITS = 512
BLOCK_BYTES = BLOCK_BITS // 8
BLOCKS_MAX = 1 << 26  # 4 GiB of filter: far past any block's size
# A filter is built SEGMENT_BITS filter bits at a time (`build_batches`): the scatter's
# scratch and the bit positions of the keys of one segment (~100k keys, ~10 MB).
SEGMENT_BITS = 1 << 20
HASHES_PER_ARRAY = 1 << 18  # hashes held in arrays of about this many
_HEADER = struct.Struct("<4sHHIQI")
_HEADER_FIELDS = struct.Struct("<4sHHIQ")  # the header less its crc: covered by a v2 crc
# A version-2 filter's bits are probed as an Arrow uint64 array over them (native order):
# the file's little-endian words are this machine's.
assert sys.byteorder == "little"
_MASK64 = (1 << 64) - 1
_U64 = pa.uint64()


def _u(v: int) -> pa.Scalar:
    return pa.scalar(v, _U64)


_GOLDEN, _M1, _M2 = _u(0x9E3779B97F4A7C15), _u(0xBF58476D1CE4E5B9), _u(0x94D049BB133111EB)
_S30, _S27, _S31, _S32 = _u(30), _u(27), _u(31), _u(32)
_LOW32 = _u(0xFFFFFFFF)
_ONE, _L63, _S6 = _u(1), _u(63), _u(6)
# The shifts of a key's PROBES bit-number fields (None: the first, unshifted).
_FIELD_SHIFTS = [None] + [_u(6 * i) for i in range(1, PROBES)]


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


def _array(hashes: pa.Array | pa.ChunkedArray | Iterable[int]) -> pa.Array:
    """Hashes as one uint64 array."""
    if isinstance(hashes, pa.ChunkedArray):
        return hashes.combine_chunks() if hashes.num_chunks != 1 else hashes.chunk(0)
    if not isinstance(hashes, pa.Array):
        return pa.array(list(hashes), _U64)
    return hashes


def _hold(batches: Iterable[pa.Array]) -> list[pa.Array]:
    """The hashes of `batches` gathered in arrays of about HASHES_PER_ARRAY (empty ones
    dropped): what a build holds, 8 bytes a key."""
    held: list[pa.Array] = []
    group: list[pa.Array] = []
    for h in batches:
        h = _array(h)
        if len(h):
            group.append(h)
        if sum(len(x) for x in group) >= HASHES_PER_ARRAY:
            held.append(pa.concat_arrays(group))
            group = []
    if group:
        held.append(pa.concat_arrays(group) if len(group) > 1 else group[0])
    return held


def _mark(positions: pa.Array, nbits: int) -> bytes:
    """The `nbits` bits (LSB first) with exactly the bits at `positions` set: a scatter of
    True at the positions, whose result's validity bitmap (written positions valid, the
    rest null) has bit p in byte p >> 3 at bit p & 7, the filter's own layout."""
    mark = pc.scatter(
        pa.repeat(pa.scalar(True, pa.bool_()), len(positions)), positions, max_index=nbits - 1
    )
    assert mark.offset == 0 and len(mark) == nbits
    validity = mark.buffers()[0]
    if validity is None:  # every bit set
        return b"\xff" * (nbits // 8)
    return validity.to_pybytes()[: nbits // 8]


# ---- version 2: one 64-bit word a key ----


def mask_of(h: int) -> int:
    """The bits a key of hash `h` sets in its word (version 2): bit (h >> 6 i) & 63 for i in
    range(PROBES), or-ed (a bit number may repeat)."""
    m = 0
    for i in range(PROBES):
        m |= 1 << ((h >> (6 * i)) & 63)
    return m


def _masks(hashes: pa.Array) -> pa.Array:
    """`mask_of` of every hash of a uint64 array (3 Arrow calls a probe, 2 for the first,
    and an `or` between probes: 18 calls a batch, whatever the filters)."""
    m = None
    for s in _FIELD_SHIFTS:
        field = pc.bit_wise_and(hashes if s is None else pc.shift_right(hashes, s), _L63)
        bit = pc.shift_left(_ONE, field)
        m = bit if m is None else pc.bit_wise_or(m, bit)
    return m


def _nwords(nkeys: int) -> int:
    return min(WORDS_MAX, max(WORDS_MIN, (nkeys * BITS_PER_KEY + WORD_BITS - 1) // WORD_BITS))


class Probe:
    """What probing a batch of hashes against any version-2 filter needs, computed once for
    the batch: the hashes, their high 32 bits (the word index is `(hi * nwords) >> 32`, the
    filter's share) and each key's mask (`mask_of`). An insert batch probes the filter of
    every run with the same keys: `may_contain_many(probe)` of each filter then costs the
    word index, one `take`, an `and` and an `equal`. `slice` and `take` give the Probe of a
    part of the batch without computing the masks again. A version-1 filter probes with
    `hashes`."""

    __slots__ = ("hashes", "hi", "mask")

    def __init__(self, hashes: pa.Array | pa.ChunkedArray | Iterable[int]) -> None:
        hashes = _array(hashes)
        self.hashes = hashes
        self.hi = pc.shift_right(hashes, _S32)
        self.mask = _masks(hashes)

    @classmethod
    def _of(cls, hashes: pa.Array, hi: pa.Array, mask: pa.Array) -> Probe:
        p = cls.__new__(cls)
        p.hashes, p.hi, p.mask = hashes, hi, mask
        return p

    def __len__(self) -> int:
        return len(self.hashes)

    def slice(self, offset: int = 0, length: int | None = None) -> Probe:
        """The Probe of `hashes.slice(offset, length)` (zero-copy)."""
        return Probe._of(
            self.hashes.slice(offset, length),
            self.hi.slice(offset, length),
            self.mask.slice(offset, length),
        )

    def take(self, indices: pa.Array) -> Probe:
        """The Probe of `hashes.take(indices)`: two `take`s and a shift, not the masks'
        18 calls."""
        hashes = pc.take(self.hashes, indices)
        return Probe._of(hashes, pc.shift_right(hashes, _S32), pc.take(self.mask, indices))


class Bloom:
    """An immutable filter (version 2): `may_contain(key_hash(k))` is False only for keys
    never added. `from_bytes` also reads version-1 files (as a `BloomV1`)."""

    __slots__ = ("bits", "nwords", "nkeys", "_n", "_words")
    version = VERSION

    def __init__(self, bits: bytes, nwords: int, nkeys: int) -> None:
        assert len(bits) == nwords * WORD_BYTES and WORDS_MIN <= nwords <= WORDS_MAX
        self.bits = bits
        self.nwords = nwords
        self.nkeys = nkeys
        self._n = _u(nwords)
        # The bits as an Arrow uint64 array (for vectorized probes), over the same memory
        # when it is 8-byte aligned (a bytes object's is), else over a copy. The file's words
        # are little endian, as this machine's (asserted at import).
        buf = pa.py_buffer(bits)
        if buf.address % WORD_BYTES:
            buf = pa.allocate_buffer(len(bits))
            memoryview(buf).cast("B")[:] = bits
        self._words = pa.Array.from_buffers(_U64, nwords, [None, buf])

    @classmethod
    def build(cls, hashes: pa.Array | Iterable[int], nkeys: int) -> Bloom:
        """The filter of `hashes` (a uint64 array, or Python ints) sized for `nkeys` keys."""
        return cls.build_batches([_array(hashes)], nkeys)

    @classmethod
    def build_batches(cls, batches: Iterable[pa.Array], nkeys: int) -> Bloom:
        """The filter of the hashes of `batches` (uint64 arrays), sized for `nkeys` keys: the
        bits of one scatter of every key's bit positions, made a segment of SEGMENT_BITS
        filter bits at a time. A scatter over the whole filter costs ~2 bytes of scratch a
        filter bit (24 a key) on top of 40 bytes a key of positions: ~640 MB for a block of
        10M keys. Here the hashes are held (8 bytes a key) and each segment scatters only
        the positions of its keys (a word range is a hash range: the word index grows with
        the hash): the rest is bounded by the segment, whatever `nkeys`."""
        nwords = _nwords(nkeys)
        held = _hold(batches)
        if not held:
            return cls(bytes(nwords * WORD_BYTES), nwords, nkeys)
        seg_words = max(1, SEGMENT_BITS // WORD_BITS)
        out = bytearray()
        for w0 in range(0, nwords, seg_words):
            w1 = min(nwords, w0 + seg_words)
            if w0 == 0 and w1 == nwords:
                mine = held
            else:
                # The keys whose word w = (hi * nwords) >> 32 is in [w0, w1): hi >= lo and
                # hi < hi_end, the ceilings of w0 and w1 times 2**32 / nwords (hi_end is
                # 2**32, no bound, for the last segment).
                lo = -(-(w0 << 32) // nwords)
                hi_end = -(-(w1 << 32) // nwords)
                mine = []
                for h in held:
                    sel = pc.greater_equal(h, _u(lo << 32)) if lo else None
                    if hi_end < 1 << 32:
                        below = pc.less(h, _u(hi_end << 32))
                        sel = below if sel is None else pc.and_(sel, below)
                    mine.append(h if sel is None else pc.filter(h, sel))
            hashes = pa.concat_arrays(mine) if len(mine) > 1 else mine[0]
            seg_bits = (w1 - w0) * WORD_BITS
            if not len(hashes):
                out += bytes(seg_bits // 8)
                continue
            out += _mark(_bit_positions(hashes, nwords, w0), seg_bits)
        assert len(out) == nwords * WORD_BYTES
        return cls(bytes(out), nwords, nkeys)

    def may_contain(self, h: int) -> bool:
        w = ((h >> 32) * self.nwords) >> 32
        m = mask_of(h)
        return int.from_bytes(self.bits[w * WORD_BYTES : (w + 1) * WORD_BYTES], "little") & m == m

    def may_contain_many(self, hashes: pa.Array | Probe) -> pa.Array:
        """`may_contain` of every hash of a batch, as a boolean array: `hashes` a uint64
        array, or the batch's `Probe` (the masks computed once for every filter probed).
        5 Arrow calls: the word index (multiply, shift), one `take` of the words, `and`,
        `equal`."""
        p = hashes if isinstance(hashes, Probe) else Probe(hashes)
        w = pc.shift_right(pc.multiply(p.hi, self._n), _S32)
        return pc.equal(pc.bit_wise_and(pc.take(self._words, w), p.mask), p.mask)

    @property
    def size_bytes(self) -> int:
        return len(self.bits)

    def to_bytes(self) -> bytes:
        fields = _HEADER_FIELDS.pack(MAGIC, VERSION, PROBES, self.nwords, self.nkeys)
        crc = zlib.crc32(self.bits, zlib.crc32(fields))
        return _HEADER.pack(MAGIC, VERSION, PROBES, self.nwords, self.nkeys, crc) + self.bits

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> Bloom | BloomV1 | None:
        """The filter in `data` (a `Bloom` for version 2, a `BloomV1` for version 1), or
        None when it is not a whole filter of either. A version-2 filter over a memoryview
        (a mapped file's: `BlockIndex.open`) keeps its bits there, no copy: they are the
        file's pages, which the mapped-pages budget hands back like the blocks'
        (`pages.release_blocks`); a version-1 one is copied."""
        if len(data) < _HEADER.size:
            return None
        magic, version, probes, nwords, nkeys, crc = _HEADER.unpack_from(data)
        if magic != MAGIC:
            return None
        if version == V1_VERSION:
            return BloomV1.from_bytes(bytes(data))
        if version != VERSION or probes != PROBES or not WORDS_MIN <= nwords <= WORDS_MAX:
            return None
        if isinstance(data, memoryview):
            bits = data[_HEADER.size :]
        else:
            bits = bytes(data[_HEADER.size :])
        if len(bits) != nwords * WORD_BYTES:
            return None
        if zlib.crc32(bits, zlib.crc32(data[: _HEADER_FIELDS.size])) != crc:
            return None
        return cls(bits, nwords, nkeys)


def _bit_positions(hashes: pa.Array, nwords: int, w0: int) -> pa.Array:
    """The bit positions (from word w0's first bit) a build sets for `hashes`, all keys of
    words w0 on: 64 (w - w0) + bit number, PROBES of them a key, as one int64 array (the
    index type `scatter` takes)."""
    w = pc.shift_right(pc.multiply(pc.shift_right(hashes, _S32), _u(nwords)), _S32)
    if w0:
        w = pc.subtract(w, _u(w0))
    base = pc.shift_left(w, _S6)
    return pa.concat_arrays(
        [
            pc.add(base, pc.bit_wise_and(hashes if s is None else pc.shift_right(hashes, s), _L63))
            for s in _FIELD_SHIFTS
        ]
    ).view(pa.int64())


# ---- version 1: 512-bit blocks (read and probed; new filters are version 2) ----


def _probe_bits(hashes: pa.Array, nblocks: int) -> list[pa.Array]:
    """The V1_PROBES bit positions of every hash in a version-1 filter, as int64 arrays (the
    arithmetic of `BloomV1.may_contain`: every term fits int64, and only the low 9 bits of
    h2 are used)."""
    hi = pc.shift_right(hashes, _S32).view(pa.int64())
    h2 = pc.bit_wise_and(hashes, _LOW32).view(pa.int64())
    # Typed scalars throughout: a bare Python int makes pyarrow try to import numpy at
    # every call (~0.5 ms when numpy is not installed, as here).
    base = pc.multiply(pc.modulo(hi, i64(nblocks)), _BLOCK_BITS)
    step = pc.bit_wise_or(pc.shift_right(h2, _I17), _I1)
    out = []
    for _ in range(V1_PROBES):
        out.append(pc.add(base, pc.bit_wise_and(h2, _I511)))
        h2 = pc.add(h2, step)
    return out


class BloomV1:
    """A version-1 filter (512-bit blocks, V1_PROBES bits a key): files written before
    version 2 are read and probed as this; `build` and `build_batches` are kept to make
    such files (tests, benchmarks), not used by the store."""

    __slots__ = ("bits", "nblocks", "nkeys", "_bools")
    version = V1_VERSION

    def __init__(self, bits: bytes, nblocks: int, nkeys: int) -> None:
        assert len(bits) == nblocks * BLOCK_BYTES
        self.bits = bits
        self.nblocks = nblocks
        self.nkeys = nkeys
        # The bits as an Arrow boolean array over the same memory (for vectorized probes):
        # Arrow packs booleans LSB first, bit p in byte p >> 3 at bit p & 7, as the filter.
        self._bools = pa.Array.from_buffers(pa.bool_(), len(bits) * 8, [None, pa.py_buffer(bits)])

    @classmethod
    def build(cls, hashes: pa.Array | Iterable[int], nkeys: int) -> BloomV1:
        """The filter of `hashes` (a uint64 array, or Python ints) sized for `nkeys` keys."""
        return cls.build_batches([_array(hashes)], nkeys)

    @classmethod
    def build_batches(cls, batches: Iterable[pa.Array], nkeys: int) -> BloomV1:
        """The filter of the hashes of `batches`, a segment of SEGMENT_BITS filter bits at a
        time (as `Bloom.build_batches`)."""
        nblocks = min(BLOCKS_MAX, max(1, (nkeys * V1_BITS_PER_KEY + BLOCK_BITS - 1) // BLOCK_BITS))
        nbits = nblocks * BLOCK_BITS
        held = _hold(batches)
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
            out += _mark(positions, seg_bits)
        assert len(out) == nbits // 8
        return cls(bytes(out), nblocks, nkeys)

    def may_contain(self, h: int) -> bool:
        bits = self.bits
        base = ((h >> 32) % self.nblocks) * BLOCK_BITS
        h2 = h & 0xFFFFFFFF
        step = (h2 >> 17) | 1
        for _ in range(V1_PROBES):
            p = base + (h2 & 511)
            if not (bits[p >> 3] >> (p & 7)) & 1:
                return False
            h2 += step
        return True

    def may_contain_many(self, hashes: pa.Array | Probe) -> pa.Array:
        """`may_contain` of every hash of a uint64 array (or of a `Probe`'s hashes), as a
        boolean array: one `take` of the filter's bits at every probe position of every hash
        (a boolean array over the bits), then the V1_PROBES hits of each hash and-ed."""
        if isinstance(hashes, Probe):
            hashes = hashes.hashes
        n = len(hashes)
        hits = pc.take(self._bools, pa.concat_arrays(_probe_bits(hashes, self.nblocks)))
        ok = hits.slice(0, n)
        for i in range(1, V1_PROBES):
            ok = pc.and_(ok, hits.slice(i * n, n))
        return ok

    @property
    def size_bytes(self) -> int:
        return len(self.bits)

    def to_bytes(self) -> bytes:
        header = _HEADER.pack(
            MAGIC, V1_VERSION, V1_PROBES, self.nblocks, self.nkeys, zlib.crc32(self.bits)
        )
        return header + self.bits

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomV1 | None:
        """The version-1 filter in `data`, or None when it is not a whole one."""
        if len(data) < _HEADER.size:
            return None
        magic, version, probes, nblocks, nkeys, crc = _HEADER.unpack_from(data)
        if magic != MAGIC or version != V1_VERSION or probes != V1_PROBES:
            return None
        if not 1 <= nblocks <= BLOCKS_MAX:
            return None
        bits = data[_HEADER.size :]
        if len(bits) != nblocks * BLOCK_BYTES or zlib.crc32(bits) != crc:
            return None
        return cls(bytes(bits), nblocks, nkeys)
