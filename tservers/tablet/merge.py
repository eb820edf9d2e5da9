"""A k-way merge of key-sorted tables in key order, made in bounded slabs.

Each source is a table sorted by key with unique keys (a data block, the memstore's sorted
snapshot), oldest first: a newer source's version of a key wins. The merge never
concatenates whole sources: it picks a cut key (the smallest of each source's key
`slab_rows` rows ahead), takes from every source the rows up to that key (a binary search
in each), merges only those (`newest_versions`) and moves on. A slab so holds at most
`len(sources) x slab_rows` rows, and at least one source advances by up to `slab_rows` rows
each time; what is held between slabs is only a position per source.

Where the sources do not overlap there is nothing to merge: when one source's next rows
all sort before every other source's next key (a tablet of one run, a run's key-disjoint
blocks, a memstore whose keys lie beyond the blocks'), those rows are the slab as they are,
a zero-copy slice (a "direct" slab: no sort, no take, newest-wins has nothing to resolve),
cut at the end of the source's record batch so that it stays one chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from tservers.tablet.schema import DELETED_FIELD

SLAB_ROWS_DEFAULT = 16_384
# A scan's slab: about this many rows in all, however many sources overlap (each gives its
# share, `shared_slab_rows`). Each source gave SLAB_ROWS_DEFAULT before: a full scan of a
# 50M-row tablet just after its load (48-63 overlapping runs) merged slabs of ~1M rows
# (~45 MB, and as much again for the merge's take), and the server's heap went from ~210 to
# ~610 MiB while scanning (design/storage.md, "The scan's heap").
SCAN_SLAB_ROWS = 65_536
SOURCE_ROWS_MIN = 1024  # a source's share of a slab at least (else slabs of a few rows)
# A direct slab shorter than this (rows of one source before another source's next key)
# is not worth a slab of its own: interleaved sources (random keys in two runs) would
# otherwise alternate slabs of a few rows; the window is merged as one slab instead.
DIRECT_ROWS_MIN = 1024


def shared_slab_rows(total: int, sources: int, least: int = SOURCE_ROWS_MIN) -> int:
    """Each source's rows a slab (`merge_slabs`' slab_rows) for slabs of about `total`
    rows over `sources` sources: an equal share, at least `least` (or `total` if less)."""
    return max(1, min(least, total), total // max(1, sources))


@dataclass(slots=True)
class SlabCounts:
    """What a merge made: slabs passed through as slices of one source (`direct`, and
    their rows) and slabs merged (`merged`, and their rows)."""

    direct: int = 0
    direct_rows: int = 0
    merged: int = 0
    merged_rows: int = 0


def newest_versions(
    parts: list[pa.Table], key_names: list[str], *, drop_deleted: bool = False
) -> pa.Table:
    """The rows of `parts` (one schema, oldest part first) sorted by key, only the newest
    version of each key (and, with `drop_deleted`, not where that version is a tombstone):
    one take of the rows (`newest_order`)."""
    t = pa.concat_tables(parts)
    return t.take(newest_order(t, key_names, drop_deleted=drop_deleted))


def _one_array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.Array):
        return col
    if col.num_chunks == 1:
        return col.chunk(0)
    return pa.concat_arrays(col.chunks) if col.num_chunks else pa.array([], col.type)


def newest_order(t: pa.Table, key_names: list[str], *, drop_deleted: bool = False) -> pa.Array:
    """Row numbers of `t` (its parts concatenated, oldest first) in key order, only the
    newest version of each key, and with `drop_deleted` not where that is a tombstone.

    Arrow's sort is stable: a key's versions stay in age order, so the last of each run of
    equal keys is the newest (no generation column, no second sort key). Only the key
    columns (and `__deleted`) are sorted and compared; versions and tombstones are left
    out of the row numbers, so the caller moves every other column once, with one take
    (before: a take of the rows, then a filter of the duplicates, then one of the
    tombstones, each a copy of every column)."""
    n = t.num_rows
    if len(key_names) == 1:
        # One key column: its chunks as one array, sorted as an array (stable too): some
        # 10% cheaper than sorting the table by that column.
        keys = _one_array(t.column(key_names[0]))
        order = pc.array_sort_indices(keys)
        sorted_keys = [keys.take(order)]
    else:
        order = pc.sort_indices(
            t.select(key_names), sort_keys=[(k, "ascending") for k in key_names]
        )
        sorted_keys = [_one_array(t.column(k)).take(order) for k in key_names]
    keep = None
    if n >= 2:
        for col in sorted_keys:  # the last version of each key: its next row's key differs
            neq = pc.not_equal(col.slice(0, n - 1), col.slice(1))
            keep = neq if keep is None else pc.or_(keep, neq)
        keep = pa.concat_arrays([keep, pa.array([True], pa.bool_())])
    if drop_deleted and n and t.schema.get_field_index(DELETED_FIELD) >= 0:
        deleted = _one_array(t.column(DELETED_FIELD))
        if pc.any(deleted).as_py():
            deleted = deleted.take(order)
            keep = pc.invert(deleted) if keep is None else pc.and_not(keep, deleted)
    if keep is not None and not pc.all(keep).as_py():
        order = order.filter(keep)
    return order


def _merge_parts(parts: list[pa.Table], key_names: list[str], drop_deleted: bool) -> pa.Table:
    """`newest_versions` of a slab's parts, without moving their `__deleted` column where
    the result holds no tombstone (none in the parts, or `drop_deleted`): a take of a
    boolean column costs about what one of an int64 column does; an all-false column of
    the result's length replaces it."""
    t = pa.concat_tables(parts)
    order = newest_order(t, key_names, drop_deleted=drop_deleted)
    at = t.schema.get_field_index(DELETED_FIELD)
    if at < 0:
        return t.take(order)
    if not drop_deleted and any(pc.any(p.column(DELETED_FIELD)).as_py() for p in parts):
        return t.take(order)
    field = t.schema.field(at)
    out = t.drop_columns([DELETED_FIELD]).take(order)
    return out.add_column(at, field, _all_false(out.num_rows))


def _all_false(n: int) -> pa.Array:
    return pa.BooleanArray.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bytes((n + 7) // 8))])


class SortedSource:
    """A key-sorted table read by position: keys as Python values (timestamps as int64)."""

    __slots__ = ("table", "num_rows", "_keys", "_offsets", "_nk")

    def __init__(self, table: pa.Table, key_names: list[str]) -> None:
        self.table = table
        self.num_rows = table.num_rows
        self._nk = len(key_names)
        self._keys: list[list[pa.Array]] = []
        self._offsets: list[int] = []
        start = 0
        for b in table.to_batches():
            if not b.num_rows:
                continue
            arrays = []
            for k in key_names:
                a = b.column(k)
                arrays.append(a.view(pa.int64()) if pa.types.is_timestamp(a.type) else a)
            self._keys.append(arrays)
            self._offsets.append(start)
            start += b.num_rows

    def batch_end(self, row: int) -> int:
        """The end row of the record batch holding `row`."""
        lo, hi = 0, len(self._offsets)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._offsets[mid] <= row:
                lo = mid
            else:
                hi = mid
        return self._offsets[lo + 1] if lo + 1 < len(self._offsets) else self.num_rows

    def key_at(self, row: int):
        lo, hi = 0, len(self._offsets)
        while hi - lo > 1:  # the batch holding `row`
            mid = (lo + hi) // 2
            if self._offsets[mid] <= row:
                lo = mid
            else:
                hi = mid
        arrays = self._keys[lo]
        i = row - self._offsets[lo]
        if self._nk == 1:
            return arrays[0][i].as_py()
        return tuple(a[i].as_py() for a in arrays)

    def search(self, key, lo: int, hi: int, *, right: bool) -> int:
        """The first row in [lo, hi) whose key is >= `key` (> with `right`), or hi."""
        while lo < hi:
            mid = (lo + hi) // 2
            k = self.key_at(mid)
            if k < key or (right and k == key):
                lo = mid + 1
            else:
                hi = mid
        return lo


def merge_slabs(
    sources: Sequence[pa.Table],
    key_names: list[str],
    adapt: Callable[[int, pa.Table], pa.Table],
    lower=None,
    upper=None,
    slab_rows: int = SLAB_ROWS_DEFAULT,
    on_slab: Callable[[list[int]], None] | None = None,
    counts: SlabCounts | None = None,
    *,
    drop_deleted: bool = False,
) -> Iterator[pa.Table]:
    """Slabs of the newest version of every key of `sources` (oldest first) in [lower,
    upper) (Python keys, None: open), in key order; `adapt(i, rows)` turns a slice of
    source i into the common schema. Tombstones come out as rows (the caller drops them);
    with `drop_deleted`, merged slabs leave them out already (in the merge's row numbers,
    no copy), direct slabs still carry theirs.
    `on_slab(pos)`, when the next slab is asked for, gets every source's position: the rows
    before it are merged and handed out (`pages.PageRelease`). `counts`, when given, is
    added what was made (direct and merged slabs).

    A slab is direct (a slice of one source, `adapt`ed, nothing merged) when the source
    with the smallest next key has at least DIRECT_ROWS_MIN rows (or all it has left)
    below every other source's next key: at most `slab_rows x len(sources)` of them, to
    the end of its record batch. Otherwise the window up to the cut key is merged."""
    slab_rows = max(1, slab_rows)
    srcs = [SortedSource(t, key_names) for t in sources]
    pos = [0 if lower is None else s.search(lower, 0, s.num_rows, right=False) for s in srcs]
    end = [
        s.num_rows if upper is None else s.search(upper, 0, s.num_rows, right=False) for s in srcs
    ]
    direct_max = slab_rows * max(1, len(srcs))
    direct_min = min(DIRECT_ROWS_MIN, slab_rows)
    # Each live source's next key, kept as positions move (one key_at per source a slab).
    heads = {i: srcs[i].key_at(pos[i]) for i in range(len(srcs)) if pos[i] < end[i]}
    while heads:
        first = min(heads, key=heads.__getitem__)
        src, p = srcs[first], pos[first]
        stop = min(end[first], p + direct_max, src.batch_end(p))
        if len(heads) > 1:
            nxt = min(k for i, k in heads.items() if i != first)
            if not heads[first] < nxt:
                stop = p  # one key in two sources: merged
            elif not src.key_at(stop - 1) < nxt:
                short = p + direct_min
                if short < stop and src.key_at(short - 1) < nxt:
                    stop = src.search(nxt, short, stop, right=False)
                else:
                    stop = p  # too few rows before the next source's key: merged
        if stop > p:
            parts = [adapt(first, src.table.slice(p, stop - p))]
            pos[first] = stop
        else:
            cut = min(srcs[i].key_at(min(pos[i] + slab_rows, end[i]) - 1) for i in heads)
            parts = []
            for i in sorted(heads):  # oldest first: newest_versions keeps the last of equal keys
                stop = srcs[i].search(cut, pos[i], end[i], right=True)
                if stop > pos[i]:
                    parts.append(adapt(i, srcs[i].table.slice(pos[i], stop - pos[i])))
                    pos[i] = stop
        for i in list(heads):
            if pos[i] >= end[i]:
                del heads[i]
            else:
                heads[i] = srcs[i].key_at(pos[i])
        if len(parts) == 1:
            slab = parts[0]
            if counts is not None:
                counts.direct += 1
                counts.direct_rows += slab.num_rows
        else:
            slab = _merge_parts(parts, key_names, drop_deleted)
            if counts is not None:
                counts.merged += 1
                counts.merged_rows += slab.num_rows
        yield slab
        if on_slab is not None:
            on_slab(pos)


# A compaction's slab: about this many rows in all, however many blocks it merges (each
# source gives at most its share, and at least COMPACT_SOURCE_ROWS_MIN rows, per slab).
COMPACT_SLAB_ROWS = 65_536
COMPACT_SOURCE_ROWS_MIN = 1024


def compaction_slabs(
    sources: Sequence[pa.Table],
    key_names: list[str],
    adapt: Callable[[int, pa.Table], pa.Table],
    *,
    drop_deleted: bool,
    slab_rows: int | None = None,
    on_slab: Callable[[list[int]], None] | None = None,
) -> Iterator[pa.Table]:
    """The rows of a compaction of `sources` (data blocks, oldest first), in key order and
    in bounded slabs (`merge_slabs`): the newest version of every key, tombstones dropped
    with `drop_deleted` (a run that starts at the oldest block: nothing older is left for
    them to hide) and kept otherwise. Each slab holds at most `len(sources) x slab_rows`
    rows (default: COMPACT_SLAB_ROWS shared among the sources)."""
    if slab_rows is None:
        slab_rows = shared_slab_rows(COMPACT_SLAB_ROWS, len(sources), COMPACT_SOURCE_ROWS_MIN)
    slabs = merge_slabs(
        sources, key_names, adapt, slab_rows=slab_rows, on_slab=on_slab, drop_deleted=drop_deleted
    )
    for slab in slabs:
        if drop_deleted and pc.any(slab.column(DELETED_FIELD)).as_py():
            slab = slab.filter(pc.invert(slab.column(DELETED_FIELD)))
        if slab.num_rows:
            yield slab
