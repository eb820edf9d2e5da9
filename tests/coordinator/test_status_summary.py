"""`coordinator status` summarizes per tablet server and per table, and says each distinct
problem once: one dead tablet server is one problem, not one line per tablet.

The pure part builds the coordinator's and the tablet servers' answers by hand; the
integration part kills tablet servers of a real local cluster (processes) and reads
`coordinator status` and `coordinator status --json` as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from optools.admin import (
    HEALTHY,
    UNAVAILABLE,
    UNDER_REPLICATED,
    ClusterCheck,
    ServerCheck,
    check_table,
    summarize_problems,
)
from rpc.protocols import coordinator_pb2 as cpb
from rpc.protocols import tserver_pb2 as tpb
from tests.coordinator.coordproc import wait_for
from tests.support.cluster import local_cluster

ROOT = Path(__file__).resolve().parents[2]
UUIDS = ["a" * 32, "b" * 32, "c" * 32]


def _table(name: str, n: int, rf: int = 3):
    summary = cpb.TableSummary(name=name, table_id=f"t-{name}", state="RUNNING")
    described = cpb.DescribeTableResponse(
        name=name, table_id=f"t-{name}", replication_factor=rf, schema=cpb.Schema(version=1)
    )
    locations = cpb.GetTabletLocationsResponse(
        tablets=[
            cpb.TabletLocation(
                tablet_id=f"t-{name}-{b}",
                replicas=[
                    cpb.ReplicaLocation(server_uuid=u, address=f"h:{i}", member_type="VOTER")
                    for i, u in enumerate(UUIDS[:rf])
                ],
            )
            for b in range(n)
        ]
    )
    return summary, described, locations


def _report(tablet_ids: list[str]) -> tpb.ListTabletsResponse:
    return tpb.ListTabletsResponse(
        tablets=[
            tpb.TabletReportPB(
                tablet_id=t, data_state=tpb.READY, status="RUNNING", schema_version=1
            )
            for t in tablet_ids
        ]
    )


def _check(reports: dict, states: dict[str, str], tables=(("users", 4), ("events", 2))):
    result = ClusterCheck(leader="h:0")
    for i, u in enumerate(UUIDS):
        report = reports[u]
        result.servers.append(
            ServerCheck(
                u, f"h:{i}", states.get(u, "LIVE"), 6, False, 12.5 if u in states else 0.2,
                answered=not isinstance(report, str),
                error=report if isinstance(report, str) else "",
            )
        )  # fmt: skip
    for name, n in tables:
        result.tables.append(check_table(*_table(name, n), reports))
    summarize_problems(result)
    return result


ALL = [f"t-users-{b}" for b in range(4)] + [f"t-events-{b}" for b in range(2)]


def test_one_dead_server_is_one_problem_with_its_tablets_counted():
    reports = {UUIDS[0]: "unreachable: timed out", UUIDS[1]: _report(ALL), UUIDS[2]: _report(ALL)}
    result = _check(reports, {UUIDS[0]: "DOWN"})
    assert not result.healthy
    assert result.problems == [
        f"tablet server {UUIDS[0]} (h:0) is DOWN (last heartbeat 12.5 s ago): tablets left "
        "6 under-replicated (events 2, users 4)"
    ]
    dead = result.servers[0]
    assert (dead.under_replicated_tablets, dead.unavailable_tablets) == (6, 0)
    counts = {HEALTHY: 0, UNDER_REPLICATED: 4, UNAVAILABLE: 0, "inconsistent": 0, "total": 4}
    assert [(t.name, t.tablet_counts) for t in result.tables] == [
        ("users", counts),
        ("events", {**counts, UNDER_REPLICATED: 2, "total": 2}),
    ]


def test_two_dead_servers_unavailable_tablets_said_once_per_table():
    reports = {UUIDS[0]: "unreachable", UUIDS[1]: "unreachable", UUIDS[2]: _report(ALL)}
    result = _check(reports, {UUIDS[0]: "DOWN", UUIDS[1]: "DOWN"})
    assert len(result.problems) == 4, result.problems
    assert result.problems[0].endswith("tablets left 6 unavailable (events 2, users 4)")
    assert result.problems[2] == (
        "table users: 4 tablet(s) UNAVAILABLE: 1 of its 3 voters running, not a majority (no "
        "leader, no write): t-users-0, t-users-1, t-users-2, t-users-3"
    )
    assert all(s.unavailable_tablets == 6 for s in result.servers[:2])


def test_replica_problems_on_a_live_server_grouped_and_ids_bounded():
    many = [f"t-big-{b}" for b in range(8)]
    reports = {UUIDS[0]: _report(ALL), UUIDS[1]: _report(ALL + many), UUIDS[2]: _report(ALL)}
    result = _check(reports, {}, tables=(("users", 4), ("events", 2), ("big", 8)))
    assert result.problems == [
        f"tablet server {UUIDS[0]} (h:0): 8 replica(s) missing on its tablet server: t-big-0, "
        "t-big-1, t-big-2, t-big-3, t-big-4 and 3 more",
        f"tablet server {UUIDS[2]} (h:2): 8 replica(s) missing on its tablet server: t-big-0, "
        "t-big-1, t-big-2, t-big-3, t-big-4 and 3 more",
        "table big: 8 tablet(s) UNAVAILABLE: 1 of its 3 voters running, not a majority (no "
        "leader, no write): t-big-0, t-big-1, t-big-2, t-big-3, t-big-4 and 3 more",
    ]
    assert result.servers[0].state == "LIVE" and result.servers[0].under_replicated_tablets == 0
    assert result.tables[2].tablet_counts[UNAVAILABLE] == 8


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "optools.coordinator_cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


@pytest.mark.integration
def test_status_of_a_cluster_losing_tablet_servers(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=1, tservers=3) as cluster:
        # A secure cluster (the default): status and DDL as its admin.
        c = ["--coordinators", ",".join(cluster.spec.coordinator_addresses),
             "--credentials", str(cluster.spec.admin_credentials)]  # fmt: skip
        for name, n in (("users", 4), ("events", 2)):
            made = _cli("create-table", name, *c, "--columns", "id:int64:key", "--tablets",
                        str(n), "--replication", "3")  # fmt: skip
            assert made.returncode == 0, made.stderr

        def status() -> tuple[int, dict]:
            out = _cli("status", *c, "--json")
            return out.returncode, json.loads(out.stdout)

        code, doc = wait_for(lambda: (r := status())[1]["healthy"] and r, 120, "a healthy cluster")
        assert code == 0 and doc["problems"] == []
        assert {t["name"]: t["tablet_counts"]["healthy"] for t in doc["tables"]} == {
            "users": 4,
            "events": 2,
        }
        by_address = {s["address"]: s for s in doc["servers"]}
        victims = [by_address[n.rpc]["uuid"] for n in cluster.spec.tservers[:2]]

        def down(uuids: list[str]):
            def check():
                code, doc = status()
                states = {s["uuid"]: s["state"] for s in doc["servers"]}
                return all(states[u] == "DOWN" for u in uuids) and (code, doc)

            return wait_for(check, 120, f"{len(uuids)} server(s) DOWN")

        cluster.kill(cluster.spec.tservers[0])
        code, doc = down(victims[:1])
        assert code == 1 and len(doc["problems"]) == 1, doc["problems"]
        assert doc["problems"][0].startswith(f"tablet server {victims[0]} (")
        assert "tablets left 6 under-replicated (events 2, users 4)" in doc["problems"][0]
        dead = next(s for s in doc["servers"] if s["uuid"] == victims[0])
        assert dead["under_replicated_tablets"] == 6 and dead["unavailable_tablets"] == 0
        assert dead["last_heartbeat_age_s"] > 0
        counts = {t["name"]: t["tablet_counts"] for t in doc["tables"]}
        assert counts["users"]["under_replicated"] == 4 and counts["users"]["healthy"] == 0
        text = _cli("status", *c)
        assert text.returncode == 1
        lines = text.stdout.splitlines()
        problems = lines[lines.index("UNHEALTHY: 1 problem(s)") + 1 :]
        assert len(problems) == 1 and victims[0] in problems[0], text.stdout
        assert any(
            "users" in ln and "4 tablets: 0 healthy, 4 under-replicated, 0 unavailable" in ln
            for ln in lines
        ), text.stdout
        assert any(
            victims[0][:12] in ln and "DOWN" in ln and "leaves 6 tablet(s) under-replicated" in ln
            for ln in lines
        ), text.stdout

        cluster.kill(cluster.spec.tservers[1])
        code, doc = down(victims)
        # Two servers, and one line per table for its unavailable tablets: not one per tablet.
        assert code == 1 and len(doc["problems"]) == 4, doc["problems"]
        counts = {t["name"]: t["tablet_counts"] for t in doc["tables"]}
        assert counts["users"]["unavailable"] == 4 and counts["events"]["unavailable"] == 2
        for uuid in victims:
            s = next(s for s in doc["servers"] if s["uuid"] == uuid)
            assert s["unavailable_tablets"] == 6
