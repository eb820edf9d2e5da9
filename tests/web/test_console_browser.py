"""The coordinator web console in a real headless Chromium against a real local cluster
(3 coordinator nodes, 3 tablet servers, each coordinator with its HTTP port).

In order, on one cluster: every page loads with no browser console error (a screenshot of
each is kept); the leader and the tables are shown; a follower's console says who leads and
links to the leader's; a tablet copy (a move onto a tablet server whose copies are throttled)
appears on /copies with its progress, refreshed by the page's script; a tablet server killed
with -9 appears DOWN. Every wait is for a condition with a deadline.
"""

from __future__ import annotations

import json
import signal
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from coordinator.node import KEY_NAME, KEYS_DIR
from logcentric.client import Client, Column
from optools.localcluster import NodeSpec
from rpc import keys
from rpc.protocols import coordinator_pb2 as cpb
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for
from tests.web.conftest import console_errors, wait_page

pytestmark = [pytest.mark.integration, pytest.mark.web]

COLUMNS = [Column("id", "int64", key=True), Column("payload", "string")]
PAGES = ("/", "/ops", "/log", "/leases", "/copies", "/log?type=lease", "/tables/users")
# Copies onto the throttled server run at this rate (tserver start --copy-rate-mb).
COPY_RATE_MB = 0.05
WAIT_S = 120.0


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def _leader(cluster) -> NodeSpec | None:
    leaders = [
        n
        for n in cluster.spec.coordinators
        if 'class="banner leader"' in _get(f"http://{n.http}/")[1]
    ]
    return leaders[0] if len(leaders) == 1 else None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory.mktemp("web") / "c", coordinators=3, tservers=3) as c:
        assert all(n.http for n in c.spec.coordinators), "local-cluster gives coordinators --http"
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    with Client(
        cluster.spec.coordinator_addresses, timeout_s=60, credentials=cluster.credentials()
    ) as client:
        wait_for(lambda: len(client.list_servers()) == 3, WAIT_S, "3 tablet servers enlisted")
        client.create_table("users", COLUMNS, num_tablets=2, replication_factor=3)
        with client.new_session(flush_rows_max=500) as s:
            t = client.table("users")
            s.upsert(t, [{"id": i, "payload": f"user-{i}"} for i in range(500)])
            s.flush()
        assert s.errors == []
        yield client


@pytest.fixture(scope="module")
def leader(cluster, client) -> NodeSpec:
    return wait_for(lambda: _leader(cluster), WAIT_S, "one coordinator console says it leads")


def _shot(driver, artifacts: Path, name: str) -> None:
    path = artifacts / f"{name}.png"
    assert driver.save_screenshot(str(path)), path
    assert path.stat().st_size > 0


def _slug(path: str) -> str:
    return path.strip("/").replace("/", "_").replace("?", "_").replace("=", "-") or "overview"


def test_every_page_loads_without_console_errors(browser, artifacts, cluster, client, leader):
    console_errors(browser)  # drain
    base = f"http://{leader.http}"
    uuids = sorted(s.uuid for s in client.list_servers())
    for path in (*PAGES, f"/tservers/{uuids[0]}"):
        browser.get(base + path)
        assert browser.find_element("id", "role").text, path
        assert browser.title.endswith("coordinator " + leader.name), browser.title
        _shot(browser, artifacts, f"leader-{_slug(path)}")
        assert console_errors(browser) == [], path
    # /copies runs its script: a few refreshes, still no error.
    browser.get(base + "/copies")
    wait_for(
        lambda: browser.find_element("id", "copies-note").text.startswith("updated "),
        30,
        "the copies page's script refreshed it",
        interval_s=0.2,
    )
    assert console_errors(browser) == []
    # The health endpoints beside the pages.
    assert _get(base + "/healthz")[0] == 200
    status, body = _get(base + "/readyz")
    assert status == 200 and json.loads(body) == {"ready": True, "why": []}, body


def test_the_leader_and_the_tables_are_shown(browser, artifacts, client, leader):
    base = f"http://{leader.http}"
    browser.get(base + "/")
    role = browser.find_element("id", "role").text
    assert role.startswith("leader: this node") and leader.name in role, role
    body = browser.find_element("tag name", "body").text
    assert "users" in body and "healthy" in body
    for s in client.list_servers():
        assert s.uuid in body
    browser.find_element("link text", "users").click()
    wait_for(lambda: "Table users" in browser.title, 30, "the table page", interval_s=0.2)
    table = browser.find_element("tag name", "body").text
    tablets = client.tablet_locations("users").tablets
    for t in tablets:
        assert t.tablet_id in table
    assert table.count("LEADER") >= len(tablets)
    _shot(browser, artifacts, "leader-table-users-clicked")
    assert console_errors(browser) == []


def test_a_tablet_servers_own_page_is_linked_from_the_console(browser, artifacts, client, leader):
    """The console's tablet server page links to the server's own page (its address comes
    with the heartbeats), which shows its tablets, WAL and copies."""
    base = f"http://{leader.http}"
    server = sorted(client.list_servers(), key=lambda s: s.uuid)[0]
    wait_page(
        browser,
        f"{base}/tservers/{server.uuid}",
        lambda d: d.find_elements("link text", "the tablet server’s own page"),
        WAIT_S,
        "the console's link to the tablet server's own page",
    )
    browser.find_element("link text", "the tablet server’s own page").click()
    wait_for(
        lambda: browser.title == f"tablet server {server.uuid}", 30, "its page", interval_s=0.2
    )
    body = browser.find_element("tag name", "body").text
    hosted = [
        t.tablet_id
        for t in client.tablet_locations("users").tablets
        if any(r.server_uuid == server.uuid for r in t.replicas)
    ]
    assert hosted and all(tid in body for tid in hosted), body
    assert "WAL" in body and "Tablet copies" in body
    _shot(browser, artifacts, "tserver-own-page")
    assert console_errors(browser) == []


def test_a_follower_says_who_leads_and_links_to_the_leader(browser, artifacts, cluster, leader):
    follower = next(n for n in cluster.spec.coordinators if n is not leader)
    status, body = _get(f"http://{follower.http}/readyz")
    wait_for(lambda: _get(f"http://{follower.http}/readyz")[0] == 200, WAIT_S, "the follower ready")
    role = wait_page(
        browser,
        f"http://{follower.http}/",
        lambda d: (
            "leader’s console" in d.find_element("id", "role").text
            and d.find_element("id", "role").text
        ),
        WAIT_S,
        "the follower's banner links to the leader's console",
    )
    assert role.startswith("follower; leader is ") and leader.rpc in role, role
    _shot(browser, artifacts, "follower-overview")
    body = browser.find_element("tag name", "body").text
    assert "users" in body  # its replayed catalog
    link = browser.find_element("link text", "the leader’s console")
    assert link.get_attribute("href") == f"http://{leader.http}/"
    link.click()
    wait_for(
        lambda: browser.find_element("id", "role").text.startswith("leader: this node"),
        30,
        "the leader's console after the link",
        interval_s=0.2,
    )
    for path in ("/leases", "/log"):
        browser.get(f"http://{follower.http}{path}")
        assert "follower; leader is" in browser.find_element("id", "role").text
        _shot(browser, artifacts, f"follower-{_slug(path)}")
    assert "coordinator-" in browser.find_element("tag name", "body").text
    assert console_errors(browser) == []


def _restart_throttled(cluster, node: NodeSpec) -> None:
    """Restart a tablet server with its incoming tablet copies throttled to COPY_RATE_MB,
    started as LocalCluster.start_tserver starts it (the password, and on a secure cluster
    CURVE with every coordinator node's key)."""
    cluster.stop(node)
    args = [
        "tservers.cli", "start",
        "--fs-root", node.data,
        "--bind", node.rpc,
        "--coordinators", ",".join(cluster.spec.coordinator_addresses),
        "--password-file", str(cluster.spec.password_file),
        "--copy-rate-mb", str(COPY_RATE_MB),
    ]  # fmt: skip
    if node.http:
        args += ["--http", node.http]
    if cluster.spec.secure:
        found = [
            keys.load_public_key(keys.public_path(Path(c.data) / KEYS_DIR, KEY_NAME))
            for c in cluster.spec.coordinators
        ]
        args += ["--curve", "--coordinator-keys", ",".join(found)]
    else:
        args += ["--insecure"]
    cluster._spawn(node, args)


def test_a_tablet_copy_appears_with_its_progress(browser, artifacts, cluster, client, leader):
    client.create_table("copied", COLUMNS, num_tablets=1, replication_factor=1)
    with client.new_session(flush_rows_max=1000) as s:
        t = client.table("copied")
        for start in range(0, 4000, 1000):
            rows = [{"id": i, "payload": "x" * 200} for i in range(start, start + 1000)]
            s.upsert(t, rows)
            s.flush()
    assert s.errors == []
    tablet = client.tablet_locations("copied").tablets[0]
    source = tablet.replicas[0].server_uuid
    servers = {s.uuid: s.address for s in client.list_servers()}
    target_uuid = next(u for u in sorted(servers) if u != source)
    target = next(n for n in cluster.spec.tservers if n.rpc == servers[target_uuid])
    _restart_throttled(cluster, target)
    wait_for(
        lambda: any(s.uuid == target_uuid and s.state == "LIVE" for s in client.list_servers()),
        WAIT_S,
        "the throttled server back",
    )
    request = cpb.MoveReplicaRequest(
        tablet_id=tablet.tablet_id, from_uuid=source, to_uuid=target_uuid
    )
    client.meta.call("MoveReplica", request, cpb.MoveReplicaResponse)
    row_id = f"copy-{target_uuid}/{tablet.tablet_id}"

    def copy_row(d):
        rows = d.find_elements("id", row_id)
        return rows[0].text if rows else ""

    text = wait_page(
        browser, f"http://{leader.http}/copies", copy_row, WAIT_S, "the copy on /copies"
    )
    assert tablet.tablet_id in text and source in text and " of " in text, text
    _shot(browser, artifacts, "leader-copies-copy")
    body = browser.find_element("tag name", "body").text
    assert "ADD" in body and target_uuid in body  # the re-replication action that asked it
    if "RUNNING" in text:
        # Throttled: the page's script moves the bar and its text (no reload) as the copy
        # goes on, and when it ends (the finished job stays listed).
        wait_for(
            lambda: copy_row(browser) != text,
            60,
            "the progress text refreshed by the script",
            interval_s=0.2,
        )
        assert browser.find_element("id", "copies-note").text.startswith("updated ")
        _shot(browser, artifacts, "leader-copies-refreshed")
    status, raw = _get(f"http://{leader.http}/copies.json")
    assert status == 200, raw
    doc = json.loads(raw)
    copy = next(c for c in doc["copies"] if c["key"] == f"{target_uuid}/{tablet.tablet_id}")
    assert copy["source_uuid"] == source and copy["bytes_total"] >= copy["bytes_done"] >= 0
    browser.get(f"http://{leader.http}/tservers/{target_uuid}")
    assert tablet.tablet_id in browser.find_element("tag name", "body").text
    _shot(browser, artifacts, "leader-tserver-copy-target")
    assert console_errors(browser) == []


def test_a_killed_tablet_server_appears_down(browser, artifacts, cluster, client, leader):
    victim = cluster.spec.tservers[-1]
    servers = {s.address: s.uuid for s in client.list_servers()}
    victim_uuid = servers[victim.rpc]
    wait_for(
        lambda: all(s.state == "LIVE" for s in client.list_servers()),
        WAIT_S,
        "every tablet server LIVE before the kill",
    )
    cluster.kill(victim, signal.SIGKILL)

    def row_down(d):
        link = d.find_elements("link text", victim_uuid)
        if not link:
            return False
        row = link[0].find_element("xpath", "./ancestor::tr").text
        return "DOWN" in row and row

    row = wait_page(
        browser, f"http://{leader.http}/", row_down, WAIT_S, f"{victim_uuid} shown DOWN"
    )
    assert "DOWN" in row
    _shot(browser, artifacts, "leader-overview-tserver-down")
    body = browser.find_element("tag name", "body").text
    assert "under-replicated" in body or "unavailable" in body or "healthy" in body
    browser.get(f"http://{leader.http}/tservers/{victim_uuid}")
    page = browser.find_element("tag name", "body").text
    assert "DOWN" in page and "not asked" in page
    _shot(browser, artifacts, "leader-tserver-down")
    # Every page once more after the failure, still without a console error.
    for path in PAGES:
        browser.get(f"http://{leader.http}{path}")
        assert browser.find_element("id", "role").text, path
        _shot(browser, artifacts, f"after-kill-{_slug(path)}")
    assert console_errors(browser) == []
    print(f"screenshots in {artifacts}", file=sys.stderr)
