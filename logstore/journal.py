"""logstore's durable Raft journal: a pysyncobj Journal with CRCs, group commit and fsync.

pysyncobj 0.3.17's FileJournal never fsyncs and has no checksums. This journal replaces it
(pysyncobj gets it through logstore.replicated; see design/logstore.md for the hook):

- `add()` only buffers the record in memory; `sync()` writes every buffered record with one
  write and one fdatasync (group commit). The replica calls `sync()` before it sends any
  message and at the start of every tick, so nothing leaves a replica, and the leader
  counts no entry of its own toward a commit, before that entry is on stable storage.
- Record: u32 payload length (bit 31: first record of its group commit), u32 CRC32C of the
  payload, payload = u64 index, u64 term, command bytes. At open, a torn tail is cut off:
  what the last group commit, never fdatasynced, left behind. That is a short record or a
  bad CRC with nothing valid after it; or a hole (a whole zeroed 512 B sector: a piece of
  the write that never reached the disk, as one write of more than 128 KiB through FUSE,
  or pages written back out of order, can leave) followed by valid records of the same
  group commit only. A damaged record followed by the first record of a later group commit
  (whose write came after this one's fdatasync returned: it was acknowledged), or by valid
  records with no hole between, is corruption and the replica refuses to start (another
  replica must be used to rebuild it). Version 1 files (no group marks) read the same.
- Term, vote and commit index live in a small meta file written to a temp file, fsynced,
  renamed and the directory fsynced; term and vote are stored before any vote is sent.
- `clear()` rewrites the journal the same atomic way. Trimming behind a snapshot
  (`deleteEntriesTo`) drops the entries from memory at once and leaves the file work to a
  thread of its own (`_Trim`): it copies the kept records into a new file while the old
  one stays the journal, the tick thread then writes each group commit to both files
  until the new one is renamed into place and the directory fsynced, and the old file is
  closed (its blocks freed) on that thread too. At every step the file at the journal's
  name holds every synced record (the old one keeps the covered prefix too, which
  `align_to_snapshot` drops at the next open).
"""

from __future__ import annotations

import logging
import os
import queue
import struct
import threading
import time
from dataclasses import dataclass

import crc32c
from pysyncobj.journal import Journal

from rpc.errors import Corruption
from rpc.observe import LatencyHistogram

logger = logging.getLogger(__name__)

JOURNAL_MAGIC = b"LSJRNL01"
META_MAGIC = b"LSMETA01"
FORMAT_VERSION = 2  # 2: bit 31 of a record's length marks a group commit's first
READ_VERSIONS = (1, 2)
HEADER = struct.Struct("<8sI")  # magic, version
HEADER_SIZE = HEADER.size
RECORD_HEAD = struct.Struct("<II")  # payload length, crc32c(payload)
ENTRY_HEAD = struct.Struct("<QQ")  # index, term
RECORD_PAYLOAD_BYTES_MAX = 256 << 20
GROUP_START = 1 << 31  # in the length word; the CRC covers the payload only
SECTOR_BYTES = 512
META_BODY = struct.Struct("<QQH")  # term, commit index, voted-for length
# Records written per group commit (one write, one fdatasync), for the metrics.
GROUP_COMMIT_RECORDS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


def encode_record(command: bytes, idx: int, term: int) -> bytes:
    payload = ENTRY_HEAD.pack(idx, term) + bytes(command)
    assert len(payload) <= RECORD_PAYLOAD_BYTES_MAX, len(payload)
    return RECORD_HEAD.pack(len(payload), crc32c.crc32c(payload)) + payload


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Records decoded from a journal image and where the valid prefix ends."""

    entries: list[tuple[bytes, int, int]]
    offsets: list[int]
    valid_end: int
    torn_bytes: int
    # Valid records of the torn group commit found past a hole, dropped with the tail.
    dropped_past_hole: int = 0


def _record_at(buf: bytes | memoryview, off: int) -> tuple[int, bytes, bool] | None:
    """(end offset, payload, first of its group commit) of a valid record at `off`, else None."""
    if off + RECORD_HEAD.size > len(buf):
        return None
    word, crc = RECORD_HEAD.unpack_from(buf, off)
    length = word & ~GROUP_START
    if length < ENTRY_HEAD.size or length > RECORD_PAYLOAD_BYTES_MAX:
        return None
    end = off + RECORD_HEAD.size + length
    if end > len(buf):
        return None
    payload = bytes(buf[off + RECORD_HEAD.size : end])
    if crc32c.crc32c(payload) != crc:
        return None
    return end, payload, bool(word & GROUP_START)


def scan_journal(buf: bytes) -> ScanResult:
    """Decode a whole journal file image (pure). Raises Corruption for damage that is not a
    torn tail: a bad header, a bad record followed by a valid one that a torn last group
    commit cannot explain, or non-contiguous indexes."""
    if len(buf) < HEADER_SIZE:
        # A crash while the file was being created: nothing was ever acknowledged from it.
        return ScanResult([], [], 0, len(buf))
    magic, version = HEADER.unpack_from(buf, 0)
    if magic != JOURNAL_MAGIC or version not in READ_VERSIONS:
        raise Corruption(f"journal header is not {JOURNAL_MAGIC!r} v{FORMAT_VERSION}")
    view = memoryview(buf)
    off = HEADER_SIZE
    entries: list[tuple[bytes, int, int]] = []
    offsets: list[int] = []
    dropped = 0
    while off < len(buf):
        rec = _record_at(view, off)
        if rec is None:
            dropped = _check_torn_tail(view, off)
            break
        end, payload, _start = rec
        idx, term = ENTRY_HEAD.unpack_from(payload, 0)
        if entries and idx != entries[-1][1] + 1:
            raise Corruption(f"journal index {idx} at offset {off} follows {entries[-1][1]}")
        entries.append((payload[ENTRY_HEAD.size :], idx, term))
        offsets.append(off)
        off = end
    return ScanResult(entries, offsets, off, len(buf) - off, dropped)


def _has_zero_sector(view: memoryview, start: int, end: int) -> bool:
    """Whether [start, end) holds a whole sector-aligned run of SECTOR_BYTES zeros."""
    first = -(-start // SECTOR_BYTES) * SECTOR_BYTES
    zeros = bytes(SECTOR_BYTES)
    for sector in range(first, end - SECTOR_BYTES + 1, SECTOR_BYTES):
        if view[sector : sector + SECTOR_BYTES] == zeros:
            return True
    return False


def _check_torn_tail(view: memoryview, off: int) -> int:
    """Whether the damage at `off` is the torn tail of the last group commit; raises
    Corruption if not, else returns how many valid records lie past it (dropped with it).

    Only the last group commit can be torn: each one is written after the previous one's
    fdatasync returned. So the tail is torn if nothing valid follows, or if what follows
    is a hole (a zeroed sector: never written) and then only records of the same group
    commit (none marked as a group's first). Probes every later offset (bounded by the
    file), jumping over the records it finds."""
    probe = off + 1
    limit = len(view) - RECORD_HEAD.size - ENTRY_HEAD.size
    first_valid = None
    valid = 0
    while probe <= limit:
        rec = _record_at(view, probe)
        if rec is None:
            probe += 1
            continue
        end, _payload, start = rec
        if start:
            raise Corruption(
                f"journal record at offset {off} is damaged but a later group commit "
                f"follows at {probe}"
            )
        if first_valid is None:
            first_valid = probe
            if not _has_zero_sector(view, off, probe):
                raise Corruption(
                    f"journal record at offset {off} is damaged but a valid record follows "
                    f"at {probe}"
                )
        valid += 1
        probe = end
    return valid


# Test-only: "1" makes sync() skip its fdatasync, so records are acknowledged while only in
# the page cache. Read once per journal at open. Never set it outside the power-loss tests.
UNSAFE_NO_FDATASYNC_ENV = "LOGSTORE_TEST_UNSAFE_NO_FDATASYNC"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes, off: int) -> int:
    """Write all of `data` at `off`; the offset after it."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, off)
        view = view[n:]
        off += n
    return off


def write_file_atomically(path: str, data: bytes) -> None:
    """temp file, fsync, rename, directory fsync."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def encode_meta(term: int, commit_index: int, voted_for: str | None) -> bytes:
    voted = (voted_for or "").encode()
    body = META_BODY.pack(term, commit_index, len(voted)) + voted
    return META_MAGIC + struct.pack("<II", len(body), crc32c.crc32c(body)) + body


def decode_meta(buf: bytes) -> tuple[int, int, str | None]:
    if len(buf) < 16 or buf[:8] != META_MAGIC:
        raise Corruption("journal meta file has a bad header")
    length, crc = struct.unpack_from("<II", buf, 8)
    body = buf[16 : 16 + length]
    if len(body) != length or crc32c.crc32c(body) != crc:
        raise Corruption("journal meta file fails its CRC")
    term, commit, vlen = META_BODY.unpack_from(body, 0)
    voted = body[META_BODY.size : META_BODY.size + vlen].decode() or None
    return term, commit, voted


# Bytes copied per read/write by a background trim (_Trim).
TRIM_COPY_BYTES = 1 << 20
# How long close() waits for a background trim's last steps.
TRIM_JOIN_S = 30.0
TRIM_THREAD_NAME = "logstore-journal-trim"


class _Trim:
    """One trim of the journal file behind a snapshot, done off the tick thread.

    The tick thread has already dropped the covered entries from memory; on disk the old
    file stays the journal, and the tick thread keeps appending to it, until the new file
    is durably in place:

    1. copy (this thread): the old file's bytes from the first kept record up to its
       written end at the start go to `journal.tmp` after a new header (the first record
       marked as a group commit's first), then fsync. The old file is read through the
       tick thread's descriptor (pread: the tick thread only writes past that end).
    2. switch (tick thread, at its next sync, `DurableJournal._advance_trim`): the bytes
       written to the old file since step 1 are copied too, and from then on every group
       commit is written to both files and both are fdatasynced before `sync()` returns.
    3. rename (this thread): fsync the new file (what step 2 copied), rename it over the
       journal, fsync the directory.
    4. adopt (tick thread, at its next sync): the new file becomes the journal (offsets
       moved by `delta`), the old one stops being written; this thread then closes it
       (the last descriptor of a renamed-over file: its blocks are freed now) and frees
       the dropped entries.

    A crash at any point leaves at the journal's name either the old file (every synced
    record, plus the covered prefix) or the new one (every synced record: it is fsynced
    before the rename, and written and fdatasynced with the old one afterwards)."""

    COPYING = 0
    COPIED = 1  # step 1 done: the tick thread switches
    RENAMED = 2  # step 3 done: the tick thread adopts the new file
    FAILED = 3
    CANCELLED = 4

    __slots__ = (
        "path",
        "directory",
        "src_fd",
        "start",
        "copy_end",
        "delta",
        "dropped",
        "tmp_fd",
        "state",
        "switched",
        "cancelled",
        "go",
        "released",
        "done",
        "finished",
        "records",
    )

    def __init__(
        self, path: str, directory: str, src_fd: int, start: int, copy_end: int, dropped, records
    ) -> None:
        self.path = path
        self.directory = directory
        self.src_fd = src_fd
        self.start = start  # old file offset of the first kept record
        self.copy_end = copy_end  # old file offset step 1 copies up to
        self.delta = HEADER_SIZE - start  # new offset = old offset + delta
        self.dropped = dropped  # the entries dropped from memory (freed here, not on the tick)
        self.records = records  # kept records at the start (stats)
        self.tmp_fd: int | None = None
        self.state = _Trim.COPYING
        self.switched = False  # set by the tick thread in step 2
        self.cancelled = False
        self.go = threading.Event()  # step 2 done (or cancelled)
        self.released = threading.Event()  # step 4 done: the old file may be closed
        self.done = threading.Event()  # RENAMED, FAILED or CANCELLED reached
        self.finished = threading.Event()  # run() has returned: nothing of it is left

    def run(self) -> None:
        """On the journal's trim thread (_TrimWorker)."""
        try:
            self._run()
        finally:
            self.finished.set()

    def _copy(self, dst: int, src_from: int, src_to: int) -> None:
        """Old file [src_from, src_to) into the new one at the same offsets + delta."""
        off = src_from
        while off < src_to:
            if self.cancelled:
                return
            chunk = os.pread(self.src_fd, min(TRIM_COPY_BYTES, src_to - off), off)
            if not chunk:
                raise OSError(f"journal ends at {off} before {src_to} while trimming")
            if off == self.start:
                # The new file's first record starts a group commit (as _rewrite marks it).
                chunk = bytearray(chunk)
                chunk[3] |= GROUP_START >> 24
            view = memoryview(chunk)
            at = off + self.delta
            while view:
                n = os.pwrite(dst, view, at)
                view = view[n:]
                at += n
            off += len(chunk)

    def _run(self) -> None:
        tmp = self.path + ".tmp"
        try:
            # The snapshot's rename durable before a journal without the prefix can be.
            fsync_dir(self.directory)
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            self.tmp_fd = fd
            os.pwrite(fd, HEADER.pack(JOURNAL_MAGIC, FORMAT_VERSION), 0)
            self._copy(fd, self.start, self.copy_end)
            os.fsync(fd)
            if self.cancelled:
                raise _TrimCancelled
            self.state = _Trim.COPIED
            self.go.wait()
            if self.cancelled:
                raise _TrimCancelled
            os.fsync(fd)  # what the switch copied; later writes are fdatasynced by sync()
            os.replace(tmp, self.path)
        except _TrimCancelled:
            self._drop_tmp(tmp)
            self.state = _Trim.CANCELLED
            self.done.set()
            return
        except Exception:  # noqa: BLE001 - the old file stays the journal
            logger.exception("journal %s: background trim failed; the old file stays", self.path)
            self._drop_tmp(tmp)
            self.state = _Trim.FAILED
            self.done.set()
            return
        try:
            fsync_dir(self.directory)
        except OSError:
            # The new file is at the name now and holds every synced record: it stays the
            # journal (the tick thread keeps writing the old one only until it adopts it).
            logger.critical("journal %s: directory fsync after the trim failed", self.path)
        self.state = _Trim.RENAMED
        self.done.set()
        self.released.wait()
        os.close(self.src_fd)
        dropped, self.dropped = self.dropped, None
        while dropped:
            del dropped[-64:]  # big batch commands: freed a few at a time
            time.sleep(0)

    def _drop_tmp(self, tmp: str) -> None:
        """After a cancel or a failure: the new file goes. Once switched, the tick thread
        still writes to its descriptor and closes it itself (when it sees FAILED)."""
        if self.tmp_fd is not None and not self.switched:
            os.close(self.tmp_fd)
            self.tmp_fd = None
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


class _TrimCancelled(Exception):
    pass


class _TrimWorker:
    """The journal's trim thread, started with the journal: starting a thread for each
    trim made the tick thread wait for it (`Thread.start()` returns only once the new
    thread runs: 68 ms once on the loaded machine)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[_Trim | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=TRIM_THREAD_NAME, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (trim := self._jobs.get()) is not None:
            trim.run()

    def submit(self, trim: _Trim) -> None:
        self._jobs.put(trim)

    def close(self, timeout_s: float) -> None:
        self._jobs.put(None)
        self._thread.join(timeout_s)


@dataclass(frozen=True, slots=True)
class JournalStats:
    entries: int
    first_index: int
    last_index: int
    file_bytes: int
    syncs: int
    records_written: int
    torn_bytes_cut: int


class DurableJournal(Journal):
    """The journal pysyncobj reads and writes from its tick thread only."""

    def __init__(self, directory: str) -> None:
        self._dir = directory
        os.makedirs(directory, exist_ok=True)
        # Its own entry too: a power loss takes a directory whose parent was never fsynced.
        fsync_dir(os.path.dirname(os.path.abspath(directory)))
        self._path = os.path.join(directory, "journal")
        self._meta_path = os.path.join(directory, "journal.meta")
        self._entries: list[tuple[bytes, int, int]] = []
        self._offsets: list[int] = []
        self._pending = bytearray()
        self._needs_sync = False
        self._syncs = 0
        self._records_written = 0
        # Written by sync() only, on pysyncobj's tick thread: one writer, no lock.
        self.sync_latency = LatencyHistogram()
        self.group_commit_records = LatencyHistogram(GROUP_COMMIT_RECORDS_BUCKETS)
        self._term = 0
        self._voted_for: str | None = None
        self._commit_index = 1
        self._commit_saved = 1
        self._closed = False
        # A trim behind a snapshot whose file work runs on the trim thread (_Trim).
        self._trim: _Trim | None = None
        self._trim_worker: _TrimWorker | None = None
        # Test-only broken build (tests/nemesis/test_power.py): acknowledge before fsync.
        self._unsafe_no_fdatasync = os.environ.get(UNSAFE_NO_FDATASYNC_ENV) == "1"
        if os.path.exists(self._meta_path):
            with open(self._meta_path, "rb") as f:
                self._term, self._commit_index, self._voted_for = decode_meta(f.read())
            self._commit_saved = self._commit_index
        self.torn_bytes_cut = 0
        if os.path.exists(self._path):
            with open(self._path, "rb") as f:
                image = f.read()
            scan = scan_journal(image)
            self._entries = scan.entries
            self._offsets = scan.offsets
            self.torn_bytes_cut = scan.torn_bytes
            if scan.valid_end < HEADER_SIZE:
                self._rewrite([])
            else:
                self._fd = os.open(self._path, os.O_RDWR)
                if scan.torn_bytes:
                    logger.warning(
                        "journal %s: cut a torn tail of %d bytes at offset %d "
                        "(%d records of the unsynced group commit past a hole)",
                        self._path,
                        scan.torn_bytes,
                        scan.valid_end,
                        scan.dropped_past_hole,
                    )
                    os.ftruncate(self._fd, scan.valid_end)
                    os.fsync(self._fd)
                self._end = scan.valid_end
        else:
            self._rewrite([])
        # Started now, not at the first trim: on the tick thread, Thread.start() waits
        # for the new thread to run.
        self._trim_worker = _TrimWorker()
        logger.info(
            "journal %s: %d entries, term %d, commit %d",
            self._path,
            len(self._entries),
            self._term,
            self._commit_index,
        )

    # --- pysyncobj Journal interface -------------------------------------------------------

    def add(self, command, idx, term):
        command = bytes(command)
        if self._entries:
            assert idx == self._entries[-1][1] + 1, (idx, self._entries[-1][1])
        self._offsets.append(self._end + len(self._pending))
        self._pending += encode_record(command, idx, term)
        self._entries.append((command, idx, term))

    def clear(self):
        self._settle_trim()
        self._rewrite([])

    def deleteEntriesFrom(self, entryFrom):
        """Drop the entries at positions >= entryFrom (a follower's conflicting suffix)."""
        if entryFrom >= len(self._entries):
            return
        self._settle_trim()
        cut = self._offsets[entryFrom]
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]
        if cut >= self._end:
            del self._pending[cut - self._end :]
            return
        self._pending.clear()
        os.ftruncate(self._fd, cut)
        self._end = cut
        self._needs_sync = True

    def deleteEntriesTo(self, entryTo):
        """Drop the entries at positions < entryTo: they are covered by a snapshot that
        pysyncobj has just renamed into place. In memory now; the file is rewritten by a
        thread of its own (_Trim), which first fsyncs the directory (the snapshot's rename
        durable before the trimmed journal can be). The tick thread only moves lists."""
        if entryTo <= 0:
            return
        self._settle_trim()
        if self._closed:
            return
        start = (
            self._offsets[entryTo]
            if entryTo < len(self._offsets)
            else self._end + len(self._pending)
        )
        dropped = self._entries[:entryTo]
        del self._entries[:entryTo]
        del self._offsets[:entryTo]
        trim = _Trim(
            self._path,
            self._dir,
            self._fd,
            start,
            max(start, self._end),
            dropped,
            len(self._entries),
        )
        self._trim = trim
        if self._trim_worker is None:  # closed and reopened? (started at open)
            self._trim_worker = _TrimWorker()
        self._trim_worker.submit(trim)

    def trim_settled(self, timeout_s: float = TRIM_JOIN_S) -> bool:
        """Drive a background trim to its end from the journal's own thread (as its
        syncs would) and wait for it; True once none is left. Tests and tools: the
        replica never waits for a trim."""
        deadline = time.monotonic() + timeout_s
        while self._trim is not None:
            trim = self._trim
            self._advance_trim()
            if self._trim is not None and trim.done.wait(0.005):
                self._settle_trim(max(0.0, deadline - time.monotonic()))
            if self._trim is not None and time.monotonic() > deadline:
                return False
        return True

    def _trim_now(self, entryTo: int) -> None:
        """deleteEntriesTo in place (at open: align_to_snapshot)."""
        self._settle_trim()
        fsync_dir(self._dir)
        self._rewrite(self._entries[entryTo:])

    def align_to_snapshot(self, prev_entry, last_entry) -> bool:
        """A snapshot covering up to `last_entry` is about to be loaded. If this journal
        holds the snapshot's two entries (same index, term and command), drop what comes
        before them, so the journal starts exactly where pysyncobj expects, and keep the
        entries after them. True if it did (or nothing was needed).

        Needed after a crash between pysyncobj's rename of a new snapshot and the next
        tick's trim: pysyncobj clears a journal whose first two entries are not the
        snapshot's, which would drop entries this replica had made durable and
        acknowledged after the snapshot point."""
        if len(self._entries) < 2:
            return False
        pos = prev_entry[1] - self._entries[0][1]
        if pos < 0 or pos + 1 >= len(self._entries):
            return False
        if tuple(self._entries[pos]) != tuple(prev_entry):
            return False
        if tuple(self._entries[pos + 1]) != tuple(last_entry):
            return False
        if pos > 0:
            logger.warning(
                "journal %s: trimming %d entries covered by the snapshot at index %d "
                "(a crash came between the snapshot and the trim)",
                self._path,
                pos,
                last_entry[1],
            )
            self._trim_now(pos)
        return True

    def __getitem__(self, item):
        return self._entries[item]

    def __len__(self):
        return len(self._entries)

    def _destroy(self):
        self.close()

    def setRaftCommitIndex(self, raftCommitIndex):
        # Lazily saved (onOneSecondTimer): a stale commit index only delays applying entries
        # until the leader repeats it; it is clamped to the journal end when read.
        self._commit_index = raftCommitIndex

    def getRaftCommitIndex(self):
        last = self._entries[-1][1] if self._entries else 1
        return max(1, min(self._commit_index, last))

    def setCurrentTerm(self, term, votedForNodeId):
        self._term = term
        self._voted_for = votedForNodeId
        self._save_meta()

    def getCurrentTerm(self):
        return self._term

    def getVotedForNodeId(self):
        return self._voted_for

    def onOneSecondTimer(self):
        if self._commit_index != self._commit_saved and not self._closed:
            self._save_meta()

    # --- durability ------------------------------------------------------------------------

    def sync(self) -> bool:
        """Group commit: write every buffered record and fdatasync once. True if it synced.
        While a background trim has switched (_Trim, step 2), the records go to both files
        and both are fdatasynced."""
        if self._trim is not None and not self._closed:
            self._advance_trim()
        if self._closed or (not self._pending and not self._needs_sync):
            return False
        records = 0
        trim = self._trim
        mirror = trim.tmp_fd if trim is not None and trim.switched else None
        mirrored = False
        if self._pending:
            # The first record of this write marks a group commit: one after it proves
            # this one was fdatasynced (see _check_torn_tail).
            self._pending[3] |= GROUP_START >> 24
            data = bytes(self._pending)
            off = _pwrite_all(self._fd, data, self._end)
            if mirror is not None:
                _pwrite_all(mirror, data, self._end + trim.delta)
                mirrored = True
            records = self._pending_records()
            self._records_written += records
            self._end = off
            self._pending.clear()
        started = time.monotonic()
        if not self._unsafe_no_fdatasync:
            os.fdatasync(self._fd)
            if mirrored:
                os.fdatasync(mirror)
        self.sync_latency.observe(time.monotonic() - started)
        self.group_commit_records.observe(records)
        self._needs_sync = False
        self._syncs += 1
        return True

    def has_unsynced(self) -> bool:
        return bool(self._pending) or self._needs_sync

    def last_index(self) -> int:
        return self._entries[-1][1] if self._entries else 0

    def stats(self) -> JournalStats:
        return JournalStats(
            entries=len(self._entries),
            first_index=self._entries[0][1] if self._entries else 0,
            last_index=self.last_index(),
            file_bytes=self._end + len(self._pending),
            syncs=self._syncs,
            records_written=self._records_written,
            torn_bytes_cut=self.torn_bytes_cut,
        )

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._settle_trim(TRIM_JOIN_S)
            if self._trim_worker is not None:
                self._trim_worker.close(TRIM_JOIN_S)
            self.sync()
            if self._commit_index != self._commit_saved:
                self._save_meta()
        finally:
            self._closed = True
            os.close(self._fd)

    # --- internals -------------------------------------------------------------------------

    def _advance_trim(self) -> None:
        """Tick thread, at every sync: move a background trim on (its steps 2 and 4)."""
        trim = self._trim
        assert trim is not None
        state = trim.state
        if state == _Trim.COPIED and not trim.switched:
            # Step 2: the records written since the copy, then both files from now on.
            assert trim.tmp_fd is not None
            trim._copy(trim.tmp_fd, trim.copy_end, max(trim.copy_end, self._end))
            trim.switched = True
            trim.go.set()
        elif state == _Trim.RENAMED:
            self._adopt_trim(trim)
        elif state in (_Trim.FAILED, _Trim.CANCELLED):
            self._drop_trim(trim)

    def _adopt_trim(self, trim: _Trim) -> None:
        """Step 4: the renamed file is the journal now."""
        assert trim.tmp_fd is not None
        delta = trim.delta
        self._offsets = [off + delta for off in self._offsets]
        self._end += delta
        self._fd = trim.tmp_fd
        self._records_written += trim.records
        self._trim = None
        trim.released.set()  # the trim's thread closes the old file

    def _settle_trim(self, timeout_s: float | None = None) -> None:
        """Before any other change of the file: a trim still copying is cancelled (the old
        file stays, with the prefix); one that has switched is waited for and adopted."""
        trim = self._trim
        if trim is None:
            return
        if not trim.switched:
            trim.cancelled = True
            trim.go.set()
        if not trim.done.wait(timeout_s):
            logger.error("journal %s: background trim still running", self._path)
            return
        if trim.state == _Trim.RENAMED:
            self._adopt_trim(trim)
            trim.finished.wait(timeout_s)  # it closes the old file: short
        else:
            self._drop_trim(trim)

    def _drop_trim(self, trim: _Trim) -> None:
        """A trim that failed or was cancelled: the old file stays the journal."""
        self._trim = None
        trim.finished.wait()  # past its last step (done is set after its cleanup)
        if trim.switched and trim.tmp_fd is not None:
            os.close(trim.tmp_fd)  # written by sync() until now
            trim.tmp_fd = None

    def _pending_records(self) -> int:
        # Records still buffered are the ones whose offset is at or past the written end.
        n = 0
        for off in reversed(self._offsets):
            if off < self._end:
                break
            n += 1
        return n

    def _save_meta(self) -> None:
        write_file_atomically(
            self._meta_path, encode_meta(self._term, self._commit_index, self._voted_for)
        )
        self._commit_saved = self._commit_index

    def _rewrite(self, entries: list[tuple[bytes, int, int]]) -> None:
        """Replace the journal file with exactly `entries`, atomically and durably."""
        out = bytearray(HEADER.pack(JOURNAL_MAGIC, FORMAT_VERSION))
        offsets = []
        for command, idx, term in entries:
            offsets.append(len(out))
            out += encode_record(command, idx, term)
        if entries:
            out[HEADER_SIZE + 3] |= GROUP_START >> 24
        old_fd = getattr(self, "_fd", None)
        write_file_atomically(self._path, bytes(out))
        if old_fd is not None:
            os.close(old_fd)
        self._fd = os.open(self._path, os.O_RDWR)
        self._entries = list(entries)
        self._offsets = offsets
        self._end = len(out)
        self._pending.clear()
        self._needs_sync = False
        self._records_written += len(entries)
