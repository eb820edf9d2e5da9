"""Per-column min/max of a block's Arrow chunks, kept beside the block, and scan pruning.

A data block (an Arrow IPC file, `tablet.py`) is written in record batches (chunks) of at
most `TabletOptions.block_chunk_rows` rows. For each chunk and each column this keeps the
smallest and largest value and the null count. A scan's predicates (`==`, `<`, `<=`, `>`,
`>=`, IN, IS NULL, IS NOT NULL, a range as two of them) are checked against them: a chunk
whose values cannot satisfy every predicate is not read, nor a block none of whose chunks
can (`prune`).

File (`<block>.stats`): JSON {"format": "lcst", "version": 2, "rows": N, "crc32": C,
"chunks": [{"rows": n, "cols": {"c<id>": [min, max, nulls]}}]} (C: CRC32 of the chunks' JSON
with sorted keys; a file whose values changed fails it and is rebuilt); timestamps as int64
microseconds; a column left out is unknown (binary, a string longer than STRING_MAX bytes,
a double column holding NaN), [null, null, n] means all null. Derived data, like the bloom
filter: a file that is missing, unreadable, of another version or of another shape than its
block is rebuilt from the block at open and written back.

Why a skipped chunk cannot change the answer: a key's versions are in several blocks, the
newest wins. A predicate on key columns holds for all versions of a key or for none, so a
chunk that misses one is skipped outright. A predicate on other columns holds for the newest
version only: skipping a chunk whose values miss it would let an older version of the same
key (in an older block) show through. Such a chunk is skipped only if every chunk of an
older block whose key range overlaps it is skipped too (blocks taken oldest first); the
memstore is newer than every block and never skipped. Then for any key: if its newest
version's chunk is kept, the merge sees that version first; if it is skipped, that version
fails the predicate and every older version is in a skipped chunk.
"""

from __future__ import annotations

import bisect
import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from rpc.protocols.tserver_pb2 import PredicateOp, PredicatePB
from tservers.tablet.schema import DELETED_FIELD, Schema, block_name, value_from_pb

FORMAT = "lcst"
VERSION = 2  # 2: crc32 of the chunks (version 1 files are rebuilt)
STATS_SUFFIX = ".stats"
STRING_MAX = 256


def stats_name(block_name_: str) -> str:
    return block_name_ + STATS_SUFFIX


def _column_stats(a: pa.Array) -> list | None:
    """[min, max, nulls] of one chunk's column, or None when not kept."""
    t = a.type
    nulls = a.null_count
    if nulls == len(a):
        return [None, None, nulls]
    if pa.types.is_timestamp(t):
        a = a.view(pa.int64())
    elif pa.types.is_floating(t):
        if pc.any(pc.is_nan(a)).as_py():
            return None
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        if pc.max(pc.binary_length(a)).as_py() > STRING_MAX:
            return None
    elif not (pa.types.is_integer(t) or pa.types.is_boolean(t)):
        return None
    mm = pc.min_max(a)
    lo, hi = mm["min"].as_py(), mm["max"].as_py()
    if isinstance(lo, float) and (math.isinf(lo) or math.isinf(hi)):
        return None  # JSON has no infinity
    return [lo, hi, nulls]


def compute(batches: Sequence[pa.RecordBatch]) -> list[dict]:
    """The stats of each (non-empty) batch of a block: {"rows": n, "cols": {...}}."""
    out = []
    for b in batches:
        cols = {}
        for name, a in zip(b.schema.names, b.columns, strict=True):
            if name == DELETED_FIELD:
                continue
            s = _column_stats(a)
            if s is not None:
                cols[name] = s
        out.append({"rows": b.num_rows, "cols": cols})
    return out


def _crc(chunks: list[dict]) -> int:
    """CRC32 of the chunks' canonical JSON (a JSON round trip gives the same text back)."""
    return zlib.crc32(json.dumps(chunks, separators=(",", ":"), sort_keys=True).encode())


def to_bytes(chunks: list[dict]) -> bytes:
    rows = sum(c["rows"] for c in chunks)
    doc = {"format": FORMAT, "version": VERSION, "rows": rows, "crc32": _crc(chunks)}
    doc["chunks"] = chunks
    return json.dumps(doc, separators=(",", ":")).encode()


def from_bytes(data: bytes, batch_rows: list[int]) -> list[dict] | None:
    """The chunks' stats in `data` if it is a whole stats file of this version for a block
    of batches of `batch_rows` rows; None otherwise."""
    try:
        doc = json.loads(data)
        if doc.get("format") != FORMAT or doc.get("version") != VERSION:
            return None
        chunks = doc["chunks"]
        if [c["rows"] for c in chunks] != batch_rows or doc["rows"] != sum(batch_rows):
            return None
        if doc["crc32"] != _crc(chunks):  # a changed value would prune rows away silently
            return None
        for c in chunks:
            for v in c["cols"].values():
                if not (isinstance(v, list) and len(v) == 3):
                    return None
        return chunks
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


@dataclass(frozen=True, slots=True)
class Check:
    """One predicate as the stats see it."""

    col: str  # the block column name (c<id>)
    op: int
    values: tuple
    is_key: bool


def checks(schema: Schema, predicates: Sequence[PredicatePB]) -> list[Check]:
    """The predicates as checks (already validated by the scan)."""
    out = []
    for p in predicates:
        c = schema.column(p.column)
        vals = tuple(v for v in (value_from_pb(x, c) for x in p.values) if v is not None)
        if (
            p.op in (PredicateOp.EQ, PredicateOp.LT, PredicateOp.LE, PredicateOp.GT, PredicateOp.GE)
            and len(vals) != 1
        ):
            continue
        if any(v != v for v in vals):  # NaN: no order to check against; not pruned
            continue
        if p.op == PredicateOp.IN:
            vals = tuple(sorted(set(vals)))
        out.append(Check(block_name(c.id), p.op, vals, c.is_key))
    return out


def _misses(ck: Check, cols: dict, present: bool) -> bool:
    """Whether no row of a chunk can satisfy `ck` (False when unknown). `present`: the
    block has the column (one added since is all null there)."""
    op = ck.op
    if not present:
        return op != PredicateOp.IS_NULL
    s = cols.get(ck.col)
    if s is None:
        return False
    lo, hi, nulls = s
    if op == PredicateOp.IS_NULL:
        return nulls == 0
    if lo is None:  # all null: no comparison, IN or IS NOT NULL holds
        return True
    if op == PredicateOp.IS_NOT_NULL:
        return False
    try:
        if op == PredicateOp.IN:  # values sorted: the first one >= lo must be <= hi
            i = bisect.bisect_left(ck.values, lo)
            return i == len(ck.values) or ck.values[i] > hi
        v = ck.values[0]
        if op == PredicateOp.EQ:
            return v < lo or v > hi
        if op == PredicateOp.LT:
            return lo >= v
        if op == PredicateOp.LE:
            return lo > v
        if op == PredicateOp.GT:
            return hi <= v
        if op == PredicateOp.GE:
            return hi < v
    except TypeError:
        return False
    return False


@dataclass(slots=True)
class Pruned:
    """What `prune` kept: per block (oldest first) the chunk numbers kept (None: all),
    and the counts."""

    keep: list[list[int] | None]
    blocks_skipped: int = 0
    chunks_skipped: int = 0
    chunks_total: int = 0


def prune(blocks: Sequence, cks: list[Check], lower=None, upper=None) -> Pruned:
    """Which chunks of `blocks` (BlockIndex, oldest first) a scan must read, given its
    checks and key bounds (lower inclusive, upper exclusive, Python keys; None: open)."""
    keep: list[list[int] | None] = []
    # Per block, its kept chunks' key ranges (sorted, disjoint): firsts and lasts.
    kept_firsts: list[list] = []
    kept_lasts: list[list] = []
    res = Pruned(keep)
    for b in blocks:
        chunks = b.chunk_stats
        n = len(chunks)
        res.chunks_total += n
        names = b.column_names
        firsts, lasts = [], []
        mine = []
        for j in range(n):
            first, last = b.chunk_first(j), b.chunk_last(j)
            key_miss = (lower is not None and last < lower) or (
                upper is not None and first >= upper
            )
            value_miss = False
            if not key_miss and cks:
                cols = chunks[j]["cols"]
                for ck in cks:
                    if _misses(ck, cols, ck.col in names):
                        if ck.is_key:
                            key_miss = True
                            break
                        value_miss = True
            skip = key_miss
            if not skip and value_miss:
                skip = True
                for of, ol in zip(kept_firsts, kept_lasts, strict=True):
                    i = bisect.bisect_right(of, last) - 1
                    if i >= 0 and ol[i] >= first:
                        skip = False  # an older kept chunk may hold an older version
                        break
            if skip:
                res.chunks_skipped += 1
            else:
                mine.append(j)
                firsts.append(first)
                lasts.append(last)
        if not mine and n:
            res.blocks_skipped += 1
        keep.append(None if len(mine) == n else mine)
        kept_firsts.append(firsts)
        kept_lasts.append(lasts)
    return res
