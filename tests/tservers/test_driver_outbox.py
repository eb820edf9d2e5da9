"""A driver round's messages to one peer go out together, in full batches, not one
TServer.Consensus message per group (issue 28, `RaftDriver._send`, design/consensus.md
"Messages dropped at a restart"). Sent a batch per group, a round in which a thousand groups
each answered the same peer (a restart's votes, a returned server's probes) posted a
thousand one-way messages to that peer's socket, whose queue holds 16: in a kill -9
restart of 3,000 replicas the servers handed ~56,000 messages to their sockets and their
peers took in ~38,000; the elections whose messages were lost ran again a timeout later.

In process, real files and sockets: TABLETS follower replicas whose leader is "peer-a", a
real rpc server that records every TServer.Consensus message it gets (one per batch) and
the Raft messages in it, and one delivery of append requests of a higher term from
peer-a for all of them (one driver round): every follower answers peer-a in that round."""

from __future__ import annotations

import threading

from rpc.protocols.tserver_pb2 import (
    ConsensusRequest,
    CreateTabletRequest,
    MemberType,
    RaftConfigPB,
)
from tests.support.procs import wait_for
from tests.tservers.helpers import SIX, consensus_peer, open_manager
from tservers.consensus.types import AppendRequest

TABLETS = 300  # well past the peer's queue of 16 batches, were each group a batch
TERM = 5


def test_a_rounds_answers_to_one_peer_go_out_in_full_batches(tmp_path):
    batches: list[int] = []  # Raft messages per TServer.Consensus message that carried any
    answered: set[str] = set()
    lock = threading.Lock()

    def consensus(req: ConsensusRequest, ctx) -> None:
        if req.messages:  # (liveness pings are empty batches)
            with lock:
                batches.append(len(req.messages))
                answered.update(
                    msg.tablet_id for msg in req.messages if msg.HasField("append_response")
                )

    peer = consensus_peer("peer-a", consensus)
    m = open_manager(tmp_path / "fs")
    try:
        peer.start()
        ids = []
        for i in range(TABLETS):
            cfg = RaftConfigPB()
            for uuid, address in (
                (m.fs.uuid, "127.0.0.1:1"),
                ("peer-a", peer.address),
                ("peer-b", "127.0.0.1:3"),
            ):
                cfg.peers.add(uuid=uuid, member_type=MemberType.VOTER, address=address)
            tid = f"f{i:03d}"
            m.create_tablet(
                CreateTabletRequest(tablet_id=tid, table_name="t", schema=SIX, config=cfg)
            )
            ids.append(tid)
        driver = m.driver
        # The driver's socket to peer-a connected first: a message posted before is
        # dropped (zmq IMMEDIATE), and peer-a, unlike a leader, never asks again. One
        # follower is asked until it answers.
        first, rest = ids[0], ids[1:]

        def warmed() -> bool:
            driver.deliver(
                [AppendRequest(first, "peer-a", m.fs.uuid, TERM, 0, 0, (), 0)],
                {"peer-a": peer.address},
            )
            return first in answered

        wait_for(warmed, 30, "an answer at peer-a")
        with lock:
            before = len(batches)
        unsent = getattr(driver, "messages_unsent", 0)  # (none on the old code)
        msgs = [AppendRequest(tid, "peer-a", m.fs.uuid, TERM, 0, 0, (), 0) for tid in rest]
        assert driver.deliver(msgs, {"peer-a": peer.address}) == len(rest)
        wait_for(lambda: answered >= set(ids), 30, "every follower's answer at peer-a")
        with lock:
            got = batches[before:]
        # One round: its answers to peer-a in full batches (1,024 messages each) and one
        # more for the rest, not a batch per group. Answers of other rounds (a follower's
        # election timeout ran out meanwhile: a pre-vote) may add a few small ones.
        assert sum(got) >= len(rest)
        assert max(got) >= len(rest) // 2, got
        assert len(got) <= 4, f"{len(got)} batches for {len(rest)} answers: {got[:20]}"
        assert getattr(driver, "messages_unsent", 0) == unsent
    finally:
        m.close()
        peer.close()


def test_a_peer_declared_down_is_back_on_a_ping_not_on_a_message(tmp_path):
    """Its messages come from its driver's sockets, its liveness pings from its ping
    thread's (`RaftDriver._pinged`): a restarted server's first messages (a replica opened
    early answering a vote) can come before its first ping, which says whether it is still
    opening; counted back on a message, it was back and not restarted until that ping."""
    m = open_manager(tmp_path / "fs")
    stop = threading.Event()
    try:
        cfg = RaftConfigPB()
        for uuid, port in ((m.fs.uuid, 1), ("peer-a", 2), ("peer-b", 3)):
            cfg.peers.add(uuid=uuid, member_type=MemberType.VOTER, address=f"127.0.0.1:{port}")
        m.create_tablet(CreateTabletRequest(tablet_id="f0", table_name="t", schema=SIX, config=cfg))
        driver = m.driver
        wait_for(lambda: "peer-a" in driver.peers_down, 30, "peer-a declared dead")

        def talk() -> None:  # messages only (a stale term: answered, changes nothing)
            while not stop.wait(0.05):
                driver.deliver(
                    [AppendRequest("f0", "peer-a", m.fs.uuid, 0, 0, 0, (), 0)],
                    {"peer-a": "127.0.0.1:2"},
                    caller="peer-a",
                )

        t = threading.Thread(target=talk, daemon=True)
        t.start()
        rounds = driver.pings_sent
        # Several liveness rounds (each a heartbeat interval) while peer-a's messages come.
        wait_for(lambda: driver.pings_sent >= rounds + 10, 30, "ten liveness rounds")
        assert "peer-a" in driver.peers_down  # heard from, but not back: no ping yet
        driver.deliver([], {}, caller="peer-a")  # its ping (not opening)
        wait_for(lambda: "peer-a" not in driver.peers_down, 30, "peer-a back on its ping")
    finally:
        stop.set()
        m.close()
