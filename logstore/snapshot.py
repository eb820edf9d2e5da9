"""Snapshot file codec, its background writer, and the pysyncobj hooks that write and read it.

A snapshot holds the live entries of every log (never invalidated ones), the two Raft
entries pysyncobj keeps at the head of the journal after compaction, and the cluster
membership. Format (no pickle: snapshots travel between replicas):

    magic "LSSNAP01", u32 version, u64 body length, u32 CRC32C(body), body
    body: entry(prev), entry(last), u32 members, members..., u32 logs, logs...
    entry: u64 index, u64 term, u32 length, command bytes
    member: u16 length, address bytes
    version 2 (written), one log in columns so that it is written and loaded in bulk:
      u16 name length, name, u64 last id, u64 live count n, n x u64 id,
      n x u32 data length, n x u32 invalidated count, (sum of those) x u64 invalidated id,
      the n entries' data one after the other
    version 1 (still read): u16 name length, name, u64 last id, u64 live count,
         live count x (u64 id, u32 data length, data, u32 n, n x u64 invalidated id)

Compaction runs off the tick thread (design/logstore.md, "compaction off the tick
thread"): on the tick thread, under the state lock, `SnapshotHooks.start_write` takes a
consistent copy (`LogState.capture`, copy on write of the state's pages); a writer thread
encodes it, writes a temp file, fsyncs it, renames it over the snapshot and fsyncs the
directory; pysyncobj learns of it at a later tick (`BackgroundSerializer.checkSerializing`)
and only then trims the journal.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import queue
import struct
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import chain, islice
from operator import attrgetter, lt

import crc32c
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.node import TCPNode
from pysyncobj.serializer import Serializer

from logstore.api import Entry
from logstore.journal import DurableJournal, fsync_dir
from logstore.state import (
    PAGE_ID_BITS,
    LiveEntries,
    LoadedPage,
    LogCopy,
    LogState,
    StateCopy,
)
from rpc.errors import Corruption

logger = logging.getLogger(__name__)

SNAPSHOT_MAGIC = b"LSSNAP01"
SNAPSHOT_VERSION = 2  # written; 1 is still read
SNAPSHOT_VERSIONS_READ = (1, 2)
SNAP_HEADER = struct.Struct("<8sIQI")
RaftEntry = tuple[bytes, int, int]
_RAFT_ENTRY_HEAD = struct.Struct("<QQI")  # index, term, command length (see _put_entry)
# The background encode works in slices of this many entries and pauses this long after
# each one (1M entries: ~1,000 pauses).
ENCODE_SLICE_ENTRIES = 1024
WRITER_PAUSE_S = 0.0001
# The writer hands the snapshot file to the disk a chunk at a time as it writes it
# (sync_file_range), and waits for the chunk before the last: at most two chunks are ever
# in the device queue. Written whole and then fsynced, an 80 MB snapshot held a concurrent
# journal fdatasync on the same ext4 file system for up to 95-146 ms (data=ordered: the
# journal's commit waits for the data of the other files being written back).
WRITE_CHUNK_BYTES = 1 << 20
# Dict pages whose columns the writer hands to the state per hold of its lock.
ADOPT_PAGES_PER_LOCK = 256
# Dict pages (up to 4,096 entries each) the writer frees between two pauses.
FREE_PAGES_PER_SLICE = 2
# A writer not finished this long after close() is left behind (it is a daemon thread; the
# journal is not trimmed, so nothing is lost).
WRITER_JOIN_S = 30.0

assert array("I").itemsize == 4 and array("Q").itemsize == 8
_BIG_ENDIAN = sys.byteorder == "big"


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    last_entry: RaftEntry
    prev_entry: RaftEntry
    members: tuple[str, ...]


def _put_entry(out: bytearray, entry: RaftEntry) -> None:
    command, idx, term = entry
    out += struct.pack("<QQI", idx, term, len(command))
    out += bytes(command)


def _head(meta: SnapshotMeta, n_logs: int) -> bytes:
    body = bytearray()
    _put_entry(body, meta.prev_entry)
    _put_entry(body, meta.last_entry)
    body += struct.pack("<I", len(meta.members))
    for m in meta.members:
        raw = m.encode()
        body += struct.pack("<H", len(raw)) + raw
    body += struct.pack("<I", n_logs)
    return bytes(body)


_data_of = attrgetter("data")
_invalidates_of = attrgetter("invalidates")


def _le(a: array) -> memoryview:
    """The array's bytes, little-endian, without a copy where the machine is: a column of
    750k ids copied with tobytes() kept the writer on the GIL for several ms at once."""
    if _BIG_ENDIAN:
        a = array(a.typecode, a)
        a.byteswap()
    return memoryview(a).cast("B")


# What a writer is told of each dict page it encoded: (log name, page number, the captured
# page, its columns).
Adopt = Callable[[str, int, dict, LoadedPage], None]


def _log_parts(
    log: LogCopy, between_pages: Callable[[], None] | None, adopt: Adopt | None = None
) -> Iterator[bytes | memoryview]:
    """One log in the version 2 layout; the work is done a page at a time, in C-level
    bulk operations (a Python loop per entry cost 7 s for 1M entries on a loaded machine).
    Each dict page's columns are handed to `adopt` (SnapshotHooks keeps them for the
    state, so an unchanged page is not encoded entry by entry again)."""
    ids = array("Q")
    lens = array("I")
    inv_counts = array("I")
    inv_ids = array("Q")
    datas: list[bytes] = []
    for page in log.pages:
        if type(page) is LoadedPage:
            # Never used since the reopen: its columns as they were loaded.
            ids.extend(page.ids)
            lens.extend(page.lens)
            end = page.start + page.data_bytes()
            datas.append(page.body[page.start : end])
            if page.invs is None:
                inv_counts.frombytes(bytes(4 * len(page.ids)))  # zeros, in C
            else:
                inv_counts.extend(map(len, page.invs))
                inv_ids.extend(chain.from_iterable(page.invs))
        else:
            entries = list(page.values())
            page_ids = array("Q", page)
            page_lens = array("I")
            page_datas: list[bytes] = []
            page_invs: list[tuple[int, ...]] = []
            any_invalidates = False
            # In slices, each followed by a pause of the writer (see _let_others_run).
            for at in range(0, len(entries), ENCODE_SLICE_ENTRIES):
                part = entries[at : at + ENCODE_SLICE_ENTRIES]
                part_datas = list(map(_data_of, part))
                page_lens.extend(map(len, part_datas))
                page_datas.append(b"".join(part_datas))
                invs = list(map(_invalidates_of, part))
                page_invs += invs
                counts = array("I", map(len, invs))
                inv_counts.extend(counts)
                if any(counts):
                    inv_ids.extend(chain.from_iterable(invs))
                    any_invalidates = True
                if between_pages is not None:
                    between_pages()
            body = b"".join(page_datas)
            ids.extend(page_ids)
            lens.extend(page_lens)
            datas.append(body)
            if adopt is not None and entries:
                columns = LoadedPage(
                    page_ids,
                    page_lens,
                    0,
                    body,
                    page_invs if any_invalidates else None,
                    len(body),
                )
                adopt(log.name, page_ids[0] >> PAGE_ID_BITS, page, columns)
            continue
        if between_pages is not None:
            between_pages()
    assert len(ids) == log.count == len(lens), (log.name, len(ids), log.count)
    raw = log.name.encode()
    yield struct.pack("<H", len(raw)) + raw + _LOG_HEAD.pack(log.last_id, log.count)
    yield _le(ids)
    yield _le(lens)
    yield _le(inv_counts)
    yield _le(inv_ids)
    yield from datas


def encode_snapshot_parts(
    copy: StateCopy,
    meta: SnapshotMeta,
    between_pages: Callable[[], None] | None = None,
    adopt: Adopt | None = None,
) -> list[bytes | memoryview]:
    """The snapshot of `copy` as pieces to write one after the other (header first); never
    joined, so no copy of the whole snapshot is made. `between_pages` runs after each page
    (the background writer lets the tick thread have the GIL there); `adopt` is told of
    each dict page's columns (_log_parts)."""
    parts = [_head(meta, len(copy.logs))]
    for log in copy.logs:
        parts.extend(_log_parts(log, between_pages, adopt))
    crc = 0
    length = 0
    for part in parts:
        crc = crc32c.crc32c(part, value=crc)
        length += len(part)
    return [SNAP_HEADER.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, length, crc), *parts]


def encode_snapshot(state: LogState | StateCopy, meta: SnapshotMeta) -> bytes:
    """The whole snapshot as one bytes object (tests, tools)."""
    copy = state.capture() if isinstance(state, LogState) else state
    return b"".join(encode_snapshot_parts(copy, meta))


_ENTRY_HEAD = struct.Struct("<QI")  # id, data length
_LOG_HEAD = struct.Struct("<QQ")  # last id, live count
_COUNT = struct.Struct("<I")
_NO_INVALIDATES = _COUNT.pack(0)


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = memoryview(buf)
        self.off = 0

    def take(self, fmt: str | struct.Struct) -> tuple:
        s = fmt if isinstance(fmt, struct.Struct) else struct.Struct(fmt)
        if self.off + s.size > len(self.buf):
            raise Corruption("snapshot body ends early")
        vals = s.unpack_from(self.buf, self.off)
        self.off += s.size
        return vals

    def raw(self, n: int) -> bytes:
        if self.off + n > len(self.buf):
            raise Corruption("snapshot body ends early")
        out = bytes(self.buf[self.off : self.off + n])
        self.off += n
        return out

    def entry(self) -> RaftEntry:
        idx, term, n = self.take("<QQI")
        return (self.raw(n), idx, term)


def _read_entries(r: _Reader, count: int) -> list[Entry]:
    """`count` live entries at the reader's position (the bulk of a snapshot: inlined)."""
    buf, off, size = r.buf, r.off, len(r.buf)
    head, head_size = _ENTRY_HEAD.unpack_from, _ENTRY_HEAD.size
    count_of, count_size = _COUNT.unpack_from, _COUNT.size
    entries = []
    put = entries.append
    for _ in range(count):
        if off + head_size > size:
            raise Corruption("snapshot body ends early")
        eid, dlen = head(buf, off)
        off += head_size
        end = off + dlen
        if end + count_size > size:
            raise Corruption("snapshot body ends early")
        data = bytes(buf[off:end])
        (ninv,) = count_of(buf, end)
        off = end + count_size
        inv: tuple[int, ...] = ()
        if ninv:
            if off + 8 * ninv > size:
                raise Corruption("snapshot body ends early")
            inv = struct.unpack_from(f"<{ninv}Q", buf, off)
            off += 8 * ninv
        put(Entry(eid, data, inv))
    r.off = off
    return entries


def _array_at(r: _Reader, typecode: str, count: int) -> array:
    a = array(typecode)
    n = count * a.itemsize
    if r.off + n > len(r.buf):
        raise Corruption("snapshot body ends early")
    a.frombytes(r.buf[r.off : r.off + n])
    r.off += n
    if _BIG_ENDIAN:
        a.byteswap()
    return a


def _restore_log_v2(r: _Reader, buf: bytes, body_at: int, state: LogState) -> None:
    """One log of the version 2 layout, in bulk (C-level loops; no Python loop per entry
    unless an entry invalidated others). The ids stay an array (8 bytes an id: no list of
    int objects), and its order is checked on the array itself."""
    (n,) = r.take("<H")
    name = r.raw(n).decode()
    last_id, count = r.take(_LOG_HEAD)
    if count > len(r.buf):  # each entry takes at least 16 bytes: a count beyond is corrupt
        raise Corruption("snapshot log count exceeds the body")
    ids = _array_at(r, "Q", count)
    lens = _array_at(r, "I", count)
    counts_at = r.off
    if r.off + 4 * count > len(r.buf):
        raise Corruption("snapshot body ends early")
    raw_counts = r.buf[counts_at : counts_at + 4 * count].tobytes()
    if raw_counts.count(0) == len(raw_counts):  # C speed: the usual case, no invalidation
        r.off += 4 * count
        inv_counts = None
        inv_total = 0
    else:
        inv_counts = _array_at(r, "I", count)
        inv_total = sum(inv_counts)
    if inv_total > len(r.buf):
        raise Corruption("snapshot invalidation count exceeds the body")
    inv_ids = _array_at(r, "Q", inv_total)
    start = r.off
    invs: list[tuple[int, ...]] | None = None
    if inv_counts is not None:
        it = iter(inv_ids.tolist())
        invs = [tuple(islice(it, k)) if k else () for k in inv_counts]
    ascending = all(map(lt, ids, islice(ids, 1, None)))
    if not ascending or (count and (ids[0] < 1 or ids[-1] > last_id)):
        raise Corruption(f"snapshot log {name!r}: ids out of order or beyond its last id")
    if name in state.last_ids:
        raise Corruption(f"snapshot holds log {name!r} twice")
    # No Entry objects yet: each page is made into them the first time it is used
    # (a reopen of 1M entries built 1M objects before this).
    live, data_bytes = LiveEntries.from_loaded(ids, lens, body_at + start, buf, invs)
    if start + data_bytes > len(r.buf):
        raise Corruption("snapshot body ends early")
    r.off = start + data_bytes
    state.install_log(name, last_id, live, data_bytes)


def decode_snapshot(buf: bytes) -> tuple[LogState, SnapshotMeta]:
    if len(buf) < SNAP_HEADER.size:
        raise Corruption("snapshot shorter than its header")
    magic, version, length, crc = SNAP_HEADER.unpack_from(buf, 0)
    if magic != SNAPSHOT_MAGIC or version not in SNAPSHOT_VERSIONS_READ:
        raise Corruption(f"snapshot header is not {SNAPSHOT_MAGIC!r} v{SNAPSHOT_VERSIONS_READ}")
    # The body is read in place: entries' data are sliced out of `buf` itself (a loaded
    # page keeps a reference to it), so no copy of the whole snapshot is made. A mapped
    # file (SnapshotHooks.deserialize) is read in place too.
    if type(buf) is not bytes and type(buf) is not mmap.mmap:
        buf = bytes(buf)
    body = memoryview(buf)[SNAP_HEADER.size : SNAP_HEADER.size + length]
    if len(body) != length or crc32c.crc32c(body) != crc:
        raise Corruption("snapshot fails its length or CRC check")
    r = _Reader(body)
    prev_entry = r.entry()
    last_entry = r.entry()
    (n_members,) = r.take("<I")
    members = []
    for _ in range(n_members):
        (n,) = r.take("<H")
        members.append(r.raw(n).decode())
    state = LogState()
    (n_logs,) = r.take("<I")
    for _ in range(n_logs):
        if version == 1:
            (n,) = r.take("<H")
            name = r.raw(n).decode()
            last_id, count = r.take(_LOG_HEAD)
            state.restore_log(name, last_id, _read_entries(r, count))
        else:
            _restore_log_v2(r, buf, SNAP_HEADER.size, state)
    if r.off != len(body):
        raise Corruption("snapshot body has trailing bytes")
    return state, SnapshotMeta(last_entry, prev_entry, tuple(members))


def snapshot_last_index(path: str) -> int | None:
    """The Raft index a snapshot file covers up to, read from its head (the header and the
    two entries that open the body; the body's CRC is not checked). None if the file is not
    that far a snapshot (missing, short, another format)."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNAP_HEADER.size + _RAFT_ENTRY_HEAD.size)
            if len(head) < SNAP_HEADER.size + _RAFT_ENTRY_HEAD.size:
                return None
            magic, version, _length, _crc = SNAP_HEADER.unpack_from(head, 0)
            if magic != SNAPSHOT_MAGIC or version not in SNAPSHOT_VERSIONS_READ:
                return None
            _idx, _term, n = _RAFT_ENTRY_HEAD.unpack_from(head, SNAP_HEADER.size)
            f.seek(SNAP_HEADER.size + _RAFT_ENTRY_HEAD.size + n)
            last = f.read(_RAFT_ENTRY_HEAD.size)
    except OSError:
        return None
    if len(last) < _RAFT_ENTRY_HEAD.size:
        return None
    return _RAFT_ENTRY_HEAD.unpack(last)[0]


_SFR_WAIT_BEFORE = 1
_SFR_WRITE = 2
_SFR_WAIT_AFTER = 4


def _libc_sync_file_range():
    """Linux `sync_file_range(2)` (Python 3.11's `os` has none), or None. Called through
    ctypes.CDLL, which releases the GIL for the call."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _libc_sync_file_range()


class _ChunkPusher:
    """Hands a file being written to the disk a chunk at a time: starts the write-back of
    each chunk once it is written and waits for the one before it, so at most two chunks
    of it are ever in flight (what a concurrent fdatasync of another file can be held
    behind). Where there is no sync_file_range (or it fails as unsupported), fdatasync
    of each chunk: slower, as bounded. Durability still comes from the fsync at the end."""

    __slots__ = ("fd", "sync_range", "pushed", "prev")

    def __init__(self, fd: int, sync_range=None) -> None:
        self.fd = fd
        self.sync_range = _SYNC_FILE_RANGE if sync_range is None else sync_range
        self.pushed = 0  # bytes from the start already handed to the disk
        self.prev: tuple[int, int] | None = None

    def _call(self, off: int, n: int, flags: int) -> bool:
        if self.sync_range is None:
            return False
        if self.sync_range(self.fd, off, n, flags) == 0:
            return True
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ESPIPE):
            self.sync_range = None  # not here (another kernel, a file system without it)
            return False
        raise OSError(err, f"sync_file_range: {os.strerror(err)}")

    def push(self, written: int) -> None:
        """The file holds `written` bytes: hand the ones not yet handed to the disk."""
        off, n = self.pushed, written - self.pushed
        if n <= 0:
            return
        if not self._call(off, n, _SFR_WRITE):
            os.fdatasync(self.fd)
        elif self.prev is not None:
            self._call(*self.prev, _SFR_WAIT_BEFORE | _SFR_WRITE | _SFR_WAIT_AFTER)
        self.prev = (off, n)
        self.pushed = written


def _write_fsynced(
    path: str, parts: list[bytes | memoryview], chunk_bytes: int | None = None, sync_range=None
) -> int:
    """Write the pieces to `path` (created or truncated) and fsync it; the bytes written.
    With `chunk_bytes`, in chunks of about that size, each handed to the disk as it is
    written, at most two in flight (_ChunkPusher)."""
    assert chunk_bytes is None or chunk_bytes > 0, chunk_bytes
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total = 0
    pusher = None if chunk_bytes is None else _ChunkPusher(fd, sync_range)
    try:
        for part in parts:
            view = memoryview(part)
            while view:
                n = os.write(
                    fd, view if pusher is None else view[: chunk_bytes - total % chunk_bytes]
                )
                view = view[n:]
                total += n
                if pusher is not None and total - pusher.pushed >= chunk_bytes:
                    pusher.push(total)
        if pusher is not None:
            pusher.push(total)
        os.fsync(fd)
    finally:
        os.close(fd)
    return total


def _map_or_read(fd: int) -> bytes | mmap.mmap:
    """The whole file, mapped read-only (the pages come from the page cache: no copy into
    the process; a reopen of 1M entries read 80 MB in 180-390 ms on the loaded machine,
    mapped them in ~40 ms), or read when it cannot be mapped (empty, a file system without
    mmap). A snapshot file is never changed in place (a new one is renamed over it), so
    the mapping stays valid after that; the loaded pages keep it referenced, and with it
    the old file's blocks until they are all used or replaced."""
    try:
        if os.fstat(fd).st_size > 0:
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            return mmap.mmap(fd, 0, flags=flags, prot=mmap.PROT_READ)
    except (OSError, ValueError) as err:
        logger.warning("snapshot not mapped (%s): read instead", err)
    with os.fdopen(os.dup(fd), "rb") as f:
        return f.read()


def _file_key(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_durably(path: str) -> bytes | mmap.mmap:
    """The snapshot file's bytes (mapped), once the file and its directory are fsynced."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        blob = _map_or_read(fd)
    finally:
        os.close(fd)
    fsync_dir(os.path.dirname(os.path.abspath(path)))
    return blob


class _Preload:
    """One snapshot file read and decoded on a thread of its own (SnapshotHooks.preload)."""

    __slots__ = ("path", "thread", "key", "blob", "state", "meta", "error")

    def __init__(self, path: str) -> None:
        self.path = path
        self.thread: threading.Thread | None = None
        self.key: tuple[int, int, int, int] | None = None
        self.blob: bytes | mmap.mmap | None = None
        self.state: LogState | None = None
        self.meta: SnapshotMeta | None = None
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            # The file's identity before its bytes: if the leader's snapshot replaces it
            # meanwhile, the keys differ and deserialize loads the new file itself.
            self.key = _file_key(self.path)
            self.blob = _read_durably(self.path)
            self.state, self.meta = decode_snapshot(self.blob)
        except Exception as err:  # noqa: BLE001 - handed to deserialize, which reports it
            self.error = err


def _let_others_run() -> None:
    """Between slices of a background encode: give the GIL up long enough for a thread
    waiting for it (the tick thread, a caller) to wake and take it. Without a pause that
    thread waits for the interpreter's switch interval (5 ms by default) each time it
    wants the GIL while the writer runs (a sleep(0) is mostly won back by the writer);
    with one it waits at most about one slice."""
    time.sleep(WRITER_PAUSE_S)


def _free_in_slices(pages: list[dict]) -> None:
    """Drop the writer's references to dict pages a few at a time, pausing between: the
    last reference to a page frees its dict and Entry objects, with the GIL held."""
    while pages:
        del pages[-FREE_PAGES_PER_SLICE:]
        _let_others_run()


class _Outcome:
    RUNNING = 0
    WRITTEN = 1
    FAILED = 2
    CANCELLED = 3  # a snapshot from the leader replaced this one before its rename


class _Write:
    """One background snapshot write (tick thread starts it, the writer thread ends it)."""

    __slots__ = (
        "ident",
        "last_index",
        "copy",
        "finished",
        "outcome",
        "cancelled",
        "size_bytes",
        "pages_adopted",
    )

    def __init__(self, ident: int, last_index: int) -> None:
        self.ident = ident
        self.last_index = last_index
        self.copy: StateCopy | None = None
        self.finished = threading.Event()  # the writer is done with it
        self.outcome = _Outcome.RUNNING
        self.cancelled = False
        self.size_bytes = 0
        self.pages_adopted = 0


class _WriterThread:
    """A replica's snapshot writer thread, started with its hooks and reused for every
    write: a thread started per write made the tick thread wait for it to run
    (`Thread.start()` returns only once the new thread has started)."""

    def __init__(self, name: str, run: Callable[[_Write, str, SnapshotMeta], None]) -> None:
        self._run = run
        self._jobs: queue.SimpleQueue[tuple[_Write, str, SnapshotMeta] | None]
        self._jobs = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._run(*job)
            finally:
                job[0].finished.set()

    def submit(self, write: _Write, path: str, meta: SnapshotMeta) -> None:
        self._jobs.put((write, path, meta))

    def stop(self, timeout_s: float) -> None:
        self._jobs.put(None)
        self.thread.join(timeout_s)


class SnapshotHooks:
    """pysyncobj's `serializer`/`deserializer` callbacks, bound to one replica's state, and
    the background writer of its snapshots.

    pysyncobj calls them from its tick thread, which is also the only thread that applies
    commands, so the state is consistent at the applied index it names. `lock` guards the
    state against readers (and the capture) on other threads. Compaction goes through
    `start_write`/`poll_write` (BackgroundSerializer); `serialize` writes synchronously
    (tests, tools)."""

    def __init__(
        self,
        state: LogState,
        lock: threading.Lock,
        on_loaded: Callable[[SnapshotMeta], None] | None = None,
        journal: DurableJournal | None = None,
        name: str = "",
        chunk_bytes: int | None = WRITE_CHUNK_BYTES,
    ) -> None:
        self._state = state
        # The background writer's chunks (_ChunkPusher); None: written whole, then fsynced.
        self._chunk_bytes = chunk_bytes
        self._lock = lock
        self._on_loaded = on_loaded
        self._journal = journal
        self._name = name
        # Orders the writer's rename with the rename of a snapshot received from the leader.
        self._file_lock = threading.Lock()
        self._write: _Write | None = None
        self._writer: _WriterThread | None = self._start_writer()
        self._preload: _Preload | None = None
        self.snapshots_written = 0
        self.snapshots_loaded = 0

    @staticmethod
    def _meta(data: tuple) -> SnapshotMeta:
        last_entry, prev_entry, cluster = data
        members = tuple(sorted(getattr(n, "id", n) for n in cluster))
        return SnapshotMeta(tuple(last_entry), tuple(prev_entry), members)

    def serialize(self, tmp_path: str, data: tuple) -> None:
        """Write the snapshot of the state now to `tmp_path`, fsynced (the caller renames)."""
        meta = self._meta(data)
        with self._lock:
            copy = self._state.capture()
        size = _write_fsynced(tmp_path, encode_snapshot_parts(copy, meta))
        self.snapshots_written += 1
        logger.info("snapshot written at index %d (%d bytes)", meta.last_entry[1], size)

    # --- background compaction (BackgroundSerializer) -----------------------------------

    def _start_writer(self) -> _WriterThread:
        name = f"logstore-snapshot-{self._name}" if self._name else "logstore-snapshot"
        return _WriterThread(name, self._run_write)

    def start_write(self, path: str, ident: int, data: tuple) -> bool:
        """Tick thread: capture the state (cheap, under the lock) and start the writer
        thread that encodes it into `path`. False when a write is still running."""
        if self._write is not None:
            return False
        meta = self._meta(data)
        with self._lock:
            copy = self._state.capture()
        write = _Write(ident, meta.last_entry[1])
        write.copy = copy  # taken by the writer (not a job argument: it frees it early)
        self._write = write
        if self._writer is None:  # closed, then asked again (tests); else started at init
            self._writer = self._start_writer()
        self._writer.submit(write, path, meta)
        return True

    def _run_write(self, write: _Write, path: str, meta: SnapshotMeta) -> None:
        """Writer thread: encode, temp file + fsync, rename + directory fsync. The journal
        is trimmed by the tick thread only after this (poll_write)."""
        tmp = path + ".tmp"
        copy, write.copy = write.copy, None
        assert copy is not None
        try:
            encoded: list[tuple[str, int, dict, LoadedPage]] = []
            parts = encode_snapshot_parts(
                copy, meta, _let_others_run, lambda *page: encoded.append(page)
            )
            del copy
            write.pages_adopted = self._adopt_columns(encoded)
            # The dict pages the state gave up for their columns are held only here now:
            # freed a few at a time (all at once, 250k entries held the GIL for tens of ms).
            pages = [page for _name, _no, page, _columns in encoded]
            encoded.clear()
            _free_in_slices(pages)
            write.size_bytes = _write_fsynced(tmp, parts, self._chunk_bytes)
            del parts
            with self._file_lock:
                if write.cancelled:
                    os.unlink(tmp)
                    write.outcome = _Outcome.CANCELLED
                    return
                os.replace(tmp, path)
                fsync_dir(os.path.dirname(os.path.abspath(path)))
            write.outcome = _Outcome.WRITTEN
        except Exception:  # noqa: BLE001 - reported to pysyncobj as a failed dump
            logger.exception("snapshot at index %d not written", write.last_index)
            write.outcome = _Outcome.FAILED

    def _adopt_columns(self, encoded: list[tuple[str, int, dict, LoadedPage]]) -> int:
        """Writer thread: give the state the columns of the dict pages just encoded (the
        ones still unchanged keep them: LogState.adopt_columns), a few hundred pages per
        hold of the state's lock. The number of pages that kept them."""
        kept = 0
        for at in range(0, len(encoded), ADOPT_PAGES_PER_LOCK):
            with self._lock:
                for name, page_no, page, columns in encoded[at : at + ADOPT_PAGES_PER_LOCK]:
                    kept += self._state.adopt_columns(name, page_no, page, columns)
            _let_others_run()
        return kept

    def poll_write(self) -> tuple[int, int | None]:
        """Tick thread: (SERIALIZER_STATE, ident) of the background write, as pysyncobj's
        `checkSerializing` answers; SUCCESS once, when the snapshot is durably in place."""
        write = self._write
        if write is None:
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        outcome = write.outcome
        if outcome == _Outcome.RUNNING:
            return SERIALIZER_STATE.SERIALIZING, write.ident
        write.finished.wait()  # it has an outcome: only its last instructions are left
        self._write = None
        if outcome == _Outcome.WRITTEN:
            self.snapshots_written += 1
            logger.info(
                "snapshot written at index %d (%d bytes)", write.last_index, write.size_bytes
            )
            return SERIALIZER_STATE.SUCCESS, write.ident
        if outcome == _Outcome.CANCELLED:
            logger.info("snapshot at index %d dropped: the leader sent one", write.last_index)
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        return SERIALIZER_STATE.FAILED, write.ident

    @contextmanager
    def replacing_file(self) -> Iterator[None]:
        """Around the rename of a snapshot received from the leader: a background write
        still running must not rename its older snapshot over it."""
        with self._file_lock:
            if self._write is not None:
                self._write.cancelled = True
            yield

    def writing(self) -> bool:
        return self._write is not None

    def close(self, timeout_s: float = WRITER_JOIN_S) -> bool:
        """Wait for a background write (and a preload never taken) to end; False if a
        write is still running."""
        pre, self._preload = self._preload, None
        if pre is not None and pre.thread is not None:
            pre.thread.join(timeout_s)
        write = self._write
        if write is not None and not write.finished.wait(timeout_s):
            logger.error("snapshot writer still running after %.0f s", timeout_s)
            return False
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.stop(timeout_s)
        return True

    def preload(self, path: str) -> bool:
        """Start reading and decoding the snapshot at `path` on a thread of its own, while
        the replica starts (the password's key derivation, which releases the GIL, and
        pysyncobj's start, whose tick thread sleeps 0.1 s before its first tick). The first
        `deserialize` of the same file takes the result; False if there is no file."""
        if self._preload is not None or not os.path.exists(path):
            return False
        pre = _Preload(path)
        pre.thread = threading.Thread(
            target=pre.run,
            name=f"logstore-snapshot-load-{self._name}" if self._name else "logstore-snapshot-load",
            daemon=True,
        )
        self._preload = pre
        pre.thread.start()
        return True

    def _take_preload(self, path: str) -> tuple[bytes | mmap.mmap, LogState, SnapshotMeta] | None:
        """The preloaded snapshot, if it is of the file now at `path` (not one the leader
        sent since); its Corruption is raised as a load of the file would raise it."""
        pre, self._preload = self._preload, None
        if pre is None:
            return None
        assert pre.thread is not None
        pre.thread.join()
        if pre.path != path or pre.key is None or pre.key != _file_key(path):
            return None
        if isinstance(pre.error, Corruption):
            raise pre.error
        if pre.error is not None:  # an I/O error: the load reads the file again
            logger.warning("snapshot preload failed (%s): loading it again", pre.error)
            return None
        assert pre.blob is not None and pre.state is not None and pre.meta is not None
        return pre.blob, pre.state, pre.meta

    def deserialize(self, path: str) -> tuple:
        """Load the snapshot into the state; answer (last entry, prev entry, members).

        The file may just have arrived from the leader (pysyncobj wrote and renamed it
        without fsync): make it durable before the journal is cleared and the transfer
        acknowledged. At startup the file was usually decoded already (`preload`)."""
        try:
            loaded = self._take_preload(path)
            if loaded is None:
                blob = _read_durably(path)
                loaded = (blob, *decode_snapshot(blob))
        except Corruption:
            logger.critical("snapshot %s is corrupt; this replica cannot load it", path)
            raise
        blob, state, meta = loaded
        if self._journal is not None:
            # Before pysyncobj compares the journal's first entries with the snapshot's (and
            # clears the journal if they differ): drop a prefix the snapshot covers, keep
            # the entries after it (DurableJournal.align_to_snapshot).
            self._journal.align_to_snapshot(meta.prev_entry, meta.last_entry)
        with self._lock:
            self._state.replace_with(state)
        self.snapshots_loaded += 1
        if self._on_loaded is not None:
            self._on_loaded(meta)
        logger.info("snapshot loaded at index %d (%d bytes)", meta.last_entry[1], len(blob))
        # Node objects, not strings: pysyncobj drops its own node from this list by
        # comparing with its self node, and a Node never equals a str (a replica that
        # counted itself as a peer could never win an election with one peer down).
        return (meta.last_entry, meta.prev_entry, [TCPNode(m) for m in meta.members])


class BackgroundSerializer(Serializer):
    """pysyncobj's Serializer for a logstore replica: compaction through
    `SnapshotHooks.start_write` (off the tick thread) instead of a synchronous call.

    pysyncobj polls `checkSerializing` on every tick and trims the journal when it answers
    SUCCESS; it starts no other compaction while a write runs. Transmissions to followers
    read the file in place, which a rename replaces atomically (an open transmission keeps
    the old file; they are restarted after a new snapshot, as pysyncobj does)."""

    def __init__(
        self, hooks: SnapshotHooks, file_name: str, batch_bytes: int, serializer, deserializer
    ):
        super().__init__(file_name, batch_bytes, False, serializer, deserializer, None)
        self._hooks = hooks
        self._path = file_name

    def checkSerializing(self):  # noqa: N802 - pysyncobj's name
        status, ident = self._hooks.poll_write()
        if status == SERIALIZER_STATE.SUCCESS:
            for transmission in self._Serializer__transmissions.values():
                f = transmission.get("file")
                if f is not None:
                    f.close()
            self._Serializer__transmissions = {}
        return status, ident

    def serialize(self, data, id):  # noqa: A002 - pysyncobj's signature
        self._hooks.start_write(self._path, id, data[1:])

    def incoming_last_index(self) -> int | None:
        """Tick thread: the index up to which the snapshot being received from the leader
        goes, read from what has arrived of it (pysyncobj writes it to `<file>.1.tmp`);
        None if none is being received or its head has not arrived."""
        incoming = self._Serializer__incomingTransmissionFile
        if incoming is None:
            return None
        incoming.flush()
        return snapshot_last_index(self._path + ".1.tmp")

    def discard_incoming(self) -> None:
        """Tick thread: drop the snapshot being received (not renamed, not loaded)."""
        incoming, self._Serializer__incomingTransmissionFile = (
            self._Serializer__incomingTransmissionFile,
            None,
        )
        if incoming is not None:
            incoming.close()
        try:
            os.unlink(self._path + ".1.tmp")
        except FileNotFoundError:
            pass

    def setTransmissionData(self, data):  # noqa: N802 - pysyncobj's name
        if data is not None and data[2]:  # the last chunk: pysyncobj renames the file now
            with self._hooks.replacing_file():
                return super().setTransmissionData(data)
        return super().setTransmissionData(data)
