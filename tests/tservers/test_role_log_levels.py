"""What a replica's role changes log, and at which level (tservers/raft_driver.py
`_handle_ready`): every change of role at INFO, a follower that stays one (it learns its
term's leader, or a new term's) at DEBUG. At a kill -9 restart of a server of 10,000
replicas the follower lines were two of the five lines a group logged, and 4-6% of each
server's GIL went to logging (design/consensus.md, session 25).

In process: a real manager and a tablet of three voters whose two others are absent: it
pre-votes (INFO), then hears a leader's append (FOLLOWER: a change, INFO), then another
leader's in a later term (FOLLOWER again: DEBUG)."""

from __future__ import annotations

import logging
import time

from rpc.protocols.tserver_pb2 import (
    AppendRequestPB,
    ConsensusMessagePB,
    ConsensusRequest,
    CreateTabletRequest,
    MemberType,
    RaftConfigPB,
    SchemaPB,
)
from tests.tservers.helpers import SIX, deadline, open_manager
from tservers.consensus_wire import decode_request

DRIVER = "tservers.raft_driver"


def _role_lines(caplog, tablet_id: str) -> list[tuple[int, str]]:
    return [
        (r.levelno, r.getMessage().split(": ", 1)[1].split(" in term")[0])
        for r in caplog.records
        if r.name == DRIVER and r.getMessage().startswith(f"tablet {tablet_id}: ")
    ]


def _wait_for_role(caplog, tablet_id: str, role: str, count: int = 1) -> None:
    end = deadline(20.0)
    while sum(1 for _, r in _role_lines(caplog, tablet_id) if r == role) < count:
        assert time.monotonic() < end, _role_lines(caplog, tablet_id)
        time.sleep(0.02)


def _append_from(m, tablet_id: str, sender: str, term: int) -> None:
    """A leader's empty append (a heartbeat) from `sender` in `term`, as the service
    delivers one (decoded and range-checked first)."""
    msg = ConsensusMessagePB(
        tablet_id=tablet_id,
        sender=sender,
        recipient=m.fs.uuid,
        term=term,
        sender_address="127.0.0.1:9",
        append_request=AppendRequestPB(),
    )
    msgs, addresses = decode_request(ConsensusRequest(messages=[msg]))
    assert m.driver.deliver(msgs, addresses, sender) == 1


def test_a_follower_that_learns_a_new_leader_logs_at_debug(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger=DRIVER)
    m = open_manager(tmp_path / "root")
    a, b = "a" * 32, "b" * 32
    try:
        config = RaftConfigPB(opid_index=-1)
        for uuid in (m.fs.uuid, a, b):
            config.peers.add(uuid=uuid, address="127.0.0.1:9", member_type=MemberType.VOTER)
        m.create_tablet(
            CreateTabletRequest(
                tablet_id="t3", table_name="tbl", schema=SchemaPB(columns=SIX.columns),
                config=config,
            )
        )  # fmt: skip
        _wait_for_role(caplog, "t3", "PRE_CANDIDATE")  # its peers never answer
        _append_from(m, "t3", a, 5)
        _wait_for_role(caplog, "t3", "FOLLOWER")
        _append_from(m, "t3", b, 6)
        _wait_for_role(caplog, "t3", "FOLLOWER", 2)
    finally:
        m.close()
    lines = _role_lines(caplog, "t3")
    follower = [level for level, role in lines if role == "FOLLOWER"]
    # After the pre-vote, a's: a change, INFO; then b's in term 6, a follower staying one:
    # DEBUG (the old code logged both at INFO).
    assert follower[:2] == [logging.INFO, logging.DEBUG], lines
    assert all(level == logging.INFO for level, role in lines if role != "FOLLOWER"), lines
