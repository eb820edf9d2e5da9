"""Re-replication with real processes (architecture 4.5): 3 coordinator nodes, 4 tablet servers.

A table with replication 3 takes writes; one tablet server hosting replicas is killed with -9
while writes go on; the coordinator leader marks it down and re-replicates every affected
tablet to the 4th server (ADD NON_VOTER + promote, then REMOVE of the dead replica) until
every tablet has 3 live voters; no acknowledged row is lost. Then the admin commands:
`coordinator set-replication 3 -> 2`, then `coordinator move-replica`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from logcentric.client import Client, Column
from rpc.errors import RpcError
from rpc.protocols import coordinator_pb2 as cpb
from tests.support.cluster import local_cluster
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

COLUMNS = [Column("id", "int64", key=True), Column("name", "string")]
CONVERGE_TIMEOUT_S = 180.0


def rows(ids):
    return [{"id": i, "name": f"n{i}"} for i in ids]


def replication_status(client: Client) -> cpb.ReplicationStatusResponse:
    return client.meta.call(
        "ReplicationStatus", cpb.ReplicationStatusRequest(), cpb.ReplicationStatusResponse
    )


def converged(client: Client, table: str, factor: int, banned: set[str]) -> bool:
    """Every tablet: `factor` replicas, all VOTERs on LIVE servers, none on a banned one,
    a leader reported; and the leader's policy sees every tablet healthy."""
    locations = client.tablet_locations(table).tablets
    for t in locations:
        if len(t.replicas) != factor or not any(r.is_leader for r in t.replicas):
            return False
        for r in t.replicas:
            if r.server_uuid in banned or r.server_state != "LIVE" or r.member_type != "VOTER":
                return False
    st = replication_status(client)
    return st.under_replicated == 0 and st.unknown == 0 and st.healthy_tablets == st.tablets


def voters_on_servers(client: Client, table: str) -> dict[str, list[str]]:
    """Each tablet's committed voters as the tablet's own leader reports them."""
    out: dict[str, list[str]] = {}
    from rpc.protocols import tserver_pb2 as ts

    for t in client.tablet_locations(table).tablets:
        leader = next(r for r in t.replicas if r.is_leader)
        # The client's own client of that server: CURVE with the key the locations give.
        answer = client.tserver(leader).list_tablets()
        report = next(r for r in answer.tablets if r.tablet_id == t.tablet_id)
        out[t.tablet_id] = sorted(
            p.uuid for p in report.committed_config.peers if p.member_type == ts.MemberType.VOTER
        )
    return out


def affected_on(locations, uuid: str) -> list[str]:
    return [x.tablet_id for x in locations if any(r.server_uuid == uuid for r in x.replicas)]


def cli(cluster, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """An operator command against the cluster, as its admin (a secure cluster's file)."""
    creds = ["--credentials", str(cluster.spec.admin_credentials)] if cluster.spec.secure else []
    return subprocess.run(
        [sys.executable, "-m", "optools.coordinator_cli", *args,
         "--coordinators", ",".join(cluster.spec.coordinator_addresses), *creds],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def write(client: Client, table, ids) -> None:
    with client.new_session(flush_rows_max=100) as s:
        for start in range(ids.start, ids.stop, 100):
            s.upsert(table, rows(range(start, min(start + 100, ids.stop))))
            s.flush()
    assert s.errors == []


def test_kill_a_tserver_then_re_replicate_lower_the_factor_and_move(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=3, tservers=4) as cluster:
        with Client(
            cluster.spec.coordinator_addresses, timeout_s=60, credentials=cluster.credentials()
        ) as client:
            # Default replication factor: 3 with 4 live servers (0 = unset).
            wait_for(lambda: len(client.list_servers()) == 4, 60, "4 tablet servers enlisted")
            client.meta.create_table("dflt", cpb.Schema(columns=[c.to_pb() for c in COLUMNS]), 1, 0)
            assert client.describe_table("dflt").replication_factor == 3

            client.create_table("rep", COLUMNS, num_tablets=4, replication_factor=3)
            wait_for(lambda: converged(client, "rep", 3, set()), 60, "leaders reported")
            t = client.table("rep")
            write(client, t, range(0, 1000))

            # kill -9 a tablet server that hosts replicas, and keep writing.
            locations = client.tablet_locations("rep").tablets
            victim_uuid = locations[0].replicas[1].server_uuid
            servers = {s.uuid: s.address for s in client.list_servers()}
            victim = next(n for n in cluster.spec.tservers if n.rpc == servers[victim_uuid])
            affected = [x.tablet_id for x in locations if any(
                r.server_uuid == victim_uuid for r in x.replicas)]  # fmt: skip
            assert affected
            killed_at = time.monotonic()
            cluster.kill(victim)
            write(client, t, range(1000, 2000))

            def down() -> bool:
                return any(
                    s.uuid == victim_uuid and s.state == "DOWN" for s in client.list_servers()
                )

            wait_for(down, 60, "the killed server marked DOWN")
            down_s = time.monotonic() - killed_at
            write(client, t, range(2000, 2500))
            wait_for(
                lambda: converged(client, "rep", 3, {victim_uuid}),
                CONVERGE_TIMEOUT_S,
                "every tablet back to 3 live voters without the killed server",
                interval_s=0.5,
            )
            print(
                f"\nkill -9 -> DOWN {down_s:.1f} s, -> {len(affected)} tablets re-replicated "
                f"{time.monotonic() - killed_at:.1f} s"
            )
            voters = voters_on_servers(client, "rep")
            assert all(len(v) == 3 and victim_uuid not in v for v in voters.values()), voters
            t.refresh()
            assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(2500))
            st = replication_status(client)
            assert st.changes_sent >= 2 * len(affected)  # one ADD and one REMOVE per tablet

            # set-replication 3 -> 2, logged: every tablet converges to 2 voters.
            done = cli(cluster, "set-replication", "rep", "2")
            assert done.returncode == 0, done.stderr + done.stdout
            assert "warning: 2 replicas tolerate as few failed servers as 1" in done.stderr
            assert client.describe_table("rep").replication_factor == 2
            again = cli(cluster, "set-replication", "rep", "2")  # the factor it has: no-op
            assert again.returncode == 0, again.stderr + again.stdout
            assert "unchanged" in again.stdout, again.stdout
            again = cli(cluster, "set-replication", "rep", "2", "--json", "--wait-s", "0")
            assert json.loads(again.stdout) == {
                "table": "rep", "replication_factor": 2, "changed": False, "converged": False
            }, again.stdout  # fmt: skip
            wait_for(lambda: converged(client, "rep", 2, {victim_uuid}), 60, "2 replicas each")
            voters = voters_on_servers(client, "rep")
            assert all(len(v) == 2 for v in voters.values()), voters
            write(client, t, range(2500, 3000))
            t.refresh()
            assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(3000))

            # move-replica: a follower replica of the first tablet to a server without it.
            first = client.tablet_locations("rep").tablets[0]
            source = next(r.server_uuid for r in first.replicas if not r.is_leader)
            live = {s.uuid for s in client.list_servers() if s.state == "LIVE"}
            target = next(iter(live - {r.server_uuid for r in first.replicas}))
            # Onto a server that already has a replica of it: refused (it could never finish).
            member = next(r.server_uuid for r in first.replicas if r.server_uuid != source)
            refused = cli(
                cluster, "move-replica", first.tablet_id, "--from", source, "--to", member
            )
            assert refused.returncode != 0 and "already has a replica" in refused.stderr, (
                refused.stdout + refused.stderr
            )
            assert not replication_status(client).moves
            done = cli(cluster, "move-replica", first.tablet_id, "--from", source, "--to", target)
            assert done.returncode == 0, done.stderr
            wait_for(
                lambda: converged(client, "rep", 2, {victim_uuid}), 60, "healthy after the move"
            )
            moved = {r.server_uuid for r in client.tablet_locations("rep").tablets[0].replicas}
            assert source not in moved and target in moved

            # A move with no target while every live server hosts the tablet (the 1-tablet
            # table of factor 3, on the 3 live servers): refused, not left pending.
            wait_for(lambda: converged(client, "dflt", 3, {victim_uuid}), 60, "dflt on the 3 live")
            full = client.tablet_locations("dflt").tablets[0]
            refused = cli(
                cluster, "move-replica", full.tablet_id, "--from", full.replicas[0].server_uuid
            )
            assert refused.returncode != 0 and "no server can take" in refused.stderr, (
                refused.stdout + refused.stderr
            )
            assert not replication_status(client).moves

            # retire-tserver: every replica moves off one server (factor 2 on the other two).
            # The 1-tablet table of factor 3 could not leave it (2 servers would remain):
            # refused up front rather than waited on.
            refused = cli(cluster, "retire-tserver", target, "--wait-s", "5")
            assert refused.returncode != 0 and "cannot retire" in refused.stderr, (
                refused.stdout + refused.stderr
            )
            assert not replication_status(client).retiring
            done = cli(cluster, "set-replication", "dflt", "2")
            assert done.returncode == 0, done.stderr + done.stdout
            retired = target
            done = cli(cluster, "retire-tserver", retired, "--wait-s", "120")
            assert done.returncode == 0, done.stderr + done.stdout
            assert all(
                retired not in {r.server_uuid for r in x.replicas}
                for x in client.tablet_locations("rep").tablets
            )
            wait_for(lambda: converged(client, "rep", 2, {victim_uuid, retired}), 60, "retired")
            voters = voters_on_servers(client, "rep")
            assert all(len(v) == 2 and retired not in v for v in voters.values()), voters
            t.refresh()
            assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(3000))
            summary = cli(cluster, "replication")
            assert summary.returncode == 0, summary.stdout + summary.stderr
            # Retired for good (logged), not only until drained: it gets no new replica.
            listed = cli(cluster, "servers")
            assert f"{retired}\t" in listed.stdout, listed.stdout
            line = next(x for x in listed.stdout.splitlines() if x.startswith(retired))
            assert line.endswith("\tretired"), line
            refused = cli(cluster, "set-replication", "rep", "3", "--wait-s", "5")
            assert refused.returncode != 0, refused.stdout + refused.stderr
            assert "2 live tablet servers not retired" in refused.stderr, refused.stderr
            again = cli(cluster, "retire-tserver", retired, "--wait-s", "5")  # logs nothing
            assert again.returncode == 0 and "hosts no replica" in again.stdout, again.stdout
            first = client.tablet_locations("rep").tablets[0]
            member = first.replicas[0].server_uuid
            onto = cli(cluster, "move-replica", first.tablet_id, "--from", member, "--to", retired)
            assert onto.returncode != 0 and "is retired" in onto.stderr, onto.stdout + onto.stderr

            # The dead server removed, the ksck (`coordinator status`) finds it all healthy.
            client.meta.call(
                "RemoveServer",
                cpb.RemoveServerRequest(
                    request_id=client.meta.next_request_id(), server_uuid=victim_uuid
                ),
                cpb.RemoveServerResponse,
            )
            last: list = []

            def healthy() -> bool:
                last[:] = [cli(cluster, "status")]
                return last[0].returncode == 0

            try:
                wait_for(healthy, 60, "coordinator status healthy", interval_s=0.5)
            except AssertionError as err:
                raise AssertionError(f"{err}\n{last[0].stdout}\n{last[0].stderr}") from None


def test_re_replication_survives_a_coordinator_failover(tmp_path):
    """The coordinator leader and a tablet server are killed together: the new leader, with
    nothing logged about re-replication, finds the under-replicated tablets from the
    heartbeats it received as a follower and repairs them."""
    with local_cluster(tmp_path / "c", coordinators=3, tservers=4) as cluster:
        with Client(
            cluster.spec.coordinator_addresses, timeout_s=60, credentials=cluster.credentials()
        ) as client:
            wait_for(lambda: len(client.list_servers()) == 4, 60, "4 tablet servers enlisted")
            schema = cpb.Schema(columns=[c.to_pb() for c in COLUMNS])
            client.meta.create_table("rep", schema, 4, 0)  # default factor: 3
            wait_for(lambda: converged(client, "rep", 3, set()), 60, "leaders reported")
            t = client.table("rep")
            write(client, t, range(0, 500))
            with cluster.client() as meta:
                leader = wait_for(lambda: cluster.leader(meta), 30, "a coordinator leader")
            locations = client.tablet_locations("rep").tablets
            victim_uuid = next(r.server_uuid for r in locations[0].replicas if r.is_leader)
            servers = {s.uuid: s.address for s in client.list_servers()}
            victim = next(n for n in cluster.spec.tservers if n.rpc == servers[victim_uuid])
            # A table to drop while the victim is dead: its replicas there outlive the drop.
            client.meta.create_table("gone", schema, 4, 3)
            gone = {x.tablet_id for x in client.tablet_locations("gone").tablets
                    if any(r.server_uuid == victim_uuid for r in x.replicas)}  # fmt: skip
            assert gone, "4 tablets x 3 replicas on 4 servers: every server hosts some"
            started = time.monotonic()
            cluster.kill(leader)
            cluster.kill(victim)
            write(client, t, range(500, 1000))
            wait_for(
                lambda: converged(client, "rep", 3, {victim_uuid}),
                CONVERGE_TIMEOUT_S,
                "every tablet back to 3 live voters after the failover",
                interval_s=0.5,
            )
            print(f"\nfailover + re-replication: {time.monotonic() - started:.1f} s")
            voters = voters_on_servers(client, "rep")
            assert all(len(v) == 3 and victim_uuid not in v for v in voters.values()), voters
            t.refresh()
            assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(1000))

            # Dropped while the victim is dead; then the victim comes back. Its replicas of
            # the dropped table (orphans) and its evicted replicas of `rep` (replaced while
            # it was down; their config is older than their leaders') are deleted: tombstones.
            client.drop_table("gone")
            evicted = set(affected_on(locations, victim_uuid))
            cluster.start_tserver(cluster.spec.tservers.index(victim))

            def victim_states() -> dict[str, str]:
                from rpc.protocols import tserver_pb2 as ts

                with cluster.tserver_client(victim, timeout_s=10) as c:
                    return {r.tablet_id: ts.DataState.Name(r.data_state)
                            for r in c.list_tablets().tablets}  # fmt: skip

            def strays_gone() -> bool:
                try:
                    states = victim_states()
                except RpcError:  # still starting
                    return False
                return all(states.get(x, "DELETED") == "DELETED" for x in gone | evicted)

            wait_for(strays_gone, 60, "the victim's stray replicas deleted", interval_s=0.5)
            assert replication_status(client).strays_deleted >= len(gone | evicted)
            # Its replicas were deleted, not the tablets: rep is whole and healthy.
            wait_for(lambda: converged(client, "rep", 3, set()), 60, "rep healthy")
            t.refresh()
            assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(1000))


def test_failed_replica_on_a_live_server_is_replaced_then_deleted(tmp_path):
    """A follower's WAL corrupted on disk: restarted, its server is LIVE but its replica is
    FAILED (it cannot vote, and the tablet leader does not copy over it). The coordinator
    replaces it like a replica on a dead server, and deletes it once it is out of the config;
    every acknowledged row stays."""
    from tservers.fs import FsLayout
    from tservers.wal import segment as seg

    with local_cluster(tmp_path / "c", coordinators=1, tservers=4) as cluster:
        with Client(
            cluster.spec.coordinator_addresses, timeout_s=60, credentials=cluster.credentials()
        ) as client:
            wait_for(lambda: len(client.list_servers()) == 4, 60, "4 tablet servers enlisted")
            client.create_table("rep", COLUMNS, num_tablets=1, replication_factor=3)
            wait_for(lambda: converged(client, "rep", 3, set()), 60, "a leader reported")
            t = client.table("rep")
            write(client, t, range(0, 600))  # six WAL records at least, no flush
            tablet = client.tablet_locations("rep").tablets[0]
            victim_uuid = next(r.server_uuid for r in tablet.replicas if not r.is_leader)
            servers = {s.uuid: s.address for s in client.list_servers()}
            i = next(
                k for k, n in enumerate(cluster.spec.tservers) if n.rpc == servers[victim_uuid]
            )
            victim = cluster.spec.tservers[i]
            cluster.stop(victim)
            # A flipped bit in the middle of the WAL, records after it: corruption, not a tail.
            path = seg.list_segments(FsLayout.open(victim.data).wal_dir(tablet.tablet_id))[0][1]
            contents = seg.read_segment(path, is_last=False)
            assert len(contents.entries) >= 3
            data = bytearray(path.read_bytes())
            data[contents.data_end // 2] ^= 0x10
            path.write_bytes(bytes(data))
            cluster.start_tserver(i)

            def victim_report():
                try:
                    with cluster.tserver_client(victim, timeout_s=10) as c:
                        return next(
                            (
                                r
                                for r in c.list_tablets().tablets
                                if r.tablet_id == tablet.tablet_id
                            ),
                            None,
                        )
                except RpcError:  # still starting
                    return None

            def status() -> str:
                r = victim_report()
                return r.status if r is not None else ""

            wait_for(lambda: status() == "FAILED", 60, "the replica FAILED at its bootstrap")
            write(client, t, range(600, 800))  # two live voters of three: a majority
            wait_for(
                lambda: converged(client, "rep", 3, {victim_uuid}),
                CONVERGE_TIMEOUT_S,
                "the failed replica replaced",
                interval_s=0.5,
            )
            voters = voters_on_servers(client, "rep")[tablet.tablet_id]
            assert len(voters) == 3 and victim_uuid not in voters, voters
            wait_for(
                lambda: status() == "TOMBSTONED",
                60,
                "the failed replica deleted (tombstoned) once out of the config",
                interval_s=0.5,
            )
            t.refresh()
            assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(800))
