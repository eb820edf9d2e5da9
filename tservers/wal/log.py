"""Per-tablet WAL (segments in wals/<tablet_id>/) and the per-server group-commit appender.

`TabletLog.open` reads every segment of a tablet once, cuts a torn tail off the last one and,
when a crash left that one open (no footer), goes on appending to it (a clean shutdown's
closed last segment gets a new one); it returns the entries for replay.
Corruption anywhere else raises `WalCorruption` (the tablet then stays offline).

`Appender` is the one thread per server that writes: callers hand it records already
encoded (serialization happens in the caller's thread, outside any lock); the thread takes
everything queued, writes each record to its tablet's current segment, then syncs each
touched segment once (group commit) and runs the completion callbacks in queue order. A
group that touched several segments syncs them at once on a few threads: the file system
commits concurrent syncs together (one journal commit and one cache flush for many), so
many tablets written at once, as when thousands of replicas elect themselves at start-up,
do not pay one device flush each in turn (issue 28).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rpc.observe import LatencyHistogram
from rpc.protocols.tserver_pb2 import LogEntryPB, OpIdPB, SegmentFooterPB, SegmentHeaderPB
from tservers.crash import crash_point
from tservers.metafile import fsync_dir
from tservers.wal import segment as seg
from tservers.wal.segment import WalCorruption

log = logging.getLogger(__name__)

SEGMENT_SIZE_BYTES_DEFAULT = 16 << 20
PREALLOCATE_STEP_BYTES_MIN = 64 << 10
# A new segment is preallocated only this far (one page): a replica that is never written
# much (most of 10,000 on a server, issue 28) holds 4 KiB of WAL, and a restart after a
# crash, which reads a footerless segment whole where the file system reports preallocated
# space as data (ext4 does), reads 4 KiB of it, not a whole step. The first append past it
# grows the file by a full step (`_SegmentWriter._preallocate`).
PREALLOCATE_FIRST_BYTES = 4 << 10
PREALLOCATE_STEP_BYTES_MAX = 4 << 20
# Records (one per tablet append) per group commit, for the metrics.
GROUP_RECORDS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True, slots=True)
class WalOptions:
    segment_size_bytes_max: int = SEGMENT_SIZE_BYTES_DEFAULT
    # Space is preallocated in steps as the segment fills, not the whole segment at once: an
    # empty replica would otherwise hold segment_size_bytes_max of disk (16 MiB; issue 28).
    # A page at creation (preallocate_first_bytes), then steps from the smallest, each next
    # one doubling, up to the largest step.
    preallocate: bool = True
    preallocate_step_bytes_min: int = PREALLOCATE_STEP_BYTES_MIN
    preallocate_step_bytes_max: int = PREALLOCATE_STEP_BYTES_MAX
    preallocate_first_bytes: int = PREALLOCATE_FIRST_BYTES  # at a segment's creation
    sync: bool = True  # durable by default: one fdatasync per group and touched segment
    queue_entries_max: int = 1024
    group_records_max: int = 256
    enqueue_timeout_s: float = 10.0
    # Segments of one group synced at once (threads of the appender; 1: one after another).
    sync_threads: int = 8


@dataclass(slots=True)
class _SegmentInfo:
    sequence: int
    path: Path
    min_index: int  # 0 when empty
    max_index: int


class _SegmentWriter:
    """The open segment of one tablet: written only by the appender thread (under the log lock)."""

    def __init__(
        self, path: Path, header: SegmentHeaderPB, opts: WalOptions, *, defer_sync: bool = False
    ) -> None:
        """A new segment, made durable (file and directory entry) before it is returned;
        `defer_sync`: by its first sync instead (start-up: thousands of replicas get a new
        segment each, most never written before the next restart, and nothing written
        in one is acknowledged before that sync; a crash before it leaves no segment, or
        one torn at creation, which the next open removes)."""
        self.path = path
        self.opts = opts
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        head = seg.encode_file_header(header)
        os.write(self.fd, head)
        self.offset = len(head)
        self.allocated = self.offset  # the file's size: preallocated zeros up to here
        self.size_changed = False  # grown since the last sync: that sync is an fsync
        self.num_entries = 0
        first = min(max(opts.preallocate_first_bytes, self.offset), opts.segment_size_bytes_max)
        if opts.preallocate and first > self.allocated:
            os.posix_fallocate(self.fd, self.allocated, first - self.allocated)
            self.allocated = first
        self.size_changed = False  # synced below
        self.min_index = 0
        self.max_index = 0
        self.dir_unsynced = False  # the file and its directory entry await the first sync
        if opts.sync and defer_sync:
            self.dir_unsynced = True
        elif opts.sync:
            os.fsync(self.fd)
            fsync_dir(path.parent)

    @classmethod
    def reopen(
        cls,
        path: Path,
        contents: seg.SegmentContents,
        opts: WalOptions,
        *,
        synced: bool = False,
        fd: int | None = None,
    ) -> _SegmentWriter:
        """Go on writing a segment a crashed process left open, after its last good record.

        A torn tail is zeroed (what follows the last good record must be zeros, or the next
        reader would take it for corruption); the file keeps its size, and grows in
        preallocation steps as appends reach its end.
        Then one sync: the dead process's writes may still be only in the page cache, and
        Raft is about to count on them (vote, acknowledge). `synced`: the caller synced the
        whole file system after the crash and before this open (`tservers/wal/syncfs.py`,
        once for every tablet at start-up), so only a zeroed torn tail needs a sync here.
        `fd`: the segment open read-write, as it was read (the writer owns it from here on,
        closed on failure too); None: opened here."""
        w = cls.__new__(cls)
        w.path = path
        w.opts = opts
        w.fd = os.open(path, os.O_RDWR) if fd is None else fd
        try:
            w.offset = contents.data_end
            w.allocated = max(contents.size, contents.data_end)
            w.size_changed = False
            w.dir_unsynced = False
            w.num_entries = len(contents.entries)
            w.min_index = contents.entries[0].index if contents.entries else 0
            w.max_index = max((e.index for e in contents.entries), default=0)
            zeroed = False
            if contents.torn_at is not None and contents.torn_end > contents.data_end:
                zeros = bytes(contents.torn_end - contents.data_end)
                os.pwrite(w.fd, zeros, contents.data_end)
                zeroed = True
            # No preallocation here: a segment cut short grows in steps as appends reach
            # its end, like any other (`write`).
            if opts.sync and (zeroed or not synced):
                os.fdatasync(w.fd)
        except BaseException:
            os.close(w.fd)
            raise
        return w

    def _preallocate(self, end: int) -> None:
        """Make sure [0, end) is allocated: grow by the next step (double the allocated size,
        between the smallest and largest step), at least to `end`, at most to the segment
        size unless `end` itself passes it (the first record of a segment may). What is
        allocated and not written reads as zeros, which is what the readers' zero-tail rule
        and the start-up's read-to-the-first-hole count on. The size changes, so the next
        sync is an fsync (`sync`)."""
        if not self.opts.preallocate or end <= self.allocated:
            return
        step = min(
            max(self.allocated, self.opts.preallocate_step_bytes_min),
            self.opts.preallocate_step_bytes_max,
        )
        target = max(end, min(self.allocated + step, self.opts.segment_size_bytes_max))
        os.posix_fallocate(self.fd, self.allocated, target - self.allocated)
        self.allocated = target
        self.size_changed = True

    def write(self, record: bytes, min_index: int, max_index: int, count: int) -> None:
        self._preallocate(self.offset + len(record))
        view = memoryview(record)
        while view:
            n = os.pwrite(self.fd, view, self.offset)
            self.offset += n
            view = view[n:]
        if self.min_index == 0:
            self.min_index = min_index
        self.max_index = max(self.max_index, max_index)
        self.num_entries += count

    def sync(self) -> None:
        # Within the preallocated size the file's size does not change: fdatasync suffices.
        # After a preallocation step, fsync (fdatasync makes a new size durable on Linux too,
        # but a step is rare: about ten per segment, so the stronger call costs nothing).
        if self.dir_unsynced:  # created with defer_sync: the file, then its entry
            os.fsync(self.fd)
            fsync_dir(self.path.parent)
            self.dir_unsynced = False
            self.size_changed = False
        elif self.size_changed:
            os.fsync(self.fd)
            self.size_changed = False
        else:
            os.fdatasync(self.fd)

    def close(self, *, sync: bool = True) -> None:
        """Write the footer and close. `sync` False leaves the footer unsynced: the caller
        makes the file system durable at once for many (a server's stop, one syncfs). A
        footer lost anyway costs only the next open's crash path (every entry before it was
        synced when the appender wrote it)."""
        footer = SegmentFooterPB(
            num_entries=self.num_entries,
            min_index=self.min_index,
            max_index=self.max_index,
            closed_ms=int(time.time() * 1000),
        )
        rec = seg.encode_footer(footer)
        os.pwrite(self.fd, rec, self.offset)
        self.offset += len(rec)
        os.ftruncate(self.fd, self.offset)
        if self.opts.sync and sync:
            os.fsync(self.fd)
            if self.dir_unsynced:
                fsync_dir(self.path.parent)
                self.dir_unsynced = False
        os.close(self.fd)
        self.fd = -1


class TabletLog:
    """The WAL of one tablet. Appends go through the server's `Appender`."""

    def __init__(self, wal_dir: Path, tablet_id: str, opts: WalOptions) -> None:
        self.wal_dir = wal_dir
        self.tablet_id = tablet_id
        self.opts = opts
        self.lock = threading.Lock()
        self.segments: list[_SegmentInfo] = []  # closed segments, oldest first
        self.writer: _SegmentWriter | None = None
        self.writer_seq = 0
        self.last_op_id = OpIdPB()
        self.failed: Exception | None = None
        self.closed = False

    # ------------------------------------------------------------ open / replay
    @classmethod
    def create(cls, wal_dir: Path, tablet_id: str, opts: WalOptions) -> TabletLog:
        wal_dir.mkdir(parents=True, exist_ok=True)
        fsync_dir(wal_dir.parent)
        tl = cls(wal_dir, tablet_id, opts)
        tl._new_segment(1)
        return tl

    @classmethod
    def open(
        cls, wal_dir: Path, tablet_id: str, opts: WalOptions, *, synced: bool = False
    ) -> tuple[TabletLog, list[LogEntryPB]]:
        """Read the whole log; returns it ready for appends and every entry in index order.

        Each segment is read once. The last segment, left open by a crash (no footer), stays
        the open segment: appends go on after its last good record (a torn tail is zeroed
        first), so a restart after kill -9 writes no new file, no footer, no truncation;
        its one fdatasync makes what the dead process wrote durable before Raft counts on
        it, unless `synced` says the caller has synced the whole file system since the
        crash (start-up: one syncfs for every tablet). A closed last segment (clean
        shutdown) gets a new segment after it, made durable by its first sync (nothing is
        acknowledged from it before), not here."""
        tl = cls(wal_dir, tablet_id, opts)
        found = seg.list_segments(wal_dir)
        entries: list[LogEntryPB] = []
        reopen: tuple[int, Path, seg.SegmentContents] | None = None
        # The last segment is opened read-write once: read through that fd and, when a
        # crash left it open, appended to through it (one open per tablet at start-up).
        last_fd: int | None = None
        try:
            for i, (sequence, path) in enumerate(found):
                is_last = i == len(found) - 1
                try:
                    if is_last:
                        last_fd = os.open(path, os.O_RDWR)
                        contents = seg.read_segment_fd(last_fd, path, is_last=True)
                    else:
                        contents = seg.read_segment(path, is_last=False)
                except seg.TornSegmentHeader as e:
                    log.warning("tablet %s: removing segment torn at creation: %s", tablet_id, e)
                    path.unlink()
                    fsync_dir(wal_dir)
                    break  # it was the last one (only the last one may be torn)
                if tl._add_read(contents, path, sequence, is_last, entries):
                    reopen = (sequence, path, contents)
            if entries:
                last = entries[-1]
                tl.last_op_id = OpIdPB(term=last.term, index=last.index)
            if reopen is not None:
                sequence, path, contents = reopen
                fd, last_fd = last_fd, None  # the writer owns it (and closes it on failure)
                tl.writer = _SegmentWriter.reopen(path, contents, opts, synced=synced, fd=fd)
                tl.writer_seq = sequence
            else:
                last_seq = max((s.sequence for s in tl.segments), default=0)
                tl._new_segment(last_seq + 1, defer_sync=True)
        finally:
            if last_fd is not None:
                os.close(last_fd)
        return tl, entries

    def _add_read(
        self,
        contents: seg.SegmentContents,
        path: Path,
        sequence: int,
        is_last: bool,
        entries: list[LogEntryPB],
    ) -> bool:
        """Take in one segment read at open: its entries appended to `entries`, a closed
        one listed; True when it is the open (last, footerless) segment to go on with."""
        tablet_id = self.tablet_id
        if contents.header.tablet_id != tablet_id or contents.header.sequence != sequence:
            raise WalCorruption(path, 0, "segment header names another tablet or sequence")
        if contents.torn_at is not None:
            log.warning(
                "tablet %s: cutting torn tail of %s at offset %d (%s)",
                tablet_id,
                path,
                contents.torn_at,
                contents.torn_reason,
            )
        for e in contents.entries:
            _append_replacing(entries, e, path)
        if contents.footer is None:
            if not is_last:
                raise WalCorruption(path, contents.data_end, "closed segment has no footer")
            return True
        mn = contents.entries[0].index if contents.entries else 0
        mx = max((e.index for e in contents.entries), default=0)
        self.segments.append(_SegmentInfo(sequence, path, mn, mx))
        return False

    def _new_segment(self, sequence: int, *, defer_sync: bool = False) -> None:
        header = SegmentHeaderPB(
            tablet_id=self.tablet_id, sequence=sequence, created_ms=int(time.time() * 1000)
        )
        self.writer = _SegmentWriter(
            self.wal_dir / seg.segment_name(sequence), header, self.opts, defer_sync=defer_sync
        )
        self.writer_seq = sequence

    # ------------------------------------------------------------ used by the appender
    def write_locked(self, record: bytes, first: int, last: int, count: int) -> None:
        if self.closed or self.writer is None:
            raise OSError(f"WAL of tablet {self.tablet_id} is closed")
        if self.writer.offset + len(record) > self.opts.segment_size_bytes_max and (
            self.writer.num_entries > 0
        ):
            self._roll_locked()
        self.writer.write(record, first, last, count)

    def _roll_locked(self) -> None:
        w = self.writer
        assert w is not None
        w.close()
        self.segments.append(_SegmentInfo(self.writer_seq, w.path, w.min_index, w.max_index))
        self._new_segment(self.writer_seq + 1)

    def sync_locked(self) -> None:
        if self.writer is not None and self.opts.sync:
            self.writer.sync()

    # ------------------------------------------------------------ maintenance
    def gc(self, flushed_index: int) -> int:
        """Delete closed segments whose entries are all <= flushed_index. Returns how many."""
        with self.lock:
            keep, drop = [], []
            for s in self.segments:
                (drop if s.max_index <= flushed_index else keep).append(s)
            # Segments are contiguous in index: stop at the first we must keep.
            for s in drop:
                s.path.unlink(missing_ok=True)
            self.segments = keep
        if drop:
            fsync_dir(self.wal_dir)
            log.info(
                "tablet %s: deleted %d WAL segments <= %d", self.tablet_id, len(drop), flushed_index
            )
        return len(drop)

    def read_entries(self, from_index: int, entries_max: int = 10_000) -> list[LogEntryPB]:
        """Durable-or-written entries with index >= from_index, in order (at most entries_max).

        For peers that need entries (the replication issue) and for tools. Reads closed
        segments and the open one up to what has been written; never blocks the appender
        for longer than taking a snapshot of the segment list."""
        assert entries_max > 0
        with self.lock:
            closed = [s for s in self.segments if s.max_index >= from_index or s.max_index == 0]
            current = (self.writer.path, self.writer.offset) if self.writer else None
        # A Raft conflict truncation is written as entries that restart at a lower index:
        # read everything from from_index on, let later records replace the suffix, then cut.
        out: list[LogEntryPB] = []
        for s in closed:
            for e in seg.read_segment(s.path, is_last=False).entries:
                _append_replacing(out, e, s.path)
        if current is not None:
            path, offset = current
            with open(path, "rb") as f:
                data = f.read(offset)
            for e in seg.decode_segment(path, data, is_last=True).entries:
                _append_replacing(out, e, path)
        out = [e for e in out if e.index >= from_index]
        return out[:entries_max]

    def segment_count(self) -> int:
        with self.lock:
            return len(self.segments) + (1 if self.writer else 0)

    def close(self, *, sync: bool = True) -> None:
        """Close the segment being written (its footer: `_SegmentWriter.close`)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            if self.writer is not None:
                self.writer.close(sync=sync)
                self.writer = None


def _append_replacing(entries: list[LogEntryPB], e: LogEntryPB, path: Path) -> None:
    """Add `e` to a log read in order. An entry whose index is at or below the last one is
    a Raft conflict truncation written by the replication driver: it replaces that index and
    everything after it. A gap is corruption."""
    if entries:
        first = entries[0].index
        last = entries[-1].index
        if e.index > last + 1:
            raise WalCorruption(path, 0, f"index {e.index} follows {last} (gap)")
        if e.index <= last:
            if e.index < first:
                raise WalCorruption(
                    path, 0, f"index {e.index} truncates below the first entry {first}"
                )
            del entries[e.index - first :]
    entries.append(e)


Callback = Callable[[Exception | None], None]


@dataclass(slots=True)
class _Item:
    tablet_log: TabletLog
    record: bytes
    first: int
    last: int
    count: int
    callback: Callback


class Appender:
    """One thread per server: drains a bounded queue, one sync per touched segment per group."""

    def __init__(self, opts: WalOptions) -> None:
        self.opts = opts
        self._q: queue.Queue[_Item | None] = queue.Queue(maxsize=opts.queue_entries_max)
        self.groups = 0
        self.syncs = 0
        self.records = 0
        self.entries = 0
        # Metrics, written by the appender thread and its sync threads (under the lock).
        self._metrics_lock = threading.Lock()
        self.sync_latency = LatencyHistogram()
        self.group_records = LatencyHistogram(GROUP_RECORDS_BUCKETS)
        self._closed = False
        assert 1 <= opts.sync_threads <= 64, opts.sync_threads
        # Started on the first group that touches several segments.
        self._sync_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._thread = threading.Thread(target=self._run, name="wal-appender", daemon=True)
        self._thread.start()

    def append(
        self,
        tablet_log: TabletLog,
        entries: list[LogEntryPB],
        callback: Callback,
        *,
        block: bool = True,
    ) -> None:
        """Queue entries (already numbered, in index order for the tablet).

        Raises TimeoutError when the queue stays full (at once with block=False) and OSError
        when the appender is closed."""
        record = seg.encode_batch(entries)
        if self._closed:
            raise OSError("WAL appender is closed")
        item = _Item(
            tablet_log, record, entries[0].index, entries[-1].index, len(entries), callback
        )
        try:
            if block:
                self._q.put(item, timeout=self.opts.enqueue_timeout_s)
            else:
                self._q.put_nowait(item)
        except queue.Full as e:
            raise TimeoutError("WAL queue is full") from e

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            group = [item]
            stop = False
            while len(group) < self.opts.group_records_max:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                group.append(nxt)
            results: list[Exception | None] = [None] * len(group)
            touched: dict[int, TabletLog] = {}
            for i, it in enumerate(group):
                tl = it.tablet_log
                if tl.failed is not None:
                    results[i] = tl.failed
                    continue
                try:
                    with tl.lock:
                        tl.write_locked(it.record, it.first, it.last, it.count)
                    touched[id(tl)] = tl
                except Exception as e:  # disk errors, and bugs: the tablet fails, not the server
                    log.error("WAL write failed for tablet %s: %s", tl.tablet_id, e)
                    tl.failed = e
                    results[i] = e
            crash_point("wal.after_append_before_sync")
            self.group_records.observe(len(group))
            if len(touched) > 1 and self.opts.sync and self.opts.sync_threads > 1:
                if self._sync_pool is None:
                    self._sync_pool = concurrent.futures.ThreadPoolExecutor(
                        self.opts.sync_threads, "wal-sync"
                    )
                # Every sync is done (or failed) before any callback runs, as below.
                for f in [self._sync_pool.submit(self._sync, tl) for tl in touched.values()]:
                    f.result()
            else:
                for tl in touched.values():
                    self._sync(tl)
            for i, it in enumerate(group):
                err = results[i] or it.tablet_log.failed
                self.records += 1
                self.entries += it.count
                try:
                    it.callback(err)
                except Exception:  # a callback bug must not kill the appender
                    log.exception("WAL completion callback failed")
            self.groups += 1
            if stop:
                return

    def _sync(self, tl: TabletLog) -> None:
        """Sync one touched segment; a failure fails its tablet (the caller reports it)."""
        try:
            with tl.lock:
                started = time.monotonic()
                tl.sync_locked()
                synced_s = time.monotonic() - started
            if self.opts.sync:
                with self._metrics_lock:
                    self.syncs += 1
                    self.sync_latency.observe(synced_s)
        except Exception as e:
            log.error("WAL sync failed for tablet %s: %s", tl.tablet_id, e)
            tl.failed = e

    def close(self, timeout_s: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._q.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)
        if self._sync_pool is not None:  # idle once the appender thread has ended
            self._sync_pool.shutdown(wait=not self._thread.is_alive())
