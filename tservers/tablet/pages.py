"""Handing a mapped block's pages back to the kernel once a merge has read them.

A data block is a memory-mapped Arrow file (`blockindex.py`): every page a scan or a
compaction reads stays mapped into the process, so a full scan of a tablet counts the
tablet's size in the tablet server's RSS (clean file pages, reclaimable, but RSS all the
same: 913 MiB peak while scanning 10M rows, 440 MB of blocks). `PageRelease` follows a
merge's positions (`merge.merge_slabs`' `on_slab`) and, once every row of a chunk (a
record batch of the block) is behind them, tells the kernel the process no longer needs
those pages (madvise MADV_DONTNEED): they leave the process's RSS and stay in the page
cache; a later read (another scan, a point read) maps them again from there.

Only ever applied to addresses inside a block's file mapping (read-only, shared: nothing
to lose), never to heap memory, where MADV_DONTNEED would zero the pages.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

log = logging.getLogger(__name__)

PAGE_BYTES = mmap.PAGESIZE
# The most resident file-mapped pages (RssFile: the data blocks' mapped pages, shared
# libraries too) the process keeps before it hands every block's pages back to the kernel
# (`trim_mapped`); Kudu's block cache capacity in spirit. The existence checks of a 50M-row
# tablet's inserts touched ~470 MiB of key-column pages (design/storage.md, "Mapped pages
# under a budget"). 0: no bound.
MAPPED_BYTES_MAX_DEFAULT = 384 << 20
MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)

_libc = ctypes.CDLL(None, use_errno=True)
_madvise = _libc.madvise
_madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_madvise.restype = ctypes.c_int


@dataclass(frozen=True, slots=True)
class Mapping:
    """The address range [lo, hi) of one block file's mapping."""

    lo: int
    hi: int


def batch_span(batch: pa.RecordBatch, mapping: Mapping) -> tuple[int, int] | None:
    """The address range of the batch's buffers that lie inside `mapping` (a batch of an
    Arrow IPC file is one contiguous body), None when none does."""
    lo = hi = None
    for col in batch.columns:
        for buf in col.buffers():
            if buf is None or buf.size == 0:
                continue
            a, b = buf.address, buf.address + buf.size
            if a < mapping.lo or b > mapping.hi:
                continue  # not the file's (a copy Arrow made): never advised
            lo = a if lo is None else min(lo, a)
            hi = b if hi is None else max(hi, b)
    return None if lo is None else (lo, hi)


def release(mapping: Mapping, lo: int, hi: int) -> int:
    """MADV_DONTNEED on the whole pages of [lo, hi) inside `mapping`; the bytes released."""
    start = max(lo, mapping.lo)
    end = min(hi, mapping.hi)
    start = -(-start // PAGE_BYTES) * PAGE_BYTES  # whole pages only: a neighbour's page stays
    end = end // PAGE_BYTES * PAGE_BYTES
    if end <= start:
        return 0
    assert mapping.lo <= start < end <= mapping.hi, "only a block's file pages are advised"
    if _madvise(start, end - start, MADV_DONTNEED) != 0:
        log.debug("madvise failed: %s", os.strerror(ctypes.get_errno()))
        return 0
    return end - start


class PageRelease:
    """For a merge over sources some of which are (chunks of) mapped blocks: called with the
    merge's position in every source after each slab, releases the chunks behind them."""

    __slots__ = ("_sources", "_next", "released_bytes")

    def __init__(self, sources: Sequence[tuple[Mapping, list[tuple[int, int, int]]] | None]):
        # Per source: its mapping and, per chunk in source order, (end row, lo, hi); None
        # for a source that is not a mapped block (the memstore).
        self._sources = list(sources)
        self._next = [0] * len(self._sources)
        self.released_bytes = 0

    @classmethod
    def of(cls, blocks: Sequence[tuple[object, list[int] | None] | None]) -> PageRelease:
        """From (BlockIndex, kept chunk indices or None for all) per source, or None."""
        out = []
        for entry in blocks:
            if entry is None or getattr(entry[0], "mapping", None) is None:
                out.append(None)
                continue
            block, keep = entry
            idx = range(len(block.batches)) if keep is None else keep
            chunks, end = [], 0
            for j in idx:
                end += block.batches[j].num_rows
                span = block.spans[j]
                if span is not None:
                    chunks.append((end, span[0], span[1]))
            out.append((block.mapping, chunks))
        return cls(out)

    def __call__(self, pos: Sequence[int]) -> None:
        for i, src in enumerate(self._sources):
            if src is None:
                continue
            mapping, chunks = src
            k = self._next[i]
            while k < len(chunks) and chunks[k][0] <= pos[i]:
                self.released_bytes += release(mapping, chunks[k][1], chunks[k][2])
                k += 1
            self._next[i] = k


def mapped_file_bytes() -> int:
    """The process's resident file-backed pages (RssFile, with RssShmem: /proc/self/statm's
    third field), bytes; 0 where /proc is not there. Shared libraries count too (~50 MiB
    for a tablet server)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[2]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


def release_blocks(blocks) -> int:
    """MADV_DONTNEED on the whole mappings of each of `blocks` (BlockIndex: its data file's
    and its filter file's): their pages leave the process (a reader maps them again from
    the page cache: the mappings are read-only and shared, nothing is lost). The bytes
    advised."""
    return sum(release(m, m.lo, m.hi) for b in blocks for m in b.mappings)
