"""Every daemon of a running local cluster serves /metrics, /healthz and /readyz, and the
numbers move when work is done (design/operability.md):

- the scrape of each daemon parses with prometheus-client's own parser and holds its
  component's families (and the process collector's RSS and open files);
- creating a table, writing and scanning rows count rpc calls, rows written and scanned, WAL
  group commits, log appends;
- a tablet server killed is logged "seen down" by every coordinator (and counted), and
  "back" once restarted; the restarted server's /readyz turns 200 (enlisted, tablets open);
- killing the coordinator leader: a survivor takes over, its role change (a failover) and
  every survivor's leader change are counted, the new leader is ready and logs the lease
  change with its wall-clock time; a node left alone without a majority says why it is not
  ready.
"""

from __future__ import annotations

import re
import signal

import pytest

from logcentric.client import Client, Column
from rpc.observe import GC_OLD_EVERY
from tests.metrics.support import get, get_json, scrape, value
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

WAIT_S = 120.0
ROWS = 300
COLUMNS = [Column("id", "int64", key=True), Column("v", "string")]
ISO_UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"

COORDINATOR_FAMILIES = {
    "logcentric_rpc_calls",
    "logcentric_rpc_call_latency_seconds",
    "logcentric_rpc_throttled",
    "logcentric_rpc_queue_depth_calls",
    "logcentric_coordinator_lease_epoch",
    "logcentric_coordinator_role",
    "logcentric_coordinator_role_changes",
    "logcentric_coordinator_leader_changes",
    "logcentric_coordinator_lease_renewal_age_seconds",
    "logcentric_coordinator_replay_backlog_entries",
    "logcentric_coordinator_pending_operations",
    "logcentric_coordinator_rereplication_actions",
    "logcentric_coordinator_location_answers",
    "logcentric_coordinator_operation_step_seconds",
    "logcentric_logstore_raft_term",
    "logcentric_logstore_raft_commit_index",
    "logcentric_logstore_raft_applied_index",
    "logcentric_logstore_append_latency_seconds",
    "logcentric_logstore_journal_fsync_latency_seconds",
    "process_resident_memory_bytes",
    "process_open_fds",
}
TSERVER_FAMILIES = {
    "logcentric_rpc_calls",
    "logcentric_tserver_memstore_bytes",
    "logcentric_tserver_arrow_allocated_bytes",
    "logcentric_rpc_call_latency_seconds",
    "logcentric_tserver_tablets",
    "logcentric_tserver_rows_written",
    "logcentric_tserver_rows_scanned",
    "logcentric_tserver_answer_buffer_bytes",
    "logcentric_tserver_answer_buffers_reused",
    "logcentric_tserver_answer_buffers_declined",
    "logcentric_tserver_wal_group_commit_records",
    "logcentric_tserver_wal_fsync_latency_seconds",
    "logcentric_tserver_tablet_copy_bytes",
    "logcentric_tserver_tablet_copy_rate_bytes_per_second",
    "logcentric_tserver_raft_messages_out",
    "logcentric_tserver_raft_groups_quiet",
    "logcentric_tserver_raft_peers_down",
    "logcentric_tserver_raft_liveness_pings_withheld",
    "logcentric_tserver_raft_peers_opening",
    "logcentric_tserver_raft_elections_held",
    "logcentric_tserver_raft_hardstate_appends",
    "logcentric_tserver_raft_hardstate_journal_bytes",
    "process_resident_memory_bytes",
    "process_open_fds",
}


def url(node) -> str:
    return f"http://{node.http}"


def ready(node) -> bool:
    try:
        return get(url(node) + "/readyz", timeout_s=5.0)[0] == 200
    except OSError:
        return False


def total(nodes, family: str, sample: str | None = None, **labels) -> float:
    return sum(value(scrape(url(n)), family, sample, **labels) for n in nodes)


def log_text(cluster, node) -> str:
    return (cluster.log_dir / f"{node.name}.log").read_text(errors="replace")


def leader_node(cluster):
    with cluster.client(timeout_s=5.0) as client:
        return cluster.leader(client)


def test_every_daemon_scraped_and_numbers_move(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=3, tservers=2) as cluster:
        coords, tservers = cluster.spec.coordinators, cluster.spec.tservers
        nodes = [*coords, *tservers]
        assert all(n.http for n in nodes), "local-cluster gives every daemon an HTTP port"
        for n in nodes:
            wait_for(lambda n=n: ready(n), WAIT_S, f"/readyz of {n.name}", 0.2)
            status, body = get_json(url(n) + "/healthz")
            assert status == 200 and body["ok"] is True
        for n in coords:
            assert COORDINATOR_FAMILIES <= set(scrape(url(n))), n.name
        for n in tservers:
            assert TSERVER_FAMILIES <= set(scrape(url(n))), n.name
        for n in nodes:  # every daemon collects its old generation seldom (rpc/observe.py)
            fams = scrape(url(n))
            assert value(fams, "logcentric_gc_threshold", generation="2") == GC_OLD_EVERY, n.name
            assert value(fams, "logcentric_gc_pauses", generation="0") > 0, n.name
        leader = leader_node(cluster)
        assert leader is not None
        fams = scrape(url(leader))
        assert value(fams, "logcentric_coordinator_role", role="LEADER") == 1
        epoch = value(fams, "logcentric_coordinator_lease_epoch")
        assert epoch > 0

        # -- work: a table, rows written and scanned -----------------------------------
        before_written = total(tservers, "logcentric_tserver_rows_written")
        before_scanned = total(tservers, "logcentric_tserver_rows_scanned")
        before_wal = total(tservers, "logcentric_tserver_wal_groups")
        before_appends = value(
            scrape(url(leader)),
            "logcentric_logstore_append_latency_seconds",
            "logcentric_logstore_append_latency_seconds_count",
        )
        assert before_written == 0 and before_scanned == 0
        with Client(
            cluster.spec.coordinator_addresses, timeout_s=60, credentials=cluster.credentials()
        ) as client:
            client.create_table("m", COLUMNS, num_tablets=2, replication_factor=2)
            table = client.table("m")
            rows = [{"id": i, "v": f"r{i}"} for i in range(ROWS)]
            with client.new_session(flush_rows_max=ROWS) as session:
                session.upsert(table, rows)
                session.flush()
            assert not session.errors
            assert table.to_arrow().num_rows == ROWS
            for _ in range(3):  # uncached by the client: the coordinator's cache answers
                client.tablet_locations("m")
        written = total(tservers, "logcentric_tserver_rows_written")
        scanned = total(tservers, "logcentric_tserver_rows_scanned")
        assert written >= ROWS, written  # each row once by its tablet's leader (retries: more)
        assert scanned >= ROWS, scanned
        # Answers of a few hundred rows are under the answer pool's smallest class: malloc.
        assert total(tservers, "logcentric_tserver_answer_buffers_declined") >= 1
        assert total(tservers, "logcentric_tserver_wal_groups") > before_wal
        assert total(tservers, "logcentric_rpc_calls", method="TServer.Write", status="OK") >= 1
        assert total(tservers, "logcentric_rpc_calls", method="TServer.Scan", status="OK") >= 1
        wait_for(
            lambda: total(tservers, "logcentric_tserver_tablets", status="RUNNING") == 4,
            WAIT_S,
            "2 tablets x 2 replicas RUNNING in the tablet servers' metrics",
            0.2,
        )
        fams = scrape(url(leader))
        assert value(fams, "logcentric_rpc_calls", method="Coordinator.CreateTable", status="OK")
        assert value(fams, "logcentric_coordinator_tables") == 1
        assert value(fams, "logcentric_coordinator_tablets") == 2
        appends = value(
            fams,
            "logcentric_logstore_append_latency_seconds",
            "logcentric_logstore_append_latency_seconds_count",
        )
        assert appends > before_appends
        assert value(fams, "logcentric_rpc_calls", method="Coordinator.Heartbeat") > 0
        answers = "logcentric_coordinator_location_answers"
        assert value(fams, answers, source="built") >= 1
        assert value(fams, answers, source="cache") >= 2
        # Every step of the one CreateTable the leader ran is timed (its 2 tablets x 2
        # replicas: 4 replica calls); `calls` and `done` are within `complete`.
        steps = "logcentric_coordinator_operation_step_seconds"
        for step, times in [
            ("write_lock", 1), ("lease_lock", 1), ("commit_point", 1), ("apply", 1),
            ("complete", 1), ("calls", 1), ("replica_call", 4), ("done", 1),
        ]:  # fmt: skip
            count = value(fams, steps, steps + "_count", kind="create_table", step=step)
            assert count == times, (step, count)

        def took(step: str) -> float:
            return value(fams, steps, steps + "_sum", kind="create_table", step=step)

        assert 0 < took("calls") + took("done") < took("complete")

        # -- a tablet server killed, then restarted --------------------------------------
        victim = tservers[1]
        cluster.kill(victim)
        for n in coords:
            wait_for(
                lambda n=n: re.search(
                    rf"tablet server \S+ at {re.escape(victim.rpc)} seen down at {ISO_UTC}",
                    log_text(cluster, n),
                ),
                WAIT_S,
                f"{n.name} logs {victim.name} seen down",
                0.2,
            )
            assert value(scrape(url(n)), "logcentric_coordinator_tablet_servers_seen_down") == 1
        cluster.start_tserver(1)
        wait_for(lambda: ready(victim), WAIT_S, f"/readyz of the restarted {victim.name}", 0.2)
        body = get_json(url(victim) + "/readyz")[1]
        assert body == {"ready": True, "why": []}
        for n in coords:
            wait_for(
                lambda n=n: re.search(
                    rf"tablet server \S+ at {re.escape(victim.rpc)} is back: heartbeats again",
                    log_text(cluster, n),
                ),
                WAIT_S,
                f"{n.name} logs {victim.name} back",
                0.2,
            )
            assert value(scrape(url(n)), "logcentric_coordinator_tablet_servers_seen_down") == 0

        # -- the coordinator leader killed: a failover, counted --------------------------
        leader = leader_node(cluster)
        assert leader is not None
        survivors = [n for n in coords if n is not leader]
        took_over = total(survivors, "logcentric_coordinator_role_changes", role="LEADER")
        seen = {
            n.name: value(scrape(url(n)), "logcentric_coordinator_leader_changes")
            for n in survivors
        }
        cluster.kill(leader, signal.SIGKILL)

        def new_leader():
            for n in survivors:
                fams = scrape(url(n))
                if ready(n) and value(fams, "logcentric_coordinator_role", role="LEADER") == 1:
                    return n
            return None

        successor = wait_for(new_leader, WAIT_S, "a survivor leads and is ready", 0.2)
        assert total(survivors, "logcentric_coordinator_role_changes", role="LEADER") > took_over
        fams = scrape(url(successor))
        assert value(fams, "logcentric_coordinator_lease_epoch") > epoch
        for n in survivors:
            wait_for(
                lambda n=n: (
                    value(scrape(url(n)), "logcentric_coordinator_leader_changes") > seen[n.name]
                ),
                WAIT_S,
                f"{n.name} counts the leader change",
                0.2,
            )
        assert re.search(
            rf"lease: this node {successor.name} \(\S+\) is now LEADER, epoch \d+, at {ISO_UTC}",
            log_text(cluster, successor),
        )
        other = next(n for n in survivors if n is not successor)
        wait_for(
            lambda: re.search(
                rf"lease: \S+ at {re.escape(successor.rpc)} holds epoch \d+ \(taken at "
                rf"{ISO_UTC}\), seen at {ISO_UTC}",
                log_text(cluster, other),
            ),
            WAIT_S,
            f"{other.name} logs the new lease holder with its wall-clock time",
            0.2,
        )
        wait_for(
            lambda: re.search(
                rf"coordinator log peer {re.escape(leader.raft)} seen down at {ISO_UTC}",
                log_text(cluster, other),
            ),
            WAIT_S,
            f"{other.name} logs the dead node's log replica down",
            0.2,
        )

        # -- alone without a majority: not ready, and it says why ------------------------
        cluster.kill(other, signal.SIGKILL)

        def not_ready_why():
            status, body = get_json(url(successor) + "/readyz")
            return (status, body) if status == 503 and body["why"] else None

        status, body = wait_for(not_ready_why, WAIT_S, "the lone node says it is not ready", 0.2)
        assert body["ready"] is False and all(isinstance(w, str) and w for w in body["why"])
        assert get_json(url(successor) + "/healthz")[0] == 200  # alive, though not ready
        assert value(scrape(url(successor)), "logcentric_coordinator_role", role="LEADER") == 0
