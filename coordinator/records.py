"""The coordinator log's records, decoded for people (pure).

Turns raw log entries (id, bytes, the ids they invalidated, whether they are still live)
into `RecordView` values: record type, operation id and phase, the table, tablets and
servers a record concerns. Also derives, from a list of views, the pending operations, the
lease history and the summary counts, and formats views and epochs as text lines. No files,
sockets or clocks here. Two users: the log inspection tool (`coordinator log`,
optools/logtool.py and its readers in optools/logtool_source.py, design/logtool.md) and the
node's web console (coordinator/console.py), which renders its own log; it lives in the
coordinator package so that the server never imports the operator tools.

A record that does not decode is a RecordView of type "undecodable" carrying the reason;
nothing in this module raises on bad bytes.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import enum
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from rpc.protocols import coordinator_pb2 as pb

# Types that are not LogRecord oneof names.
TYPE_INVALIDATION = "invalidation"  # an entry with empty data: it only invalidates others
TYPE_UNDECODABLE = "undecodable"
TYPE_GONE = "gone"  # ids whose entries are no longer held anywhere we can read

RECORD_TYPES: tuple[str, ...] = tuple(
    f.name for f in pb.LogRecord.DESCRIPTOR.oneofs_by_name["record"].fields
)
ALL_TYPES: tuple[str, ...] = (*RECORD_TYPES, TYPE_INVALIDATION, TYPE_UNDECODABLE, TYPE_GONE)
_CAMEL = {"".join(p.capitalize() for p in t.split("_")).lower(): t for t in ALL_TYPES}


def normalize_type(name: str) -> str | None:
    """'CreateTable', 'create-table', 'create_table' -> 'create_table'; None if unknown."""
    key = name.strip().replace("-", "_").lower()
    if key in ALL_TYPES:
        return key
    return _CAMEL.get(key.replace("_", ""))


class Status(enum.Enum):
    LIVE = "live"
    INVALIDATED = "invalidated"


def utc_iso(unix_ms: int) -> str | None:
    """A wall-clock time in ms since the Unix epoch as UTC ISO 8601 with milliseconds
    ("2026-11-25T21:55:02.123Z"); None for 0 (a record written before lease records carried
    their time) or a value no calendar holds."""
    if unix_ms <= 0:
        return None
    try:
        when = datetime.datetime.fromtimestamp(unix_ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class LeaseInfo(NamedTuple):
    """What a Lease record says. `written_unix_ms` is the writer's wall clock, for people
    only (0 in records written before the field existed)."""

    holder_uuid: str
    holder_address: str
    epoch: int
    takeover: bool
    written_unix_ms: int = 0


@dataclass(frozen=True, slots=True)
class RawEntry:
    """One entry as a reader found it. `committed` is None when the reader cannot tell."""

    id: int
    data: bytes
    invalidates: tuple[int, ...]
    live: bool
    invalidated_by: int = 0  # 0: unknown or live
    source: str = ""  # "snapshot", "journal" or "remote"
    raft_index: int = 0
    raft_term: int = 0
    committed: bool | None = None


@dataclass(frozen=True, slots=True)
class RecordView:
    id: int
    status: Status
    type: str
    size_bytes: int
    invalidates: tuple[int, ...] = ()
    invalidated_by: int = 0
    op_id: int = 0
    phase: str = ""
    request_id: str = ""
    table_id: str = ""
    table_names: tuple[str, ...] = ()
    tablets: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()
    summary: str = ""  # type-specific words for the text line
    error: str = ""  # why it did not decode
    source: str = ""
    raft_index: int = 0
    raft_term: int = 0
    committed: bool | None = None
    id_to: int = 0  # TYPE_GONE only: the range id..id_to
    record: dict[str, Any] = field(default_factory=dict)  # the decoded protobuf as JSON
    lease: LeaseInfo | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "status": self.status.value,
            "invalidated_by": self.invalidated_by or None,
            "invalidates": list(self.invalidates),
            "size_bytes": self.size_bytes,
        }
        if self.type == TYPE_GONE:
            out["id_to"] = self.id_to
            return out
        out.update(
            op_id=self.op_id or None,
            phase=self.phase or None,
            request_id=self.request_id or None,
            table_id=self.table_id or None,
            table_names=list(self.table_names),
            tablets=list(self.tablets),
            servers=list(self.servers),
            source=self.source,
            raft_index=self.raft_index or None,
            raft_term=self.raft_term or None,
            committed=self.committed,
        )
        if self.lease is not None:
            out["lease"] = {
                "holder_uuid": self.lease.holder_uuid,
                "holder_address": self.lease.holder_address,
                "epoch": self.lease.epoch,
                "takeover": self.lease.takeover,
                "written_at": utc_iso(self.lease.written_unix_ms),
            }
        if self.error:
            out["error"] = self.error
        out["record"] = self.record
        return out


def _rid(r: pb.RequestId) -> str:
    return f"{r.client_id}/{r.seq}" if r.client_id or r.seq else ""


def _tablets(placements: Iterable[pb.TabletPlacement]) -> tuple[tuple[str, ...], list[str]]:
    tablets: list[str] = []
    servers: list[str] = []
    for t in placements:
        tablets.append(t.tablet_id)
        for u in t.replica_uuids:
            if u not in servers:
                servers.append(u)
    return tuple(tablets), servers


def decode_entry(raw: RawEntry) -> RecordView:
    """Decode one entry; never raises for bad data (the view says 'undecodable')."""
    status = Status.LIVE if raw.live else Status.INVALIDATED
    base = dict(
        id=raw.id,
        status=status,
        size_bytes=len(raw.data),
        invalidates=tuple(raw.invalidates),
        invalidated_by=raw.invalidated_by,
        source=raw.source,
        raft_index=raw.raft_index,
        raft_term=raw.raft_term,
        committed=raw.committed,
    )
    if not raw.data:
        return RecordView(type=TYPE_INVALIDATION, **base)
    record = pb.LogRecord()
    try:
        record.ParseFromString(raw.data)
    except (DecodeError, ValueError, RuntimeError) as err:
        return RecordView(type=TYPE_UNDECODABLE, error=f"not a LogRecord: {err}", **base)
    kind = record.WhichOneof("record")
    if kind is None:
        # Protobuf parses many byte strings as unknown fields; a record sets its oneof.
        return RecordView(
            type=TYPE_UNDECODABLE, error="no record kind set (unknown fields only)", **base
        )
    try:
        as_json = json_format.MessageToDict(record, preserving_proto_field_name=True)
    except (ValueError, TypeError) as err:  # e.g. a string field holding invalid UTF-8
        return RecordView(type=TYPE_UNDECODABLE, error=f"{kind}: {err}", **base)
    return _view_of(kind, record, as_json, base)


def _superseded(msg) -> list[str]:
    if not msg.superseded:
        return []
    return [f"superseded={','.join(_rid(s.request_id) for s in msg.superseded)}"]


def _skipped(msg) -> list[str]:
    return [f"skipped={','.join(msg.skipped_replicas)}"] if msg.skipped_replicas else []


def _previous(record_id: int) -> list[str]:
    return [f"previous={record_id}"] if record_id else []


# One function per operation record: (the message, the view's fields to fill) -> the words of
# the text line. Every LogRecord oneof but `lease` has one (tests/logtool checks it, so that a
# record type added to coordinator.proto is not left undecoded).


def _create_table(msg: pb.CreateTable, fields: dict[str, Any]) -> list[str]:
    tablets, servers = _tablets(msg.tablets)
    fields.update(table_id=msg.table_id, table_names=(msg.name,), tablets=tablets)
    fields["servers"] = tuple(servers)
    return [f"rf={msg.replication_factor} schema_v={msg.schema.version}", *_skipped(msg)]


def _drop_table(msg: pb.DropTable, fields: dict[str, Any]) -> list[str]:
    tablets, servers = _tablets(msg.tablets)
    fields.update(table_id=msg.table_id, table_names=(msg.name,), tablets=tablets)
    fields["servers"] = tuple(servers)
    words = []
    if msg.moot_record_ids:
        words.append(f"moot={','.join(map(str, msg.moot_record_ids))}")
    return [*words, *_superseded(msg), *_skipped(msg)]


def _alter_table(msg: pb.AlterTable, fields: dict[str, Any]) -> list[str]:
    tablets, servers = _tablets(msg.tablets)
    names = (msg.old_name,) if msg.new_name == msg.old_name else (msg.old_name, msg.new_name)
    fields.update(table_id=msg.table_id, table_names=names, tablets=tablets)
    fields["servers"] = tuple(servers)
    words = [f"schema_v={msg.old_schema.version}->{msg.new_schema.version}"]
    if msg.add_columns:
        words.append(f"add={','.join(c.name for c in msg.add_columns)}")
    if msg.drop_columns:
        words.append(f"drop={','.join(msg.drop_columns)}")
    if msg.previous_alter_id:
        words.append(f"previous_alter={msg.previous_alter_id}")
    return [*words, *_superseded(msg), *_skipped(msg)]


def _enlist_server(msg: pb.EnlistServer, fields: dict[str, Any]) -> list[str]:
    fields["servers"] = (msg.server_uuid,)
    return [f"address={msg.address}", *_previous(msg.previous_record_id)]


def _server_down(msg: pb.ServerDown, fields: dict[str, Any]) -> list[str]:
    fields["servers"] = (msg.server_uuid,)
    return [f"address={msg.address} reason={msg.reason!r}", *_previous(msg.previous_record_id)]


def _remove_server(msg: pb.RemoveServer, fields: dict[str, Any]) -> list[str]:
    fields["servers"] = (msg.server_uuid,)
    words = _previous(msg.previous_record_id)
    if msg.retire_record_id:
        words.append(f"retirement={msg.retire_record_id}")
    return words


def _retire_server(msg: pb.RetireServer, fields: dict[str, Any]) -> list[str]:
    fields["servers"] = (msg.server_uuid,)
    return [
        "retired" if msg.retired else "retirement cancelled",
        *_previous(msg.previous_record_id),
    ]


def _set_replication(msg: pb.SetReplication, fields: dict[str, Any]) -> list[str]:
    # The record names its table by id only; name_tables() adds the name from the table's
    # other records.
    fields["table_id"] = msg.table_id
    return [
        f"rf={msg.old_replication_factor}->{msg.replication_factor}",
        *_previous(msg.previous_record_id),
        *_superseded(msg),
    ]


def _utc_ms(unix_ms: int) -> str:
    when = datetime.datetime.fromtimestamp(unix_ms / 1000, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _principal(msg: pb.Principal, fields: dict[str, Any]) -> list[str]:
    words = [f"{msg.action} principal={msg.name} kind={msg.kind} key={msg.public_key}"]
    if msg.action != "add" and list(msg.old_roles) != list(msg.roles):
        words.append(f"roles={','.join(msg.old_roles)}->{','.join(msg.roles)}")
    else:
        words.append(f"roles={','.join(msg.roles)}")
    if msg.old_state and msg.old_state != msg.state:
        words.append(f"state={msg.old_state}->{msg.state}")
    else:
        words.append(f"state={msg.state}")
    if msg.expires_unix_ms:
        words.append(f"expires={_utc_ms(msg.expires_unix_ms)}")
    if msg.join_token:
        words.append(f"join_token={msg.join_token}")
    if msg.join_token_record_id:
        words.append(f"spends=#{msg.join_token_record_id}")
    words += _previous(msg.previous_record_id)
    if msg.superseded:
        words.append(f"superseded={','.join(_rid(r) for r in msg.superseded)}")
    return words


OP_DECODERS: dict[str, Callable[[Any, dict[str, Any]], list[str]]] = {
    "create_table": _create_table,
    "drop_table": _drop_table,
    "alter_table": _alter_table,
    "enlist_server": _enlist_server,
    "server_down": _server_down,
    "remove_server": _remove_server,
    "set_replication": _set_replication,
    "retire_server": _retire_server,
    "principal": _principal,
}


def _view_of(kind: str, record: pb.LogRecord, as_json: dict, base: dict) -> RecordView:
    msg = getattr(record, kind)
    fields: dict[str, Any] = {}
    if kind == "lease":
        epoch = base["id"] if msg.takeover else msg.epoch
        fields["lease"] = LeaseInfo(
            msg.holder_uuid, msg.holder_address, epoch, msg.takeover, msg.written_unix_ms
        )
        fields["servers"] = (msg.holder_uuid,)
        word = "takeover" if msg.takeover else "renewal"
        fields["summary"] = (
            f"{word} epoch={epoch} holder={msg.holder_uuid} address={msg.holder_address} "
            f"at={utc_iso(msg.written_unix_ms) or '-'}"
        )
        return RecordView(type=kind, record=as_json, **base, **fields)
    header = msg.header
    fields["op_id"] = header.op_id
    fields["phase"] = (
        pb.Phase.Name(header.phase) if header.phase in pb.Phase.values() else str(header.phase)
    )
    fields["request_id"] = _rid(header.request_id)
    decode = OP_DECODERS.get(kind)
    # A type newer than this tool (a newer coordinator's log): its header is still read, and
    # --verbose / --json show the whole record.
    words = decode(msg, fields) if decode else ["(fields not decoded: see --verbose)"]
    fields["summary"] = " ".join(words)
    return RecordView(type=kind, record=as_json, **base, **fields)


# Records that give a table its name: the name the table has from that record on.
TABLE_NAMING_TYPES = frozenset({"create_table", "alter_table", "drop_table"})


def name_tables(
    views: Sequence[RecordView], names: Mapping[str, str] | None = None
) -> tuple[list[RecordView], dict[str, str]]:
    """Name the records that carry a table id but no name (set_replication): the table's
    name at that point of the log, from the held records that name it (create, alter,
    drop), or, when none precedes it, the name a later one gives. `names` (table id -> name)
    carries on from records read before (--follow). Views in id order; returns them in the
    same order, and the names as of the last one."""
    current = dict(names or {})
    last_known = {
        v.table_id: v.table_names[-1]
        for v in views
        if v.type in TABLE_NAMING_TYPES and v.table_id and v.table_names
    }
    out: list[RecordView] = []
    for v in views:
        if v.type in TABLE_NAMING_TYPES and v.table_id and v.table_names:
            current[v.table_id] = v.table_names[-1]
        elif v.table_id and not v.table_names:
            name = current.get(v.table_id) or last_known.get(v.table_id)
            if name:
                v = dataclasses.replace(v, table_names=(name,))
        out.append(v)
    return out, current


def gone_ranges(
    last_id: int, present: Iterable[int], invalidated_by: dict[int, int], first_id: int = 1
) -> list[RecordView]:
    """Views for the ids in 1..last_id that no reader holds: invalidated, then compacted
    away (or, read live, never returned). One view per run of ids with the same
    invalidating record (0 when unknown), from first_id on."""
    have = set(present)
    out: list[RecordView] = []
    start = 0
    by = 0
    for i in range(max(1, first_id), last_id + 2):
        missing = i <= last_id and i not in have
        cur_by = invalidated_by.get(i, 0) if missing else -1
        if start and (not missing or cur_by != by):
            out.append(
                RecordView(
                    id=start,
                    id_to=i - 1,
                    status=Status.INVALIDATED,
                    type=TYPE_GONE,
                    size_bytes=0,
                    invalidated_by=by,
                )
            )
            start = 0
        if missing and not start:
            start, by = i, cur_by
    return out


# ------------------------------------------------------------------ filters


@dataclass(frozen=True, slots=True)
class Filter:
    types: frozenset[str] = frozenset()
    op_ids: frozenset[int] = frozenset()
    tables: frozenset[str] = frozenset()  # table ids or names
    servers: frozenset[str] = frozenset()
    live_only: bool = False

    def active(self) -> bool:
        return bool(self.types or self.op_ids or self.tables or self.servers or self.live_only)

    def matches(self, v: RecordView) -> bool:
        if self.live_only and v.status is not Status.LIVE:
            return False
        if self.types and v.type not in self.types:
            return False
        if self.op_ids and v.op_id not in self.op_ids:
            return False
        if self.tables and not (
            v.table_id in self.tables
            or any(n in self.tables for n in v.table_names)
            or any(t.split("-", 1)[0] in self.tables for t in v.tablets)
        ):
            return False
        if self.servers and not any(s in self.servers for s in v.servers):
            return False
        return True


# ------------------------------------------------------------------ derived views


def pending_operations(views: Sequence[RecordView]) -> list[RecordView]:
    """STARTED records with no DONE record of the same operation, in log order.

    A DONE record invalidates its STARTED record, so a STARTED record that is still live
    has no DONE yet; a DONE record seen (even invalidated later) settles the operation."""
    done = {v.op_id for v in views if v.phase == "DONE" and v.op_id}
    return [
        v
        for v in views
        if v.phase == "STARTED"
        and v.status is Status.LIVE
        and v.op_id not in done
        and v.type != TYPE_GONE
    ]


def is_renewal(v: RecordView) -> bool:
    """A lease renewal (not a takeover): what `--follow` hides unless asked."""
    return v.lease is not None and not v.lease.takeover


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One lease record of an epoch, as held by the source."""

    id: int
    takeover: bool
    live: bool
    written_unix_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": "takeover" if self.takeover else "renewal",
            "status": "live" if self.live else "invalidated",
            "written_at": utc_iso(self.written_unix_ms),
        }


@dataclass(frozen=True, slots=True)
class Epoch:
    epoch: int  # the takeover record's id
    holder_uuid: str
    holder_address: str
    takeover_seen: bool  # the takeover record itself is still held
    takeover_live: bool
    first_id: int  # first lease record seen of this epoch
    last_id: int  # last lease record seen of this epoch
    renewals_seen: int
    last_record_id: int  # last record of any kind before the next epoch (who wrote last)
    ended_by: int  # the next epoch's takeover id (0: still current, as far as we know)
    records: tuple[LeaseRecord, ...] = ()  # every lease record of it held, in id order

    @property
    def taken_over_unix_ms(self) -> int:
        """When the takeover record was written (0: not held, or written without a time)."""
        first = self.records[0] if self.records else None
        return first.written_unix_ms if first is not None and first.takeover else 0

    @property
    def last_written_unix_ms(self) -> int:
        """When the last lease record held of this epoch was written (0: unknown)."""
        return self.records[-1].written_unix_ms if self.records else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "holder_uuid": self.holder_uuid,
            "holder_address": self.holder_address,
            "takeover_seen": self.takeover_seen,
            "takeover_live": self.takeover_live,
            "taken_over_at": utc_iso(self.taken_over_unix_ms),
            "last_lease_record_at": utc_iso(self.last_written_unix_ms),
            "first_lease_id": self.first_id,
            "last_lease_id": self.last_id,
            "renewals_seen": self.renewals_seen,
            "last_record_id": self.last_record_id,
            "ended_by": self.ended_by or None,
            "lease_records": [r.to_json() for r in self.records],
        }


def lease_history(views: Sequence[RecordView]) -> list[Epoch]:
    """Who led when, in log ids and (for records that carry it) the writers' wall clock:
    one Epoch per epoch that any held Lease record names."""
    by_epoch: dict[int, list[RecordView]] = {}
    for v in views:
        if v.lease is not None:
            by_epoch.setdefault(v.lease.epoch, []).append(v)
    epochs = sorted(by_epoch)
    held_ids = sorted(v.id for v in views if v.type != TYPE_GONE)
    out: list[Epoch] = []
    for n, e in enumerate(epochs):
        recs = sorted(by_epoch[e], key=lambda v: v.id)
        takeover = next((v for v in recs if v.lease and v.lease.takeover), None)
        head = takeover or recs[0]
        assert head.lease is not None
        ended_by = epochs[n + 1] if n + 1 < len(epochs) else 0
        # The last record held before the next epoch opened: the last write of this leader.
        end = bisect.bisect_left(held_ids, ended_by) if ended_by else len(held_ids)
        last_in_epoch = held_ids[end - 1] if end and held_ids[end - 1] >= e else recs[-1].id
        out.append(
            Epoch(
                epoch=e,
                holder_uuid=head.lease.holder_uuid,
                holder_address=head.lease.holder_address,
                takeover_seen=takeover is not None,
                takeover_live=takeover is not None and takeover.status is Status.LIVE,
                first_id=recs[0].id,
                last_id=recs[-1].id,
                renewals_seen=sum(1 for v in recs if is_renewal(v)),
                last_record_id=last_in_epoch,
                ended_by=ended_by,
                records=tuple(
                    LeaseRecord(
                        v.id, v.lease.takeover, v.status is Status.LIVE, v.lease.written_unix_ms
                    )
                    for v in recs
                    if v.lease is not None
                ),
            )
        )
    return out


def summarize(views: Sequence[RecordView], last_id: int) -> dict[str, Any]:
    """Counts of one log that do not depend on the source, and what this source still holds
    of its invalidated records.

    Logstore drops an invalidated entry at once; only a data dir's journal still holds
    invalidated records (until compaction), a live read holds none. So the figures of the
    log itself (ids, live records by type and bytes, invalidated ids, pending operations,
    epochs and undecodable records among the live ones) are counted from live records and
    ids alone, and agree whatever the source; `invalidated_held*` says how many of the
    invalidated ids this source can still show, `gone_ids` how many it cannot."""
    by_type: dict[str, dict[str, int]] = {}
    live = live_bytes = held = held_bytes = 0
    for v in views:
        if v.type == TYPE_GONE:
            continue
        row = by_type.setdefault(
            v.type,
            {"live": 0, "live_bytes": 0, "invalidated_held": 0, "invalidated_held_bytes": 0},
        )
        if v.status is Status.LIVE:
            row["live"] += 1
            row["live_bytes"] += v.size_bytes
            live += 1
            live_bytes += v.size_bytes
        else:
            row["invalidated_held"] += 1
            row["invalidated_held_bytes"] += v.size_bytes
            held += 1
            held_bytes += v.size_bytes
    live_views = [v for v in views if v.status is Status.LIVE and v.type != TYPE_GONE]
    return {
        "last_id": last_id,
        "live": live,
        "live_bytes": live_bytes,
        "invalidated": max(0, last_id - live),
        "invalidated_held": held,
        "invalidated_held_bytes": held_bytes,
        "gone_ids": max(0, last_id - live - held),
        "by_type": dict(sorted(by_type.items())),
        "pending_operations": len(pending_operations(views)),
        "epochs": len(lease_history(live_views)),
        "undecodable": by_type.get(TYPE_UNDECODABLE, {}).get("live", 0),
    }


# ------------------------------------------------------------------ text lines


def format_view(v: RecordView, verbose: bool = False) -> str:
    if v.type == TYPE_GONE:
        ids = f"#{v.id}" if v.id == v.id_to else f"#{v.id}-#{v.id_to}"
        by = f" by #{v.invalidated_by}" if v.invalidated_by else ""
        return f"{ids} gone (invalidated{by}; no longer held)"
    status = v.status.value
    if v.type == TYPE_INVALIDATION:
        status = "never-live"  # an empty entry only invalidates others; nothing is kept
    elif v.status is Status.INVALIDATED and v.invalidated_by:
        status += f" by #{v.invalidated_by}"
    parts = [f"#{v.id}", status, v.type]
    if v.phase:
        parts.append(v.phase)
    if v.op_id:
        parts.append(f"op={v.op_id}")
    if v.request_id:
        parts.append(f"req={v.request_id}")
    if v.table_id or v.table_names:
        names = "/".join(n for n in v.table_names if n)
        parts.append(f"table={v.table_id}" + (f"({names})" if names else ""))
    if v.tablets:
        parts.append(f"tablets={','.join(v.tablets)}")
    if v.servers and v.type != "lease":
        parts.append(f"servers={','.join(v.servers)}")
    if v.summary:
        parts.append(v.summary)
    if v.invalidates:
        parts.append(f"invalidates={','.join(map(str, v.invalidates))}")
    parts.append(f"{v.size_bytes}B")
    if v.committed is False:
        parts.append("(beyond the saved commit index)")
    if v.error:
        parts.append(f"error: {v.error}")
    line = " ".join(parts)
    if verbose and v.record:
        line += "\n    " + json.dumps(v.record, sort_keys=True)
    return line


def _at(unix_ms: int) -> str:
    return utc_iso(unix_ms) or "-"


def format_epoch(e: Epoch, verbose: bool = False) -> str:
    until = f"until epoch {e.ended_by}" if e.ended_by else "current"
    note = ""
    if not e.takeover_seen:
        note = " (takeover record no longer held)"
    elif not e.takeover_live:
        note = " (takeover record invalidated)"
    line = (
        f"epoch {e.epoch}: holder={e.holder_uuid} address={e.holder_address} "
        f"taken over at {_at(e.taken_over_unix_ms) if e.takeover_seen else '-'}, "
        f"last lease record at {_at(e.last_written_unix_ms)}; "
        f"lease records #{e.first_id}..#{e.last_id} (renewals seen {e.renewals_seen}), "
        f"last record #{e.last_record_id}, {until}{note}"
    )
    if verbose:
        for r in e.records:
            kind = "takeover" if r.takeover else "renewal"
            status = "live" if r.live else "invalidated"
            line += f"\n    #{r.id} {kind} at {_at(r.written_unix_ms)} ({status})"
    return line
