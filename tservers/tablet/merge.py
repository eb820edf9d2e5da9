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
# otherwise alternate slabs of a few rows; the window is merged as one slab instead. Was
# 1,024: a run of 50M rows with 20,000 memstore rows of random keys alternated direct
# slabs of ~2,500 rows with merged windows, and a slab's own cost (its answer's IPC
# stream, the Python around it) is what merging some thousands of rows costs; at 8,192
# the server's CPU for that scan went from 1.68-1.97 s to 1.55 s (design/storage.md,
# "Session 27").
DIRECT_ROWS_MIN = 8192


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
    # Rows an unordered scan handed out without the merge (`Tablet.scan_pieces`).
    unmerged_rows: int = 0


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


_ARANGE = pa.array(range(1 << 17), pa.int64())


def _arange(start: int, n: int) -> pa.Array:
    """int64 [start, start + n), a slice of a cached range grown by doubling."""
    global _ARANGE
    if start + n > len(_ARANGE):
        size = len(_ARANGE)
        while size < start + n:
            size *= 2
        _ARANGE = pa.array(range(size), pa.int64())
    return _ARANGE.slice(start, n)


def two_order(t: pa.Table, n: int, key: str, *, drop_deleted: bool = False) -> pa.Array:
    """`newest_order` of `t` made of two key-sorted parts with unique keys, its first `n`
    rows (the older) and the rest (the newer), on one key column: by position instead of a
    sort. Each newer key's place among the older ones is a binary search (Arrow's
    search_sorted); an older row whose key the newer part holds is left out; the newer
    rows' row numbers are scattered to their places in the result and the older rows'
    fill the rest, in order (replace_with_mask). Cheaper than the sort only while the
    newer part is small (TWO_ORDER_RATIO; design/storage.md, "Session 27")."""
    keys = _one_array(t.column(key))
    m = t.num_rows - n
    ka, kb = keys.slice(0, n), keys.slice(n, m)
    pos = pc.search_sorted(ka, kb).cast(pa.int64())
    newer = _arange(n, m)
    if n and m:
        dup = pc.and_(pc.less(pos, n), pc.equal(ka.take(pc.min_element_wise(pos, n - 1)), kb))
        ndup = pc.sum(dup).as_py() or 0
    else:
        ndup = 0
    if ndup:
        d = dup.cast(pa.int64())
        # A newer row's place: the older keys below it, less those it and the newer rows
        # before it replace, plus the newer rows before it.
        at = pc.add(pc.subtract(pos, pc.subtract(pc.cumulative_sum(d), d)), _arange(0, m))
        shadowed = pc.scatter(_trues(ndup), pos.filter(dup), max_index=n - 1)
        older = _arange(0, n).filter(pc.invert(pc.fill_null(shadowed, False)))
    else:
        at = pc.add(pos, _arange(0, m))
        older = _arange(0, n)
    size = n + m - ndup
    order = pc.scatter(newer, at, max_index=size - 1) if m else pa.nulls(size, pa.int64())
    order = pc.replace_with_mask(order, pc.is_null(order), older)
    if drop_deleted and t.schema.get_field_index(DELETED_FIELD) >= 0:
        deleted = _one_array(t.column(DELETED_FIELD))
        if pc.any(deleted).as_py():
            order = order.filter(pc.invert(deleted.take(order)))
    return order


def _trues(n: int) -> pa.Array:
    return pa.BooleanArray.from_buffers(
        pa.bool_(), n, [None, pa.py_buffer(b"\xff" * ((n + 7) // 8))]
    )


def _two_part_key(parts: list[pa.Table], key_names: list[str]) -> str | None:
    """The key column of a slab of two parts on one key column of a type `two_order` and
    `splice` take; None for any other slab (merged by a sort)."""
    if len(parts) == 2 and len(key_names) == 1:
        if _positional(parts[0].schema.field(key_names[0]).type):
            return key_names[0]
    return None


def _positional(typ: pa.DataType) -> bool:
    """Key types `two_order` merges: those search_sorted takes whose equality is the
    sort's (floats are left to the sort: NaN)."""
    t = pa.types
    return (
        t.is_integer(typ)
        or t.is_string(typ)
        or t.is_binary(typ)
        or t.is_timestamp(typ)
        or t.is_date(typ)
        or t.is_boolean(typ)
    )


# A newer part of at most 1 row in this many of the older one is merged by position
# (`two_order`), else by a sort: for a slab of 65,536 keys, two_order takes 0.23 ms with
# 0.2% of them newer, 0.30 with 1%, 0.47 with 3%, 0.80 with 10%, 2.3 with half; the sort
# 0.47-0.70 whatever the share.
TWO_ORDER_RATIO = 32
# A newer part of at most 1 row in this many of the older one is spliced in (`splice`),
# not merged through an order and a take: a slab of 32k rows of 5 columns (the bench's)
# costs ~0.47 ms that way whatever the newer rows, a splice ~0.15 ms and ~5 µs a newer
# row (13 rows 0.22 ms, 64 rows 0.45, 128 rows 0.79).
SPLICE_RATIO = 512


def splice(older: pa.Table, newer: pa.Table, key: str, *, drop_deleted: bool) -> pa.Table:
    """`newest_versions([older, newer])` (two key-sorted parts with unique keys, one key
    column) by slicing: the older part's rows between the newer rows' places (Arrow's
    search_sorted), the newer rows in them, an older row whose key the newer part holds
    left out; the pieces copied once into one chunk a column. With `drop_deleted`, no
    tombstone is left. For a few newer rows among many older ones: a memstore's scattered
    keys in a run's slab (design/storage.md, "Session 27")."""
    n = older.num_rows
    ka = _one_array(older.column(key))
    kb = _one_array(newer.column(key))
    pos_arr = pc.search_sorted(ka, kb)
    pos = pos_arr.to_pylist()
    if n:
        same = pc.equal(ka.take(pc.min_element_wise(pos_arr, n - 1)), kb)
        dup = pc.and_(pc.less(pos_arr, n), same).to_pylist()
    else:
        dup = [False] * len(pos)
    pieces = []
    p = 0  # the older rows before p are placed
    run = None  # the newer rows [run, j) wait to be placed at p
    for j, (q, d) in enumerate(zip(pos, dup, strict=True)):
        if q > p:
            if run is not None:
                pieces.append(newer.slice(run, j - run))
            pieces.append(older.slice(p, q - p))
            run = j
        elif run is None:
            run = j
        p = q + 1 if d else q
    if run is not None:
        pieces.append(newer.slice(run, len(pos) - run))
    if p < n:
        pieces.append(older.slice(p, n - p))
    out = pa.concat_tables(pieces).combine_chunks()
    if drop_deleted and out.schema.get_field_index(DELETED_FIELD) >= 0:
        deleted = out.column(DELETED_FIELD)
        if pc.any(deleted).as_py():
            out = out.filter(pc.invert(deleted))
    return out


def _merge_parts(parts: list[pa.Table], key_names: list[str], drop_deleted: bool) -> pa.Table:
    """`newest_versions` of a slab's parts, without moving their `__deleted` column where
    the result holds no tombstone (none in the parts, or `drop_deleted`): a take of a
    boolean column costs about what one of an int64 column does; an all-false column of
    the result's length replaces it. Two parts, the newer at most 1/SPLICE_RATIO of the
    older: `splice`d; at most 1/TWO_ORDER_RATIO: ordered by position (`two_order`); else
    by a sort."""
    key = _two_part_key(parts, key_names)
    older = parts[0].num_rows
    newer = parts[1].num_rows if key is not None else 0
    if key is not None and newer * SPLICE_RATIO <= older:
        return splice(parts[0], parts[1], key, drop_deleted=drop_deleted)
    t = pa.concat_tables(parts)
    if key is not None and newer * TWO_ORDER_RATIO <= older:
        order = two_order(t, older, key, drop_deleted=drop_deleted)
    else:
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
    total_rows: int | None = None,
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
    the end of its record batch. Otherwise the window up to the cut key is merged.

    With `total_rows`, a slab holds about that many rows however many sources there are:
    a window's sources are only those whose next key lies before where any one source
    would end a slab of `total_rows` rows alone. If they hold at most 1/8 more than
    `total_rows` up to there, that is the slab (a run and a memstore of scattered keys:
    the run's `total_rows` rows and the memstore's few among them); else they share it
    equally (`shared_slab_rows`). `slab_rows` is then unused. Before, a tablet of one run
    of 12 key-disjoint blocks and a memstore merged windows of 65,536 / 13 = 5,041 rows,
    and searched every block each window. Sources whose next key is past the cut are not
    searched."""
    slab_rows = max(1, slab_rows)
    srcs = [SortedSource(t, key_names) for t in sources]
    pos = [0 if lower is None else s.search(lower, 0, s.num_rows, right=False) for s in srcs]
    end = [
        s.num_rows if upper is None else s.search(upper, 0, s.num_rows, right=False) for s in srcs
    ]
    if total_rows is not None:
        total_rows = max(1, total_rows)
        direct_max = total_rows
    else:
        direct_max = slab_rows * max(1, len(srcs))
    direct_min = min(DIRECT_ROWS_MIN, slab_rows if total_rows is None else total_rows)
    # Each live source's next key, kept as positions move (one key_at per source a slab).
    heads = {i: srcs[i].key_at(pos[i]) for i in range(len(srcs)) if pos[i] < end[i]}
    while heads:
        at = list(pos)
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
            stops = None
            if total_rows is not None:
                # Where the source that gets there first would end a slab of total_rows
                # alone: the window is the sources that start before it. Where the others
                # give few rows up to there (a memstore's scattered keys in a run), that is
                # the cut; else they share the slab.
                # The searches stop as soon as the rows pass the bound (overlapping runs:
                # at the second source), and those made bound the shared cut's.
                alone = {i: min(pos[i] + total_rows, end[i]) for i in heads}
                last = {i: srcs[i].key_at(alone[i] - 1) for i in heads}
                r = min(heads, key=last.__getitem__)
                reach = last[r]
                window = [i for i in heads if not reach < heads[i]]
                upto = {i: end[i] for i in window}
                upto[r] = alone[r]  # unique keys: its rows up to reach are exactly those
                given = alone[r] - pos[r]
                for i in window:
                    if i != r and given <= total_rows + total_rows // 8:
                        upto[i] = srcs[i].search(reach, pos[i], end[i], right=True)
                        given += upto[i] - pos[i]
                if given <= total_rows + total_rows // 8:
                    stops = upto
                else:
                    share = shared_slab_rows(total_rows, len(window))
                    cut = min(srcs[i].key_at(min(pos[i] + share, end[i]) - 1) for i in window)
                    stops = {
                        i: srcs[i].search(cut, pos[i], upto[i], right=True)
                        for i in window
                        if not cut < heads[i]  # nothing of this source up to the cut
                    }
            else:
                cut = min(srcs[i].key_at(min(pos[i] + slab_rows, end[i]) - 1) for i in heads)
                stops = {
                    i: srcs[i].search(cut, pos[i], end[i], right=True)
                    for i in heads
                    if not cut < heads[i]
                }
            parts = []
            for i in sorted(stops):  # oldest first: newest_versions keeps the last of equal keys
                stop = stops[i]
                if stop > pos[i]:
                    parts.append(adapt(i, srcs[i].table.slice(pos[i], stop - pos[i])))
                    pos[i] = stop
        for i in list(heads):
            if pos[i] >= end[i]:
                del heads[i]
            elif pos[i] != at[i]:
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
    rows (default: about COMPACT_SLAB_ROWS, shared among the sources each window overlaps,
    `merge_slabs`' total_rows)."""
    total = None
    if slab_rows is None:  # COMPACT_SLAB_ROWS shared among the blocks each window overlaps
        slab_rows, total = COMPACT_SOURCE_ROWS_MIN, COMPACT_SLAB_ROWS
    slabs = merge_slabs(
        sources,
        key_names,
        adapt,
        slab_rows=slab_rows,
        on_slab=on_slab,
        drop_deleted=drop_deleted,
        total_rows=total,
    )
    for slab in slabs:
        if drop_deleted and pc.any(slab.column(DELETED_FIELD)).as_py():
            slab = slab.filter(pc.invert(slab.column(DELETED_FIELD)))
        if slab.num_rows:
            yield slab
