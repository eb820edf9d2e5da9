"""A tablet server's own web page: its tablets, its WAL and its tablet copies.

Served at `/` (and `/tablets.json`) by the server's HTTP endpoint (`tserver start --http`,
tservers/metrics.py), linked from the coordinator's console (`/tservers/<uuid>`), which learns
the address from heartbeats. As the console does: gather a snapshot, then render it with a
pure function; every value is escaped; no JavaScript; bounded (at most TABLETS_SHOWN rows).
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from rpc.observe import Page
from rpc.protocols.tserver_pb2 import DataState

if TYPE_CHECKING:
    from tservers.server import TabletServer

TABLETS_SHOWN = 2000


@dataclass(frozen=True, slots=True)
class TabletRow:
    tablet_id: str
    table_name: str
    status: str
    data_state: str
    role: str
    term: int
    commit_index: int
    applied_index: int
    memstore_rows: int
    blocks: int
    wal_segments: int
    wal_bytes: int
    error: str


@dataclass(frozen=True, slots=True)
class CopyRow:
    tablet_id: str
    source_uuid: str
    state: str
    files: str
    bytes_done: int
    bytes_total: int
    rate_bytes_s: float
    error: str


@dataclass(frozen=True, slots=True)
class PageState:
    uuid: str
    address: str
    coordinators: tuple[str, ...]
    enlisted: bool
    tablets: tuple[TabletRow, ...]
    tablets_total: int
    copies: tuple[CopyRow, ...]
    wal_groups: int
    wal_syncs: int
    wal_entries: int


def _wal_usage(path) -> tuple[int, int]:
    """(segments, bytes) of a tablet's WAL directory; (0, 0) when it has none."""
    try:
        with os.scandir(path) as it:
            sizes = [e.stat().st_size for e in it if e.is_file() and e.name.startswith("wal-")]
    except OSError:
        return 0, 0
    return len(sizes), sum(sizes)


def gather(server: TabletServer) -> PageState:
    manager = server.manager
    reports = sorted(manager.reports(), key=lambda r: r.tablet_id)
    rows = []
    for r in reports[:TABLETS_SHOWN]:
        segments, wal_bytes = _wal_usage(server.fs.wal_dir(r.tablet_id))
        rows.append(
            TabletRow(
                tablet_id=r.tablet_id,
                table_name=r.table_name,
                status=r.status,
                data_state=DataState.Name(r.data_state) if r.data_state else "-",
                role=r.role or "-",
                term=r.current_term,
                commit_index=r.commit_index,
                applied_index=r.applied_index,
                memstore_rows=r.memstore_rows,
                blocks=r.blocks,
                wal_segments=segments,
                wal_bytes=wal_bytes,
                error=r.error,
            )
        )
    copies: list[CopyRow] = []
    if manager.copy_jobs is not None:
        _finished, live = manager.copy_jobs.progress()
        copies = [
            CopyRow(
                j.tablet_id,
                j.source_uuid,
                j.state,
                f"{j.files_done}/{j.files_total}",
                j.bytes_done,
                j.bytes_total,
                j.rate_bytes_s,
                j.error,
            )
            for j in live
        ]
    hb = server.heartbeater
    a = manager.appender
    return PageState(
        uuid=server.uuid,
        address=server.address,
        coordinators=tuple(server.config.coordinators),
        enlisted=bool(hb is not None and hb.enlisted),
        tablets=tuple(rows),
        tablets_total=len(reports),
        copies=tuple(copies),
        wal_groups=a.groups,
        wal_syncs=a.syncs,
        wal_entries=a.entries,
    )


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _table(headers: tuple[str, ...], rows: list[tuple], empty: str) -> str:
    if not rows:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


STYLE = (
    "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}.muted{color:#777}"
    ".bad{color:#b00;font-weight:bold}"
)


def render(s: PageState) -> bytes:
    """The page, from a snapshot (pure)."""
    failed = [t for t in s.tablets if t.status == "FAILED"]
    tablets = _table(
        (
            "tablet",
            "table",
            "status",
            "data state",
            "role",
            "term",
            "commit",
            "applied",
            "memstore rows",
            "blocks",
            "WAL segments",
            "WAL size",
        ),
        [
            (
                t.tablet_id,
                t.table_name,
                t.status,
                t.data_state,
                t.role,
                t.term,
                t.commit_index,
                t.applied_index,
                t.memstore_rows,
                t.blocks,
                t.wal_segments,
                _mb(t.wal_bytes),
            )
            for t in s.tablets
        ],
        "no tablets",
    )
    more = (
        f'<p class="muted">{s.tablets_total - len(s.tablets)} more not shown</p>'
        if s.tablets_total > len(s.tablets)
        else ""
    )
    problems = "".join(
        f'<p class="bad">tablet {_e(t.tablet_id)} FAILED: {_e(t.error)}</p>' for t in failed
    )
    copies = _table(
        ("tablet", "from", "state", "files", "received", "of", "rate", "error"),
        [
            (
                c.tablet_id,
                c.source_uuid,
                c.state,
                c.files,
                _mb(c.bytes_done),
                _mb(c.bytes_total),
                f"{c.rate_bytes_s / 1e6:.2f} MB/s",
                c.error,
            )
            for c in s.copies
        ],
        "no tablet copies onto this server",
    )
    wal = _table(
        ("group commits", "fdatasyncs", "entries"),
        [(s.wal_groups, s.wal_syncs, s.wal_entries)],
        "",
    )
    enlisted = "enlisted" if s.enlisted else "not enlisted (no coordinator leader said so yet)"
    coordinators = ", ".join(s.coordinators) or "none (a standalone server)"
    doc = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>tablet server {_e(s.uuid)}</title><style>{STYLE}</style></head><body>"
        f"<h1>Tablet server {_e(s.uuid)}</h1>"
        f"<p>rpc {_e(s.address)}; {_e(enlisted)}; coordinators {_e(coordinators)}</p>"
        '<p><a href="/metrics">metrics</a> · <a href="/readyz">readiness</a> · '
        '<a href="/tablets.json">tablets as JSON</a></p>'
        f"{problems}<h2>Tablets ({s.tablets_total})</h2>{tablets}{more}"
        f"<h2>WAL</h2>{wal}<h2>Tablet copies</h2>{copies}</body></html>"
    )
    return doc.encode("utf-8")


def page_handler(server: TabletServer):
    """The endpoint's handler of `/` and `/tablets.json`."""

    def handle(path: str, _query) -> Page | None:
        if path in ("/", "/index.html"):
            return Page(200, render(gather(server)))
        if path == "/tablets.json":
            state = gather(server)
            body = json.dumps(
                {
                    "uuid": state.uuid,
                    "tablets": [asdict(t) for t in state.tablets],
                    "copies": [asdict(c) for c in state.copies],
                }
            )
            return Page(200, body.encode(), "application/json")
        if path == "/favicon.ico":
            return Page(204, b"", "image/x-icon")
        return None

    return handle
