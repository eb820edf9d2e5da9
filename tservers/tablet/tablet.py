"""One tablet replica: memstore, data blocks, WAL replay, writes and scans.

State of a running tablet:
- `blocks`: immutable data blocks (Arrow IPC files, sorted by key, columns named `c<id>` plus
  `__deleted` for tombstones), oldest first; a newer block overrides an older one. Each is a
  `BlockIndex` (blockindex.py): mapped, with its key range and a bloom filter persisted
  beside it, so a key is found by range, filter and a binary search (design/storage.md).
  Blocks form sorted runs (`blockindex.runs_of`): a flushed block is a run of its own, a
  compaction writes one run of key-disjoint blocks listed together in key order, so a
  key is looked for in one block per run (`_locate_blocks`).
- `memstore`: key -> row tuple (schema order) or None (tombstone), for applied entries not yet
  flushed; `frozen` is the memstore being flushed. Both are hash maps: they are sorted by key
  once, when flushed or scanned, rather than on every write.
- `mem_batches`: memstore row blocks (`RowBlocks`), Arrow tables in the block schema, oldest
  first, all older than `memstore`: an entry of INSERTs of new keys only (a bulk load), kept
  whole (no Python row objects), at the leader as at followers, with a key -> row index
  built only when a lookup needs it (memstore-sized); `frozen_batches` are flushed with
  `frozen`.
- `pending`: key -> (index, row or None, or the row block holding the key's new row) for
  writes proposed at this leader but not applied yet. Validation (ALREADY_EXISTS,
  NOT_FOUND) sees them, scans do not: only committed writes are applied and visible.
- No set of every key: an existence check or a point read asks the layers newest first
  (pending, memstore dict, row blocks, frozen ones, blocks by range, filter and binary
  search) and the first that knows the key decides (`_locate_mem`, `_locate_blocks`).

A write (at the Raft leader only): decode and check outside the lock; under the lock check
each row against the state, propose the entry to the tablet's RaftCore (tservers/raft_driver.py)
and wait; the driver makes it durable, replicates it and, once committed, calls
`apply_entry`, which applies the rows in index order and answers the writer. Followers apply
the same entries to the same state (in log order). An entry of INSERTs only is applied as row
blocks without checking its keys again: the leader that proposed it validated them against
this same log prefix (it accepts writes only once every earlier entry is applied there), so
its keys are new; any other entry is checked row by row, a difference being corruption.

Exactly-once writes: a write carrying a request id (client id, seq) is recorded in `dedup`
(tservers/tablet/dedup.py) when its entry is applied; an entry whose id is already there is a
no-op when applied (on every replica, at replay too) and its writer gets the first entry's
answer. The leader also answers a resend of an applied write at once (its rows are not checked
again: an INSERT that landed is not ALREADY_EXISTS) and a resend of a write it has in flight
with that write's outcome. The table is persisted in the superblock at each flush, as of the
flushed index.
"""

from __future__ import annotations

import bisect
import enum
import functools
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError

from rpc.errors import (
    AlreadyExists,
    AlreadyInProgress,
    BadRequest,
    CasFailed,
    Corruption,
    IllegalState,
    NotFound,
    NotLeader,
    SchemaVersionMismatch,
    TabletDeleted,
    TabletFailed,
    Throttled,
    TimedOut,
    Unavailable,
)
from rpc.protocols.tserver_pb2 import (
    ConsensusMetaPB,
    LogEntryPB,
    OpIdPB,
    OpType,
    PredicateOp,
    PredicatePB,
    RowBlockPB,
    SuperblockPB,
    ValuePB,
    WriteOpPB,
)
from tservers.consensus.types import (
    ConfigChange,
    Entry,
    HardState,
    OpId,
    ProposalStatus,
    Role,
    SoftState,
)
from tservers.consensus.types import EntryType as ConsensusEntryType
from tservers.consensus_wire import config_to_pb, hard_state_meta
from tservers.crash import crash_point
from tservers.fs import FsLayout
from tservers.metafile import fsync_dir, install_file
from tservers.tablet.blockindex import (
    BlockIndex,
    block_file_name,
    block_metadata,
    bloom_name,
    check_runs,
    runs_of,
    write_merged_run,
)
from tservers.tablet.bloom import Probe, hash_array, key_hash
from tservers.tablet.dedup import STALE, DedupTable, Done, RequestId
from tservers.tablet.merge import (
    SCAN_SLAB_ROWS,
    SlabCounts,
    merge_slabs,
    newest_versions,
)
from tservers.tablet.pages import PageRelease
from tservers.tablet.pages import release as release_pages
from tservers.tablet.schema import DELETED_FIELD, Schema, block_name, value_from_pb
from tservers.tablet.stats import checks as stats_checks
from tservers.tablet.stats import prune as stats_prune
from tservers.tablet.stats import stats_name
from tservers.tablet.validate import Block, decode_block
from tservers.wal.log import Appender, TabletLog, WalOptions

log = logging.getLogger(__name__)

ROWS_PER_WRITE_MAX = 100_000
WRITE_BYTES_MAX = 48 << 20
# How long a write waits at a replica for an election to end before NOT_LEADER.
LEADER_WAIT_S = 3.0
SHUTDOWN_DRAIN_S = 5.0
# How long a follower's apply waits for its own schema alter to reach a leader's newer one.
SCHEMA_CATCH_UP_S = 30.0
# A scan whose predicates pin at most this many whole keys is served as point reads.
POINT_KEYS_MAX = 1000
# Keys looked up in blocks with Arrow kernels (vectorized) from this many on, else one by one.
VECTOR_KEYS_MIN = 64


class _CompactionAborted(Exception):
    """The tablet stopped running while a compaction merged: it gives up its output."""


class TabletStatus(enum.Enum):
    """Runtime state of a replica (the data state is in the superblock)."""

    BOOTSTRAPPING = "BOOTSTRAPPING"
    RUNNING = "RUNNING"
    FAILED = "FAILED"
    SHUTDOWN = "SHUTDOWN"
    TOMBSTONED = "TOMBSTONED"
    COPYING = "COPYING"


@dataclass(frozen=True, slots=True)
class TabletOptions:
    flush_rows_threshold: int = 200_000
    compaction_blocks_min: int = 4
    # Flush also when the WAL holds more segments than this above the flushed index, so that a
    # workload of updates to few keys (a small memstore) cannot grow the WAL without bound.
    wal_segments_flush: int = 8
    # Flush also a memstore that has taken no write for this long (0: never), as Kudu's
    # `flush_threshold_secs`: an idle tablet does not keep its last rows in the heap (~220
    # bytes a row: up to 44 MB a tablet at the default threshold) and in its WAL for good.
    flush_idle_s: float = 60.0
    apply_timeout_s: float = 30.0
    # Rows of a data block's Arrow record batches: the unit scans skip by min/max (stats.py).
    block_chunk_rows: int = 64 * 1024
    # Rows of a compaction's output block at most: a compaction writes a sorted run of
    # key-disjoint blocks of this size (design/storage.md, "Key-disjoint runs").
    run_block_rows: int = 64 * 64 * 1024


# The memstore's heap beyond its Arrow tables, per row (`Tablet.memstore_bytes`): 10
# tablets of 50,000 inserted rows of the tests' six columns (~45 bytes of Arrow data a row)
# took 105 MiB of RssAnon, ~220 bytes a row (design/storage.md, "Idle memstores are
# flushed"); a row kept as a Python tuple (an update or upsert) costs more.
MEMSTORE_ROW_OVERHEAD = 180
MEMSTORE_PY_ROW_BYTES = 400


@dataclass(slots=True)
class _Op:
    """One decoded row block of a write."""

    op: int
    keys: list
    rows: list  # full rows (INSERT/UPSERT), partial value tuples (UPDATE), unused (DELETE)
    present: tuple[int, ...]  # column positions given (UPDATE)


@dataclass(frozen=True, slots=True)
class WriteResult:
    op_id: OpIdPB
    rows: int


class _Inflight:
    """A write proposed at this replica, waiting for its entry to be applied."""

    __slots__ = ("index", "term", "changes", "inserts", "rid", "rows", "event", "error", "result")

    def __init__(
        self,
        index: int,
        term: int,
        changes: dict | None,
        inserts: list | None = None,
        rid: RequestId | None = None,
        rows: int = 0,
    ) -> None:
        self.index = index
        self.term = term
        self.changes = changes  # key -> final row; None: the write is `inserts`
        self.inserts = inserts  # [(keys, row block)]: new keys only, applied as row blocks
        self.rid = rid  # the write's request id (the one in its entry), if any
        self.rows = rows
        self.event = threading.Event()
        self.error: Exception | None = None
        # Set when applied: this entry's answer, or the earlier entry's one when the write
        # had been applied already (a resend).
        self.result: WriteResult | None = None


def _stale(tablet_id: str, rid: RequestId) -> IllegalState:
    return IllegalState(
        f"tablet {tablet_id}: write {rid.seq} of client {rid.client_id.hex()} is older than the "
        f"writes the tablet remembers (the client finished it): its outcome cannot be told"
    )


def _done_result(d: Done) -> WriteResult:
    return WriteResult(OpIdPB(term=d.term, index=d.index), d.rows)


_INSERT = OpType.INSERT


@functools.lru_cache(maxsize=8)
def _all_false(n: int) -> pa.Array:
    """A row block's __deleted column (immutable: shared by blocks of the same length)."""
    return pa.nulls(n, pa.bool_()).fill_null(False)


def size_class(rows: int, fanout: int, base_rows: int) -> int:
    """0 up to base_rows, 1 up to fanout x base_rows, 2 up to fanout^2 x base_rows, ..."""
    c, bound = 0, max(1, base_rows)
    while rows > bound:
        bound *= fanout
        c += 1
    return c


def compaction_run(rows: Sequence[int], fanout: int, base_rows: int) -> int | None:
    """Size-tiered compaction: where the newest runs to merge start, or None.

    `rows` are the sorted runs' row counts (a run: a flushed block, or the key-disjoint
    blocks a compaction wrote), oldest first. From the smallest size class up, the
    candidate run is the newest blocks of that class or a smaller one; the first candidate
    holding at least `fanout` blocks of its class is merged. A row is so rewritten about
    log_fanout(tablet rows / base_rows) times in all, where merging every block whenever
    `fanout` had piled up rewrote the whole tablet every `fanout - 1` flushes (quadratic in
    the tablet's size)."""
    fanout = max(2, fanout)
    classes = [size_class(r, fanout, base_rows) for r in rows]
    n = len(classes)
    for c in sorted(set(classes)):
        start = n
        while start > 0 and classes[start - 1] <= c:
            start -= 1
        if classes[start:].count(c) >= fanout:
            return start
    return None


def compaction_window(rows: Sequence[int], fanout: int, base_rows: int) -> tuple[int, int] | None:
    """Size-tiered compaction over adjacent runs: (start, end), the runs rows[start:end] to
    merge, or None. `compaction_run`'s suffix when it has one. Otherwise, from the smallest
    size class c up, the newest window of adjacent runs of class c or smaller (bounded by
    bigger runs on both sides) that holds at least `fanout` runs of class c.

    Windows keep a tablet from sticking: a merge of the newest runs while older small ones
    were busy or over the bound K can leave a big run newest, and behind it small runs that
    no suffix ever gathers (bench/storage.py at 50M rows: 43 runs of 50-110k rows behind a
    run of 7.1M, none merged for minutes, every insert batch checked against each of them;
    design/storage.md, "Runs stuck behind a newer big run"). A merged window is listed
    where its runs were, so newer runs still shadow it and it shadows older ones; a row is
    still rewritten about once per size class."""
    start = compaction_run(rows, fanout, base_rows)
    if start is not None:
        return start, len(rows)
    fanout = max(2, fanout)
    classes = [size_class(r, fanout, base_rows) for r in rows]
    for c in sorted(set(classes)):
        end = len(classes)
        while end > 0:
            while end > 0 and classes[end - 1] > c:
                end -= 1
            start = end
            while start > 0 and classes[start - 1] <= c:
                start -= 1
            if classes[start:end].count(c) >= fanout:
                return start, end
            end = start
    return None


class RowBlocks:
    """Memstore row blocks (Arrow tables in the block schema, oldest first) and a key -> row
    number index of their newest versions, built only when a lookup asks (`index`): a
    follower that never reads pays nothing, a leader folds in each block once."""

    __slots__ = ("tables", "_keys", "_index", "_offsets", "_indexed", "_rows")

    def __init__(self, tables: Sequence[pa.Table] = ()) -> None:
        self.tables: list[pa.Table] = []
        self._keys: list[list | None] = []  # the keys of a table, when its writer had them
        self._index: dict = {}
        self._offsets: list[int] = []
        self._indexed = 0
        self._rows = 0
        for t in tables:
            self.append(t)

    def append(self, table: pa.Table, keys: list | None = None) -> None:
        self.tables.append(table)
        self._keys.append(keys)
        self._offsets.append(self._rows)
        self._rows += table.num_rows

    def __len__(self) -> int:
        return len(self.tables)

    @property
    def num_rows(self) -> int:
        return self._rows

    def index(self, key_names: list[str]) -> dict:
        """key -> row number (over all tables) of its newest version here."""
        while self._indexed < len(self.tables):
            j = self._indexed
            t = self.tables[j]
            keys = self._keys[j]
            if keys is None:
                lists = [_to_python(t.column(k)) for k in key_names]
                keys = lists[0] if len(lists) == 1 else zip(*lists, strict=True)
            start = self._offsets[j]
            self._index.update(zip(keys, range(start, start + t.num_rows), strict=True))
            self._keys[j] = None
            self._indexed += 1
        return self._index

    def at(self, row: int) -> tuple[pa.Table, int]:
        """The table and its row number of row number `row`."""
        j = bisect.bisect_right(self._offsets, row) - 1
        return self.tables[j], row - self._offsets[j]


def _keys_of(inserts: list[tuple[list, pa.Table]]):
    for keys, _ in inserts:
        yield from keys


def _scalar(value, column) -> pa.Scalar:
    """A predicate's or key bound's value as the column's type; BAD_REQUEST when it does not
    fit (an int32 column compared with 2**40), not an internal error."""
    try:
        return pa.scalar(value, column.arrow_type)
    except (pa.ArrowInvalid, OverflowError, TypeError) as err:
        raise BadRequest(
            f"value {value!r} does not fit column {column.name!r} ({column.arrow_type}): {err}"
        ) from None


def _to_python(col: pa.ChunkedArray | pa.Array) -> list:
    # Timestamps live in the memstore as int64 microseconds: cheaper than datetime objects.
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.int64())
    return col.to_pylist()


# Tablets made and not yet in a compaction scheduler's listing: its rounds take the
# manager's list of every tablet only while one of these is RUNNING (compaction.py,
# "Changed tablets only"; issue 28). Weak: a tablet never listed is not kept alive here.
UNLISTED_LOCK = threading.Lock()
UNLISTED: weakref.WeakSet[Tablet] = weakref.WeakSet()


class Tablet:
    """A READY replica. Created by the TabletManager, which owns its lifecycle."""

    def __init__(
        self,
        fs: FsLayout,
        sb: SuperblockPB,
        cmeta: ConsensusMetaPB,
        appender: Appender,
        wal_opts: WalOptions,
        opts: TabletOptions,
    ) -> None:
        self.fs = fs
        self.tablet_id = sb.tablet_id
        self.sb = sb
        self.cmeta = cmeta
        # Held from copying `cmeta` to storing its successor: the driver (terms and votes)
        # and the apply thread (committed configs) both rewrite the file, and neither may
        # lose the other's change or share its temp file. A leaf lock: nothing else is
        # taken while it is held.
        self.cmeta_lock = threading.Lock()
        self.appender = appender
        self.wal_opts = wal_opts
        self.opts = opts
        self.schema = Schema(sb.schema)
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        # One flush at a time; a compaction holds it to pick its runs and to commit.
        self.flush_lock = threading.Lock()
        # Blocks being merged by compactions in progress (design/storage.md, "Key-disjoint
        # runs": a compaction of newer runs may go on beside one of older runs) and how
        # many are in progress (shutdown waits for none).
        self.compacting: set[str] = set()
        self.compactions_active = 0
        self.compaction_idle = threading.Condition(self.lock)
        self.status = TabletStatus.BOOTSTRAPPING
        self.error = ""
        self.wal: TabletLog | None = None
        self.blocks: list[BlockIndex] = []
        self.memstore: dict = {}
        self.frozen: dict | None = None
        # Row blocks (block schema) applied as a whole, oldest first, older than `memstore`.
        # A key in the dict is newer than in any of them; a later block newer than an earlier
        # one; tombstones (__deleted) only in a block put back by a failed flush.
        # `frozen_batches` are the ones being flushed with `frozen`.
        self.mem_batches = RowBlocks()
        self.frozen_batches = RowBlocks()
        # Whether the memstore (`memstore`, `mem_batches`) may hide a live row of an older
        # source: set by anything the dict takes (an update, a delete, an upsert, inserts
        # checked row by row) and by rows put back by a failed flush; False while it holds
        # only row blocks of new keys. `frozen_shadows`: the same of the memstore being
        # flushed. A flush of a memstore that hides nothing marks its block so
        # (`block_metadata`), for unordered scans (`scan_pieces`).
        self.mem_shadows = False
        self.frozen_shadows = False
        self.pending: dict = {}
        self.inflight = 0  # writes proposed here and not applied yet
        self.waiters: dict[int, _Inflight] = {}  # index -> write proposed here
        # Writes proposed here and not applied yet, by request id: a resend waits for them.
        self.waiting_rids: dict[RequestId, _Inflight] = {}
        # Applied writes by request id (replicated state; persisted as of the flushed index).
        self.dedup = DedupTable()
        # Called (under the tablet lock) after a write's rows are applied: the manager's
        # maintenance looks at written tablets only, not every tablet every round.
        self.on_written: Callable[[Tablet], None] | None = None
        # Told when applying an entry fails the tablet (its heartbeat report changes).
        self.on_failed: Callable[[Tablet], None] | None = None
        # Told (no lock held) when its blocks changed (a flush), a compaction ended
        # (committed, gave up or failed: the runs it held are free again) or it shut down:
        # the compaction scheduler looks at such tablets only, not every tablet every round
        # (issue 28); until one lists it, it is in UNLISTED.
        self.on_blocks: list[Callable[[Tablet], None]] = []
        self.barrier = False
        self.switching = False  # an alter is flushing and switching the schema
        self.copy_anchors = 0  # tablet copy sessions reading this replica's files
        self.applied_index = 0
        self.applied_term = 0
        # Raft, as the driver last reported it (soft state) and the group driving it.
        self.group = None  # tservers.raft_driver.RaftGroup once started
        self.role = Role.FOLLOWER
        self.leader_uuid: str | None = None
        self.soft_term = 0
        self.writes = 0
        self.rows_written = 0
        # Scans that merge blocks: chunks and blocks read and skipped by key range or
        # min/max (stats.prune); tests and metrics read them.
        self.scan_chunks_total = 0
        self.scan_chunks_skipped = 0
        self.scan_blocks_skipped = 0
        # Slabs of those scans passed through as slices of one source (no sort, no take:
        # merge.merge_slabs' direct slabs) and slabs merged, and their rows. Their own lock:
        # a scan adds them when its generator ends, which may be its finalizer, run on any
        # thread at any moment (one holding the tablet lock too).
        self._scan_counts_lock = threading.Lock()
        self.scan_slabs_direct = 0
        self.scan_rows_direct = 0
        self.scan_rows_unmerged = 0  # an unordered scan's rows of blocks not merged
        self.scan_slabs_merged = 0
        self.scan_rows_merged = 0
        with UNLISTED_LOCK:
            UNLISTED.add(self)

    # ================================================================ bootstrap
    def bootstrap(self, *, wal_synced: bool = False) -> list[LogEntryPB]:
        """Load blocks and open the WAL; returns the WAL entries above the flushed index.
        They are not applied here: the Raft driver hands them back once it knows they are
        committed (a follower's tail may be truncated by a new leader). Raises on any
        failure; the manager then leaves the tablet FAILED. `wal_synced`: the file system
        was synced since the crash (start-up: `TabletLog.open`'s `synced`)."""
        data_dir = self.fs.data_dir(self.tablet_id)
        # Blocks of a flush or compaction that crashed before or after its superblock write,
        # their filters, temporary files. A listed block's filter stays (rebuilt if absent).
        listed = set(self.sb.blocks)
        listed.update(bloom_name(n) for n in self.sb.blocks)
        listed.update(stats_name(n) for n in self.sb.blocks)
        try:
            names = os.listdir(data_dir)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        for name in names:
            if name not in listed:
                log.info("tablet %s: removing orphan data file %s", self.tablet_id, name)
                (data_dir / name).unlink()
        for name in self.sb.blocks:
            self.blocks.append(self._open_block(name))
        bad = check_runs(self.blocks)
        if bad is not None:
            raise Corruption(f"tablet {self.tablet_id}: superblock lists {bad}")
        wal, entries = TabletLog.open(
            self.fs.wal_dir(self.tablet_id), self.tablet_id, self.wal_opts, synced=wal_synced
        )
        self.wal = wal
        flushed = self.sb.flushed_index
        self.applied_index = flushed
        self.applied_term = self.sb.flushed_term
        self.dedup = DedupTable.from_pb(self.sb.dedup)
        # Entries of another schema version are possible on a replica (the leader was
        # altered before or after it); apply_entry handles them.
        above = [e for e in entries if e.index > flushed]
        # Debug: at start-up thousands of tablets open at once (the manager logs a summary).
        log.debug(
            "tablet %s: %d blocks, %d WAL entries above flushed index %d",
            self.tablet_id,
            len(self.blocks),
            len(above),
            flushed,
        )
        return above

    def snapshot_op_id(self) -> OpId:
        """The Raft snapshot point: the flushed op id (everything at or below is in blocks)."""
        if self.sb.flushed_index == 0:
            return OpId(0, 0)
        return OpId(self.sb.flushed_term, self.sb.flushed_index)

    def _key_names(self, schema: Schema | None = None) -> list[str]:
        return [block_name(c.id) for c in (schema or self.schema).key_columns]

    def _open_block(self, name: str) -> BlockIndex:
        return BlockIndex.open(self.fs.data_dir(self.tablet_id), name, self._key_names())

    # ================================================================ writes
    def write(
        self,
        schema_version: int,
        blocks: list[tuple[int, bytes]],
        deadline: float,
        rid: RequestId | None = None,
    ) -> WriteResult:
        """Propose a write and wait until it is applied. With a request id `rid`: a write
        applied already (a resend) is answered as it was, never applied twice."""
        if not blocks:
            raise BadRequest("write has no rows")
        total = sum(len(b) for _, b in blocks)
        if total > WRITE_BYTES_MAX:
            raise BadRequest(f"write of {total} bytes exceeds {WRITE_BYTES_MAX}")
        self._check_running()
        if schema_version != self.schema.version:
            raise SchemaVersionMismatch(
                f"schema mismatch: write uses version {schema_version}, tablet {self.tablet_id} "
                f"has version {self.schema.version}"
            )
        # Every block decoded and fully validated (Arrow's own full validation and the
        # schema's rules) before anything is proposed: nothing that fails it reaches the
        # WAL, so no replica is ever handed it to apply or replay.
        decoded = self._validate_blocks(blocks, lenient=False)
        nrows = sum(b.num_rows for b in decoded)
        # INSERTs only (a bulk load): checked and kept as Arrow row blocks, only the keys
        # made Python objects; anything else is decoded into Python rows.
        inserts = self._insert_tables(decoded)
        ops = None
        if inserts is None:
            ops = [self._decode(b) for b in decoded]
        op = WriteOpPB(
            schema_version=schema_version,
            blocks=[RowBlockPB(op=op, arrow_ipc=data) for op, data in blocks],
        )
        if rid is not None:
            op.request_id.CopyFrom(rid.to_pb())
        payload = op.SerializeToString()
        result, new = self._propose_wait(
            schema_version, payload, decoded, ops, inserts, deadline, rid, nrows
        )
        if new:
            with self.lock:
                self.writes += 1
                self.rows_written += nrows
        return result

    def _wait_leadership_locked(self, deadline: float) -> None:
        """Return when this replica leads and has applied an entry of its term (so every
        earlier entry is in its state and validation against it is exact); raise NotLeader
        with a hint when another server leads; wait (bounded) while an election runs."""
        limit = min(deadline, time.monotonic() + LEADER_WAIT_S)
        while True:
            self._check_running_locked()
            if self.role is Role.LEADER and self.applied_term == self.soft_term:
                return
            leader = self.leader_uuid
            if self.role is not Role.LEADER and leader and leader != self.fs.uuid:
                raise self.group.driver.not_leader(self.tablet_id, leader)
            remaining = limit - time.monotonic()
            if remaining <= 0:
                if self.role is Role.LEADER:
                    raise Unavailable(
                        f"tablet {self.tablet_id}: leader still applying its first entry",
                        retry_after_ms=100,
                    )
                raise self.group.driver.not_leader(self.tablet_id, None)
            self.cond.wait(remaining)

    def _propose_wait(
        self,
        schema_version: int,
        payload: bytes,
        decoded: list[Block],
        ops: list[_Op] | None,
        inserts: list[tuple[list, pa.Table]] | None,
        deadline: float,
        rid: RequestId | None,
        nrows: int,
    ) -> tuple[WriteResult, bool]:
        """The write's answer, and whether it was applied by this call (False: a resend of
        a write applied or in flight already)."""
        g = self.group
        assert g is not None, "tablet is not driven by raft"
        with self.lock:
            while self.barrier:
                if not self.cond.wait(max(0.0, deadline - time.monotonic())):
                    raise TimedOut(f"tablet {self.tablet_id}: schema change in progress")
            self._wait_leadership_locked(deadline)
            early: _Inflight | None = None
            # Every entry of earlier terms is applied now: `dedup` knows whether the write
            # landed before; one proposed in this term and not applied yet is in
            # `waiting_rids`. Either way it is not proposed again (its rows not checked
            # again: an INSERT that landed must not come back ALREADY_EXISTS).
            if rid is not None:
                seen = self.dedup.lookup(rid)
                if seen is STALE:
                    raise _stale(self.tablet_id, rid)
                if seen is not None:
                    return _done_result(seen), False
                earlier = self.waiting_rids.get(rid)
                if earlier is not None:
                    early = earlier  # waited for outside the lock (nothing is proposed)
            if early is None:
                inflight = self._propose_locked(
                    g, schema_version, payload, decoded, ops, inserts, rid, nrows
                )
        if early is not None:
            return self._await(early, deadline), False
        g.wake()
        result = self._await(inflight, deadline)
        return result, result.op_id.index == inflight.index

    def _propose_locked(
        self,
        g,
        schema_version: int,
        payload: bytes,
        decoded: list[Block],
        ops: list[_Op] | None,
        inserts: list[tuple[list, pa.Table]] | None,
        rid: RequestId | None,
        nrows: int,
    ) -> _Inflight:
        """Check the write against the state and propose it (caller holds the lock and has
        waited for leadership)."""
        if schema_version != self.schema.version:
            raise BadRequest(
                f"schema mismatch: tablet {self.tablet_id} schema changed to "
                f"version {self.schema.version}"
            )
        changes: dict | None = None
        if inserts is None or not self._all_new(inserts, self.pending):
            if ops is None:
                # Inserts of a key that exists, is pending or repeats: row by row, for
                # the error (or a key deleted by a write still pending: allowed).
                ops = [self._decode(b) for b in decoded]
            changes = self._prepare(ops)
            inserts = None
        # Only a write whose every block was validated, against this very schema, is
        # proposed (to the WAL).
        assert len(ops if changes is not None else inserts) == len(decoded), "unvalidated"
        assert all(b.schema.version == schema_version for b in decoded), "another schema"
        res = g.propose(payload)
        if res.status is not ProposalStatus.OK:
            raise _proposal_error(self.tablet_id, res, g)
        inflight = _Inflight(res.index, res.term, changes, inserts, rid, nrows)
        self.waiters[res.index] = inflight
        if rid is not None:
            self.waiting_rids[rid] = inflight
        self.inflight += 1
        if changes is not None:
            for k, v in changes.items():
                self.pending[k] = (res.index, v)
        else:
            for keys, table in inserts:
                # The row lives in the block until applied (`_current_row` reads it).
                self.pending.update(zip(keys, itertools.repeat((res.index, table))))
        return inflight

    def _await(self, inflight: _Inflight, deadline: float) -> WriteResult:
        """The answer of a write proposed here, once its entry is applied."""
        if not inflight.event.wait(max(deadline - time.monotonic(), 0.0)):
            # Still in flight: it may yet commit; the caller must not assume either outcome.
            raise TimedOut(f"write to tablet {self.tablet_id} not committed before the deadline")
        if inflight.error is not None:
            raise inflight.error
        assert inflight.result is not None, "a write answered without a result"
        return inflight.result

    def change_config(
        self, change: ConfigChange, address: str, cas_config_index: int | None, deadline: float
    ) -> None:
        """AddServer / RemoveServer / ChangeRole at the leader; returns once the CONFIG entry
        is committed and applied here (consensus metadata then holds the new config)."""
        g = self.group
        assert g is not None, "tablet is not driven by raft"
        if address:
            g.driver.learn_addresses({change.uuid: address})
        with self.lock:
            self._check_running_locked()
            res = g.change_config(change, cas_config_index)
            if res.status is not ProposalStatus.OK:
                raise _proposal_error(self.tablet_id, res, g)
            inflight = _Inflight(res.index, res.term, {})
            self.waiters[res.index] = inflight
            self.inflight += 1
        g.wake()
        if not inflight.event.wait(max(deadline - time.monotonic(), 0.0)):
            raise TimedOut(
                f"config change of tablet {self.tablet_id} not committed before the deadline"
            )
        if inflight.error is not None:
            raise inflight.error

    # ================================================================ raft driver callbacks
    def apply_entry(self, e: Entry) -> None:
        """Driver thread, in index order: apply a committed entry to the memstore and answer
        the writer that proposed it (OK when the term matches, else NOT_LEADER: lost)."""
        if e.entry_type is ConsensusEntryType.WRITE and e.index in self.waiters:
            crash_point("write.after_sync_before_apply")  # a new write, not a replay
        with self.lock:
            limit = time.monotonic() + SCHEMA_CATCH_UP_S
            while self.switching and time.monotonic() < limit:
                self.cond.wait(max(0.0, limit - time.monotonic()))
            w = self.waiters.pop(e.index, None)
            if w is not None and w.rid is not None and self.waiting_rids.get(w.rid) is w:
                del self.waiting_rids[w.rid]
            try:
                if e.entry_type is ConsensusEntryType.WRITE:
                    self._apply_write_locked(e, w)
                elif e.entry_type is ConsensusEntryType.CONFIG:
                    self._apply_config_locked(e)
                self.applied_index = e.index
                self.applied_term = e.term
            except Exception as err:
                log.exception("tablet %s: applying entry %d failed", self.tablet_id, e.index)
                self.status = TabletStatus.FAILED
                self.error = f"applying entry {e.index} failed: {err}"
                if self.on_failed is not None:
                    self.on_failed(self)
                if w is not None:
                    w.error = TabletFailed(f"tablet {self.tablet_id}: {self.error}")
            if w is not None:
                self.inflight -= 1
                if w.error is None and w.term != e.term:
                    w.error = NotLeader(
                        f"write to tablet {self.tablet_id} lost: index {e.index} was "
                        f"committed in term {e.term}, not {w.term}; retry at the leader"
                    )
                w.event.set()
            self.cond.notify_all()

    def _apply_write_locked(self, e: Entry, w: _Inflight | None) -> None:
        """Apply a WRITE entry, or nothing if its request id was applied already (a resend:
        decided from the entry and the replicated dedup table only, so the same on every
        replica and at replay); answer `w` if it proposed this very entry."""
        mine = w is not None and w.term == e.term
        op: WriteOpPB | None = None
        if mine:
            rid = w.rid  # the one in the entry
        else:
            try:
                op = WriteOpPB.FromString(e.payload)
            except DecodeError as err:
                raise Corruption(f"entry {e.index} of tablet {self.tablet_id}: {err}") from err
            rid = RequestId.from_pb(op.request_id) if op.HasField("request_id") else None
        if rid is not None:
            seen = self.dedup.lookup(rid)
            if seen is not None:
                log.info(
                    "tablet %s: entry %d is write %d of client %s again (%s): not applied",
                    self.tablet_id,
                    e.index,
                    rid.seq,
                    rid.client_id.hex(),
                    "forgotten" if seen is STALE else f"applied at index {seen.index}",
                )
                if mine:
                    self._unpend_locked(e.index, w)
                    if seen is STALE:
                        w.error = _stale(self.tablet_id, rid)
                    else:
                        w.result = _done_result(seen)
                return
        rows = self._apply_write_rows_locked(e, w if mine else None, op)
        on_written = self.on_written
        if on_written is not None:
            on_written(self)
        if rid is not None:
            self.dedup.record(rid, Done(e.term, e.index, rows))
        if mine:
            w.result = WriteResult(OpIdPB(term=e.term, index=e.index), rows)

    def _unpend_locked(self, index: int, w: _Inflight) -> None:
        """Drop the validation state of the write proposed here at `index`."""
        pending = self.pending
        for k in w.changes if w.changes is not None else _keys_of(w.inserts):
            p = pending.get(k)
            if p is not None and p[0] == index:
                del pending[k]

    def _apply_write_rows_locked(self, e: Entry, w: _Inflight | None, op: WriteOpPB | None) -> int:
        """Apply the rows of a WRITE entry (`w`: proposed here, in this term; else `op` is
        the decoded entry); returns how many rows it holds."""
        if w is not None:
            # Proposed here: validated in log order against this very state.
            changes = w.changes
            self._unpend_locked(e.index, w)
            if changes is None:
                for keys, table in w.inserts:
                    self._apply_batch(keys, table)
                return w.rows
            rows = w.rows
        else:
            assert op is not None
            if op.schema_version > self.schema.version:
                # The coordinator alters every replica one after the other: the leader may be
                # ahead of this one for a moment. Wait (bounded) for this replica's alter.
                limit = time.monotonic() + SCHEMA_CATCH_UP_S
                while op.schema_version > self.schema.version:
                    remaining = limit - time.monotonic()
                    if remaining <= 0:
                        raise Corruption(
                            f"entry {e.index} has schema version {op.schema_version}, tablet "
                            f"has {self.schema.version} (no alter came within "
                            f"{SCHEMA_CATCH_UP_S:.0f} s)"
                        )
                    self.cond.wait(remaining)
            # An older version (this replica was altered first) applies by column name:
            # dropped columns are ignored, added ones (nullable) are null.
            lenient = op.schema_version < self.schema.version
            try:
                # The leader validated every block before proposing it; the same check here
                # means an entry that fails it is corruption, never a crash.
                decoded = self._validate_blocks(
                    [(b.op, b.arrow_ipc) for b in op.blocks], lenient=lenient
                )
                batches = self._insert_tables(decoded, with_keys=False)
            except BadRequest as err:
                raise Corruption(
                    f"entry {e.index} (term {e.term}) of tablet {self.tablet_id} holds a row "
                    f"block that fails validation: {err}"
                ) from err
            if batches is not None:
                # INSERTs only, validated by the leader that proposed them against this same
                # log prefix: new keys. Kept as Arrow row blocks (no Python row objects on a
                # follower's bulk load), their keys not indexed until a leader needs them.
                for keys, table in batches:
                    self._apply_batch(keys, table, index=False)
                return sum(b.num_rows for b in decoded)
            ops = [self._decode(b) for b in decoded]
            try:
                changes = self._prepare(ops, pending={})
            except (AlreadyExists, NotFound) as err:
                raise Corruption(f"replay of entry {e.index} diverged: {err}") from err
            rows = sum(b.num_rows for b in decoded)
        self._apply(changes)
        return rows

    def _apply_config_locked(self, e: Entry) -> None:
        assert e.config is not None
        addresses = dict(self.group.driver.addresses) if self.group else {}
        addresses[self.fs.uuid] = self.group.driver.address if self.group else ""
        with self.cmeta_lock:
            cm = ConsensusMetaPB()
            cm.CopyFrom(self.cmeta)
            for p in cm.committed_config.peers:
                addresses.setdefault(p.uuid, p.address)
            cm.committed_config.CopyFrom(config_to_pb(e.config, e.index, addresses))
            self.fs.write_cmeta(cm)
            self.cmeta = cm

    def wait_leader_ready(self, deadline: float) -> bool:
        """Wait until this replica leads and has applied its term's first entry."""
        with self.lock:
            while not (self.role is Role.LEADER and self.applied_term == self.soft_term):
                if self.status is not TabletStatus.RUNNING:
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.cond.wait(remaining)
            return True

    def on_soft_state(self, s: SoftState) -> None:
        with self.lock:
            if s.role is not Role.LEADER or s.term != self.soft_term:
                # Validation state of a past leadership: entries it covered are either
                # applied by now or will be, checked again, from the log.
                self.pending.clear()
            self.role = s.role
            self.leader_uuid = s.leader_uuid
            self.soft_term = s.term
            self.cond.notify_all()

    def persist_hard_state(self, hs: HardState) -> None:
        with self.cmeta_lock:
            cm = hard_state_meta(self.cmeta, hs)
            self.fs.write_hard_states([cm])  # durable before any message that depends on it
            self.cmeta = cm

    def fail(self, reason: str) -> None:
        with self.lock:
            self.status = TabletStatus.FAILED
            self.error = reason
            for w in self.waiters.values():
                w.error = TabletFailed(f"tablet {self.tablet_id} failed: {reason}")
                w.event.set()
            self.waiters.clear()
            self.waiting_rids.clear()
            self.inflight = 0
            self.cond.notify_all()
        log.error("tablet %s: failed: %s", self.tablet_id, reason)

    def _apply_batch(self, keys: list | None, table: pa.Table, *, index: bool = True) -> None:
        """New rows of keys none of which is live: a memstore row block. A tombstone of such a
        key in the dict is older than the block, and the dict must stay the newest layer.
        `keys` (None: read from the block when a lookup needs them) feed the row blocks'
        index; `index` is kept for callers and means nothing more now."""
        del index
        mem = self.memstore
        if mem:
            if keys is None:
                keys = self._key_lists(table)
            if not mem.keys().isdisjoint(keys):
                for k in keys:
                    mem.pop(k, None)
        self.mem_batches.append(table, keys)

    def _apply(self, changes: dict) -> None:
        if changes:
            self.mem_shadows = True
        self.memstore.update(changes)

    # ================================================================ lookups
    def _mem_layers_locked(self) -> list:
        """The memstore's layers, newest first: dicts and RowBlocks (caller holds the lock)."""
        return [self.memstore, self.mem_batches, self.frozen or {}, self.frozen_batches]

    def _locate_mem(self, want: set, layers: list, key_names: list[str]) -> dict:
        """Where the newest version of each key of `want` is in the memstore `layers` (newest
        first): key -> None (a tombstone), ("row", tuple) or ("t", table, row number). Keys
        no layer holds are left out. Caller holds the lock (dicts change under it)."""
        out: dict = {}
        want = set(want)
        for layer in layers:
            if not want:
                break
            if isinstance(layer, dict):
                if not layer:
                    continue
                hit = [k for k in want if k in layer]
                for k in hit:
                    v = layer[k]
                    out[k] = None if v is None else ("row", v)
            else:
                if not len(layer):
                    continue
                idx = layer.index(key_names)
                hit = [k for k in want if k in idx]
                for k in hit:
                    t, i = layer.at(idx[k])
                    out[k] = None if t.column(DELETED_FIELD)[i].as_py() else ("t", t, i)
            want.difference_update(hit)
        return out

    @staticmethod
    def _locate_blocks(want: set, blocks: Sequence[BlockIndex]) -> dict:
        """Where the newest version of each key of `want` is in `blocks` (oldest first): key ->
        None (a tombstone) or ("b", block, row number); keys in no block are left out. Blocks
        are asked newest first, each only for the keys still unknown. From VECTOR_KEYS_MIN
        keys of a one-column key on, vectorized (`BlockIndex.locate_many`: the keys hashed
        once as an Arrow array, range, filter and binary search per block in Arrow
        kernels); fewer keys or a composite key one by one (range, filter, bisect). Needs
        no lock: blocks are immutable."""
        out: dict = {}
        if not want or not blocks:
            return out
        left = list(want)
        lo, hi = min(left), max(left)
        key_type = blocks[-1].key_type
        keys = hashes = None
        # A few keys (a point read, a small write) cost less one by one than the fixed
        # cost of the Arrow kernels per block.
        if key_type is not None and len(left) >= VECTOR_KEYS_MIN:
            try:
                left.sort()
                keys = pa.array(left, key_type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
                keys = None  # a key of another type than the blocks': the per-key path
        if keys is not None:
            # `left` sorted: each block's keys are one slice of it (two bisects), so a key
            # is checked (filter, binary search) only against the one block of each run
            # whose range holds it, not against every block.
            hashes = Probe(hash_array(keys))  # the filter masks, once for every block
            for run in reversed(runs_of(blocks)):
                if not left:
                    break
                found: list[int] = []
                for b in run:  # key-disjoint: at most one holds a key
                    if b.min_key is None or b.max_key < lo or b.min_key > hi:
                        continue
                    if b.key_type != key_type:  # cannot happen (keys never change type)
                        raise Corruption(f"block {b.name} has key type {b.key_type}")
                    a = bisect.bisect_left(left, b.min_key)
                    z = bisect.bisect_right(left, b.max_key, a)
                    if a >= z:
                        continue
                    pos, rows, dels = b.locate_many(keys.slice(a, z - a), hashes.slice(a, z - a))
                    for i, r, d in zip(pos, rows, dels, strict=True):
                        out[left[a + i]] = None if d else ("b", b, r)
                        found.append(a + i)
                if not found:
                    continue
                gone = set(found)
                remain = [i for i in range(len(left)) if i not in gone]
                left = [left[i] for i in remain]
                ix = pa.array(remain, pa.int64())
                keys = keys.take(ix)
                hashes = hashes.take(ix)
            return out
        left_set = set(left)
        hashes_d: dict = {}
        for b in reversed(blocks):
            if not left_set:
                break
            if b.min_key is None or b.max_key < lo or b.min_key > hi:
                continue
            found = []
            for k in left_set:
                if k < b.min_key or k > b.max_key:
                    continue
                h = hashes_d.get(k)
                if h is None:
                    h = hashes_d[k] = key_hash(k)
                i = b.find(k, h)
                if i is not None:
                    found.append(k)
                    out[k] = None if b.deleted(i) else ("b", b, i)
            left_set.difference_update(found)
        return out

    def _locate_locked(self, want: set) -> dict:
        """`_locate_mem` then `_locate_blocks` over the current state (caller holds the lock):
        key -> None or the location of its live row; keys without any version left out."""
        out = self._locate_mem(want, self._mem_layers_locked(), self._key_names())
        if len(out) < len(want):
            out.update(self._locate_blocks(want.difference(out), self.blocks))
        return out

    def _row_at(self, loc: tuple, schema: Schema | None = None) -> tuple:
        """The row (schema order, timestamps as int64) at a location `_locate_*` gave."""
        if loc[0] == "row":
            return loc[1]
        t = loc[1].table if loc[0] == "b" else loc[1]
        one = self._adapt(t.slice(loc[2], 1), schema) if loc[0] == "b" else t.slice(loc[2], 1)
        ncols = len((schema or self.schema).columns)
        return tuple(_to_python(one.column(i))[0] for i in range(ncols))

    def _check_running(self) -> None:
        with self.lock:
            self._check_running_locked()

    def _check_running_locked(self) -> None:
        if self.status is TabletStatus.RUNNING:
            return
        if self.status is TabletStatus.FAILED:
            raise TabletFailed(f"tablet {self.tablet_id} failed: {self.error}")
        if self.status is TabletStatus.TOMBSTONED:
            raise TabletDeleted(f"tablet {self.tablet_id} is deleted")
        raise Unavailable(f"tablet {self.tablet_id} is {self.status.value}", retry_after_ms=100)

    def _validate_blocks(self, blocks: list[tuple[int, bytes]], *, lenient: bool) -> list[Block]:
        """Decode and fully validate every row block against the schema
        (`tservers.tablet.validate`), at most ROWS_PER_WRITE_MAX rows in all; BadRequest
        naming the column otherwise. `lenient`: a committed entry of an older schema version
        (columns dropped since are left out)."""
        schema = self.schema  # one version for every block (an alter may switch it)
        out: list[Block] = []
        rows = 0
        for op, data in blocks:
            b = decode_block(op, data, schema, lenient=lenient, rows_max=ROWS_PER_WRITE_MAX - rows)
            rows += b.num_rows
            out.append(b)
        return out

    def _decode(self, block: Block) -> _Op:
        """A validated row block as Python keys and rows."""
        schema = block.schema
        op = block.op
        given = block.columns
        n = block.num_rows
        nk = schema.num_keys
        key_lists = [_to_python(given[i]) for i in range(nk)]
        keys = key_lists[0] if nk == 1 else list(zip(*key_lists, strict=True))
        rows: list = []
        present: tuple[int, ...] = ()
        if op in (OpType.INSERT, OpType.UPSERT):
            cols = []
            for i, c in enumerate(schema.columns):
                if i < nk:
                    cols.append(key_lists[i])
                elif i in given:
                    cols.append(_to_python(given[i]))
                elif c.nullable:
                    cols.append([None] * n)
                else:
                    raise BadRequest(
                        f"non-nullable column {c.name!r} missing from {OpType.Name(op)}"
                    )
            rows = list(zip(*cols, strict=True))
        elif op == OpType.UPDATE:
            present = tuple(sorted(i for i in given if i >= nk))
            rows = (
                list(zip(*[_to_python(given[i]) for i in present], strict=True))
                if present
                else [()] * n
            )
        return _Op(op, keys, rows, present)

    def _insert_blocks(
        self, blocks: list[tuple[int, bytes]], lenient: bool, *, with_keys: bool = True
    ) -> list[tuple[list | None, pa.Table]] | None:
        """`_insert_tables` of the blocks, decoded and validated (BadRequest)."""
        return self._insert_tables(self._validate_blocks(blocks, lenient=lenient), with_keys)

    def _insert_tables(
        self, decoded: list[Block], with_keys: bool = True
    ) -> list[tuple[list | None, pa.Table]] | None:
        """A write (or committed entry) of INSERTs only, as (keys, row block in the block
        schema) per block; None if it has another operation. Without `with_keys` the keys
        are None (not made Python objects)."""
        if not all(b.op == _INSERT for b in decoded):
            return None
        out = []
        for b in decoded:
            schema = b.schema
            nk = schema.num_keys
            given = b.columns
            n = b.num_rows
            arrays = []
            for i, c in enumerate(schema.columns):
                col = given.get(i)
                if col is None:
                    if not c.nullable:
                        raise BadRequest(f"non-nullable column {c.name!r} missing from INSERT")
                    col = pa.nulls(n, c.arrow_type)
                arrays.append(col)
            arrays.append(_all_false(n))
            keys = None
            if with_keys:
                key_lists = [_to_python(given[i]) for i in range(nk)]
                keys = key_lists[0] if nk == 1 else list(zip(*key_lists, strict=True))
            out.append((keys, pa.Table.from_arrays(arrays, schema=schema.block_schema())))
        return out

    def _all_new(self, inserts: list[tuple[list, pa.Table]], pending: dict) -> bool:
        """No key of `inserts` repeats, is live or is in `pending` (caller holds the lock):
        they can be applied as row blocks, with nothing to check row by row."""
        every: set = set()
        total = 0
        for keys, _ in inserts:
            every.update(keys)
            total += len(keys)
        if len(every) != total or (pending and not pending.keys().isdisjoint(every)):
            return False
        return all(v is None for v in self._locate_locked(every).values())

    def _prepare(self, ops: list[_Op], pending: dict | None = None) -> dict:
        """Check every row against the state (caller holds the lock) and the writes
        proposed but not applied yet (`pending`, default the leader's); returns key -> final
        row (None: deleted). Raises before changing anything."""
        local: dict = {}
        if pending is None:
            pending = self.pending
        # Every key's newest committed version, looked up once for the whole write.
        every: set = set()
        for o in ops:
            every.update(o.keys)
        state = self._locate_locked(every)
        live = {k for k, v in state.items() if v is not None}
        missing = object()

        def exists(k) -> bool:
            v = local.get(k, missing)
            if v is not missing:
                return v is not None
            p = pending.get(k)
            if p is not None:
                return p[1] is not None
            return k in live

        for o in ops:
            if o.op == OpType.INSERT and not local:
                # Fast path, all in C: unique keys, none live, none pending.
                kset = set(o.keys)
                if (
                    len(kset) == len(o.keys)
                    and live.isdisjoint(kset)
                    and (not pending or pending.keys().isdisjoint(kset))
                ):
                    local.update(zip(o.keys, o.rows, strict=True))
                    continue
            if o.op == OpType.INSERT:
                for k, row in zip(o.keys, o.rows, strict=True):
                    if exists(k):
                        raise AlreadyExists(
                            f"key {k!r} already exists in tablet {self.tablet_id}; nothing written"
                        )
                    local[k] = row
            elif o.op == OpType.UPSERT:
                local.update(zip(o.keys, o.rows, strict=True))
            elif o.op == OpType.DELETE:
                for k in o.keys:
                    if not exists(k):
                        raise NotFound(
                            f"key {k!r} not found in tablet {self.tablet_id}; nothing written"
                        )
                    local[k] = None
            else:  # UPDATE
                for k in o.keys:
                    if not exists(k):
                        raise NotFound(
                            f"key {k!r} not found in tablet {self.tablet_id}; nothing written"
                        )
                for k, vals in zip(o.keys, o.rows, strict=True):
                    old = self._current_row(k, local, state, pending)
                    row = list(old)
                    for i, v in zip(o.present, vals, strict=True):
                        row[i] = v
                    local[k] = tuple(row)
        return local

    def _current_row(self, k, local: dict, state: dict, pending: dict) -> tuple:
        if k in local:
            return local[k]
        p = pending.get(k)
        if p is not None:
            v = p[1]
            if isinstance(v, pa.Table):  # an insert still in flight, as a row block
                row: dict = {}
                self._rows_of(v, {k}, row)
                return row[k]
            return v
        return self._row_at(state[k])

    def _rows_of(self, t: pa.Table, want: set, out: dict) -> None:
        """Move the keys of `want` found in `t` (block schema) out of it; live ones' rows
        into `out`."""
        nk = self.schema.num_keys
        first = [k if nk == 1 else k[0] for k in want]
        kcol = t.column(block_name(self.schema.columns[0].id))
        sub = t.filter(pc.is_in(kcol, value_set=pa.array(first, type=kcol.type)))
        cols = [_to_python(sub.column(i)) for i in range(len(self.schema.columns))]
        deleted = sub.column(DELETED_FIELD).to_pylist()
        for j, row in enumerate(zip(*cols, strict=True)) if cols else ():
            k = row[0] if nk == 1 else tuple(row[:nk])
            if k in want:
                want.discard(k)
                if not deleted[j]:
                    out[k] = row

    # ================================================================ flush / compaction
    def flush(self) -> bool:
        """Write the memstore as a new block; returns False when there was nothing to flush."""
        with self.flush_lock:
            with self.lock:
                if self.status is not TabletStatus.RUNNING:
                    return False
                if not self.memstore and not self.mem_batches:
                    return False
                frozen = self.memstore
                frozen_batches = self.mem_batches
                shadows = self.mem_shadows
                self.memstore = {}
                self.frozen = frozen
                self.mem_batches = RowBlocks()
                self.frozen_batches = frozen_batches
                self.frozen_shadows = shadows
                self.mem_shadows = False
                index = self.applied_index
                index_term = self.applied_term
                dedup = self.dedup.to_pb()  # as of `index`, persisted with it
                block_id = self.sb.next_block_id
            try:
                parts = list(frozen_batches.tables)
                if frozen:
                    parts.append(self._memtable(frozen, with_deleted=True))
                table = self._merge([], parts, keep_deleted=True)
                name = block_file_name(block_id)
                # The mark rides in the file's schema (`BlockIndex.open` reads it).
                table = table.replace_schema_metadata(block_metadata(not shadows))
                self._write_block(name, table)
                opened = self._open_block(name)  # writes its filter
                crash_point("flush.after_block_write")
                with self.lock:
                    sb = SuperblockPB()
                    sb.CopyFrom(self.sb)
                    sb.blocks.append(name)
                    sb.flushed_index = index
                    sb.flushed_term = index_term
                    del sb.dedup[:]
                    sb.dedup.extend(dedup)
                    sb.next_block_id = block_id + 1
                    self.fs.write_superblock(sb)
                    self.sb = sb
                    self.blocks.append(opened)
                    self.frozen = None
                    self.frozen_batches = RowBlocks()
                    self.frozen_shadows = False
                crash_point("flush.after_superblock")
            except Exception:
                with self.lock:
                    # Put the rows back so nothing is lost from view (the WAL still has them),
                    # in their order: the old dict becomes a row block (tombstones kept)
                    # between the old row blocks and the ones applied since.
                    restored = list(frozen_batches.tables)
                    if frozen:
                        restored.append(self._memtable(frozen, with_deleted=True))
                    self.mem_batches = RowBlocks(restored + self.mem_batches.tables)
                    self.mem_shadows = self.mem_shadows or shadows
                    self.frozen = None
                    self.frozen_batches = RowBlocks()
                    self.frozen_shadows = False
                raise
            self._blocks_changed()
            assert self.wal is not None
            # Lagging peers may still need entries below the flushed index (WAL retention);
            # a tablet copy session in progress needs every segment it listed.
            gc_index = self.group.compact_for_flush(index) if self.group is not None else index
            if not self.copy_anchors:
                self.wal.gc(gc_index)
            log.info(
                "tablet %s: flushed %d rows to %s (flushed index %d)",
                self.tablet_id,
                table.num_rows,
                name,
                index,
            )
            return True

    def compaction_plan(
        self,
        *,
        tiered: bool = True,
        rows_max: int | None = None,
        pick: Callable[[list[list[BlockIndex]]], int | None] | None = None,
        runs_max: int | None = None,
    ) -> list[list[BlockIndex]]:
        """The runs `compact` would merge now ([] when none): the runs newer than every run
        a compaction in progress merges, and of those the adjacent runs `compaction_window`
        picks (`tiered`) or all (a full compaction: only when no compaction is in progress).
        With `runs_max` (tiered), at most that many of them, the oldest (a pile of one
        class longer than a merge takes: the rest, newer, stay smaller than the output, in
        the order size-tiering keeps). With `rows_max` (tiered), only the newest of those
        that hold at most `rows_max` rows together, if at least two (runs of a class that
        piled up during a long merge are so merged a few at a time). `pick` (tiered): where
        the newest runs to merge start among those runs (oldest first), or None, in place
        of `compaction_window` (the scheduler's key-overlap policy, compaction.py). Caller
        holds the lock or accepts a stale answer."""
        runs = runs_of(list(self.blocks))
        free = 0
        for i, r in enumerate(runs):
            if any(b.name in self.compacting for b in r):
                free = i + 1
        if not tiered and free:
            return []
        runs = runs[free:]
        if len(runs) < 2:
            return []
        if not tiered:
            return runs
        if pick is not None:
            found = pick(runs)
            if found is None:
                return []
            plan = runs[found:]
        else:
            window = compaction_window(
                [sum(b.num_rows for b in r) for r in runs],
                self.opts.compaction_blocks_min,
                self.opts.flush_rows_threshold,
            )
            if window is None:
                return []
            plan = runs[window[0] : window[1]]
        if runs_max is not None and len(plan) > runs_max:
            plan = plan[: max(2, runs_max)]
        if rows_max is not None:
            total, cut = 0, len(plan)
            while cut > 0 and total + sum(b.num_rows for b in plan[cut - 1]) <= rows_max:
                cut -= 1
                total += sum(b.num_rows for b in plan[cut])
            plan = plan[cut:] if len(plan) - cut >= 2 else []
        return plan

    def compact(
        self,
        *,
        tiered: bool = False,
        rows_max: int | None = None,
        report: list | None = None,
        pick: Callable[[list[list[BlockIndex]]], int | None] | None = None,
        runs_max: int | None = None,
    ) -> bool:
        """Merge runs of blocks into one sorted run of key-disjoint blocks (at most
        `run_block_rows` rows each): every run (tombstones dropped, all older versions are
        merged), or with `tiered` the adjacent runs `compaction_window` picks (tombstones
        kept unless they start at the oldest run), listed where they were. False when there
        was nothing to do.

        The flush lock is held only to pick the runs and to commit, not while merging: a
        merge of a large tablet's runs takes minutes, and a memstore that could not flush
        meanwhile would grow without bound. Flushes meanwhile only append newer blocks, and
        a second compaction may merge runs newer than this one's (`compaction_plan`):
        each replaces its runs where they are listed. A copy session that began meanwhile
        (it lists the old blocks) or a shutdown makes the compaction give up its output.
        `rows_max`: merge only the newest of the runs that hold at most that many rows
        (`compaction_plan`). `report` gets (merged block names, new block names) appended
        when it commits. `pick`, `runs_max`: as in `compaction_plan`."""
        opts = self.opts
        with self.flush_lock, self.lock:
            if self.status is not TabletStatus.RUNNING or self.copy_anchors:
                return False  # a copy session reads the current blocks
            merged = self.compaction_plan(
                tiered=tiered,
                rows_max=rows_max if tiered else None,
                pick=pick,
                runs_max=runs_max if tiered else None,
            )
            if not merged:
                return False
            blocks = list(self.blocks)
            runs = runs_of(blocks)
            first = runs.index(merged[0])
            if rows_max is not None and sum(b.num_rows for r in merged for b in r) > rows_max:
                return False
            # Block ids for the output, reserved now (flushes go on meanwhile): one per
            # `run_block_rows` of input rows, rounded up.
            block_rows_max = max(1, opts.run_block_rows)
            in_rows = sum(b.num_rows for r in merged for b in r)
            ids = max(1, -(-in_rows // block_rows_max))
            block_id = self.sb.next_block_id
            sb = SuperblockPB()
            sb.CopyFrom(self.sb)
            sb.next_block_id = block_id + ids  # persisted by the next superblock write
            self.sb = sb
            schema = self.schema
            run_names = [b.name for r in merged for b in r]
            self.compacting.update(run_names)
            self.compactions_active += 1
        try:
            done = self._compact_runs(
                blocks, runs, merged, first, block_id, ids, block_rows_max, schema
            )
        finally:
            with self.lock:
                self.compacting.difference_update(run_names)
                self.compactions_active -= 1
                self.compaction_idle.notify_all()
            self._blocks_changed()
        if done is not None and report is not None:
            report.append((run_names, done))
        return done is not None

    def _blocks_changed(self) -> None:
        for fn in list(self.on_blocks):
            fn(self)

    def _compact_runs(
        self,
        blocks: list[BlockIndex],
        runs: list[list[BlockIndex]],
        merged: list[list[BlockIndex]],
        first: int,
        block_id: int,
        ids: int,
        block_rows_max: int,
        schema: Schema,
    ) -> list[str] | None:
        """`compact`'s merge and commit of the runs `merged` (runs[first:first + n]): the
        new blocks' names (none when every row was a dropped tombstone), None when it gave
        up its output."""
        opts = self.opts
        run = [b for r in merged for b in r]
        i0 = blocks.index(run[0])
        assert blocks[i0 : i0 + len(run)] == run  # adjacent runs (the newest, or a window)
        # Merged in bounded slabs, one source per run (its blocks one after the other:
        # sorted, disjoint), and written as they come (blockindex.py); tombstones
        # dropped only from runs that start at the oldest (older blocks may hold
        # versions the runs' tombstones hide).
        sources = [
            r[0].table if len(r) == 1 else pa.concat_tables([b.table for b in r]) for r in merged
        ]
        release = PageRelease.of([(b, None) for b in run])
        offsets = [[0] for _ in merged]  # per source: its blocks' first rows
        for i, r in enumerate(merged):
            for b in r:
                offsets[i].append(offsets[i][-1] + b.num_rows)

        def on_slab(pos: list[int]) -> None:
            if self.status is not TabletStatus.RUNNING:  # shutdown waits for us
                raise _CompactionAborted
            # Positions per source to positions per block (PageRelease is per block).
            release(
                [
                    min(max(p - o[j], 0), o[j + 1] - o[j])
                    for p, o in zip(pos, offsets, strict=True)
                    for j in range(len(o) - 1)
                ]
            )

        data_dir = self.fs.data_dir(self.tablet_id)
        out_names = [block_file_name(block_id + i, block_id) for i in range(ids)]

        def drop_output() -> None:  # never listed: the output's files, whole or not
            for name in out_names:
                for f in (name, name + ".tmp", bloom_name(name), stats_name(name)):
                    (data_dir / f).unlink(missing_ok=True)

        try:
            written = write_merged_run(
                data_dir,
                out_names.__getitem__,
                sources,
                self._key_names(schema),
                lambda _i, t: self._adapt(t, schema),
                drop_deleted=first == 0,
                chunk_rows=opts.block_chunk_rows,
                block_rows_max=block_rows_max,
                on_slab=on_slab,
                # Runs that each hide nothing older hold disjoint keys: so does their merge.
                metadata=block_metadata(all(b.shadows_nothing for b in run)),
            )
            loaded = [self._open_block(name) for name, _ in written]  # writes filters
        except _CompactionAborted:
            drop_output()
            return None
        except Exception:
            drop_output()
            raise
        assert check_runs(loaded) is None, check_runs(loaded)
        crash_point("compact.after_block_write")
        with self.flush_lock, self.lock:
            # The merged blocks where they are listed now: older runs may have been
            # merged meanwhile (a compaction beside this one), newer blocks flushed.
            now = list(self.blocks)
            names = [b.name for b in now]
            at = names.index(run[0].name) if run[0].name in names else -1
            gone = (
                self.status is not TabletStatus.RUNNING
                or self.copy_anchors
                or at < 0
                or names[at : at + len(run)] != [b.name for b in run]
            )
            if not gone:
                sb = SuperblockPB()
                sb.CopyFrom(self.sb)
                assert list(sb.blocks) == names, "blocks not as listed"
                del sb.blocks[:]
                sb.blocks.extend(names[:at] + [b.name for b in loaded] + names[at + len(run) :])
                self.fs.write_superblock(sb)
                self.sb = sb
                self.blocks = now[:at] + loaded + now[at + len(run) :]
                assert check_runs(self.blocks) is None, check_runs(self.blocks)
        if gone:
            # Shut down, or a copy session lists the old blocks (or, a bug, the blocks
            # changed): the output was never listed; remove it, keep the old run.
            drop_output()
            log.info("tablet %s: compaction output dropped (copy or shutdown)", self.tablet_id)
            return None
        crash_point("compact.after_superblock")
        for old in run:
            (data_dir / old.name).unlink(missing_ok=True)
            (data_dir / bloom_name(old.name)).unlink(missing_ok=True)
            (data_dir / stats_name(old.name)).unlink(missing_ok=True)
        fsync_dir(data_dir)
        log.info(
            "tablet %s: compacted %d of %d runs (%d blocks) into %d blocks from %s (%d rows)",
            self.tablet_id,
            len(merged),
            len(runs),
            len(run),
            len(loaded),
            block_file_name(block_id, block_id),
            sum(b.num_rows for b in loaded),
        )
        return [b.name for b in loaded]

    def _write_block(self, name: str, table: pa.Table) -> None:
        data_dir = self.fs.data_dir(self.tablet_id)
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / name
        tmp = data_dir / (name + ".tmp")
        with pa.OSFile(str(tmp), "wb") as sink:
            with pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table, max_chunksize=max(1, self.opts.block_chunk_rows))
        install_file(tmp, path)

    # ================================================================ schema
    def alter_schema(self, new_schema_pb, deadline: float) -> None:
        """Drain in-flight writes, flush (so the WAL never needs an older schema to replay),
        then switch to the new schema version."""
        with self.lock:
            self._check_running_locked()
            if self.barrier:
                raise Unavailable("another schema change is in progress", retry_after_ms=100)
            self.barrier = True
        try:
            with self.lock:
                while self.inflight:
                    if not self.cond.wait(max(0.0, deadline - time.monotonic())):
                        raise TimedOut("in-flight writes did not drain before the deadline")
                # Committed entries (a follower's) wait while the memstore is flushed and the
                # schema switched: memstore rows are tuples in the schema's column order.
                self.switching = True
            self.flush()
            with self.lock:
                sb = SuperblockPB()
                sb.CopyFrom(self.sb)
                sb.schema.CopyFrom(new_schema_pb)
                self.fs.write_superblock(sb)
                self.sb = sb
                self.schema = Schema(new_schema_pb)
                assert not self.memstore and not self.mem_batches and not self.pending
        finally:
            with self.lock:
                self.barrier = False
                self.switching = False
                self.cond.notify_all()

    # ================================================================ scans
    def scan(
        self,
        projection: list[str],
        predicates: list[PredicatePB],
        lower: list[ValuePB],
        upper: list[ValuePB],
        limit: int,
    ) -> pa.Table:
        """A consistent snapshot of the tablet, filtered, projected, sorted by key: the
        pieces of `scan_pieces` put together."""
        schema, pieces = self.scan_pieces(projection, predicates, lower, upper, limit)
        parts = list(pieces)
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def scan_pieces(
        self,
        projection: list[str],
        predicates: list[PredicatePB],
        lower: list[ValuePB],
        upper: list[ValuePB],
        limit: int,
        slab_rows: int = SCAN_SLAB_ROWS,
        *,
        prune: bool = True,
        ordered: bool = True,
    ) -> tuple[pa.Schema, Iterator[pa.Table]]:
        """The result's schema and its rows, in key order, as non-empty pieces made as they
        are asked for. Everything is checked (BadRequest) before this returns.

        Snapshot: the blocks are taken under the lock with a sorted copy of the memstore
        (bounded by the flush threshold); the pieces read only those, so writes, flushes
        and compactions after this call are not seen. Blocks stay readable while a scan
        holds them: they are immutable and mapped, and unlinking a compacted block's file
        does not unmap it.

        Predicates that pin every key column (`==`, or IN on a one-column key; at most
        POINT_KEYS_MAX keys) make it point reads: only those keys are looked up, the memstore
        under the lock, then the blocks, reading only the rows found. Otherwise blocks whose
        key range misses the bounds are skipped, then chunks and blocks by key range and
        per-column min/max against the predicates (`stats.prune`; not with `prune=False`),
        and the rest merged in slabs of about `slab_rows` rows in all, however many
        sources overlap (`merge.merge_slabs`, `merge.shared_slab_rows`), each filtered and
        projected as it is made.

        Not `ordered` (Kudu's unordered scan): the same rows, in no promised order. The
        newest blocks that each hide nothing older (`BlockIndex.shadows_nothing`: rows of
        keys live nowhere when inserted), after the last block that may, are handed out as
        they are, chunk by chunk: no key is in two of them, and where a key of theirs is in
        an older block its newest version there is a tombstone (it was live nowhere when
        inserted), so the merge of the other blocks and the memstore drops it. Only a
        memstore that may hide rows (`mem_shadows`) can hide theirs: their rows with its
        keys are left out (a one-column key; with a composite key everything is merged)."""
        with self.lock:
            self._check_running_locked()
            schema = self.schema
            blocks = list(self.blocks)
            mem_shadows = self.mem_shadows or self.frozen_shadows
            names = projection or [c.name for c in schema.columns]
            cols = [schema.column(n) for n in names]  # raises BadRequest on unknown names
            key_filter = self._key_range_expr(schema, lower, upper)
            pred = self._predicate_expr(schema, predicates)
            keys = self._pinned_keys(schema, predicates)
            if keys is not None:
                found = self._locate_mem(keys, self._mem_layers_locked(), self._key_names(schema))
            else:
                # The memstore's layers, oldest first (a later one overrides an earlier one).
                layers = list(self.frozen_batches.tables)
                layers.append(dict(self.frozen or {}))
                layers.extend(self.mem_batches.tables)
                layers.append(dict(self.memstore))
        fields = [pa.field(n, c.arrow_type) for n, c in zip(names, cols, strict=True)]
        out_schema = pa.schema(fields)
        selected = [block_name(c.id) for c in cols]

        def finish(t: pa.Table) -> pa.Table:
            return t.select(selected).rename_columns(names)

        if keys is not None:
            found.update(self._locate_blocks(keys.difference(found), blocks))
            table = self._point_rows(found, schema)
            if key_filter is not None:
                table = table.filter(key_filter)
            if pred is not None:
                table = table.filter(pred)
            if limit:  # uint64 on the wire: Arrow's slice takes at most 2**63 - 1
                table = table.slice(0, min(limit, table.num_rows))
            return out_schema, iter([finish(table)] if table.num_rows else [])
        lo, hi = self._key_bounds(schema, lower, upper)
        # The blocks an unordered scan hands out unmerged: after the last that may hide rows.
        plain: set[int] = set()
        if not ordered:
            cut = max((i + 1 for i, b in enumerate(blocks) if not b.shadows_nothing), default=0)
            plain = {id(b) for b in blocks[cut:]}
        blocks = [b for b in blocks if b.overlaps(lo, hi)]
        if prune and blocks:
            pr = stats_prune(blocks, stats_checks(schema, predicates), lo, hi)
            with self.lock:
                self.scan_chunks_total += pr.chunks_total
                self.scan_chunks_skipped += pr.chunks_skipped
                self.scan_blocks_skipped += pr.blocks_skipped
            kept = [(b, k) for b, k in zip(blocks, pr.keep, strict=True) if k != []]
        else:
            kept = [(b, None) for b in blocks]
        mem_parts = [
            self._memtable(x, with_deleted=True, schema=schema) if isinstance(x, dict) else x
            for x in layers
            if len(x)
        ]
        # The memstore's newest versions, sorted (tombstones kept: they hide block rows).
        mem = self._merge([], mem_parts, schema=schema, keep_deleted=True) if mem_parts else None
        key_names = self._key_names(schema)
        hidden = None  # the keys of a memstore that may hide rows of the unmerged blocks
        if plain and mem_shadows and mem is not None and mem.num_rows:
            if len(key_names) == 1:
                hidden = mem.column(key_names[0]).combine_chunks()
            else:
                plain = set()
        direct = [(b, k) for b, k in kept if id(b) in plain]
        kept = [(b, k) for b, k in kept if id(b) not in plain]
        block_tables = [b.chunks_table(k) for b, k in kept]
        # Projection pushdown: the merge moves only the columns the answer, the predicates
        # and the merge itself (keys, __deleted) need, not every column of the rows.
        used = set(selected) | set(key_names)
        used.update(block_name(schema.column(p.column).id) for p in predicates)
        merge_cols = [c for c in schema.columns if block_name(c.id) in used]
        if len(merge_cols) == len(schema.columns):
            merge_cols = None
        sources = block_tables
        nblocks = len(sources)
        if mem is not None and mem.num_rows:
            sources.append(mem if merge_cols is None else self._adapt(mem, schema, merge_cols))

        adapters = [self._adapter(t.schema, schema, merge_cols) for t in block_tables]

        def adapt(i: int, t: pa.Table) -> pa.Table:
            return adapters[i](t) if i < nblocks else t

        def unmerged(counts: SlabCounts) -> Iterator[pa.Table]:
            """The chunks of the `direct` blocks as they are (an unordered scan)."""
            for b, keep in direct:
                adapter = self._adapter(b.table.schema, schema, merge_cols)
                for j in range(len(b.batches)) if keep is None else keep:
                    t = adapter(pa.Table.from_batches([b.batches[j]]))
                    if key_filter is not None and (
                        (lo is not None and b.chunk_first(j) < lo)
                        or (hi is not None and b.chunk_last(j) >= hi)
                    ):
                        t = t.filter(key_filter)
                    if hidden is not None:
                        t = t.filter(pc.invert(pc.is_in(t.column(key_names[0]), hidden)))
                    counts.unmerged_rows += t.num_rows
                    yield t
                    if b.mapping is not None and b.spans[j] is not None:
                        release_pages(b.mapping, *b.spans[j])  # as PageRelease does

        def pieces() -> Iterator[pa.Table]:
            left = limit or None
            # The pages of block chunks merged and handed out leave the process (pages.py).
            pages = PageRelease.of([*kept, None])
            counts = SlabCounts()
            # `slab_rows` in all, shared among the sources each window overlaps.
            merged = merge_slabs(
                sources,
                key_names,
                adapt,
                lo,
                hi,
                on_slab=pages,
                counts=counts,
                drop_deleted=True,
                total_rows=slab_rows,
            )
            slabs = itertools.chain(unmerged(counts), merged) if direct else merged
            try:
                for slab in slabs:
                    deleted = slab.column(DELETED_FIELD)
                    # Most slabs hold no tombstone: no filter (a copy of every column) then.
                    t = slab.filter(pc.invert(deleted)) if pc.any(deleted).as_py() else slab
                    if pred is not None and t.num_rows:
                        t = t.filter(pred)
                    if left is not None:
                        t = t.slice(0, min(left, t.num_rows))
                        left -= t.num_rows
                    if t.num_rows:
                        yield finish(t)
                    if left == 0:
                        return
            finally:  # also when the scanner is dropped part way (expired, closed)
                with self._scan_counts_lock:
                    self.scan_slabs_direct += counts.direct
                    self.scan_rows_direct += counts.direct_rows
                    self.scan_rows_unmerged += counts.unmerged_rows
                    self.scan_slabs_merged += counts.merged
                    self.scan_rows_merged += counts.merged_rows

        return out_schema, pieces()

    def _pinned_keys(self, schema: Schema, predicates: list[PredicatePB]) -> set | None:
        """The whole keys the predicates allow, if they pin every key column to a few values
        (`==`, IN): at most POINT_KEYS_MAX of them; None otherwise. Called after
        `_predicate_expr`, which rejects values that do not fit."""
        allowed: dict[int, set] = {}
        for p in predicates:
            c = schema.column(p.column)
            if not c.is_key:
                continue
            if p.op == PredicateOp.EQ and len(p.values) == 1:
                vals = {value_from_pb(p.values[0], c)}
            elif p.op == PredicateOp.IN:
                vals = {value_from_pb(v, c) for v in p.values}
            else:
                continue
            vals.discard(None)
            allowed[c.id] = vals if c.id not in allowed else allowed[c.id] & vals
        if len(allowed) != schema.num_keys:
            return None
        n = 1
        for vals in allowed.values():
            n *= len(vals)
        if n > POINT_KEYS_MAX:
            return None
        sets = [allowed[c.id] for c in schema.key_columns]
        if len(sets) == 1:
            return set(sets[0])
        return set(itertools.product(*sets))

    def _point_rows(self, found: dict, schema: Schema) -> pa.Table:
        """The live rows at `found`'s locations, sorted by key, without __deleted."""
        dict_rows = {k: loc[1] for k, loc in found.items() if loc is not None and loc[0] == "row"}
        parts = []
        if dict_rows:
            parts.append(self._memtable(dict_rows, with_deleted=True, schema=schema))
        for loc in found.values():
            if loc is None or loc[0] == "row":
                continue
            if loc[0] == "t":
                parts.append(loc[1].slice(loc[2], 1))
            else:
                parts.append(self._adapt(loc[1].table.slice(loc[2], 1), schema))
        if not parts:
            t = schema.block_schema().empty_table()
        else:
            t = pa.concat_tables(parts)
            if len(parts) > 1:
                order = [(k, "ascending") for k in self._key_names(schema)]
                t = t.take(pc.sort_indices(t, sort_keys=order))
        return t.drop_columns([DELETED_FIELD])

    def _key_bounds(self, schema: Schema, lower, upper) -> tuple:
        """The scan's key bounds as Python keys (lower inclusive, upper exclusive; None:
        open), as blocks compare them; `_key_range_expr` has checked them already."""
        out = []
        for bound in (lower, upper):
            if not bound:
                out.append(None)
                continue
            vals = [value_from_pb(v, c) for v, c in zip(bound, schema.key_columns, strict=True)]
            out.append(vals[0] if len(vals) == 1 else tuple(vals))
        return out[0], out[1]

    def _key_range_expr(self, schema: Schema, lower, upper):
        keys = schema.key_columns
        exprs = []
        for bound, strict_last, is_lower in ((lower, False, True), (upper, True, False)):
            if not bound:
                continue
            if len(bound) != len(keys):
                raise BadRequest(f"key bound needs {len(keys)} values, got {len(bound)}")
            vals = [_scalar(value_from_pb(v, c), c) for v, c in zip(bound, keys, strict=True)]
            expr = None
            for i in reversed(range(len(keys))):
                f = pc.field(block_name(keys[i].id))
                if i == len(keys) - 1:
                    e = (f < vals[i]) if (not is_lower and strict_last) else (f >= vals[i])
                else:
                    e = (f > vals[i]) if is_lower else (f < vals[i])
                    e = e | ((f == vals[i]) & expr)
                expr = e
            exprs.append(expr)
        if not exprs:
            return None
        return exprs[0] if len(exprs) == 1 else exprs[0] & exprs[1]

    def _predicate_expr(self, schema: Schema, predicates: list[PredicatePB]):
        out = None
        for p in predicates:
            c = schema.column(p.column)
            f = pc.field(block_name(c.id))
            op = p.op
            if op == PredicateOp.IS_NULL:
                e = f.is_null()
            elif op == PredicateOp.IS_NOT_NULL:
                e = f.is_valid()
            elif op == PredicateOp.IN:
                vals = [value_from_pb(v, c) for v in p.values]
                try:
                    values = pa.array([v for v in vals if v is not None], c.arrow_type)
                except (pa.ArrowInvalid, OverflowError, TypeError) as err:
                    raise BadRequest(f"IN values do not fit column {c.name!r}: {err}") from None
                e = f.isin(values)
            elif op in (
                PredicateOp.EQ,
                PredicateOp.LT,
                PredicateOp.LE,
                PredicateOp.GT,
                PredicateOp.GE,
            ):
                if len(p.values) != 1:
                    raise BadRequest(f"predicate on {c.name!r} needs exactly one value")
                v = value_from_pb(p.values[0], c)
                if v is None:
                    raise BadRequest(f"comparison with null on {c.name!r}; use IS NULL")
                s = _scalar(v, c)
                e = {
                    PredicateOp.EQ: f == s,
                    PredicateOp.LT: f < s,
                    PredicateOp.LE: f <= s,
                    PredicateOp.GT: f > s,
                    PredicateOp.GE: f >= s,
                }[op]
            else:
                raise BadRequest(f"unknown predicate operator {op}")
            out = e if out is None else out & e
        return out

    def _adapter(
        self, block_schema: pa.Schema, schema: Schema, columns: list | None
    ) -> Callable[[pa.Table], pa.Table]:
        """`_adapt` for slices of one block (its Arrow schema `block_schema`), worked out
        once: where the block has every column wanted, with the same fields, a `select` of
        them (one call; `_adapt` builds the fields and the schema again for each slice,
        ~15% of a scan of 17 overlapping runs' server samples); else `_adapt`."""
        want = [
            pa.field(block_name(c.id), c.arrow_type)
            for c in (schema.columns if columns is None else columns)
        ]
        want.append(pa.field(DELETED_FIELD, pa.bool_()))
        idx = [block_schema.get_field_index(f.name) for f in want]
        if all(i >= 0 for i in idx) and [block_schema.field(i) for i in idx] == want:
            if block_schema.metadata:
                return lambda t: t.select(idx).replace_schema_metadata(None)
            return lambda t: t.select(idx)
        return lambda t: self._adapt(t, schema, columns)

    def _adapt(
        self, block: pa.Table, schema: Schema | None = None, columns: list | None = None
    ) -> pa.Table:
        """A block in the current schema's columns (added columns null, dropped ones gone);
        only `columns` (of the schema, in its order) when given."""
        schema = schema or self.schema
        names = set(block.column_names)
        arrays, fields = [], []
        for c in schema.columns if columns is None else columns:
            bn = block_name(c.id)
            arrays.append(
                block.column(bn) if bn in names else pa.nulls(block.num_rows, c.arrow_type)
            )
            fields.append(pa.field(bn, c.arrow_type))
        arrays.append(block.column(DELETED_FIELD))
        fields.append(pa.field(DELETED_FIELD, pa.bool_()))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def _memtable(self, mem: dict, *, with_deleted: bool, schema: Schema | None = None) -> pa.Table:
        schema = schema or self.schema
        nk = schema.num_keys
        items = sorted(mem.items(), key=lambda kv: kv[0])
        ncols = len(schema.columns)
        rows = []
        deleted = []
        for k, v in items:
            if v is None:
                kv = (k,) if nk == 1 else tuple(k)
                rows.append(kv + (None,) * (ncols - nk))
                deleted.append(True)
            else:
                rows.append(v)
                deleted.append(False)
        cols = list(zip(*rows, strict=True)) if rows else [[] for _ in range(ncols)]
        arrays = [pa.array(cols[i], type=c.arrow_type) for i, c in enumerate(schema.columns)]
        arrays.append(pa.array(deleted, type=pa.bool_()))
        return pa.Table.from_arrays(arrays, schema=schema.block_schema())

    def _merge(
        self,
        blocks: list[pa.Table],
        mem_parts: list[pa.Table] | None,
        key_filter=None,
        schema: Schema | None = None,
        *,
        keep_deleted: bool = False,
    ) -> pa.Table:
        """Newest version of every key, sorted by key: `blocks` (oldest first, any schema
        version) then `mem_parts` (block schema, oldest first); live rows only, without
        __deleted, unless `keep_deleted` (a flush: tombstones hide older blocks' rows)."""
        schema = schema or self.schema
        parts = [self._adapt(b, schema) for b in blocks]
        parts.extend(mem_parts or ())
        if key_filter is not None:
            parts = [p.filter(key_filter) for p in parts]
        parts = [p for p in parts if p.num_rows]
        key_names = [block_name(c.id) for c in schema.key_columns]
        if not parts:
            t = schema.block_schema().empty_table()
        elif len(parts) == 1 and not mem_parts:
            t = parts[0]  # a block: sorted, its keys unique
        else:
            t = newest_versions(parts, key_names)
        if keep_deleted:
            return t
        t = t.filter(pc.invert(t.column(DELETED_FIELD)))
        return t.drop_columns([DELETED_FIELD])

    def _key_lists(self, merged: pa.Table) -> list:
        keys = [_to_python(merged.column(block_name(c.id))) for c in self.schema.key_columns]
        return keys[0] if len(keys) == 1 else list(zip(*keys, strict=True))

    # ================================================================ lifecycle
    def shutdown(self, timeout_s: float = 30.0, *, sync_wal: bool = True) -> None:
        """Stop accepting writes, let in-flight ones finish (bounded), stop the Raft group,
        close the WAL (footer; synced unless `sync_wal` is False: the server's stop syncs
        every tablet's at once). Writes still in flight then get TIMED_OUT (outcome
        unknown)."""
        deadline = time.monotonic() + min(timeout_s, SHUTDOWN_DRAIN_S)
        with self.lock:
            if self.status is TabletStatus.RUNNING:
                self.status = TabletStatus.SHUTDOWN
            while self.inflight:
                if not self.cond.wait(max(0.0, deadline - time.monotonic())):
                    log.warning(
                        "tablet %s: %d writes still in flight at shutdown",
                        self.tablet_id,
                        self.inflight,
                    )
                    break
        if self.group is not None:
            self.group.driver.remove_group(self.tablet_id)
        with self.lock:
            for w in self.waiters.values():
                w.error = TimedOut(f"tablet {self.tablet_id} shut down before the write committed")
                w.event.set()
            self.waiters.clear()
            self.waiting_rids.clear()
            self.inflight = 0
            self.cond.notify_all()
        # A flush or compaction in progress finishes first: none may write a superblock after
        # this tablet is shut down (deletion rewrites it next), nor a file in its directory
        # (a compaction gives up at its next slab once the status is no longer RUNNING).
        with self.lock:
            while self.compactions_active:
                # Not bounded: stopping before it gives up could let it write a superblock
                # after the shutdown. It gives up within one slab; say so if it does not.
                if not self.compaction_idle.wait(SHUTDOWN_DRAIN_S):
                    log.warning(
                        "tablet %s: shutdown waits for %d compactions to give up",
                        self.tablet_id,
                        self.compactions_active,
                    )
        with self.flush_lock:
            if self.wal is not None:
                self.wal.close(sync=sync_wal)
        self._blocks_changed()  # forgotten by the compaction scheduler

    def last_op_id(self) -> OpIdPB:
        if self.group is not None:
            op = self.group.last_op_id()
            return OpIdPB(term=op.term, index=op.index)
        return OpIdPB(term=self.applied_term, index=self.applied_index)

    def memstore_bytes(self) -> int:
        """An estimate of the memstore's heap: its Arrow tables' bytes and MEMSTORE_ROW_OVERHEAD
        a row (the key index, the keys kept as Python objects), MEMSTORE_PY_ROW_BYTES a row
        held as a Python tuple (updates, upserts). For the server's memstore budget
        (TabletManager._flush_for_memory)."""
        frozen = self.frozen
        arrow = 0
        rows = 0
        for blocks in (self.mem_batches, self.frozen_batches):
            rows += blocks.num_rows
            arrow += sum(t.nbytes for t in blocks.tables)
        py_rows = len(self.memstore) + (len(frozen) if frozen else 0)
        return arrow + rows * MEMSTORE_ROW_OVERHEAD + py_rows * MEMSTORE_PY_ROW_BYTES

    def memstore_rows(self) -> int:
        frozen = self.frozen
        return (
            len(self.memstore)
            + self.mem_batches.num_rows
            + (len(frozen) if frozen else 0)
            + self.frozen_batches.num_rows
        )

    def wal_segments_unflushed(self) -> int:
        """WAL segments holding entries above the flushed index (the open one included): the
        ones a flush lets GC delete. Segments kept below it for lagging peers or a copy
        session are not counted: a flush cannot free them, so they must not trigger one (a
        long-dead peer made every maintenance round flush a few rows and compact the tablet)."""
        wal = self.wal
        if wal is None:
            return 0
        flushed = self.sb.flushed_index
        with wal.lock:
            closed = sum(1 for s in wal.segments if s.max_index > flushed)
            return closed + (1 if wal.writer is not None else 0)


def _proposal_error(tablet_id: str, res, g) -> Exception:
    """The rpc error of a refused proposal or config change."""
    st = res.status
    text = f"tablet {tablet_id}: {res.message or st.value}"
    if st is ProposalStatus.NOT_LEADER:
        return g.driver.not_leader(tablet_id, res.leader_hint)
    if st is ProposalStatus.CAS_FAILED:
        return CasFailed(text)
    if st is ProposalStatus.ALREADY_IN_PROGRESS:
        return AlreadyInProgress(text)
    if st is ProposalStatus.ILLEGAL_STATE:
        return IllegalState(text)
    if st is ProposalStatus.BAD_REQUEST:
        return BadRequest(text)
    if st is ProposalStatus.THROTTLED:
        return Throttled(text, retry_after_ms=50)
    hint = g.driver.not_leader(tablet_id, res.leader_hint).leader_hint
    return Unavailable(text, retry_after_ms=100, leader_hint=hint)
