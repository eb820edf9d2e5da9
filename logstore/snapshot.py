"""Snapshot file codec and the pysyncobj serializer hooks that write and read it.

A snapshot holds the live entries of every log (never invalidated ones), the two Raft
entries pysyncobj keeps at the head of the journal after compaction, and the cluster
membership. Format (no pickle: snapshots travel between replicas):

    magic "LSSNAP01", u32 version, u64 body length, u32 CRC32C(body), body
    body: entry(prev), entry(last), u32 members, members..., u32 logs, logs...
    entry: u64 index, u64 term, u32 length, command bytes
    member: u16 length, address bytes
    log: u16 name length, name, u64 last id, u64 live count,
         live count x (u64 id, u32 data length, data, u32 n, n x u64 invalidated id)

Writes go to a temp file that is fsynced; pysyncobj then renames it over the snapshot and
logstore's journal fsyncs the directory before it trims (logstore/journal.py).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass

import crc32c
from pysyncobj.node import TCPNode

from logstore.api import Entry
from logstore.journal import DurableJournal, fsync_dir
from logstore.state import LogState
from rpc.errors import Corruption

logger = logging.getLogger(__name__)

SNAPSHOT_MAGIC = b"LSSNAP01"
SNAPSHOT_VERSION = 1
SNAP_HEADER = struct.Struct("<8sIQI")
RaftEntry = tuple[bytes, int, int]


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    last_entry: RaftEntry
    prev_entry: RaftEntry
    members: tuple[str, ...]


def _put_entry(out: bytearray, entry: RaftEntry) -> None:
    command, idx, term = entry
    out += struct.pack("<QQI", idx, term, len(command))
    out += bytes(command)


def encode_snapshot(state: LogState, meta: SnapshotMeta) -> bytes:
    body = bytearray()
    _put_entry(body, meta.prev_entry)
    _put_entry(body, meta.last_entry)
    body += struct.pack("<I", len(meta.members))
    for m in meta.members:
        raw = m.encode()
        body += struct.pack("<H", len(raw)) + raw
    names = list(state.iter_logs())
    body += struct.pack("<I", len(names))
    # The live entries are most of a snapshot (and it is encoded on the tick thread):
    # one precompiled pack per entry, pieces joined once.
    parts: list[bytes] = [bytes(body)]
    put = parts.append
    head = _ENTRY_HEAD.pack
    for name, last_id, live in names:
        raw = name.encode()
        put(struct.pack("<H", len(raw)) + raw)
        put(_LOG_HEAD.pack(last_id, len(live)))
        for e in live.values():
            data = e.data
            put(head(e.id, len(data)))
            put(data)
            inv = e.invalidates
            put(struct.pack(f"<I{len(inv)}Q", len(inv), *inv) if inv else _NO_INVALIDATES)
    body = b"".join(parts)
    return SNAP_HEADER.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, len(body), crc32c.crc32c(body)) + body


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


def decode_snapshot(buf: bytes) -> tuple[LogState, SnapshotMeta]:
    if len(buf) < SNAP_HEADER.size:
        raise Corruption("snapshot shorter than its header")
    magic, version, length, crc = SNAP_HEADER.unpack_from(buf, 0)
    if magic != SNAPSHOT_MAGIC or version != SNAPSHOT_VERSION:
        raise Corruption(f"snapshot header is not {SNAPSHOT_MAGIC!r} v{SNAPSHOT_VERSION}")
    body = buf[SNAP_HEADER.size : SNAP_HEADER.size + length]
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
        (n,) = r.take("<H")
        name = r.raw(n).decode()
        last_id, count = r.take(_LOG_HEAD)
        state.restore_log(name, last_id, _read_entries(r, count))
    if r.off != len(body):
        raise Corruption("snapshot body has trailing bytes")
    return state, SnapshotMeta(last_entry, prev_entry, tuple(members))


class SnapshotHooks:
    """pysyncobj's `serializer`/`deserializer` callbacks, bound to one replica's state.

    pysyncobj calls both from its tick thread, which is also the only thread that applies
    commands, so the state is consistent at the applied index it names. `lock` guards the
    state against readers on other threads.
    """

    def __init__(
        self,
        state: LogState,
        lock: threading.Lock,
        on_loaded: Callable[[SnapshotMeta], None] | None = None,
        journal: DurableJournal | None = None,
    ) -> None:
        self._state = state
        self._lock = lock
        self._on_loaded = on_loaded
        self._journal = journal
        self.snapshots_written = 0
        self.snapshots_loaded = 0

    def serialize(self, tmp_path: str, data: tuple) -> None:
        last_entry, prev_entry, cluster = data
        members = tuple(sorted(getattr(n, "id", n) for n in cluster))
        meta = SnapshotMeta(tuple(last_entry), tuple(prev_entry), members)
        with self._lock:
            blob = encode_snapshot(self._state, meta)
        fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        self.snapshots_written += 1
        logger.info("snapshot written at index %d (%d bytes)", last_entry[1], len(blob))

    def deserialize(self, path: str) -> tuple:
        """Load the snapshot into the state; answer (last entry, prev entry, members).

        The file may just have arrived from the leader (pysyncobj wrote and renamed it
        without fsync): make it durable before the journal is cleared and the transfer
        acknowledged."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            with os.fdopen(os.dup(fd), "rb") as f:
                blob = f.read()
        finally:
            os.close(fd)
        fsync_dir(os.path.dirname(os.path.abspath(path)))
        try:
            state, meta = decode_snapshot(blob)
        except Corruption:
            logger.critical("snapshot %s is corrupt; this replica cannot load it", path)
            raise
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
