"""A data block opened for lookups: memory-mapped rows, key range, chunk bounds, bloom filter.

A block is an Arrow IPC file sorted by key with unique keys (`tablet.py`). Opened here it
is mapped, not read: its pages belong to the page cache, and a lookup touches only the pages
of the key column its binary search visits and of the row it returns. What stays on the heap
per block is its filter (`bloom.py`, ~1.5 bytes a key; 1.25 for a version-1 file), its
first and last key, the first and last key of each record batch (64k rows) and each batch's
column min/max (`stats.py`): nothing per row. Many keys at once are looked up with Arrow
kernels (`locate_many`).

The filter lives beside the block in `<block>.bloom`. A block without one (written before
filters existed, copied by tablet copy, which copies only block files, or a crash between the
two writes) or with one that fails its checks gets it rebuilt from the key column at open and
written back (derived data, atomically replaced); the stats file `<block>.stats` likewise.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tservers.metafile import fsync_dir, install_file
from tservers.tablet import stats as block_stats
from tservers.tablet.bloom import Bloom, BloomV1, Probe, hash_columns, i64, is_int_type, key_hash
from tservers.tablet.merge import compaction_slabs
from tservers.tablet.pages import PAGE_BYTES, Mapping, batch_span, release
from tservers.tablet.schema import DELETED_FIELD
from tservers.tablet.stats import stats_name

log = logging.getLogger(__name__)

BLOOM_SUFFIX = ".bloom"
# `locate_many` confirms up to this many candidates (keys its filter passed) one by one in
# Python, more with kernels per batch of the block.
LOCATE_PY_MAX = 512

# A block of a sorted run (design/storage.md, "Key-disjoint runs"): `block-<id>-r<run>.arrow`,
# <run> the id of the run's first block. Blocks of one run hold disjoint key ranges and are
# listed next to each other in key order; any other name (`block-<id>.arrow`: a flush, or a
# block written before runs existed) is a run of its own.
RUN_BLOCK_RE = re.compile(r"^block-(\d{9})-r(\d{9})\.arrow$")

# Schema metadata of a block file whose rows hide no live row of an older source: each row
# was inserted while its key was live nowhere, and the block holds no tombstone (a flush of
# a memstore that took only such inserts, or a compaction of blocks that all say so). An
# unordered scan hands such blocks' rows out as they are, merging only the rest
# (design/storage.md, "Unordered scans"). A file without it (written before it existed, or
# of any other memstore) is taken to hide rows: merged, as always.
SHADOWS_NOTHING_META = b"logcentric.shadows_nothing"


def block_metadata(shadows_nothing: bool) -> dict[bytes, bytes] | None:
    """The schema metadata a block file is written with (None: none)."""
    return {SHADOWS_NOTHING_META: b"1"} if shadows_nothing else None


def block_file_name(block_id: int, run_id: int | None = None) -> str:
    """A flush's block (`run_id` None: a run of its own) or a block of run `run_id`."""
    if run_id is None:
        return f"block-{block_id:09d}.arrow"
    return f"block-{block_id:09d}-r{run_id:09d}.arrow"


def run_of(name: str) -> str:
    """The run a block belongs to: its run id, or its own name for a run of one."""
    m = RUN_BLOCK_RE.match(name)
    return "r" + m.group(2) if m else name


def runs_of(blocks: Sequence[BlockIndex]) -> list[list[BlockIndex]]:
    """`blocks` (oldest first) grouped into their runs, oldest run first (each run's blocks
    in key order, as listed)."""
    out: list[list[BlockIndex]] = []
    last = None
    for b in blocks:
        r = run_of(b.name)
        if out and r == last:
            out[-1].append(b)
        else:
            out.append([b])
            last = r
    return out


def check_runs(blocks: Sequence[BlockIndex]) -> str | None:
    """Why the listed `blocks` break the run invariant (a run's blocks adjacent, in key
    order, key-disjoint), or None. Asserted at open (a listed superblock) and after a
    compaction writes its run."""
    seen: set[str] = set()
    for run in runs_of(blocks):
        r = run_of(run[0].name)
        if r in seen:
            return f"run {r} is not listed in one piece"
        seen.add(r)
        prev = None
        for b in run:
            if b.min_key is None:
                continue
            if prev is not None and not prev.max_key < b.min_key:
                return f"blocks {prev.name} and {b.name} of run {r} overlap or are out of order"
            prev = b
    return None


def bloom_name(block_name: str) -> str:
    return block_name + BLOOM_SUFFIX


def _key_array(a: pa.Array) -> pa.Array:
    # Keys are compared as the tablet holds them: timestamps as int64 microseconds.
    if pa.types.is_timestamp(a.type):
        return a.view(pa.int64())
    return a


def _map_filter(path: Path) -> tuple[Bloom | BloomV1 | None, Mapping | None]:
    """The filter in the file at `path`, mapped: a version-2 filter's bits stay in the
    file's pages (counted in RssFile and under the mapped-pages budget, not the heap: 1.5
    bytes a key, 75 MB at 50M rows), with the mapping's range; (None, None) when there is
    no file or it is not a whole filter. A version-1 filter is copied to the heap (no
    mapping): its block's next compaction writes version 2."""
    try:
        with pa.memory_map(str(path), "r") as src:
            whole = src.read_buffer(src.size())  # the mapping itself, no copy
    except FileNotFoundError:
        return None, None
    if not whole.size:
        return None, None
    bloom = Bloom.from_bytes(memoryview(whole).cast("B"))  # bytes, not signed chars
    if not isinstance(bloom, Bloom):
        return bloom, None
    # The mapping covers the file's last page whole (the kernel maps whole pages).
    end = -(-(whole.address + whole.size) // PAGE_BYTES) * PAGE_BYTES
    return bloom, Mapping(whole.address, end)


class BlockIndex:
    """One immutable block: its mapped table and what finds a key in it."""

    __slots__ = (
        "name",
        "table",
        "num_rows",
        "min_key",
        "max_key",
        "bloom",
        "_keys",
        "_deleted",
        "_firsts",
        "_offsets",
        "_nk",
        "_col",
        "_offsets_arr",
        "key_type",
        "batches",
        "chunk_stats",
        "column_names",
        "_lasts",
        "mapping",
        "spans",
        "filter_mapping",
        "shadows_nothing",
    )

    def __init__(self, name: str, table: pa.Table, key_names: list[str]) -> None:
        self.name = name
        self.table = table
        self.num_rows = table.num_rows
        self._nk = len(key_names)
        batches = [b for b in table.to_batches() if b.num_rows]
        self.batches = batches
        self.column_names = frozenset(table.column_names)
        self.chunk_stats: list[dict] = []  # per batch: stats.compute's
        self._keys = [[_key_array(b.column(k)) for k in key_names] for b in batches]
        self._deleted = [b.column(DELETED_FIELD) for b in batches]
        self._offsets = []
        start = 0
        for b in batches:
            self._offsets.append(start)
            start += b.num_rows
        self._firsts = [self._key(j, 0) for j in range(len(batches))]
        self._lasts = [self._key(j, b.num_rows - 1) for j, b in enumerate(batches)]
        self.min_key = self._firsts[0] if batches else None
        self.max_key = self._lasts[-1] if batches else None
        self.bloom: Bloom | BloomV1 | None = None
        # The file's mapping and each batch's address span in it (`pages.PageRelease`);
        # None for a table not read from a mapped file.
        self.mapping: Mapping | None = None
        self.spans: list[tuple[int, int] | None] = []
        # The filter file's mapping, where the filter's bits are (`_map_filter`); None for
        # a version-1 filter (copied to the heap) or none.
        self.filter_mapping: Mapping | None = None
        # Whether the block's rows hide no live row of an older source (its file's
        # metadata, `SHADOWS_NOTHING_META`); False for a table not read from a file.
        self.shadows_nothing = False
        # A one-column key as a chunked array over the mapped batches (timestamps as
        # int64), searched with Arrow's binary search (`locate_many`); None for a
        # composite key (Python bisect per key).
        self._col = None
        self._offsets_arr = pa.array(self._offsets, pa.int64())
        self.key_type = None
        if self._nk == 1 and batches:
            t = self._keys[0][0].type
            if is_int_type(t) or pa.types.is_string(t) or pa.types.is_binary(t):
                self._col = pa.chunked_array([a[0] for a in self._keys], t)
                self.key_type = t

    @classmethod
    def open(cls, data_dir: Path, name: str, key_names: list[str]) -> BlockIndex:
        """Map the block and load its filter (rebuilt and written back if missing or bad)."""
        with pa.memory_map(str(data_dir / name), "r") as src:
            table = pa.ipc.open_file(src).read_all()
            src.seek(0)
            whole = src.read_buffer(src.size())  # the mapping itself (no copy): its range
        meta = table.schema.metadata or {}
        if meta:  # the same columns (no copy) without it: every block's schema alike
            table = table.replace_schema_metadata(None)
        b = cls(name, table, key_names)
        b.shadows_nothing = meta.get(SHADOWS_NOTHING_META) == b"1"
        if whole is not None and whole.size:
            b.mapping = Mapping(whole.address, whole.address + whole.size)
            b.spans = [batch_span(x, b.mapping) for x in b.batches]
        path = data_dir / bloom_name(name)
        bloom, b.filter_mapping = _map_filter(path)
        if bloom is None or bloom.nkeys != b.num_rows:
            if path.exists():
                log.warning("block %s: filter file unreadable or stale; rebuilding it", name)
            write_file(path, b.build_bloom().to_bytes())
            bloom, b.filter_mapping = _map_filter(path)  # its pages, not a heap copy
            if bloom is None:  # cannot be read back as written
                raise OSError(f"block {name}: the filter file just written is unreadable")
        b.bloom = bloom
        if b.filter_mapping is not None:  # the crc check read it: out of the process again
            release(b.filter_mapping, b.filter_mapping.lo, b.filter_mapping.hi)
        spath = data_dir / stats_name(name)
        rows = [x.num_rows for x in b.batches]
        chunks = None
        try:
            chunks = block_stats.from_bytes(spath.read_bytes(), rows)
        except FileNotFoundError:
            pass
        if chunks is None:
            if spath.exists():
                log.warning("block %s: stats file unreadable or stale; rebuilding it", name)
            chunks = block_stats.compute(b.batches)
            write_file(spath, block_stats.to_bytes(chunks))
        b.chunk_stats = chunks
        # Building the filter or the stats read the block: its pages leave the process
        # again (a compaction's output is opened right after it is written).
        for span in b.spans:
            if span is not None:
                release(b.mapping, *span)
        return b

    @property
    def mappings(self) -> list[Mapping]:
        """The block's file mappings: its data and its filter's (`pages.release_blocks`)."""
        return [m for m in (self.mapping, self.filter_mapping) if m is not None]

    def chunk_first(self, j: int):
        return self._firsts[j]

    def chunk_last(self, j: int):
        return self._lasts[j]

    def chunks_table(self, keep: list[int] | None) -> pa.Table:
        """The block's rows of the chunks `keep` (None: all), still sorted by key."""
        if keep is None:
            return self.table
        return pa.Table.from_batches([self.batches[j] for j in keep], schema=self.table.schema)

    def build_bloom(self) -> Bloom:
        """The filter of the block's keys, hashed a batch at a time (vectorized for
        integer keys) and folded into the filter as they come (`Bloom.build_batches`):
        never every key's hash or bit positions at once."""
        return Bloom.build_batches((hash_columns(arrays) for arrays in self._keys), self.num_rows)

    def iter_keys(self) -> Iterable:
        for arrays in self._keys:
            lists = [a.to_pylist() for a in arrays]
            if self._nk == 1:
                yield from lists[0]
            else:
                yield from zip(*lists, strict=True)

    def _key(self, j: int, i: int):
        arrays = self._keys[j]
        if self._nk == 1:
            return arrays[0][i].as_py()
        return tuple(a[i].as_py() for a in arrays)

    def may_hold(self, key, h: int | None = None) -> bool:
        """Range and filter: False only when the block cannot hold `key`."""
        if self.min_key is None or key < self.min_key or key > self.max_key:
            return False
        if self.bloom is None:
            return True
        return self.bloom.may_contain(key_hash(key) if h is None else h)

    def find(self, key, h: int | None = None) -> int | None:
        """The row number of `key` in the block (a live row or a tombstone), or None."""
        if not self.may_hold(key, h):
            return None
        j = bisect.bisect_right(self._firsts, key) - 1
        if j < 0:
            return None
        lo, hi = 0, len(self._deleted[j])
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(j, mid) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(self._deleted[j]) and self._key(j, lo) == key:
            return self._offsets[j] + lo
        return None

    def locate_many(
        self, keys: pa.Array, hashes: pa.Array | Probe
    ) -> tuple[list[int], list[int], list]:
        """The keys of `keys` (an array of `key_type`; `hashes` their `key_hash`, or the
        `Probe` of those: the filter masks computed once for all blocks) this block holds,
        vectorized: range, then filter, then a binary search (Arrow's search_sorted) of the
        rest in the mapped key column. Returns their positions in `keys`, their row numbers
        and whether each is a tombstone."""
        if self._col is None or not len(keys):
            return [], [], []
        t = self.key_type
        mask = pc.and_(
            pc.greater_equal(keys, pa.scalar(self.min_key, t)),
            pc.less_equal(keys, pa.scalar(self.max_key, t)),
        )
        idx = pc.indices_nonzero(mask)
        if not len(idx):
            return [], [], []
        if self.bloom is not None:
            # Every key in range (the caller's slice of sorted keys): no take.
            sub = hashes if len(idx) == len(keys) else hashes.take(idx)
            idx = pc.filter(idx, self.bloom.may_contain_many(sub))
            if not len(idx):
                return [], [], []
        cand = pc.take(keys, idx)
        pos = pc.search_sorted(self._col, cand).cast(pa.int64())
        pos = pc.min_element_wise(pos, i64(self.num_rows - 1))
        if len(cand) <= LOCATE_PY_MAX:
            return self._confirm_py(idx, cand, pos)
        # Take per batch: a take over the chunked column would concatenate it. (Scalars
        # typed: a bare int costs a failed numpy import per call in pyarrow.)
        batch = pc.search_sorted(self._offsets_arr, pos, side="right").cast(pa.int64())
        batch = pc.subtract(batch, i64(1))
        out_i: list[int] = []
        out_r: list[int] = []
        out_d: list = []
        for j in pc.unique(batch).to_pylist():
            sel = pc.equal(batch, i64(j))
            rows = pc.filter(pos, sel)
            local = pc.subtract(rows, i64(self._offsets[j]))
            at = pc.take(self._keys[j][0], local)
            hit = pc.equal(at, pc.filter(cand, sel))
            if not pc.any(hit).as_py():
                continue
            out_i.extend(pc.filter(pc.filter(idx, sel), hit).to_pylist())
            out_r.extend(pc.filter(rows, hit).to_pylist())
            out_d.extend(pc.take(self._deleted[j], pc.filter(local, hit)).to_pylist())
        return out_i, out_r, out_d

    def _confirm_py(
        self, idx: pa.Array, cand: pa.Array, pos: pa.Array
    ) -> tuple[list[int], list[int], list]:
        """`locate_many`'s last step for a few candidates (the filter's false positives of
        new keys, ~1%): each one's key at its search position compared in Python, where
        the kernels' fixed cost per batch of the block they fall in (~8 calls each) made
        most of a lookup's time."""
        out_i: list[int] = []
        out_r: list[int] = []
        out_d: list = []
        offsets = self._offsets
        for i, k, p in zip(idx.to_pylist(), cand.to_pylist(), pos.to_pylist(), strict=True):
            j = bisect.bisect_right(offsets, p) - 1
            local = p - offsets[j]
            if self._keys[j][0][local].as_py() == k:
                out_i.append(i)
                out_r.append(p)
                out_d.append(self._deleted[j][local].as_py())
        return out_i, out_r, out_d

    def deleted(self, row: int) -> bool:
        j = bisect.bisect_right(self._offsets, row) - 1
        return bool(self._deleted[j][row - self._offsets[j]].as_py())

    def overlaps(self, lower, upper) -> bool:
        """Whether keys in [lower, upper) may be here (None: unbounded)."""
        if self.min_key is None:
            return False
        if lower is not None and self.max_key < lower:
            return False
        return not (upper is not None and self.min_key >= upper)

    def heap_bytes(self) -> int:
        """What the block costs on the heap beyond its mapped file (the filter)."""
        return self.bloom.size_bytes if self.bloom is not None else 0


def write_block(
    data_dir: Path,
    name: str,
    schema: pa.Schema,
    pieces: Iterable[pa.Table],
    chunk_rows: int,
    metadata: dict[bytes, bytes] | None = None,
) -> int:
    """Write the key-sorted `pieces` (tables of `schema`) as the block `name`, as they come:
    record batches of `chunk_rows` rows (the last one shorter), each written once it is
    whole, so at most one batch and one piece are held; each batch's stats (`stats.py`)
    are computed as it is written and the stats file written after the block. The block
    goes to a temporary file, fsynced, renamed and the directory fsynced (a crash leaves
    either no block or a whole one; an unlisted one is removed at open). `metadata`: the
    file schema's (`block_metadata`). Returns the rows written."""
    chunk_rows = max(1, chunk_rows)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / name
    tmp = data_dir / (name + ".tmp")
    chunks: list[dict] = []
    rows = 0
    file_schema = schema.with_metadata(metadata) if metadata else schema
    with pa.OSFile(str(tmp), "wb") as sink:
        with pa.ipc.new_file(sink, file_schema) as writer:

            def emit(t: pa.Table) -> None:
                nonlocal rows
                (batch,) = t.combine_chunks().to_batches()
                writer.write_batch(batch)
                chunks.extend(block_stats.compute([batch]))
                rows += batch.num_rows

            held: pa.Table | None = None  # rows not written yet: fewer than chunk_rows
            for piece in pieces:
                if not piece.num_rows:
                    continue
                assert piece.schema == schema, (piece.schema, schema)
                held = piece if held is None else pa.concat_tables([held, piece])
                while held.num_rows >= chunk_rows:
                    emit(held.slice(0, chunk_rows))
                    held = held.slice(chunk_rows)
            if held is not None and held.num_rows:
                emit(held)
    install_file(tmp, path)
    write_file(data_dir / stats_name(name), block_stats.to_bytes(chunks))
    return rows


def write_run(
    data_dir: Path,
    name_of: Callable[[int], str],
    schema: pa.Schema,
    pieces: Iterable[pa.Table],
    chunk_rows: int,
    block_rows_max: int,
    metadata: dict[bytes, bytes] | None = None,
) -> list[tuple[str, int]]:
    """Write the key-sorted `pieces` (unique keys across them) as consecutive blocks of at
    most `block_rows_max` rows each (`write_block`, as they come): block i is named
    `name_of(i)`, and the blocks hold disjoint, increasing key ranges (a sorted run).
    Returns (name, rows) per block; none when `pieces` hold no row."""
    assert block_rows_max > 0, block_rows_max
    it = iter(pieces)
    carry: list[pa.Table] = []  # the rest of a piece cut at a block's end

    def next_piece() -> pa.Table | None:
        if carry:
            return carry.pop()
        for p in it:
            if p.num_rows:
                return p
        return None

    out: list[tuple[str, int]] = []
    first = next_piece()
    while first is not None:

        def one_block(p: pa.Table) -> Iterator[pa.Table]:
            room = block_rows_max
            while p is not None:
                if p.num_rows > room:
                    carry.append(p.slice(room))
                    p = p.slice(0, room)
                room -= p.num_rows
                yield p
                if room == 0:
                    return
                p = next_piece()

        name = name_of(len(out))
        rows = write_block(data_dir, name, schema, one_block(first), chunk_rows, metadata)
        assert 0 < rows <= block_rows_max, (rows, block_rows_max)
        out.append((name, rows))
        first = next_piece()
    return out


def write_merged_run(
    data_dir: Path,
    name_of: Callable[[int], str],
    sources: Sequence[pa.Table],
    key_names: list[str],
    adapt: Callable[[int, pa.Table], pa.Table],
    *,
    drop_deleted: bool,
    chunk_rows: int,
    block_rows_max: int,
    slab_rows: int | None = None,
    on_slab: Callable[[list[int]], None] | None = None,
    metadata: dict[bytes, bytes] | None = None,
) -> list[tuple[str, int]]:
    """A compaction's output run: `sources` (oldest first; each a key-sorted table, a block
    or a run's blocks one after the other) merged in bounded slabs and cut into blocks of at
    most `block_rows_max` rows (`write_run`, each file with `metadata`). Returns (name, rows)
    per block written."""
    assert sources
    schema = adapt(0, sources[0].slice(0, 0)).schema
    slabs = compaction_slabs(
        sources, key_names, adapt, drop_deleted=drop_deleted, slab_rows=slab_rows, on_slab=on_slab
    )
    return write_run(data_dir, name_of, schema, slabs, chunk_rows, block_rows_max, metadata)


def write_merged_block(
    data_dir: Path,
    name: str,
    sources: Sequence[pa.Table],
    key_names: list[str],
    adapt: Callable[[int, pa.Table], pa.Table],
    *,
    drop_deleted: bool,
    chunk_rows: int,
    slab_rows: int | None = None,
    on_slab: Callable[[list[int]], None] | None = None,
) -> int:
    """A compaction's output block: `sources` (blocks, oldest first) merged in bounded slabs
    (`merge.compaction_slabs`) and written as the slabs come (`write_block`); the memory is
    a slab and a batch, not the run. The block's filter is built when it is opened
    (`BlockIndex.open`, a batch at a time). Returns the rows written."""
    assert sources
    schema = adapt(0, sources[0].slice(0, 0)).schema
    slabs = compaction_slabs(
        sources, key_names, adapt, drop_deleted=drop_deleted, slab_rows=slab_rows, on_slab=on_slab
    )
    return write_block(data_dir, name, schema, slabs, chunk_rows)


def write_file(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically and durably (tmp, fsync, rename, fsync dir)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
