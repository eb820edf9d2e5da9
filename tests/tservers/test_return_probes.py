"""A server heard from again gets the quiesce heartbeat it missed from each quiet leader
naming it, and again after 1, 2, 4 and 8 liveness rounds (issue 28,
`RaftDriver._probe_returned`). With one probe only, a probe posted before the leader's
socket to the restarted server had reconnected was dropped, and a server holding only a
tombstone of the group (it never speaks first) was never copied again: the leader stayed
quiet (`tests/replication/test_tablet_copy.py::test_crash_during_a_copy_then_copied_again`
timed out once in ten runs, its leader logging "heard from again" and nothing after).

In process, real files and sockets: a tablet whose only voter is this server and whose
non-voter is "peer-a", a real rpc server that notes the Raft messages it gets and never
answers. Peer-a is declared dead (never heard from), so the leader goes quiet without its
answer; then peer-a is heard from (its liveness pings, delivered as the rpc handler does)
and the heartbeats it gets from then on are counted."""

from __future__ import annotations

import threading
import time

from rpc.protocols.tserver_pb2 import (
    ConsensusRequest,
    CreateTabletRequest,
    MemberType,
    RaftConfigPB,
)
from tests.support.procs import wait_for
from tests.tservers.helpers import SIX, consensus_peer, open_manager


def test_a_returned_server_is_probed_again_by_quiet_leaders(tmp_path):
    heartbeats: list[float] = []

    def consensus(req: ConsensusRequest, ctx) -> None:
        for msg in req.messages:
            if msg.tablet_id == "r1" and msg.HasField("append_request"):
                heartbeats.append(time.monotonic())

    peer = consensus_peer("peer-a", consensus)
    m = open_manager(tmp_path / "fs")
    stop = threading.Event()
    try:
        peer.start()
        driver = m.driver
        cfg = RaftConfigPB()
        cfg.peers.add(uuid=m.fs.uuid, member_type=MemberType.VOTER, address="127.0.0.1:1")
        cfg.peers.add(uuid="peer-a", member_type=MemberType.NON_VOTER, address=peer.address)
        m.create_tablet(CreateTabletRequest(tablet_id="r1", table_name="t", schema=SIX, config=cfg))
        g = driver.group("r1")
        wait_for(lambda: "peer-a" in driver.peers_down, 30, "peer-a declared dead")
        wait_for(lambda: g.core.quiesced, 30, "the leader quiet without peer-a's answer")
        assert heartbeats, "peer-a got the leader's heartbeats while it was awake"

        def ping() -> None:  # peer-a's liveness pings, as TServer.Consensus delivers them
            while not stop.wait(0.05):
                driver.deliver([], {}, caller="peer-a")

        probes = driver.return_probes
        declared = driver.peers_declared_down
        back = time.monotonic()
        threading.Thread(target=ping, daemon=True).start()
        wait_for(lambda: "peer-a" not in driver.peers_down, 30, "peer-a heard from again")
        # peer_up's probe, then one after 1, 2, 4 and 8 liveness rounds: 4 repeats.
        repeats = 4
        wait_for(lambda: driver.return_probes - probes >= repeats, 30, "the repeated probes")
        wait_for(
            lambda: len([t for t in heartbeats if t > back]) >= 1 + repeats,
            30,
            "every probe at peer-a",
        )
        assert g.core.quiesced  # the probes leave the leader quiet
        # The schedule ends with the repeat after 8 rounds: no more after it.
        wait_for(lambda: "peer-a" not in driver._returned, 30, "the repeats to end")
        if driver.peers_declared_down == declared:  # (else the ping thread was starved)
            assert driver.return_probes - probes == repeats
    finally:
        stop.set()
        m.close()
        peer.close()
