"""The coordinator node's web console (design/operability.md section 3).

Server-rendered HTML pages served by the node's `rpc.observe.HttpEndpoint`: no build step,
no external assets, readable without JavaScript; a few lines of inline JavaScript only
refresh the progress bars of tablet copies from `/copies.json`.

Two halves:
- `ConsoleSource` gathers a `Snapshot` (frozen values) from a running node: its catalog
  under the catalog lock, its lease and replay state, its own log (read live and decoded
  with coordinator/records.py), and, for the pages that need them, the tablet servers'
  `TServer.Status` / `TServer.ListTablets` answers (copies in flight, WAL counters) and the
  leader's console address (`Coordinator.Status.http_address`). All I/O is here, each call
  with a short deadline.
- `render_*` functions are pure: a snapshot in, HTML bytes out; every value that came from
  the cluster is escaped (html.escape). `Console.handle` routes a path to them.

A follower renders the same pages from its replayed catalog and says "follower; leader is X"
with a link to the leader's console when it knows its address.

Pages: `/` overview, `/tables/<name>`, `/ops`, `/log`, `/leases`, `/copies` (and
`/copies.json`), `/tservers/<uuid>`.
"""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode

from coordinator.catalog import ServerState
from coordinator.leases.driver import LOG_NAME
from coordinator.records import (
    TYPE_GONE,
    Epoch,
    Filter,
    RawEntry,
    RecordView,
    Status,
    decode_entry,
    format_epoch,
    format_view,
    gone_ranges,
    lease_history,
    name_tables,
    normalize_type,
    utc_iso,
)
from logstore.api import read_live
from rpc.client import RpcClient, Transport
from rpc.errors import RpcError
from rpc.observe import Page
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts

if TYPE_CHECKING:
    from coordinator.node import CoordinatorNode

logger = logging.getLogger(__name__)

LOG_ENTRIES_MAX = 20_000  # live records read per page at most (the live log is small)
LOG_PAGE_DEFAULT = 200
LOG_PAGE_MAX = 1000
RECENT_DONE_MAX = 50
SERVERS_POLLED_MAX = 64  # tablet servers asked for their copies per page
TSERVER_CALL_TIMEOUT_S = 1.0
# A follower whose replay is this many ids behind its log's tail is not ready.
REPLAY_LAG_IDS_MAX = 100
COPY_ACTIVE_STATES = frozenset({"QUEUED", "RUNNING"})
PROGRESS_POLL_MS = 1000

HEALTHY = "healthy"
UNDER_REPLICATED = "under-replicated"
UNAVAILABLE = "unavailable"
UNKNOWN = "unknown"


# ------------------------------------------------------------------ snapshot values


@dataclass(frozen=True, slots=True)
class NodeView:
    node_id: str
    uuid: str
    address: str
    http_address: str
    role: str  # LEADER, RECOVERING, FOLLOWER
    epoch: int
    leader_uuid: str
    leader_address: str
    leader_http: str  # the leader's console HOST:PORT ("" unknown)
    applied_id: int
    log_last_id: int  # -1: could not be read
    replay_error: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaView:
    uuid: str
    address: str
    server_state: str  # LIVE, DOWN, REMOVED
    is_leader: bool
    member_type: str  # VOTER, NON_VOTER
    failed: bool = False  # its server reports it FAILED


@dataclass(frozen=True, slots=True)
class TabletRow:
    tablet_id: str
    hash_bucket: int
    num_buckets: int
    replicas: tuple[ReplicaView, ...]
    config_index: int  # -1: no report yet (the placement)
    leader_uuid: str
    health: str
    why: str = ""


@dataclass(frozen=True, slots=True)
class TableRow:
    table_id: str
    name: str
    state: str
    replication_factor: int
    schema_version: int
    columns: tuple[tuple[str, str, bool, bool], ...]  # name, type, key, nullable
    tablets: tuple[TabletRow, ...]
    pending_op_id: int = 0

    @property
    def health(self) -> str:
        states = {t.health for t in self.tablets}
        for worst in (UNAVAILABLE, UNDER_REPLICATED, UNKNOWN):
            if worst in states:
                return worst
        return HEALTHY


@dataclass(frozen=True, slots=True)
class ServerRow:
    uuid: str
    address: str
    state: str  # LIVE, DOWN
    retired: bool
    replicas: int
    heartbeat_age_s: float | None  # None: no heartbeat seen by this node
    http_address: str = ""  # its own page ("" unknown: heartbeats carry none yet)


@dataclass(frozen=True, slots=True)
class CopyRow:
    server_uuid: str  # the server the tablet is copied onto
    tablet_id: str
    source_uuid: str
    state: str
    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    rate_bytes_s: float
    error: str = ""
    rate_limit_bytes_s: int = 0

    @property
    def key(self) -> str:
        return f"{self.server_uuid}/{self.tablet_id}"

    @property
    def active(self) -> bool:
        return self.state in COPY_ACTIVE_STATES

    @property
    def percent(self) -> float:
        if self.bytes_total <= 0:
            return 100.0 if self.state == "DONE" else 0.0
        return round(min(100.0, 100.0 * self.bytes_done / self.bytes_total), 1)

    @property
    def eta_s(self) -> float | None:
        left = self.bytes_total - self.bytes_done
        if not self.active or self.rate_bytes_s <= 0 or left < 0:
            return None
        return left / self.rate_bytes_s

    def progress_text(self) -> str:
        eta = self.eta_s
        return (
            f"{fmt_bytes(self.bytes_done)} of {fmt_bytes(self.bytes_total)} "
            f"({self.percent:.1f}%), files {self.files_done}/{self.files_total}, "
            f"{fmt_bytes(int(self.rate_bytes_s))}/s, ETA {fmt_duration(eta)}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "server_uuid": self.server_uuid,
            "tablet_id": self.tablet_id,
            "source_uuid": self.source_uuid,
            "state": self.state,
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "files_done": self.files_done,
            "files_total": self.files_total,
            "rate_bytes_s": self.rate_bytes_s,
            "eta_s": self.eta_s,
            "percent": self.percent,
            "text": self.progress_text(),
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class ActionRow:
    at_unix_ms: int
    kind: str  # ADD, REMOVE
    tablet_id: str
    peer_uuid: str
    leader_uuid: str
    reason: str
    outcome: str


@dataclass(frozen=True, slots=True)
class ReplicationRow:
    """What the leader's replication manager says (None on a follower)."""

    tablets: int
    healthy: int
    under_replicated: int
    unknown: int
    moves: tuple[tuple[str, str, str], ...]  # tablet, from, to
    retiring: tuple[str, ...]
    changes_sent: int
    changes_refused: int
    strays: int
    unhealthy: tuple[tuple[str, str, str], ...]  # tablet, table, reason


@dataclass(frozen=True, slots=True)
class TServerDetail:
    """A tablet server's own answers (TServer.Status and ListTablets)."""

    uuid: str
    error: str = ""  # why it did not answer
    tablets: int = 0
    wal_groups: int = 0
    wal_syncs: int = 0
    wal_entries: int = 0
    writes: int = 0
    rows_written: int = 0
    wal_sync_enabled: bool = True
    # tablet id, table name, data state, status, role, term, last op index, error
    replicas: tuple[tuple[str, str, str, str, str, int, int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    now_unix_ms: int
    node: NodeView
    raft: dict[str, Any] | None = None  # this node's log replica (embedded logstore only)
    tables: tuple[TableRow, ...] = ()
    servers: tuple[ServerRow, ...] = ()
    pending: tuple[RecordView, ...] = ()  # the catalog's pending operations, decoded
    records: tuple[RecordView, ...] | None = None  # the log (None: not read for this page)
    log_error: str = ""
    log_truncated: bool = False
    copies: tuple[CopyRow, ...] | None = None  # None: not gathered for this page
    copy_errors: tuple[tuple[str, str], ...] = ()  # (server uuid, why it did not answer)
    replication: ReplicationRow | None = None
    actions: tuple[ActionRow, ...] = ()
    tserver: TServerDetail | None = None

    def table(self, name: str) -> TableRow | None:
        return next((t for t in self.tables if t.name == name), None)

    def server(self, uuid: str) -> ServerRow | None:
        return next((s for s in self.servers if s.uuid == uuid), None)


# ------------------------------------------------------------------ pure helpers


def fmt_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def tablet_health(
    replication_factor: int,
    replicas: Sequence[ReplicaView],
    reported: bool,
) -> tuple[str, str]:
    """(health, why) of one tablet from its replicas as this node knows them.

    unavailable: no majority of its members on live servers (writes cannot commit), or none
    at all; under-replicated: fewer good voters than its replication factor; unknown: no
    report from a replica yet (only the placement is known)."""
    voters = [r for r in replicas if r.member_type != "NON_VOTER"]
    good = [r for r in voters if r.server_state == "LIVE" and not r.failed]
    if not voters or len(good) < len(voters) // 2 + 1:
        bad = ", ".join(f"{r.uuid} {r.server_state}" for r in voters if r not in good)
        return UNAVAILABLE, f"{len(good)} good voter(s) of {len(voters)}" + (
            f" ({bad})" if bad else ""
        )
    if len(good) < replication_factor:
        return (
            UNDER_REPLICATED,
            f"{len(good)} good voter(s), replication factor {replication_factor}",
        )
    if not reported:
        return UNKNOWN, "no replica has reported yet"
    return HEALTHY, ""


def decide_ready(
    *,
    serving: bool,
    lease_serving: bool,
    epoch: int,
    leader_uuid: str,
    applied_id: int,
    log_last_id: int | None,
    log_error: str = "",
    replay_error: str = "",
) -> tuple[bool, list[str]]:
    """/readyz of a coordinator node: it leads (recovered), or follows a known leader with
    its replay caught up (within REPLAY_LAG_IDS_MAX ids of its log's tail)."""
    if replay_error:
        return False, [f"replay stopped at id {applied_id}: {replay_error}"]
    if serving:
        return True, []
    if lease_serving:
        return False, [
            f"leader of epoch {epoch}, recovering (replaying the log and completing "
            "pending operations)"
        ]
    why: list[str] = []
    if not leader_uuid:
        why.append("follower that knows no leader (no live lease seen)")
    if log_error:
        why.append(f"cannot read its log: {log_error}")
    elif log_last_id is not None and log_last_id - applied_id > REPLAY_LAG_IDS_MAX:
        why.append(f"replay behind: applied id {applied_id} of {log_last_id}")
    return not why, why


def log_views(
    last_id: int, entries: Iterable[tuple[int, bytes, tuple[int, ...]]]
) -> list[RecordView]:
    """Decoded live records of the log with the gone ranges between them, named, in id
    order (what `coordinator log --address` lists)."""
    raws = [RawEntry(i, data, inv, True, source="live") for i, data, inv in entries]
    views = [decode_entry(r) for r in raws]
    invalidated_by = {i: r.id for r in raws for i in r.invalidates}
    views += gone_ranges(last_id, {r.id for r in raws}, invalidated_by)
    views.sort(key=lambda v: v.id)
    named, _ = name_tables(views)
    return named


# ------------------------------------------------------------------ html


class _Html(str):
    """Markup already made safe: not escaped again."""


def _e(value: object) -> str:
    if isinstance(value, _Html):
        return value
    return html.escape("" if value is None else str(value), quote=True)


def _page_url(address: str) -> str:
    """The link to a daemon's page from its advertised address: HOST:PORT is HTTP, an
    `https://HOST:PORT` one HTTPS (rpc.observe.HttpEndpoint.advertised); no other scheme."""
    if address.startswith("https://"):
        return address.rstrip("/") + "/"
    return f"http://{address}/"


def _a(href: str, text: object, cls: str = "") -> _Html:
    c = f' class="{_e(cls)}"' if cls else ""
    return _Html(f'<a href="{_e(href)}"{c}>{_e(text)}</a>')


def _badge(text: str) -> _Html:
    cls = {
        "LIVE": "ok",
        HEALTHY: "ok",
        "RUNNING": "ok",
        "LEADER": "ok",
        "DONE": "ok",
        "DOWN": "bad",
        UNAVAILABLE: "bad",
        "FAILED": "bad",
        "REMOVED": "bad",
        UNDER_REPLICATED: "warn",
        UNKNOWN: "warn",
        "RECOVERING": "warn",
        "COPYING": "warn",
        "QUEUED": "warn",
    }.get(text, "")
    return _Html(f'<span class="badge {cls}">{_e(text)}</span>')


def _table(headers: Sequence[str], rows: Iterable[Sequence[object]], empty: str = "none") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class="muted">{_e(empty)}</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def table_href(name: str) -> str:
    return "/tables/" + quote(name, safe="")


def tserver_href(uuid: str) -> str:
    return "/tservers/" + quote(uuid, safe="")


def _age(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f}s ago"


def _at(unix_ms: int) -> str:
    return utc_iso(unix_ms) or "-"


_CSS = """
body{font-family:system-ui,sans-serif;margin:0;color:#1a1a1a;background:#fafafa}
header{background:#223;color:#eee;padding:.5em 1em}
header a{color:#cde;margin-right:1em;text-decoration:none}
header a.on{color:#fff;font-weight:bold}
main{padding:0 1em 2em}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;margin:.3em 0;background:#fff}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top;font-size:.92em}
th{background:#eef}
.banner{padding:.5em 1em;margin:.8em 0;border-radius:4px}
.banner.leader{background:#e3f6e3}.banner.follower{background:#fff4d6}
.badge{padding:0 .4em;border-radius:3px;background:#ddd}
.ok{background:#bfe8bf}.bad{background:#f5b5b5}.warn{background:#f6e3a5}
.muted{color:#777}
pre{background:#fff;border:1px solid #ccc;padding:.5em;overflow-x:auto;font-size:.85em}
.bar{display:inline-block;width:14em;height:.9em;background:#ddd;vertical-align:middle}
.bar>span{display:block;height:100%;background:#4a8}
.tl{position:relative;height:1.2em;background:#eee;width:40em}
.tl>span{position:absolute;top:0;height:100%;background:#69c;min-width:2px}
form{margin:.5em 0}input{margin-right:.5em}
"""

_PAGES = (
    ("/", "overview"),
    ("/ops", "operations"),
    ("/log", "log"),
    ("/leases", "leases"),
    ("/copies", "copies"),
)


def _banner(node: NodeView) -> str:
    if node.role == "LEADER":
        return (
            f'<div class="banner leader" id="role">leader: this node ({_e(node.node_id)}, '
            f"{_e(node.uuid)}) leads epoch {node.epoch}</div>"
        )
    if node.role == "RECOVERING":
        return (
            f'<div class="banner follower" id="role">leader recovering: this node '
            f"({_e(node.uuid)}) holds the lease of epoch {node.epoch} and is replaying the "
            "log; it serves once every pending operation is complete</div>"
        )
    if not node.leader_uuid:
        return (
            '<div class="banner follower" id="role">follower; leader is unknown (no live '
            "lease seen): this view is this node's replayed catalog</div>"
        )
    who = f"{node.leader_uuid} at {node.leader_address}"
    if node.leader_http:
        link = f" &mdash; {_a(_page_url(node.leader_http), 'the leader’s console')}"
    else:
        link = " (its console address is not known)"
    return (
        f'<div class="banner follower" id="role">follower; leader is {_e(who)}, epoch '
        f"{node.epoch}{link}. This view is this node's replayed catalog.</div>"
    )


def _page(s: Snapshot, title: str, current: str, body: str, script: str = "") -> bytes:
    nav = "".join(
        f'<a href="{p}"{" class=on" if p == current else ""}>{_e(label)}</a>' for p, label in _PAGES
    )
    n = s.node
    tail = f"log id {n.log_last_id}" if n.log_last_id >= 0 else "log tail unknown"
    doc = (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_e(title)} · coordinator {_e(n.node_id)}</title><style>{_CSS}</style></head>"
        f"<body><header><strong>coordinator {_e(n.node_id)}</strong> &nbsp; {nav}</header>"
        f"<main>{_banner(n)}<h1>{_e(title)}</h1>{body}"
        f'<p class="muted">rendered {_e(_at(s.now_unix_ms))} by {_e(n.uuid)} '
        f"(applied id {n.applied_id}, {_e(tail)})</p></main>"
        f"{script}</body></html>\n"
    )
    return doc.encode()


def _servers_table(s: Snapshot, servers: Sequence[ServerRow]) -> str:
    rows = []
    for srv in servers:
        rows.append(
            (
                _a(tserver_href(srv.uuid), srv.uuid),
                srv.address,
                _badge(srv.state),
                "yes" if srv.retired else "",
                srv.replicas,
                _age(srv.heartbeat_age_s),
            )
        )
    return _table(
        ("uuid", "address", "state", "retired", "replicas", "last heartbeat (this node)"),
        rows,
        "no tablet server enlisted",
    )


def _raft_section(s: Snapshot) -> str:
    r = s.raft
    if r is None:
        return '<p class="muted">this node uses an external logstore (`logstore status`)</p>'
    connected = set(r.get("connected", ()))
    me = r.get("address", "")
    leader = r.get("leader") or ""
    rows = []
    for m in r.get("members", ()):
        if m == me:
            state = f"{r.get('role', '?')} (this node)"
        elif m == leader:
            state = "leader"
        else:
            state = "follower"
        link = "this node" if m == me else ("connected" if m in connected else "not connected")
        rows.append((m, state, link))
    facts = (
        f"term {r.get('term', 0)}, commit index {r.get('commit_index', 0)}, applied index "
        f"{r.get('applied_index', 0)}, last log index {r.get('last_log_index', 0)}"
    )
    return (
        _table(("log member (Raft address)", "Raft state", "link from this node"), rows)
        + f'<p class="muted">this replica: {_e(facts)}; Raft leader {_e(leader or "unknown")}; '
        "the state of the other members as this replica sees them</p>"
    )


def render_overview(s: Snapshot) -> bytes:
    n = s.node
    node_rows = [
        ("node", n.node_id),
        ("uuid", n.uuid),
        ("role", _badge(n.role)),
        ("rpc address", n.address),
        ("console", n.http_address or "-"),
        ("epoch", n.epoch or "-"),
        ("leader", f"{n.leader_uuid} at {n.leader_address}" if n.leader_uuid else "unknown"),
        ("applied id / log tail", f"{n.applied_id} / {n.log_last_id}"),
        ("pending operations", _a("/ops", len(s.pending))),
    ]
    if n.replay_error:
        node_rows.append(("replay", f"STOPPED: {n.replay_error}"))
    node_html = "<table>" + "".join(
        f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in node_rows
    )
    node_html += "</table>"
    table_rows = []
    for t in s.tables:
        counts: dict[str, int] = {}
        for tablet in t.tablets:
            counts[tablet.health] = counts.get(tablet.health, 0) + 1
        detail = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        table_rows.append(
            (
                _a(table_href(t.name), t.name),
                t.table_id,
                _badge(t.state),
                t.replication_factor,
                len(t.tablets),
                _badge(t.health),
                detail,
            )
        )
    tables = _table(
        ("table", "id", "state", "replication", "tablets", "health", "tablets by health"),
        table_rows,
        "no table",
    )
    body = (
        f"<h2>This node</h2>{node_html}"
        f"<h2>Coordinator log members</h2>{_raft_section(s)}"
        f"<h2>Tablet servers</h2>{_servers_table(s, s.servers)}"
        f"<h2>Tables</h2>{tables}"
    )
    return _page(s, "Overview", "/", body)


def render_table(s: Snapshot, name: str) -> bytes | None:
    t = s.table(name)
    if t is None:
        return None
    facts = _table(
        ("id", "state", "replication factor", "schema version", "health", "pending operation"),
        [
            (
                t.table_id,
                _badge(t.state),
                t.replication_factor,
                t.schema_version,
                _badge(t.health),
                t.pending_op_id or "-",
            )
        ],
    )
    cols = _table(
        ("column", "type", "key", "nullable"),
        [(c, typ, "key" if k else "", "yes" if nul else "no") for c, typ, k, nul in t.columns],
    )
    rows = []
    for tablet in t.tablets:
        replicas = []
        for r in tablet.replicas:
            words = [r.server_state]
            if r.is_leader:
                words.append("LEADER")
            if r.member_type == "NON_VOTER":
                words.append("NON_VOTER")
            if r.failed:
                words.append("FAILED")
            replicas.append(
                f"{_a(tserver_href(r.uuid), r.uuid)} <span class=muted>{_e(r.address)}</span> "
                + " ".join(_badge(w) for w in words)
            )
        rows.append(
            (
                tablet.tablet_id,
                f"{tablet.hash_bucket}/{tablet.num_buckets}",
                _Html("<br>".join(replicas)),
                tablet.config_index if tablet.config_index >= 0 else "placement",
                _badge(tablet.health),
                tablet.why,
            )
        )
    tablets = _table(
        ("tablet", "bucket", "replicas (server, state, role)", "config index", "health", "why"),
        rows,
        "no tablet",
    )
    body = f"{facts}<h2>Schema</h2>{cols}<h2>Tablets</h2>{tablets}"
    return _page(s, f"Table {t.name}", "", body)


def _lines(views: Sequence[RecordView], empty: str) -> str:
    if not views:
        return f'<p class="muted">{_e(empty)}</p>'
    out = "".join(
        f'<div class="rec {_e(v.type)}" id="rec-{v.id}">{_e(format_view(v))}</div>' for v in views
    )
    return f"<pre>{out}</pre>"


def render_ops(s: Snapshot) -> bytes:
    pending = _lines(s.pending, "no pending operation")
    body = (
        "<h2>Pending operations</h2><p>Past the commit point (their STARTED record is "
        "logged): the leader completes them (tablet server calls, then DONE), in log order "
        f"after a failover.</p>{pending}"
    )
    if s.records is None:
        body += f'<p class="muted">log not read: {_e(s.log_error)}</p>'
    else:
        done = [v for v in s.records if v.phase == "DONE" and v.status is Status.LIVE]
        recent = list(reversed(done[-RECENT_DONE_MAX:]))
        body += (
            f"<h2>Recent completed operations</h2><p>The last {RECENT_DONE_MAX} DONE records "
            f"still live in the log, newest first.</p>{_lines(recent, 'none')}"
        )
    return _page(s, "Operations", "/ops", body)


def parse_log_query(query: dict[str, list[str]]) -> tuple[Filter, int, int, list[str]]:
    """(filter, first id, page size, problems) from /log's query string."""
    problems: list[str] = []

    def values(name: str) -> list[str]:
        out: list[str] = []
        for raw in query.get(name, ()):
            out.extend(p.strip() for p in raw.split(",") if p.strip())
        return out

    types = set()
    for t in values("type"):
        n = normalize_type(t)
        if n is None:
            problems.append(f"unknown record type {t!r}")
        else:
            types.add(n)
    op_ids = set()
    for o in values("op"):
        if o.isdigit():
            op_ids.add(int(o))
        else:
            problems.append(f"op {o!r} is not a number")

    def number(name: str, default: int, low: int, high: int) -> int:
        raw = (query.get(name) or [""])[-1].strip()
        if not raw:
            return default
        if not raw.isdigit():
            problems.append(f"{name} {raw!r} is not a number")
            return default
        return max(low, min(high, int(raw)))

    flt = Filter(
        types=frozenset(types),
        op_ids=frozenset(op_ids),
        tables=frozenset(values("table")),
        servers=frozenset(values("server")),
        live_only=bool(values("live")),
    )
    return (
        flt,
        number("from", 1, 1, 1 << 62),
        number("limit", LOG_PAGE_DEFAULT, 1, LOG_PAGE_MAX),
        problems,
    )


def render_log(s: Snapshot, query: dict[str, list[str]]) -> bytes:
    flt, first_id, limit, problems = parse_log_query(query)

    def field_value(name: str) -> str:
        return ",".join(query.get(name, ()))

    form = (
        '<form method="get" action="/log">'
        f'type <input name="type" size="16" value="{_e(field_value("type"))}" '
        'placeholder="create_table,lease">'
        f'table <input name="table" size="12" value="{_e(field_value("table"))}">'
        f'op <input name="op" size="6" value="{_e(field_value("op"))}">'
        f'server <input name="server" size="12" value="{_e(field_value("server"))}">'
        f'from id <input name="from" size="6" value="{first_id}">'
        f'<input type="hidden" name="limit" value="{limit}">'
        '<input type="submit" value="filter"> <a href="/log">clear</a></form>'
    )
    body = form
    if problems:
        body += "".join(f'<p class="banner follower">{_e(p)}</p>' for p in problems)
    if s.records is None:
        body += f'<p class="muted">log not read: {_e(s.log_error)}</p>'
        return _page(s, "Coordinator log", "/log", body)
    selected = [
        v
        for v in s.records
        if (v.id_to if v.type == TYPE_GONE else v.id) >= first_id
        and (
            (v.type == TYPE_GONE and (not flt.active() or TYPE_GONE in flt.types))
            or (v.type != TYPE_GONE and flt.matches(v))
        )
    ]
    page, more = selected[:limit], selected[limit:]
    body += (
        f"<p>{len(selected)} record(s) from id {first_id} match; showing {len(page)}. Live "
        "records as the log holds them; invalidated ones appear only as the gone ranges "
        "and ids their successors name (`coordinator log --data-dir` shows those still held "
        "by a replica's journal).</p>"
    )
    if s.log_truncated:
        body += (
            f'<p class="banner follower">only the first {LOG_ENTRIES_MAX} live records '
            "were read</p>"
        )
    body += _lines(page, "no record matches")
    if more:
        nxt = {k: ",".join(v) for k, v in query.items() if k not in ("from",)}
        nxt["from"] = str(more[0].id)
        nxt["limit"] = str(limit)
        body += f"<p>{_a('/log?' + urlencode(nxt), 'next page')}</p>"
    return _page(s, "Coordinator log", "/log", body)


def render_leases(s: Snapshot) -> bytes:
    if s.records is None:
        body = f'<p class="muted">log not read: {_e(s.log_error)}</p>'
        return _page(s, "Lease history", "/leases", body)
    epochs: list[Epoch] = lease_history([v for v in s.records if v.type != TYPE_GONE])
    times = [t for e in epochs for t in (e.taken_over_unix_ms, e.last_written_unix_ms) if t > 0]
    start, end = (min(times), max(max(times), s.now_unix_ms)) if times else (0, 0)
    span = max(1, end - start)
    rows = []
    for e in epochs:
        t0 = e.taken_over_unix_ms or e.last_written_unix_ms
        t1 = s.now_unix_ms if not e.ended_by else e.last_written_unix_ms
        if t0 and t1:
            left = 100.0 * (t0 - start) / span
            width = max(0.3, 100.0 * (t1 - t0) / span)
            bar = _Html(
                f'<div class="tl"><span style="left:{left:.2f}%;width:{width:.2f}%"></span></div>'
            )
        else:
            bar = "-"
        rows.append(
            (
                e.epoch,
                e.holder_uuid,
                e.holder_address,
                _at(e.taken_over_unix_ms) if e.takeover_seen else "- (takeover not held)",
                _at(e.last_written_unix_ms),
                "current" if not e.ended_by else f"until epoch {e.ended_by}",
                bar,
            )
        )
    table = _table(
        ("epoch", "holder", "address", "taken over at (UTC)", "last lease record", "", "timeline"),
        rows,
        "no lease record held",
    )
    lines = "".join(_e(format_epoch(e, verbose=True)) + "\n" for e in epochs)
    body = (
        "<p>Epochs named by the lease records the log still holds (the last takeovers are "
        "kept, renewals of earlier epochs are invalidated); times are the writers' wall "
        f"clocks, UTC. Timeline from {_e(_at(start))} to {_e(_at(end))}.</p>{table}"
        f"<h2>As <code>coordinator log --leases --verbose</code> prints it</h2><pre>{lines}</pre>"
    )
    return _page(s, "Lease history", "/leases", body)


def _copy_rows(copies: Sequence[CopyRow]) -> list[tuple]:
    rows = []
    for c in copies:
        bar = _Html(
            f'<span class="bar"><span style="width:{c.percent:.1f}%"></span></span> '
            f'<span class="progress-text">{_e(c.progress_text())}</span>'
        )
        rows.append(
            (
                c.tablet_id,
                _a(tserver_href(c.source_uuid), c.source_uuid) if c.source_uuid else "-",
                _a(tserver_href(c.server_uuid), c.server_uuid),
                _badge(c.state),
                bar,
                c.error,
            )
        )
    return rows


def _copies_table(copies: Sequence[CopyRow], empty: str) -> str:
    headers = ("tablet", "from", "onto", "state", "progress (bytes, rate, ETA)", "error")
    html_rows = []
    for c, row in zip(copies, _copy_rows(copies), strict=True):
        cells = "".join(f"<td>{_e(x)}</td>" for x in row)
        html_rows.append(f'<tr id="copy-{_e(c.key)}" data-copy="{_e(c.key)}">{cells}</tr>')
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(html_rows) or f'<tr><td colspan="6" class="muted">{_e(empty)}</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_PROGRESS_JS = """<script>
(function () {
  function tick() {
    fetch("/copies.json", {cache: "no-store"}).then(function (r) {
      return r.ok ? r.json() : null;
    }).then(function (d) {
      if (!d) { return; }
      var fresh = 0;
      d.copies.forEach(function (c) {
        var row = document.getElementById("copy-" + c.key);
        if (!row) { if (c.active) { fresh += 1; } return; }
        row.querySelector(".bar > span").style.width = c.percent + "%";
        row.querySelector(".progress-text").textContent = c.text;
        row.querySelector(".badge").textContent = c.state;
      });
      var note = document.getElementById("copies-note");
      note.textContent = "updated " + new Date().toISOString() +
        (fresh ? "; " + fresh + " new copy(ies) since this page was rendered: reload" : "");
    }).catch(function () {});
  }
  setInterval(tick, %d);
})();
</script>""".replace("%d", str(PROGRESS_POLL_MS))


def render_copies(s: Snapshot) -> bytes:
    copies = s.copies or ()
    active = [c for c in copies if c.active]
    recent = [c for c in copies if not c.active]
    errors = "".join(
        f'<p class="banner follower">tablet server {_e(u)} did not answer: {_e(why)}</p>'
        for u, why in s.copy_errors
    )
    body = (
        "<p>Tablet copies onto each live tablet server, as it reports them (TServer.Status); "
        "the bars refresh every second with JavaScript, the page itself is complete "
        f'without it.</p><p class="muted" id="copies-note">as rendered</p>{errors}'
        f"<h2>In flight</h2>{_copies_table(active, 'no copy in flight')}"
        f"<h2>Recent (finished, failed, cancelled)</h2>{_copies_table(recent, 'none')}"
    )
    body += _replication_section(s)
    return _page(s, "Tablet copies and re-replication", "/copies", body, _PROGRESS_JS)


def _replication_section(s: Snapshot) -> str:
    r = s.replication
    if r is None:
        return (
            "<h2>Re-replication</h2><p class=muted>the re-replication policy runs on the "
            "serving leader only: see the leader's console</p>"
        )
    facts = _table(
        (
            "tablets",
            "healthy",
            "under-replicated",
            "no leader report",
            "changes sent",
            "refused",
            "strays",
        ),
        [
            (
                r.tablets,
                r.healthy,
                r.under_replicated,
                r.unknown,
                r.changes_sent,
                r.changes_refused,
                r.strays,
            )
        ],
    )
    moves = _table(
        ("tablet", "from", "to"),
        [(t, f, to or "(least loaded)") for t, f, to in r.moves],
        "no move requested",
    )
    unhealthy = _table(("tablet", "table", "why"), r.unhealthy, "every tablet healthy")
    actions = _table(
        ("at (UTC)", "change", "tablet", "server", "via leader", "reason", "outcome"),
        [
            (
                _at(a.at_unix_ms),
                a.kind,
                a.tablet_id,
                a.peer_uuid,
                a.leader_uuid,
                a.reason,
                a.outcome,
            )
            for a in reversed(s.actions)
        ],
        "no config change sent by this leader",
    )
    retiring = ", ".join(r.retiring) or "none"
    return (
        f"<h2>Re-replication</h2>{facts}<h3>Unhealthy tablets</h3>{unhealthy}"
        f"<h3>Requested moves</h3>{moves}<p>retiring servers still hosting replicas: "
        f"{_e(retiring)}</p><h3>Recent actions (newest first)</h3>{actions}"
    )


def copies_json(s: Snapshot) -> bytes:
    doc = {
        "copies": [dict(c.to_json(), active=c.active) for c in (s.copies or ())],
        "errors": [{"server_uuid": u, "error": why} for u, why in s.copy_errors],
        "at": _at(s.now_unix_ms),
    }
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


def render_tserver(s: Snapshot, uuid: str) -> bytes | None:
    srv = s.server(uuid)
    if srv is None:
        return None
    if srv.http_address:
        own = f"<p>{_a(_page_url(srv.http_address), 'the tablet server’s own page')}</p>"
    else:
        own = (
            '<p class="muted">the tablet server\'s own page: its address is not known here '
            "(its heartbeats do not carry one)</p>"
        )
    body = own + _servers_table(s, [srv])
    hosted = []
    for t in s.tables:
        for tablet in t.tablets:
            mine = next((r for r in tablet.replicas if r.uuid == uuid), None)
            if mine is not None:
                role = "LEADER" if mine.is_leader else mine.member_type
                hosted.append(
                    (
                        _a(table_href(t.name), t.name),
                        tablet.tablet_id,
                        _badge(role),
                        _badge(tablet.health),
                    )
                )
    body += "<h2>Replicas the coordinator places here</h2>" + _table(
        ("table", "tablet", "role (reported)", "tablet health"), hosted, "none"
    )
    d = s.tserver
    if d is not None and d.error:
        body += f'<p class="banner follower">the tablet server did not answer: {_e(d.error)}</p>'
    elif d is not None:
        wal = _table(
            (
                "tablets",
                "WAL groups",
                "WAL syncs",
                "WAL entries",
                "writes",
                "rows written",
                "fsync",
            ),
            [
                (
                    d.tablets,
                    d.wal_groups,
                    d.wal_syncs,
                    d.wal_entries,
                    d.writes,
                    d.rows_written,
                    "on" if d.wal_sync_enabled else "OFF",
                )
            ],
        )
        reps = _table(
            ("tablet", "table", "data state", "status", "role", "term", "last op", "error"),
            [
                (tid, tname, _badge(state), _badge(status), role, term, last, err)
                for tid, tname, state, status, role, term, last, err in d.replicas
            ],
            "no replica",
        )
        body += f"<h2>As the tablet server reports itself</h2>{wal}<h3>Its replicas</h3>{reps}"
    if s.copies is not None:
        mine = [c for c in s.copies if c.server_uuid == uuid or c.source_uuid == uuid]
        body += "<h2>Copies onto it</h2>" + _copies_table(mine, "none")
    return _page(s, f"Tablet server {uuid}", "", body)


# ------------------------------------------------------------------ gathering (I/O)


@dataclass
class _Want:
    log: bool = False
    copies: bool = False
    tserver: str = ""
    replication: bool = False


@dataclass
class ConsoleSource:
    """Builds snapshots from a running node. Owns one rpc transport (closed in close())."""

    node: CoordinatorNode
    http_address: Callable[[], str] = lambda: ""
    _transport: Transport | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def close(self) -> None:
        with self._lock:
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()

    def _client(self, address: str) -> RpcClient:
        with self._lock:
            if self._transport is None:
                # With CURVE: as the node's key pair, to tablet servers proving the key of
                # their principal (as the node's own calls to them, coordinator/gateway.py).
                self._transport = Transport(name="console", curve=self.node.tserver_curve)
            return RpcClient(address, self.node.uuid, transport=self._transport)

    def readiness(self) -> tuple[bool, list[str]]:
        node = self.node
        engine = node.engine
        if engine is None:
            return False, ["starting"]
        last: int | None = None
        log_error = ""
        try:
            last = node.store.last_id(LOG_NAME, timeout_s=1.0)
        except RpcError as e:
            # Only the kind of error: /readyz answers anyone, and an error's text may name
            # an address or a table (design/security.md section 8). The log says the rest.
            log_error = type(e).__name__
        error = node.replayer.error
        return decide_ready(
            serving=engine.serving(),
            lease_serving=node.lease.is_serving(),
            epoch=node.lease.epoch,
            leader_uuid=engine.hint().uuid,
            applied_id=node.catalog.applied_id,
            log_last_id=last,
            log_error=log_error,
            replay_error=type(error).__name__ if error is not None else "",
        )

    def snapshot(self, want: _Want) -> Snapshot:
        node = self.node
        engine = node.engine
        now = time.monotonic()
        hint = engine.hint() if engine is not None else None
        serving = engine is not None and engine.serving()
        if serving:
            role = "LEADER"
        elif node.lease.is_serving():
            role = "RECOVERING"
        else:
            role = "FOLLOWER"
        try:
            log_last = node.store.last_id(LOG_NAME, timeout_s=1.0)
        except RpcError:
            log_last = -1
        raft = None
        status = getattr(node.store, "status", None)
        if node.config.raft_address and callable(status):
            try:
                raft = dict(status())
            except (RpcError, RuntimeError) as e:
                raft = {"address": node.config.raft_address, "role": f"unknown ({e})"}
        tables, servers, pending = self._catalog_rows(now)
        leader_uuid = hint.uuid if hint else ""
        leader_address = hint.address if hint else ""
        own_http = self.http_address()
        if role != "FOLLOWER":
            leader_uuid, leader_address = node.uuid, node.address
        error = node.replayer.error
        view = NodeView(
            node_id=node.config.node_id,
            uuid=node.uuid,
            address=node.address,
            http_address=own_http,
            role=role,
            epoch=node.lease.epoch if role != "FOLLOWER" else (hint.epoch if hint else 0),
            leader_uuid=leader_uuid,
            leader_address=leader_address,
            leader_http=own_http
            if leader_uuid == node.uuid
            else self._leader_console(leader_uuid, leader_address),
            applied_id=node.catalog.applied_id,
            log_last_id=log_last,
            replay_error=repr(error) if error is not None else "",
        )
        out: dict[str, Any] = dict(
            now_unix_ms=int(time.time() * 1000),
            node=view,
            raft=raft,
            tables=tables,
            servers=servers,
            pending=pending,
        )
        if want.log:
            out.update(self._read_log())
        if want.copies or want.tserver:
            out.update(self._copies(servers, want.tserver))
        if want.tserver:
            out["tserver"] = self._tserver_detail(servers, want.tserver)
        if want.replication and serving and node.replication is not None:
            out.update(self._replication())
        return Snapshot(**out)

    def _catalog_rows(self, now: float):
        c = self.node.catalog
        with c.lock:
            retired = c.retired_servers()
            counts = c.replica_counts()
            states = {u: s.state.value for u, s in c.servers.items()}
            addresses = {u: s.address for u, s in c.servers.items()}
            servers = tuple(
                ServerRow(
                    uuid=u,
                    address=s.address,
                    state=s.state.value,
                    retired=u in retired,
                    replicas=counts.get(u, 0),
                    heartbeat_age_s=(now - c.heartbeats[u]) if u in c.heartbeats else None,
                    http_address=c.http_addresses.get(u, ""),
                )
                for u, s in sorted(c.servers.items())
            )
            tables = []
            for t in sorted(c.tables.values(), key=lambda t: t.name):
                rows = []
                for tablet_id in t.tablet_ids:
                    info = c.tablets.get(tablet_id)
                    if info is None:
                        continue
                    report = c.tablet_reports.get(tablet_id)
                    uuids = c.current_replicas(tablet_id)
                    types = report.member_types if report else ()
                    failed = c.failed_replicas.get(tablet_id, set())
                    leader = report.leader_uuid if report else ""
                    replicas = tuple(
                        ReplicaView(
                            uuid=u,
                            address=addresses.get(u, ""),
                            server_state=states.get(u, "REMOVED"),
                            is_leader=u == leader,
                            member_type=types[i] if i < len(types) else "VOTER",
                            failed=u in failed,
                        )
                        for i, u in enumerate(uuids)
                    )
                    health, why = tablet_health(t.replication_factor, replicas, report is not None)
                    rows.append(
                        TabletRow(
                            tablet_id=tablet_id,
                            hash_bucket=info.hash_bucket,
                            num_buckets=info.num_buckets,
                            replicas=replicas,
                            config_index=report.config_index if report else -1,
                            leader_uuid=leader,
                            health=health,
                            why=why,
                        )
                    )
                tables.append(
                    TableRow(
                        table_id=t.table_id,
                        name=t.name,
                        state=t.state.value,
                        replication_factor=t.replication_factor,
                        schema_version=t.schema.version,
                        columns=tuple(
                            (col.name, pb.ColumnType.Name(col.type), col.is_key, col.nullable)
                            for col in t.schema.columns
                        ),
                        tablets=tuple(rows),
                        pending_op_id=t.pending_op_id,
                    )
                )
            pending_records = [(op.op_id, op.record) for op in c.pending.values()]
        pending = tuple(
            decode_entry(RawEntry(op_id, record.SerializeToString(), (), True))
            for op_id, record in pending_records
        )
        return tuple(tables), servers, pending

    def _read_log(self) -> dict[str, Any]:
        store = self.node.store
        try:
            last = store.last_id(LOG_NAME, timeout_s=2.0)
            entries = []
            for e in read_live(store, LOG_NAME, through=last):
                entries.append((e.id, e.data, tuple(e.invalidates)))
                if len(entries) >= LOG_ENTRIES_MAX:
                    break
        except RpcError as e:
            return {"records": None, "log_error": str(e)}
        truncated = len(entries) >= LOG_ENTRIES_MAX
        if truncated:
            last = entries[-1][0]
        return {"records": tuple(log_views(last, entries)), "log_truncated": truncated}

    def _leader_console(self, uuid: str, address: str) -> str:
        """The leader's console address, from the Lease record that names it (its holder
        writes its console there): no call to the leader, which with CURVE would not admit
        this node's key."""
        if not uuid or not address:
            return ""
        return self.node.lease.leader_http_address(uuid)

    def _status_of(self, server: ServerRow) -> ts.StatusResponse:
        return self._client(server.address).call(
            server.uuid,
            "TServer.Status",
            ts.StatusRequest(),
            ts.StatusResponse,
            timeout_s=TSERVER_CALL_TIMEOUT_S,
            idempotent=True,
        )

    def _copies(self, servers: Sequence[ServerRow], only: str) -> dict[str, Any]:
        copies: list[CopyRow] = []
        errors: list[tuple[str, str]] = []
        asked = [
            s for s in servers if s.state == ServerState.LIVE.value and (not only or s.uuid == only)
        ][:SERVERS_POLLED_MAX]
        for server in asked:
            try:
                status = self._status_of(server)
            except RpcError as e:
                errors.append((server.uuid, f"{type(e).__name__}: {e}"))
                continue
            for j in status.copies:
                copies.append(
                    CopyRow(
                        server_uuid=server.uuid,
                        tablet_id=j.tablet_id,
                        source_uuid=j.source_uuid,
                        state=j.state,
                        files_done=j.files_done,
                        files_total=j.files_total,
                        bytes_done=j.bytes_done,
                        bytes_total=j.bytes_total,
                        rate_bytes_s=j.rate_bytes_s,
                        error=j.error,
                        rate_limit_bytes_s=j.rate_limit_bytes_s,
                    )
                )
        return {"copies": tuple(copies), "copy_errors": tuple(errors)}

    def _tserver_detail(self, servers: Sequence[ServerRow], uuid: str) -> TServerDetail | None:
        server = next((s for s in servers if s.uuid == uuid), None)
        if server is None:
            return None
        if server.state != ServerState.LIVE.value:
            return TServerDetail(uuid, error=f"marked {server.state}: not asked")
        try:
            status = self._status_of(server)
            listing = self._client(server.address).call(
                uuid,
                "TServer.ListTablets",
                ts.ListTabletsRequest(),
                ts.ListTabletsResponse,
                timeout_s=TSERVER_CALL_TIMEOUT_S,
                idempotent=True,
            )
        except RpcError as e:
            return TServerDetail(uuid, error=f"{type(e).__name__}: {e}")
        return TServerDetail(
            uuid=uuid,
            tablets=status.tablets,
            wal_groups=status.wal_groups,
            wal_syncs=status.wal_syncs,
            wal_entries=status.wal_entries,
            writes=status.writes,
            rows_written=status.rows_written,
            wal_sync_enabled=status.wal_sync_enabled,
            replicas=tuple(
                (
                    r.tablet_id,
                    r.table_name,
                    ts.DataState.Name(r.data_state)
                    if r.data_state in ts.DataState.values()
                    else str(r.data_state),
                    r.status,
                    r.role,
                    r.current_term,
                    r.last_op_id.index,
                    r.error,
                )
                for r in listing.tablets
            ),
        )

    def _replication(self) -> dict[str, Any]:
        manager = self.node.replication
        assert manager is not None
        st = manager.status()
        row = ReplicationRow(
            tablets=st.tablets,
            healthy=st.healthy_tablets,
            under_replicated=st.under_replicated,
            unknown=st.unknown,
            moves=tuple((m.tablet_id, m.from_uuid, m.to_uuid) for m in st.moves),
            retiring=tuple(st.retiring),
            changes_sent=st.changes_sent,
            changes_refused=st.changes_refused,
            strays=st.strays,
            unhealthy=tuple((u.tablet_id, u.table_name, u.reason) for u in st.unhealthy),
        )
        actions = tuple(
            ActionRow(
                int(at * 1000),
                a.kind,
                a.tablet_id,
                a.peer_uuid,
                a.leader_uuid,
                a.reason,
                outcome,
            )
            for at, a, outcome in list(manager.recent_actions)
        )
        return {"replication": row, "actions": actions}


class Console:
    """Routes a path to its page: `handle(path, query) -> Page | None` (rpc.observe)."""

    def __init__(self, source: ConsoleSource) -> None:
        self.source = source

    def handle(self, path: str, query: dict[str, list[str]]) -> Page | None:
        path = unquote(path)
        snap = self.source.snapshot
        if path in ("/", "/index.html"):
            return _html(render_overview(snap(_Want())))
        if path == "/ops":
            return _html(render_ops(snap(_Want(log=True))))
        if path == "/log":
            return _html(render_log(snap(_Want(log=True)), query))
        if path == "/leases":
            return _html(render_leases(snap(_Want(log=True))))
        if path == "/copies":
            return _html(render_copies(snap(_Want(copies=True, replication=True))))
        if path == "/favicon.ico":  # none: answered, so that no browser logs a 404
            return Page(204, b"", "image/x-icon")
        if path == "/copies.json":
            return Page(200, copies_json(snap(_Want(copies=True))), "application/json")
        for prefix, render, want in (
            ("/tables/", render_table, lambda _: _Want()),
            ("/tservers/", render_tserver, lambda name: _Want(tserver=name)),
        ):
            if path.startswith(prefix) and len(path) > len(prefix):
                name = path[len(prefix) :]
                body = render(snap(want(name)), name)
                if body is None:
                    what = "table" if prefix == "/tables/" else "tablet server"
                    return Page(404, f"no {what} {name!r} known here\n".encode(), "text/plain")
                return _html(body)
        return None


def _html(body: bytes) -> Page:
    return Page(200, body)
