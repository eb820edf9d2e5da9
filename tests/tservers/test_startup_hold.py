"""A restarted tablet server holds its replicas' elections until every one is open, and its
liveness pings say it is opening, then open (issue 28, restart of 10,000 replicas;
design/consensus.md, "Restart without a storm").

Real processes: one coordinator, three tablet servers, a table of 4 tablets of replication 3.
The server leading the fewest tablets is killed with -9 and started again with every
start-up thread paused before its tablet (the pause point `startup.before_open_tablet`).
One tablet is let go, then, once the other servers' quiet leaders are done probing the
server they hear from again, a second.
On the old code that second replica, open while two others are not, finds no leader talking
to it and pre-votes 1-2 s after its open: in the 3,000-replica restart thousands did so
while their server still opened the rest, and each pre-vote woke a quiet leader and
follower on the other servers. Here it starts no election while the server still opens.
Once all are let go every replica there knows a leader (the other servers probe it when its
pings say it is open) and the table serves every row."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

import logcentric
from logcentric import Column
from optools.localcluster import LocalCluster
from rpc.protocols.tserver_pb2 import ListTabletsResponse
from tests.metrics.support import scrape, value
from tests.support.procs import wait_for
from tests.tservers.test_startup import POINT, WAIT_S, _list, _paused_tablets, _rpc
from tservers.crash import PAUSE_DIR_ENV, PAUSE_ENV

TABLETS = 4
ROWS = 200
# Long enough for an unheld replica to time out and pre-vote: its election timeout is drawn
# from [1, 2) s (the first one: no backoff yet). Not needed to pass: a held one never does.
WINDOW_S = 4.0
# The survivors' quiet leaders probe a server heard from again 5 times over ~3 s (0, 1, 2, 4
# and 8 liveness rounds of 0.2 s): a replica opened after that hears nothing from a quiet
# leader. Not needed to pass: it lets the old code fail (see WINDOW_S).
RETURN_PROBES_S = 4.0


def _campaigns(log_path: Path, tablet_id: str, since: int) -> list[str]:
    text = log_path.read_text(errors="replace")[since:]
    return [
        line
        for line in text.splitlines()
        if f"tablet {tablet_id}: " in line and "CANDIDATE in term" in line
    ]


@pytest.mark.integration
def test_a_restarted_server_holds_elections_until_open_and_is_probed_then(tmp_path, monkeypatch):
    cluster = LocalCluster.create(tmp_path / "cluster", 1, 3, lease_timeout_s=1.5)
    pause = tmp_path / "pause"
    pause.mkdir()
    try:
        cluster.up(timeout_s=WAIT_S)
        coords = ",".join(cluster.spec.coordinator_addresses)
        admin = str(cluster.spec.admin_credentials)
        with logcentric.connect(coords, timeout_s=WAIT_S, credentials=admin) as client:
            client.create_table(
                "held",
                [Column("id", "int64", key=True), Column("v", "string", nullable=True)],
                num_tablets=TABLETS,
                replication_factor=3,
            )
            table = client.table("held")
            with client.new_session() as s:
                s.upsert(table, [{"id": i, "v": f"v{i}"} for i in range(ROWS)])
            tablet_ids = {t.tablet_id for t in table.tablets()}

        # The victim: the server leading the fewest tablets (at most one of the four). The
        # replicas watched below are of groups led elsewhere, by leaders that stay quiet.
        led: dict[int, set[str]] = {}
        for i, n in enumerate(cluster.spec.tservers):
            resp = wait_for(lambda n=n: _list(cluster, n), WAIT_S, f"{n.name} to list")
            led[i] = {t.tablet_id for t in resp.tablets if t.role == "LEADER"}
        victim = min(led, key=lambda i: len(led[i]))
        node = cluster.spec.tservers[victim]
        with _rpc(cluster, node) as rc:
            uuid0 = rc.ping(timeout_s=5.0).uuid
        log_path = cluster.log_dir / f"{node.name}.log"
        others = [n for n in cluster.spec.tservers if n is not node]
        survivors = [cluster.log_dir / f"{n.name}.log" for n in others]
        sizes = [p.stat().st_size for p in survivors]
        cluster.kill(node, signal.SIGKILL)
        since = log_path.stat().st_size
        monkeypatch.setenv(PAUSE_ENV, POINT)
        monkeypatch.setenv(PAUSE_DIR_ENV, str(pause))
        # A start-up thread per tablet: each waits at its own pause point.
        cluster.start_tserver(victim, ["--startup-threads", str(TABLETS)])
        monkeypatch.delenv(PAUSE_ENV)
        # Both other servers count it down (silent since the kill, or saying it is opening):
        # their quiet leaders stop waiting for its answers, and the groups it led elect.
        for path, size in zip(survivors, sizes, strict=True):
            wait_for(
                lambda p=path, k=size: re.search(
                    rf"peer servers {uuid0} (not heard from|are opening)",
                    p.read_text(errors="replace")[k:],
                ),
                WAIT_S,
                "the victim counted down by the others",
            )

        def running(tablet_id: str) -> bool:
            resp = _list(cluster, node) or ListTabletsResponse()
            return any(t.tablet_id == tablet_id and t.status == "RUNNING" for t in resp.tablets)

        # One tablet opens: the server is heard from again (on the old code, by the pings
        # of that tablet's group), and the survivors' quiet leaders probe it for ~3 s.
        paused = wait_for(
            lambda: (p := _paused_tablets(log_path)) and len(p) == TABLETS and p,
            WAIT_S,
            "every start-up thread paused",
        )
        first, second = [t for t in paused if t not in led[victim]][:2]
        (pause / f"{POINT}.{first}").touch()
        wait_for(lambda: running(first), WAIT_S, f"{first} to open")
        time.sleep(RETURN_PROBES_S)  # (see RETURN_PROBES_S)
        # A second one opens after the probes: no leader talks to it, and it is held.
        (pause / f"{POINT}.{second}").touch()
        wait_for(lambda: running(second), WAIT_S, f"{second} to open")
        time.sleep(WINDOW_S)  # (see WINDOW_S)
        assert not _campaigns(log_path, second, since), "an election while others still open"
        # Said on the metrics pages: two replicas hold their elections there, and the
        # others count it as opening.
        assert value(scrape(f"http://{node.http}"), "logcentric_tserver_raft_elections_held") == 2
        for n in others:
            wait_for(
                lambda n=n: (
                    value(scrape(f"http://{n.http}"), "logcentric_tserver_raft_peers_opening") == 1
                ),
                WAIT_S,
                f"{n.name} to count the victim as opening",
            )
        resp = _list(cluster, node)
        assert resp is not None
        assert sum(1 for t in resp.tablets if t.status == "RUNNING") == 2  # still opening

        (pause / POINT).touch()  # the others open: its pings say so, and it is probed

        def all_know_a_leader() -> bool:
            resp = _list(cluster, node) or ListTabletsResponse()
            mine = {t.tablet_id: t for t in resp.tablets}
            return set(mine) == tablet_ids and all(
                t.status == "RUNNING" and t.leader_uuid for t in mine.values()
            )

        wait_for(all_know_a_leader, WAIT_S, "every replica of the victim to know its leader")
        with logcentric.connect(coords, timeout_s=WAIT_S, credentials=admin) as client:
            assert client.table("held").count() == ROWS
    finally:
        (pause / POINT).touch()
        cluster.down()
