"""Removing the leader of a quiet Raft group (issue 28, design/consensus.md "Quiet groups"):
three real tablet server processes, one tablet, idle until leader and followers are quiet.
One ChangeConfig REMOVE of the leader, sent to the leader once and not retried, is refused
while the leader hands leadership over ("transferring leadership ... before removing the
leader"); the hand-over must happen all the same: another replica leads soon after and the
REMOVE goes through there.

The failure this guards against (the full suite, `retire-tserver` under load): the refused
call left the transfer's messages in the quiet group's core, the driver had no timer for the
group and was never told, so nothing was sent; the leader stepped down by check-quorum at the
next call and no follower (quiet, its leader's server alive) ever campaigned."""

from __future__ import annotations

import pytest

from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    ChangeConfigRequest,
    ChangeConfigResponse,
    ConfigChangeTypePB,
)
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for
from tservers.raft_driver import QUIET_GROUPS_ENV

TABLET = "r1"
NEW_LEADER_WAIT_S = 20.0  # an election timeout is 1 s; this is for a loaded machine


def _log_has(proc, text: str) -> bool:
    return proc.err_path.exists() and text in proc.err_path.read_text(errors="replace")


def _remove(trio: TServerTrio, at: int, uuid: str) -> ChangeConfigResponse:
    """One REMOVE_SERVER call at server `at`, not retried (not idempotent)."""
    p = trio.procs[at]
    req = ChangeConfigRequest(tablet_id=TABLET, type=ConfigChangeTypePB.REMOVE_SERVER)
    req.peer.uuid = uuid
    with RpcClient(p.address, "test") as rc:
        return rc.call(p.uuid, "TServer.ChangeConfig", req, ChangeConfigResponse, timeout_s=20)


@pytest.mark.integration
def test_removing_a_quiet_leader_hands_leadership_over(tmp_path, monkeypatch):
    monkeypatch.delenv(QUIET_GROUPS_ENV, raising=False)  # on by default
    trio = TServerTrio(tmp_path, extra_args=["--log-level", "debug"])
    try:
        trio.start_all()
        trio.create_tablet(TABLET)
        trio.write_anywhere(TABLET, range(5))
        lead = trio.leader(TABLET)
        p = trio.procs
        others = [i for i in range(3) if i != lead]
        wait_for(lambda: _log_has(p[lead], f"{TABLET}/{p[lead].uuid} quiet at"), 30, "quiet")
        for f in others:
            wait_for(
                lambda f=f: _log_has(p[f], f"{TABLET}/{p[f].uuid} quiet, following"),
                30,
                "a quiet follower",
            )

        with pytest.raises(errors.Unavailable, match="transferring leadership"):
            _remove(trio, lead, p[lead].uuid)
        # Nothing else is sent to the tablet: the hand-over runs on its own.
        new = trio.leader(TABLET, timeout_s=NEW_LEADER_WAIT_S, among=others)

        def removed_at_new_leader():
            try:
                return _remove(trio, new, p[lead].uuid)
            except errors.Unavailable:  # no commit in its term yet
                return None

        answer = wait_for(removed_at_new_leader, 30, "the REMOVE at the new leader", 0.1)
        assert p[lead].uuid not in {m.uuid for m in answer.committed_config.peers}
        trio.write(new, TABLET, [5])
        assert trio.scan_ids(new, TABLET) == list(range(6))
    finally:
        trio.stop_all()
