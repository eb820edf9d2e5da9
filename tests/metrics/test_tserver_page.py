"""A tablet server's own page (tservers/status_page.py) against a real cluster: its tablets,
WAL and copies; the JSON twin; and the coordinator's console links to it (the address comes
with the heartbeats). Plus the pure render: every value escaped."""

from __future__ import annotations

import json
import urllib.request

import pytest

import logcentric
from logcentric import Column
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for
from tservers import status_page


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def test_render_escapes_everything():
    row = status_page.TabletRow(
        "t<1>", "<script>x</script>", "FAILED", "READY", "LEADER", 1, 2, 2, 0, 0, 1, 10,
        "bad & <worse>",
    )  # fmt: skip
    page = status_page.render(
        status_page.PageState("u&1", "127.0.0.1:1", ("c:1",), True, (row,), 1, (), 3, 2, 5)
    ).decode()
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page
    assert "t&lt;1&gt; FAILED: bad &amp; &lt;worse&gt;" in page


@pytest.mark.integration
def test_the_tablet_server_page_and_the_console_link(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=1, tservers=1, lease_timeout_s=1.5) as cl:
        with logcentric.connect(
            cl.spec.coordinator_addresses, timeout_s=60, credentials=str(cl.spec.admin_credentials)
        ) as client:
            client.create_table(
                "paged", [Column("id", "int64", key=True), Column("v", "string")], num_tablets=2
            )
            table = client.table("paged")
            with client.new_session() as s:
                s.insert(table, [{"id": i, "v": "x"} for i in range(20)])
            tablet_ids = sorted(t.tablet_id for t in table.tablets())
        ts = cl.spec.tservers[0]
        page = _get(f"http://{ts.http}/")
        for tid in tablet_ids:
            assert tid in page
        assert "paged" in page and "WAL" in page and "Tablet copies" in page
        doc = json.loads(_get(f"http://{ts.http}/tablets.json"))
        assert sorted(t["tablet_id"] for t in doc["tablets"]) == tablet_ids
        assert all(t["status"] == "RUNNING" and t["wal_segments"] >= 1 for t in doc["tablets"])
        console = cl.spec.coordinators[0].http
        uuid = doc["uuid"]

        def linked() -> bool:
            return f"http://{ts.http}/" in _get(f"http://{console}/tservers/{uuid}")

        wait_for(linked, 30, "the console links to the tablet server's own page")
