"""The web console's pure parts (coordinator/console.py): snapshots in, HTML out.

Every page is rendered from hand-made snapshots: values from the cluster are escaped, the
role banner says who leads (and links to the leader's console when known), tablet health,
readiness, the log's filters and pages, the lease timeline, copy progress, routing."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from coordinator import console as c
from coordinator.records import RecordView
from rpc.protocols import coordinator_pb2 as pb

T0_MS = 1_790_000_000_000  # 2026-09-21T...Z
EVIL = '<script>alert("x")</script>&'


def _node(role: str = "LEADER", **kw) -> c.NodeView:
    base = dict(
        node_id="coordinator-0",
        uuid="coord-0-uuid",
        address="127.0.0.1:7100",
        http_address="127.0.0.1:8100",
        role=role,
        epoch=7,
        leader_uuid="coord-0-uuid",
        leader_address="127.0.0.1:7100",
        leader_http="127.0.0.1:8100",
        applied_id=42,
        log_last_id=42,
    )
    base.update(kw)
    return c.NodeView(**base)


def _replica(uuid: str, state: str = "LIVE", leader: bool = False, **kw) -> c.ReplicaView:
    return c.ReplicaView(uuid, f"{uuid}:1", state, leader, kw.pop("member_type", "VOTER"), **kw)


def _tablet(tablet_id: str, replicas, rf: int = 3, reported: bool = True) -> c.TabletRow:
    health, why = c.tablet_health(rf, replicas, reported)
    leader = next((r.uuid for r in replicas if r.is_leader), "")
    return c.TabletRow(tablet_id, 0, 2, tuple(replicas), 5 if reported else -1, leader, health, why)


def _table(name: str, tablets, rf: int = 3) -> c.TableRow:
    return c.TableRow(
        table_id="t9",
        name=name,
        state="RUNNING",
        replication_factor=rf,
        schema_version=1,
        columns=(("id", "INT64", True, False), ("v", "STRING", False, True)),
        tablets=tuple(tablets),
    )


def _servers(down: str = "") -> tuple[c.ServerRow, ...]:
    return tuple(
        c.ServerRow(u, f"{u}:1", "DOWN" if u == down else "LIVE", False, 1, 0.4)
        for u in ("ts-a", "ts-b", "ts-c")
    )


def _record(entry_id: int, record: pb.LogRecord, invalidates=()) -> tuple:
    return (entry_id, record.SerializeToString(), tuple(invalidates))


def _lease(entry_id: int, holder: str, takeover: bool, epoch: int, at_ms: int) -> tuple:
    lease = pb.Lease(
        holder_uuid=holder,
        holder_address=f"{holder}:7100",
        epoch=0 if takeover else epoch,
        takeover=takeover,
        written_unix_ms=at_ms,
    )
    return _record(entry_id, pb.LogRecord(lease=lease))


def _create(entry_id: int, name: str, phase: int, op_id: int, invalidates=()) -> tuple:
    msg = pb.CreateTable(table_id=f"t{op_id}", name=name, replication_factor=3)
    msg.header.op_id = op_id
    msg.header.phase = phase
    msg.tablets.add(tablet_id=f"t{op_id}-0", replica_uuids=["ts-a", "ts-b", "ts-c"])
    return _record(entry_id, pb.LogRecord(create_table=msg), invalidates)


def _log() -> tuple[RecordView, ...]:
    entries = [
        _lease(1, "coord-1-uuid", True, 0, T0_MS),
        _create(3, "users", pb.STARTED, 3),
        _create(4, "users", pb.DONE, 3, invalidates=(3,)),
        _lease(6, "coord-0-uuid", True, 0, T0_MS + 60_000),
        _lease(9, "coord-0-uuid", False, 6, T0_MS + 61_000),
        _create(10, EVIL, pb.DONE, 10),
    ]
    # id 2, 5, 7, 8 were invalidated and are gone; 3 was invalidated by 4 (its DONE)
    return tuple(c.log_views(10, [e for e in entries if e[0] != 3]))


def _snapshot(role: str = "LEADER", **kw) -> c.Snapshot:
    tablets = [
        _tablet("t9-0", [_replica("ts-a", leader=True), _replica("ts-b"), _replica("ts-c")]),
        _tablet("t9-1", [_replica("ts-a"), _replica("ts-b", leader=True), _replica("ts-c")]),
    ]
    base = dict(
        now_unix_ms=T0_MS + 62_000,
        node=_node(role),
        raft={
            "address": "127.0.0.1:9100",
            "role": "leader",
            "leader": "127.0.0.1:9100",
            "term": 3,
            "commit_index": 80,
            "applied_index": 80,
            "members": ["127.0.0.1:9100", "127.0.0.1:9101", "127.0.0.1:9102"],
            "connected": ["127.0.0.1:9101"],
        },
        tables=(_table("users", tablets), _table(EVIL, tablets[:1])),
        servers=_servers(),
        records=_log(),
    )
    base.update(kw)
    return c.Snapshot(**base)


class _Balance(HTMLParser):
    """Counts opened and closed elements that must be closed."""

    CHECKED = ("html", "body", "main", "table", "tr", "td", "th", "div", "pre", "a", "p", "form")

    def __init__(self) -> None:
        super().__init__()
        self.depth: dict[str, int] = {}
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.CHECKED:
            self.depth[tag] = self.depth.get(tag, 0) + 1
        if tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag in self.CHECKED:
            self.depth[tag] = self.depth.get(tag, 0) - 1
            assert self.depth[tag] >= 0, f"</{tag}> without <{tag}>"


def _check_html(body: bytes) -> str:
    text = body.decode()
    assert text.startswith("<!DOCTYPE html>")
    parser = _Balance()
    parser.feed(text)
    assert all(v == 0 for v in parser.depth.values()), parser.depth
    assert "<script>alert" not in text  # every cluster value escaped
    assert 'href="data:,"' in text  # no favicon request (a 404 in the browser's console)
    return text


def test_overview_shows_leader_members_servers_and_tables_escaped():
    text = _check_html(c.render_overview(_snapshot()))
    assert "leader: this node (coordinator-0, coord-0-uuid) leads epoch 7" in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in text
    assert 'href="/tables/%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E%26"' in text
    assert 'href="/tables/users"' in text and 'href="/tservers/ts-a"' in text
    assert "127.0.0.1:9102" in text and "not connected" in text and "leader (this node)" in text
    assert "0.4s ago" in text
    assert "<script" not in text  # the overview needs no JavaScript at all


def test_follower_banner_names_the_leader_and_links_to_its_console_when_known():
    known = _node(
        "FOLLOWER",
        leader_uuid="coord-1-uuid",
        leader_address="127.0.0.1:7101",
        leader_http="127.0.0.1:8101",
    )
    text = _check_html(c.render_overview(_snapshot(node=known)))
    assert "follower; leader is coord-1-uuid at 127.0.0.1:7101" in text
    assert 'href="http://127.0.0.1:8101/"' in text
    unknown_http = _node(
        "FOLLOWER", leader_uuid="coord-1-uuid", leader_address="127.0.0.1:7101", leader_http=""
    )
    text = _check_html(c.render_overview(_snapshot(node=unknown_http)))
    assert "its console address is not known" in text and "http://127.0.0.1:8101" not in text
    nobody = _node("FOLLOWER", leader_uuid="", leader_address="", leader_http="")
    assert "follower; leader is unknown" in _check_html(c.render_overview(_snapshot(node=nobody)))
    leader_http_evil = _node("FOLLOWER", leader_uuid="x", leader_address="y", leader_http='"><b')
    assert (
        'href="http://&quot;&gt;&lt;b/"'
        in c.render_overview(_snapshot(node=leader_http_evil)).decode()
    )


def test_tablet_health():
    live3 = [_replica("a", leader=True), _replica("b"), _replica("c")]
    assert c.tablet_health(3, live3, True) == (c.HEALTHY, "")
    assert c.tablet_health(3, live3, False)[0] == c.UNKNOWN
    one_down = [_replica("a", leader=True), _replica("b"), _replica("c", "DOWN")]
    health, why = c.tablet_health(3, one_down, True)
    assert health == c.UNDER_REPLICATED and "2 good voter(s)" in why
    two_down = [_replica("a"), _replica("b", "DOWN"), _replica("c", "DOWN")]
    health, why = c.tablet_health(3, two_down, True)
    assert health == c.UNAVAILABLE and "b DOWN" in why and "c DOWN" in why
    failed = [_replica("a"), _replica("b", failed=True), _replica("c", failed=True)]
    assert c.tablet_health(3, failed, True)[0] == c.UNAVAILABLE
    # A non-voter being added does not count as a voter, nor against the majority.
    adding = [*one_down, _replica("d", member_type="NON_VOTER")]
    assert c.tablet_health(3, adding, True)[0] == c.UNDER_REPLICATED
    assert c.tablet_health(1, [], False)[0] == c.UNAVAILABLE
    t = _table("x", [_tablet("x-0", live3), _tablet("x-1", one_down)])
    assert t.health == c.UNDER_REPLICATED


def test_table_page_lists_tablets_replicas_and_roles():
    s = _snapshot(servers=_servers(down="ts-c"))
    text = _check_html(c.render_table(s, "users"))
    assert "t9-0" in text and "t9-1" in text and "LEADER" in text
    assert text.count('href="/tservers/ts-a"') == 2
    assert "INT64" in text and "key" in text
    assert c.render_table(s, "nope") is None
    assert "&lt;script&gt;" in _check_html(c.render_table(s, EVIL))


@pytest.mark.parametrize(
    ("ready_args", "ready", "why"),
    [
        (dict(serving=True), True, ""),
        (dict(lease_serving=True), False, "recovering"),
        (dict(leader_uuid=""), False, "knows no leader"),
        (dict(log_last_id=42 + c.REPLAY_LAG_IDS_MAX + 1), False, "replay behind"),
        (dict(log_last_id=42 + c.REPLAY_LAG_IDS_MAX), True, ""),
        (dict(log_last_id=None, log_error="TimedOut"), False, "cannot read its log"),
        (dict(serving=True, replay_error="ValueError()"), False, "replay stopped"),
    ],
)
def test_readiness(ready_args, ready, why):
    args = dict(
        serving=False,
        lease_serving=False,
        epoch=7,
        leader_uuid="coord-1-uuid",
        applied_id=42,
        log_last_id=43,
    )
    args.update(ready_args)
    got, reasons = c.decide_ready(**args)
    assert got is ready
    assert (not reasons) if ready else any(why in r for r in reasons)


def test_log_page_lists_filters_and_pages_records_as_the_tool_prints_them():
    s = _snapshot()
    text = _check_html(c.render_log(s, {}))
    # As `coordinator log` prints them: ids, status, type, phase, op, table, gone ranges.
    assert "#4 live create_table DONE op=3 table=t3(users)" in text
    assert "#2 gone (invalidated; no longer held)" in text
    assert "#3 gone (invalidated by #4; no longer held)" in text
    assert "#6 live lease" in text
    only_leases = _check_html(c.render_log(s, {"type": ["Lease"]}))
    assert "#6 live lease" in only_leases and "create_table" not in only_leases.split("<pre>")[1]
    users = _check_html(c.render_log(s, {"table": ["users"]}))
    assert "#4 live create_table" in users and "#10 " not in users
    page = _check_html(c.render_log(s, {"limit": ["2"], "type": ["lease"]}))
    assert "3 record(s) from id 1 match; showing 2" in page
    assert "next page" in page and "from=9" in page and "type=lease" in page
    second = _check_html(c.render_log(s, {"limit": ["2"], "type": ["lease"], "from": ["9"]}))
    assert "#9 live lease" in second and "#6 live" not in second and "next page" not in second
    bad = _check_html(c.render_log(s, {"type": ["nosuch"], "from": ["x"]}))
    assert "unknown record type" in bad and "from &#x27;x&#x27; is not a number" in bad
    assert "&lt;script&gt;" in text  # the evil table name in a record line, escaped
    unread = _check_html(c.render_log(_snapshot(records=None, log_error="TimedOut"), {}))
    assert "log not read: TimedOut" in unread


def test_leases_page_is_a_timeline_with_wall_clock_times():
    text = _check_html(c.render_leases(_snapshot()))
    assert "coord-1-uuid" in text and "coord-0-uuid" in text
    first = c.utc_iso(T0_MS)
    second = c.utc_iso(T0_MS + 60_000)
    assert first in text and second in text and c.utc_iso(T0_MS + 61_000) in text
    assert "until epoch 6" in text and "current" in text
    assert text.count('<div class="tl">') == 2
    assert "epoch 1: holder=coord-1-uuid" in text  # format_epoch's line, as the tool prints


def test_ops_page_shows_pending_with_phase_and_recent_done():
    pending = c.decode_entry(c.RawEntry(*_create(12, "orders", pb.STARTED, 12), True))
    text = _check_html(c.render_ops(_snapshot(pending=(pending,))))
    pending_part, done_part = text.split("Recent completed operations")
    assert "#12 live create_table STARTED op=12 table=t12(orders)" in pending_part
    assert "#10 live create_table DONE" in done_part and "#4 live create_table DONE" in done_part
    assert done_part.index("#10 ") < done_part.index("#4 ")  # newest first
    assert "no pending operation" in _check_html(c.render_ops(_snapshot()))


def _copy(state: str = "RUNNING", done: int = 3 << 20, total: int = 12 << 20) -> c.CopyRow:
    return c.CopyRow("ts-c", "t9-0", "ts-a", state, 1, 4, done, total, float(1 << 20))


def test_copy_progress_rate_and_eta():
    copy = _copy()
    assert copy.percent == 25.0 and copy.eta_s == pytest.approx(9.0)
    assert copy.progress_text() == ("3.0 MiB of 12.0 MiB (25.0%), files 1/4, 1.0 MiB/s, ETA 9s")
    assert _copy("DONE", 12 << 20).eta_s is None and _copy("DONE", 0, 0).percent == 100.0
    assert _copy("QUEUED", 0, 0).percent == 0.0
    assert c.fmt_duration(3725) == "1h02m" and c.fmt_duration(75) == "1m15s"


def test_copies_page_and_json():
    s = _snapshot(
        copies=(_copy(), _copy("FAILED", 1, 10)),
        copy_errors=(("ts-b", "TimedOut: no answer"),),
        replication=c.ReplicationRow(
            2, 1, 1, 0, (("t9-0", "ts-c", ""),), (), 3, 1, 0, (("t9-0", "users", "why"),)
        ),
        actions=(c.ActionRow(T0_MS, "ADD", "t9-0", "ts-d", "ts-a", "replace ts-c", "sent"),),
    )
    text = _check_html(c.render_copies(s))
    in_flight, recent = text.split("Recent (finished")
    assert 'id="copy-ts-c/t9-0"' in in_flight and "width:25.0%" in in_flight
    assert "FAILED" in recent
    assert "ts-b did not answer: TimedOut" in text
    assert "replace ts-c" in text and c.utc_iso(T0_MS) in text and "(least loaded)" in text
    assert text.count("<script>") == 1 and "/copies.json" in text
    doc = json.loads(c.copies_json(s))
    assert [x["state"] for x in doc["copies"]] == ["RUNNING", "FAILED"]
    assert doc["copies"][0]["key"] == "ts-c/t9-0" and doc["copies"][0]["active"] is True
    assert doc["copies"][0]["text"] == _copy().progress_text()
    follower = _check_html(c.render_copies(_snapshot("FOLLOWER", copies=())))
    assert "no copy in flight" in follower and "serving leader only" in follower


def test_tserver_page():
    s = _snapshot(
        tserver=c.TServerDetail(
            "ts-a",
            tablets=2,
            wal_syncs=17,
            replicas=(("t9-0", "users", "COPYING", "RUNNING", "FOLLOWER", 2, 8, ""),),
        ),
        copies=(_copy(),),
    )
    text = _check_html(c.render_tserver(s, "ts-a"))
    assert "COPYING" in text and ">17<" in text and "t9-0" in text
    assert "its heartbeats do not carry one" in text
    assert c.render_tserver(s, "ts-x") is None
    with_http = (*s.servers[:1], *s.servers[1:])
    linked = c.ServerRow("ts-a", "ts-a:1", "LIVE", False, 1, 0.1, http_address="127.0.0.1:8200")
    s2 = _snapshot(servers=(linked, *with_http[1:]))
    assert 'href="http://127.0.0.1:8200/"' in c.render_tserver(s2, "ts-a").decode()
    down = _snapshot(tserver=c.TServerDetail("ts-a", error="marked DOWN: not asked"))
    assert "did not answer: marked DOWN" in _check_html(c.render_tserver(down, "ts-a"))


class _FixedSource:
    """Stands in for ConsoleSource: answers every snapshot request with one snapshot and
    remembers what each page asked for."""

    def __init__(self, snapshot: c.Snapshot) -> None:
        self.snap = snapshot
        self.wants: list = []

    def snapshot(self, want):
        self.wants.append(want)
        return self.snap


def test_routing():
    source = _FixedSource(_snapshot(copies=(_copy(),)))
    console = c.Console(source)  # type: ignore[arg-type]
    for path in ("/", "/ops", "/log", "/leases", "/copies", "/tables/users", "/tservers/ts-a"):
        page = console.handle(path, {})
        assert page is not None and page.status == 200, path
        assert page.content_type.startswith("text/html")
    quoted = console.handle("/tables/%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E%26", {})
    assert quoted is not None and quoted.status == 200
    assert console.handle("/tables/nope", {}).status == 404
    assert console.handle("/tservers/nope", {}).status == 404
    assert console.handle("/favicon.ico", {}).status == 204
    assert console.handle("/nowhere", {}) is None and console.handle("/tables/", {}) is None
    page = console.handle("/copies.json", {})
    assert page.content_type == "application/json" and json.loads(page.body)["copies"]
    assert [w.log for w in source.wants[:4]] == [False, True, True, True]
