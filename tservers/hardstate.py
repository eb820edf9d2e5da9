"""The hard-state journal: the terms and votes of every tablet replica of a server in one
append-only file, `consensus-meta/hardstate.journal` (design/consensus.md, "The hard-state
journal").

Raft must make a replica's new term and vote durable before it sends anything that depends
on them. One consensus-metadata file per tablet (temp file, fsync, rename, directory fsync)
cost 125-195 ms for the 1,000 new terms of one driver round on this machine, 40-50% of the
driver's time in a restart of 10,000 replicas; the same 1,000 states appended here as one
record with one fdatasync cost about 0.5 ms.

Format: a header (magic `TSHJ`, u32 version), then records: u32 payload length, u32 CRC32C
of the payload, the payload (a `HardStatePB` list: tablet id, term, voted for; or `forget`:
the tablet's file alone holds its hard state from here on). A torn or corrupt record ends the
journal: it and what follows are cut off when the journal is opened for appending (nothing
of that round was sent: its sync had not returned).

A tablet's hard state is the larger of its consensus-metadata file's and the journal's,
ordered by (term, a vote given) (`merge`): a hard state only grows (a term never falls, a
vote is given once per term), so whichever of the two was written last is the larger. Other
writers of a consensus-metadata file (a committed config, a tablet copy, a tombstone) write
it with the replica's hard state of the moment, which keeps that true.

Compaction: past COMPACT_BYTES (and at least COMPACT_RATIO times the states' own size) the
journal is replaced by a new one holding one record of every tablet's last state (temp file,
fsync, rename, directory fsync): a crash leaves the old journal or the new, both giving the
same answers. No consensus-metadata file is written for it.

Downgrade: an older server reads the files only and would take stale terms (and could vote
twice in a term); so a root whose journal is in use has its instance file written with
metafile version 2, which older code refuses to start on ("unsupported version 2").
`tserver fs downgrade` folds the journal into the files and writes version 1 again.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Iterable
from pathlib import Path

import crc32c
from google.protobuf.message import DecodeError

from rpc.protocols.tserver_pb2 import ConsensusMetaPB, HardStatePB, HardStateRecordPB
from tservers import metafile

log = logging.getLogger(__name__)

NAME = "hardstate.journal"
MAGIC = b"TSHJ"
VERSION = 1
_FILE_HEADER = struct.Struct("<4sI")
_RECORD_HEADER = struct.Struct("<II")
RECORD_BYTES_MAX = 64 << 20  # a round's states: 10,000 tablets take about 0.8 MB
COMPACT_BYTES = 4 << 20
COMPACT_RATIO = 4

# (term, voted for; "" none) of one tablet.
State = tuple[int, str]
# How an appended record is made durable (a name of its own: the power-loss tests replace
# it to show that they catch a journal that does not sync).
_datasync = os.fdatasync


class JournalCorrupt(Exception):
    """The journal's header is not one this code reads (its records are checked one by one:
    a bad record ends the journal instead)."""


def newer(a: State, b: State) -> bool:
    """Whether hard state `a` is past `b`: a higher term, or the same term with a vote
    where `b` has none."""
    return a[0] > b[0] or (a[0] == b[0] and bool(a[1]) and not b[1])


def merge(cm: ConsensusMetaPB, state: State | None) -> ConsensusMetaPB:
    """`cm` (a file's metadata) with the journal's `state` when that is newer (in place)."""
    if state is not None and newer(state, (cm.current_term, cm.voted_for)):
        cm.current_term, cm.voted_for = state
    return cm


def _encode(states: Iterable[HardStatePB]) -> bytes:
    payload = HardStateRecordPB(states=states).SerializeToString()
    assert len(payload) <= RECORD_BYTES_MAX, len(payload)
    return _RECORD_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


def read(path: Path) -> tuple[dict[str, State], int, int]:
    """(tablet id -> last state, the bytes of good records with the header, records read)
    of the journal at `path` (nothing when it does not exist). Stops at the first torn or
    corrupt record; raises JournalCorrupt for a bad header."""
    try:
        data = metafile.read_file(path, 1 << 62)
    except FileNotFoundError:
        return {}, 0, 0
    if len(data) < _FILE_HEADER.size:
        return {}, 0, 0  # torn while it was being made: nothing in it was ever synced
    magic, version = _FILE_HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise JournalCorrupt(
            f"{path}: not a hard-state journal this server reads (magic {magic!r}, "
            f"version {version}; expected {MAGIC!r} version {VERSION})"
        )
    states: dict[str, State] = {}
    at = _FILE_HEADER.size
    records = 0
    while at + _RECORD_HEADER.size <= len(data):
        length, crc = _RECORD_HEADER.unpack_from(data, at)
        start = at + _RECORD_HEADER.size
        if length > RECORD_BYTES_MAX or start + length > len(data):
            break
        payload = data[start : start + length]
        if crc32c.crc32c(payload) != crc:
            break
        rec = HardStateRecordPB()
        try:
            rec.ParseFromString(payload)
        except DecodeError:
            break
        for s in rec.states:
            if s.forget:
                states.pop(s.tablet_id, None)
            else:
                states[s.tablet_id] = (s.term, s.voted_for)
        at = start + length
        records += 1
    return states, at, records


class HardStateJournal:
    """The journal of one fs root: its states in memory, appends made durable with one
    fdatasync each. Thread-safe; `open_for_append` before the first append."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fd: int | None = None
        self.states, self._size, _ = read(self.path)
        self.appends = 0  # records appended (tests, metrics)
        self.compactions = 0
        self.states_written = 0

    def get(self, tablet_id: str) -> State | None:
        return self.states.get(tablet_id)

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def open_for_append(self) -> None:
        """Read the journal again, cut a torn tail off (made durable), or make an empty
        journal; appends go to its end from here on."""
        with self._lock:
            if self._fd is not None:
                return
            self.states, good, records = read(self.path)
            if good == 0:
                self._rewrite_locked()
                return
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            try:
                size = os.fstat(fd).st_size
                if size > good:
                    log.warning(
                        "%s: a torn or corrupt record after %d good ones (%d bytes) cut off",
                        self.path,
                        records,
                        size - good,
                    )
                    os.ftruncate(fd, good)
                    os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
            self._fd, self._size = fd, good

    def append(self, states: list[tuple[str, int, str]]) -> None:
        """Make (tablet id, term, voted for) of each durable: one record, one fdatasync.
        Raises OSError (the record may or may not be there: as after a crash)."""
        if not states:
            return
        pbs = [HardStatePB(tablet_id=t, term=term, voted_for=v) for t, term, v in states]
        self._append(pbs)

    def forget(self, tablet_ids: Iterable[str]) -> None:
        """From here on the files alone hold these tablets' hard states (a file rewritten on
        purpose with a lower term or no vote: `tserver cmeta rewrite`)."""
        ids = list(tablet_ids)
        if not ids:
            return
        self._append([HardStatePB(tablet_id=t, forget=True) for t in ids])

    def _append(self, pbs: list[HardStatePB]) -> None:
        data = _encode(pbs)
        with self._lock:
            if self._fd is None:
                raise RuntimeError(f"{self.path}: journal not open for appending")
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            _datasync(self._fd)
            self._size += len(data)
            self.appends += 1
            self.states_written += len(pbs)
            # In memory before a compaction below writes them all out again.
            for pb in pbs:
                if pb.forget:
                    self.states.pop(pb.tablet_id, None)
                else:
                    self.states[pb.tablet_id] = (pb.term, pb.voted_for)
            live = len(self.states) * 80 + _FILE_HEADER.size
            if self._size > max(COMPACT_BYTES, COMPACT_RATIO * live):
                self._rewrite_locked()
                self.compactions += 1

    def _rewrite_locked(self) -> None:
        """Replace the journal by one record of every state (temp file, fsync, rename,
        directory fsync) and append to that."""
        pbs = [HardStatePB(tablet_id=t, term=s[0], voted_for=s[1]) for t, s in self.states.items()]
        data = _FILE_HEADER.pack(MAGIC, VERSION) + (_encode(pbs) if pbs else b"")
        metafile.write_atomic(self.path, data)
        old, self._fd = self._fd, os.open(self.path, os.O_WRONLY | os.O_APPEND)
        if old is not None:
            os.close(old)
        self._size = len(data)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
