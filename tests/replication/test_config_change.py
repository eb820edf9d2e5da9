"""Config change over rpc (TServer.ChangeConfig): add a NON_VOTER with promote, which the
leader promotes once caught up; remove a dead voter under a CAS on the committed config."""

from __future__ import annotations

import pytest

from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    ChangeConfigRequest,
    ChangeConfigResponse,
    ConfigChangeTypePB,
    CreateTabletRequest,
    CreateTabletResponse,
    MemberType,
    RaftConfigPB,
    RaftPeerPB,
    SchemaPB,
)
from tests.replication.helpers import COLS, TServerTrio
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def quartet(tmp_path):
    t = TServerTrio(tmp_path, n=4)
    try:
        t.start_all()
        yield t
    finally:
        t.stop_all()


def change(q: TServerTrio, i: int, req: ChangeConfigRequest) -> ChangeConfigResponse:
    p = q.procs[i]
    with RpcClient(p.address, "test") as rc:
        return rc.call(p.uuid, "TServer.ChangeConfig", req, ChangeConfigResponse, timeout_s=20)


def voters(config: RaftConfigPB) -> set[str]:
    return {p.uuid for p in config.peers if p.member_type == MemberType.VOTER}


def test_add_non_voter_promoted_then_remove_dead_voter(quartet: TServerTrio):
    q = quartet
    q.create_tablet("c1", members=[0, 1, 2])
    lead = q.leader("c1")
    q.write(lead, "c1", range(100))
    new = q.procs[3]
    # The new replica exists (empty) before it is added: tablet copy is not done yet.
    config = RaftConfigPB(opid_index=-1)
    for i in (0, 1, 2):
        config.peers.add(
            uuid=q.procs[i].uuid, address=q.procs[i].address, member_type=MemberType.VOTER
        )
    config.peers.add(
        uuid=new.uuid, address=new.address, member_type=MemberType.NON_VOTER, promote=True
    )
    with RpcClient(new.address, "test") as rc:
        rc.call(
            new.uuid,
            "TServer.CreateTablet",
            CreateTabletRequest(
                tablet_id="c1", table_name="tbl", schema=SchemaPB(columns=COLS), config=config
            ),
            CreateTabletResponse,
            timeout_s=30,
        )
    add = ChangeConfigRequest(
        tablet_id="c1",
        type=ConfigChangeTypePB.ADD_SERVER,
        peer=RaftPeerPB(
            uuid=new.uuid, address=new.address, member_type=MemberType.NON_VOTER, promote=True
        ),
        cas_config_index=0,
    )
    follower = next(i for i in (0, 1, 2) if i != lead)
    with pytest.raises(errors.NotLeader) as e:
        change(q, follower, add)
    assert e.value.leader_hint.uuid == q.procs[lead].uuid
    with pytest.raises(errors.CasFailed):
        change(
            q,
            lead,
            ChangeConfigRequest(
                tablet_id="c1",
                type=ConfigChangeTypePB.ADD_SERVER,
                peer=add.peer,
                cas_config_index=7,
            ),
        )
    resp = change(q, lead, add)
    assert new.uuid in {p.uuid for p in resp.committed_config.peers}

    # The leader promotes it once it has caught up.
    def promoted():
        r = q.report(lead, "c1")
        return r is not None and new.uuid in voters(r.committed_config) and r.committed_config

    cfg = wait_for(promoted, 30, "the new replica promoted to VOTER")
    assert len(voters(cfg)) == 4
    # A voter dies; it is removed under a CAS on the committed config.
    dead = next(i for i in (0, 1, 2) if i != lead)
    q.kill9(dead)
    stale = cfg.opid_index - 1
    remove = ChangeConfigRequest(
        tablet_id="c1",
        type=ConfigChangeTypePB.REMOVE_SERVER,
        peer=RaftPeerPB(uuid=q.procs[dead].uuid),
        cas_config_index=stale,
    )
    with pytest.raises(errors.CasFailed):
        change(q, lead, remove)
    remove.cas_config_index = cfg.opid_index
    resp = change(q, lead, remove)
    assert voters(resp.committed_config) == {q.procs[i].uuid for i in range(4) if i != dead}
    # The promoted replica is a full voter: with the old leader gone too, it and the last
    # one elect a leader and hold every row.
    q.kill9(lead)
    q.write_anywhere("c1", [100])
    rest = [i for i in range(4) if i not in (dead, lead)]
    leader = q.leader("c1", among=rest)
    assert q.scan_ids(leader, "c1") == list(range(101))
