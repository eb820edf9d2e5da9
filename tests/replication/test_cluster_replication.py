"""End to end through the coordinator: a table with replication factor 3 on three tablet
servers keeps taking writes and reads after one tablet server is killed with -9."""

from __future__ import annotations

import pytest

from logcentric.client import Client, Column
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

COLUMNS = [Column("id", "int64", key=True), Column("name", "string")]


def rows(ids):
    return [{"id": i, "name": f"n{i}"} for i in ids]


def test_replicated_table_survives_a_tserver_kill(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=1, tservers=3) as cluster:
        with Client(
            cluster.spec.coordinator_addresses, timeout_s=60, credentials=cluster.credentials()
        ) as client:
            client.create_table("rep_t", COLUMNS, num_tablets=2, replication_factor=3)
            locations = client.tablet_locations("rep_t")
            assert all(len(t.replicas) == 3 for t in locations.tablets)
            t = client.table("rep_t")

            def leaders_reported() -> bool:
                locs = client.tablet_locations("rep_t").tablets
                return all(any(r.is_leader for r in x.replicas) for x in locs)

            wait_for(leaders_reported, 60, "a leader reported for every tablet")
            written = 0
            with client.new_session(flush_rows_max=100) as s:
                for start in range(0, 1000, 100):
                    s.upsert(t, rows(range(start, start + 100)))
                    s.flush()
                    written = start + 100
            assert s.errors == []
            assert t.count() == written

            # Kill the server that leads the first tablet: its tablets elect new leaders.
            first = client.tablet_locations("rep_t").tablets[0]
            leader_uuid = next(r.server_uuid for r in first.replicas if r.is_leader)
            servers = {x.uuid: x for x in client.list_servers()}
            victim = next(n for n in cluster.spec.tservers if n.rpc == servers[leader_uuid].address)
            cluster.kill(victim)
            with client.new_session(flush_rows_max=100) as s:
                for start in range(1000, 2000, 100):
                    s.upsert(t, rows(range(start, start + 100)))
                    s.flush()
                    written = start + 100
            assert s.errors == []
            t.refresh()
            data = t.to_arrow()
            assert sorted(data["id"].to_pylist()) == list(range(written))
            assert data.num_rows == 2000
