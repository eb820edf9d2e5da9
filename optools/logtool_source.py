"""Readers for the log inspection tool: a replica's data dir offline, or live over zmq.

Offline (`load_data_dir`): read-only, with logstore's own codecs (journal.scan_journal,
journal.decode_meta, snapshot.decode_snapshot) and state machine (state.LogState). The
snapshot gives the live entries at its Raft index; the journal's later Raft entries are
replayed into that state exactly as the replica applies them, and every entry they create
is kept, so entries that were invalidated after the snapshot are still shown (marked
invalidated). Nothing is written: unlike opening a DurableJournal, a torn tail is only
skipped, never cut. logstore should own a read-only loader like this one
(design/logtool.md); it lives here until it does.

Journal commands are pysyncobj's: one type byte, then a pickle of (method id, args). They
are unpickled with a restricted unpickler that builds nothing but plain values (the only
globals allowed are `_codecs.encode` and `bytes`, which protocol 2 uses for bytes; pysyncobj node
objects in membership commands become inert stubs).

Live (`RemoteReader`): a RemoteLogStore to coordinator nodes or `logstore serve` replicas
(both serve LogStore.Read); it returns only live entries, so invalidated ones appear only as
ids named by a live entry's `invalidates`.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
from collections import Counter
from dataclasses import dataclass, field

from coordinator.records import RawEntry
from logstore.journal import decode_meta, scan_journal
from logstore.snapshot import decode_snapshot
from logstore.state import LogState
from rpc.errors import Corruption

logger = logging.getLogger(__name__)

REPLICA_DIR = "logstore"  # a coordinator node's embedded replica, under its data dir
NODE_UUID_FILE = "coordinator-uuid"
JOURNAL_FILE = "journal"
META_FILE = "journal.meta"
SNAPSHOT_FILE = "snapshot"
FILE_BYTES_MAX = 1 << 30  # refuse to read a journal or snapshot bigger than this
READ_PAGE = 1000
PING_TIMEOUT_S = 2.0  # a live node answers a ping at once, even when busy

# pysyncobj's command types (pysyncobj.syncobj._COMMAND_TYPE) and logstore's method ids
# (_RaftNode's replicated methods in name order: _ls_append = 0, _ls_barrier = 1,
# _ls_batch = 2: several appends in one Raft entry, applied in order).
CMD_REGULAR, CMD_NO_OP, CMD_MEMBERSHIP, CMD_VERSION = 0, 1, 2, 3
METHOD_APPEND = 0
METHOD_BATCH = 2


class DataDirError(Exception):
    """The data dir cannot be read (missing, not a replica, damaged beyond a torn tail)."""


class _NodeStub:
    """Stands in for pysyncobj node objects inside a membership command."""

    def __setstate__(self, state) -> None:
        self.__dict__.update(state if isinstance(state, dict) else {})


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if module == "_codecs" and name == "encode":
            import codecs

            return codecs.encode
        if module in ("__builtin__", "builtins") and name == "bytes":
            return bytes  # protocol 2 writes b"" as bytes()
        if module == "pysyncobj.node" and name in ("Node", "TCPNode"):
            return _NodeStub
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")


def safe_unpickle(data: bytes):
    return _SafeUnpickler(io.BytesIO(data)).load()


@dataclass(slots=True)
class LoadStats:
    """What a data dir held, beyond the entries."""

    replica_dir: str = ""
    node_uuid: str = ""
    snapshot_bytes: int = 0
    snapshot_raft_index: int = 0
    snapshot_members: tuple[str, ...] = ()
    journal_bytes: int = 0
    journal_entries: int = 0
    journal_first_index: int = 0
    journal_last_index: int = 0
    journal_torn_bytes: int = 0
    commit_index: int = 0
    term: int = 0
    raft_commands: Counter = field(default_factory=Counter)  # by kind
    rejected_appends: Counter = field(default_factory=Counter)  # by log: condition / bad
    warnings: list[str] = field(default_factory=list)
    # Something could not be read or replayed: what is shown may miss records.
    incomplete: bool = False

    def to_json(self) -> dict:
        return {
            "replica_dir": self.replica_dir,
            "node_uuid": self.node_uuid or None,
            "snapshot_bytes": self.snapshot_bytes,
            "snapshot_raft_index": self.snapshot_raft_index,
            "snapshot_members": list(self.snapshot_members),
            "journal_bytes": self.journal_bytes,
            "journal_entries": self.journal_entries,
            "journal_first_index": self.journal_first_index,
            "journal_last_index": self.journal_last_index,
            "journal_torn_bytes": self.journal_torn_bytes,
            "commit_index": self.commit_index,
            "term": self.term,
            "raft_commands": dict(self.raft_commands),
            "rejected_appends": dict(self.rejected_appends),
            "warnings": list(self.warnings),
            "incomplete": self.incomplete,
        }


@dataclass(frozen=True, slots=True)
class LogImage:
    """Every entry of one log that a reader could see, in id order, and its last id."""

    log: str
    last_id: int
    entries: list[RawEntry]
    # Ids no longer held, with the id of the entry that invalidated them when known.
    invalidated_by: dict[int, int]
    stats: LoadStats


def resolve_replica_dir(path: str) -> str:
    """A coordinator node's data dir (holding logstore/) or a replica dir itself."""
    candidates = [os.path.join(path, REPLICA_DIR), path]
    for c in candidates:
        if any(os.path.exists(os.path.join(c, f)) for f in (JOURNAL_FILE, SNAPSHOT_FILE)):
            return c
    if os.path.exists(path) and not os.path.isdir(path):
        raise DataDirError(f"{path}: not a directory (give a node's data dir)")
    if not os.path.isdir(path):
        raise DataDirError(f"{path}: no such directory")
    raise DataDirError(
        f"{path}: no logstore journal or snapshot here or in {os.path.join(path, REPLICA_DIR)}"
    )


def _read_file(path: str) -> bytes | None:
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return None
    if size > FILE_BYTES_MAX:
        raise DataDirError(f"{path}: {size} bytes is more than {FILE_BYTES_MAX}")
    try:
        with open(path, "rb") as f:
            return f.read(FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        return None  # replaced between the size check and the open: read it next time
    except OSError as err:
        raise DataDirError(f"{path}: {err}") from None


def _check_append(args) -> tuple[str, bytes, int | None, tuple[int, ...]]:
    if not (
        isinstance(args, tuple | list)
        and len(args) == 4
        and isinstance(args[0], str)
        and isinstance(args[1], bytes | bytearray)
        and (args[2] is None or isinstance(args[2], int))
        and isinstance(args[3], tuple | list)
        and all(isinstance(i, int) for i in args[3])
    ):
        raise ValueError("append command arguments have the wrong shape")
    return args[0], bytes(args[1]), args[2], tuple(args[3])


def _append_args(command: bytes):
    """The appends of a command, as a list of (log, data, expected_id, invalidates) in
    apply order (one for an append, several for a batch), None for other regular commands
    (the barrier); raises ValueError for a command that does not decode."""
    try:
        value = safe_unpickle(command)
    except Exception as err:  # noqa: BLE001 - any unpickling failure is "does not decode"
        raise ValueError(f"command does not unpickle: {err}") from None
    if isinstance(value, int):
        return None  # a method without arguments: the barrier
    if not (isinstance(value, tuple) and len(value) in (2, 3) and isinstance(value[0], int)):
        raise ValueError(f"command is not (method id, args): {type(value).__name__}")
    if value[0] == METHOD_APPEND:
        return [_check_append(value[1])]
    if value[0] == METHOD_BATCH:
        args = value[1]
        if not (isinstance(args, tuple) and len(args) == 1 and isinstance(args[0], tuple | list)):
            raise ValueError("append batch arguments have the wrong shape")
        return [_check_append(a) for a in args[0]]
    return None


def load_data_dir(path: str, log: str) -> LogImage:
    """Read a replica's snapshot and journal without changing anything (see module doc)."""
    replica = resolve_replica_dir(path)
    stats = LoadStats(replica_dir=replica)
    node_dir = os.path.dirname(replica) if os.path.basename(replica) == REPLICA_DIR else ""
    if node_dir:
        raw_uuid = _read_file(os.path.join(node_dir, NODE_UUID_FILE))
        if raw_uuid:
            stats.node_uuid = raw_uuid.decode(errors="replace").strip()
    # Read the snapshot and the journal as one consistent pair: a running replica may
    # write a new snapshot and trim its journal between the two reads; then read again.
    for _attempt in range(5):
        snap = _read_file(os.path.join(replica, SNAPSHOT_FILE))
        journal = _read_file(os.path.join(replica, JOURNAL_FILE))
        snap_again = _read_file(os.path.join(replica, SNAPSHOT_FILE))
        if snap == snap_again:
            break
    else:
        raise DataDirError(f"{replica}: the snapshot keeps changing while being read")
    meta = _read_file(os.path.join(replica, META_FILE))
    if meta is not None:
        try:
            stats.term, stats.commit_index, _voted = decode_meta(meta)
        except Corruption as err:
            stats.warnings.append(f"journal meta: {err}; which entries are committed is unknown")
            stats.incomplete = True

    state = LogState()
    history: dict[int, RawEntry] = {}  # id -> entry, for `log` only
    invalidated_by: dict[int, int] = {}
    snap_index = 0
    if snap is not None:
        stats.snapshot_bytes = len(snap)
        try:
            state, smeta = decode_snapshot(snap)
        except Corruption as err:
            raise DataDirError(f"{replica}/{SNAPSHOT_FILE}: {err}") from None
        snap_index = smeta.last_entry[1]
        stats.snapshot_raft_index = snap_index
        stats.snapshot_members = smeta.members
        for e in state.logs.get(log, {}).values():  # every live entry, in id order
            history[e.id] = RawEntry(e.id, e.data, e.invalidates, True, source="snapshot")
        # Entries that live entries invalidated before the snapshot: known by whom, only.
        for e in history.values():
            for i in e.invalidates:
                invalidated_by[i] = e.id

    entries: list[tuple[bytes, int, int]] = []
    if journal is not None:
        stats.journal_bytes = len(journal)
        try:
            scan = scan_journal(journal)
        except Corruption as err:
            stats.warnings.append(f"journal not read: {err}")
            stats.incomplete = True
        else:
            entries = scan.entries
            stats.journal_torn_bytes = scan.torn_bytes
            if scan.torn_bytes:
                stats.warnings.append(
                    f"journal: {scan.torn_bytes} bytes at its end are torn or being written"
                )
    stats.journal_entries = len(entries)
    if entries:
        stats.journal_first_index = entries[0][1]
        stats.journal_last_index = entries[-1][1]
    tail = [e for e in entries if e[1] > snap_index]
    if tail and tail[0][1] != snap_index + 1:
        raise DataDirError(
            f"{replica}: the journal starts at Raft index {tail[0][1]} but the snapshot "
            f"ends at {snap_index}: entries in between are missing"
        )
    for command, idx, term in tail:
        committed = idx <= stats.commit_index if stats.commit_index else None
        kind = command[0] if command else -1
        if kind == CMD_NO_OP:
            stats.raft_commands["no_op"] += 1
            continue
        if kind == CMD_MEMBERSHIP:
            stats.raft_commands["membership"] += 1
            continue
        if kind == CMD_VERSION:
            stats.raft_commands["version"] += 1
            continue
        if kind != CMD_REGULAR:
            stats.raft_commands["unknown"] += 1
            stats.incomplete = True
            stats.warnings.append(f"Raft entry {idx}: unknown command type {kind}")
            continue
        try:
            args = _append_args(command[1:])
        except ValueError as err:
            stats.raft_commands["undecodable"] += 1
            stats.incomplete = True
            stats.warnings.append(f"Raft entry {idx}: {err}; the replay may be incomplete")
            continue
        if args is None:
            stats.raft_commands["barrier"] += 1
            continue
        if len(args) > 1:
            stats.raft_commands["append_batch"] += 1
        for name, data, expected_id, invalidates in args:
            stats.raft_commands["append"] += 1
            outcome = state.apply_append(name, data, expected_id, invalidates)
            if outcome.error_kind:
                stats.rejected_appends[f"{name}:{outcome.error_kind}"] += 1
                continue
            if name != log:
                continue
            for i in invalidates:
                invalidated_by[i] = outcome.entry_id
            # An invalidation-only entry (empty data) is never live, but it is a record.
            history[outcome.entry_id] = RawEntry(
                outcome.entry_id,
                data,
                invalidates,
                bool(data),
                source="journal",
                raft_index=idx,
                raft_term=term,
                committed=committed,
            )
    names = state.log_names()
    if log not in names and names:  # a mistyped --log reads like an empty log otherwise
        stats.warnings.append(f"no log named {log!r} here; its logs: {', '.join(names)}")
    live_ids = set(state.logs.get(log, {}))
    out: list[RawEntry] = []
    for i in sorted(history):
        e = history[i]
        live = i in live_ids
        out.append(
            RawEntry(
                e.id,
                e.data,
                e.invalidates,
                live,
                0 if live else invalidated_by.get(i, 0),
                e.source,
                e.raft_index,
                e.raft_term,
                e.committed,
            )
        )
    return LogImage(log, state.last_id(log), out, invalidated_by, stats)


class RemoteReader:
    """Live entries of one log from coordinator nodes or `logstore serve` replicas."""

    def __init__(self, addresses: list[str], timeout_s: float, credentials=None) -> None:
        """`credentials` (rpc/credentials.py): CURVE to each address with the key the file
        lists for it, as that principal (the admin role reads the log)."""

        self.addresses = addresses
        self.timeout_s = timeout_s
        self._credentials = credentials
        self._store = self._open(addresses)

    def _open(self, addresses: list[str]):
        from logstore.remote import RemoteLogStore

        creds = self._credentials
        return RemoteLogStore(
            addresses,
            connect_timeout_s=self.timeout_s,
            curve=creds.client_curve() if creds is not None else None,
            server_keys=creds.coordinator_keys() if creds is not None else None,
        )

    def _rpc(self, address: str):
        from rpc.client import RpcClient

        creds = self._credentials
        if creds is None:
            return RpcClient(address, caller_uuid="coordinator-log-tool")
        return RpcClient(
            address,
            caller_uuid="coordinator-log-tool",
            curve=creds.client_curve(),
            server_key=creds.server_key(address),
        )

    def check_service(self) -> list[str]:
        """Ping every address (at most PING_TIMEOUT_S each) and return a warning for each
        that did not answer; fail clearly when none did, or when one that answered serves
        no log (`logstore serve` replicas and coordinator nodes, which serve their log
        read-only, do). The addresses that answered are read first; the others stay as
        fallbacks (a node may come back while --follow runs)."""
        from rpc.errors import TimedOut, Unavailable

        live: list[str] = []
        warnings: list[str] = []
        for address in self.addresses:
            try:
                with self._rpc(address) as client:
                    answer = client.ping(timeout_s=min(self.timeout_s, PING_TIMEOUT_S))
            except (Unavailable, TimedOut) as err:
                warnings.append(f"{address} did not answer ({err})")
                continue
            if "LogStore.Read" not in answer.methods:
                raise Unavailable(
                    f"{address} is a {answer.service!r} server that serves no log: give the "
                    "address of a coordinator node or of a `logstore serve` replica"
                )
            live.append(address)
        if not live:
            raise Unavailable("no address answered: " + "; ".join(warnings))
        if warnings:
            self._store.close()
            ordered = live + [a for a in self.addresses if a not in live]
            self._store = self._open(ordered)
            warnings.append(f"reading from {', '.join(live)}")
        return warnings

    def last_id(self, log: str) -> int:
        return self._store.last_id(log, timeout_s=self.timeout_s)

    def read(self, log: str, from_id: int, last: int) -> tuple[list[RawEntry], int]:
        """Live entries from from_id on, read in pages, and the last id they account for:
        `last` (the log's last id, asked for before the read), or the last id served when
        the read reached the end of the log (a page short of READ_PAGE) past it. Each page
        is read under the replica's lock, so the one that reached the end holds every record
        appended since `last` was asked, among them whatever invalidated an id at or below
        it in the meantime: cut at `last`, that id would show as gone with no invalidator
        (a lease renewal, its record cut, that --follow could not tell from anything else).
        A full page that goes past `last` is cut at it: the ids past it that the page left
        out are vouched for by nothing."""
        out: list[RawEntry] = []
        next_id = from_id
        while next_id <= last:
            page = self._store.read(log, next_id, READ_PAGE, timeout_s=self.timeout_s)
            full = len(page) >= READ_PAGE
            for e in page:
                if e.id > last and full:
                    return out, last
                out.append(RawEntry(e.id, e.data, tuple(e.invalidates), True, source="remote"))
            if not full:
                break
            next_id = page[-1].id + 1
        return out, max(last, out[-1].id if out else 0)

    def load(self, log: str) -> LogImage:
        # last_id first; the entries read afterwards may go past it (`read`).
        entries, last = self.read(log, 1, self.last_id(log))
        invalidated_by = {i: e.id for e in entries for i in e.invalidates}
        stats = LoadStats(replica_dir=",".join(self.addresses))
        return LogImage(log, last, entries, invalidated_by, stats)

    def close(self) -> None:
        self._store.close()
