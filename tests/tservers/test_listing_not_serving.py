"""ListTablets with `not_serving_only` (issue 28): only the replicas that are not RUNNING or
know no leader of their group, and the count of all. A restart's probe asks it of a server
of 10,000 replicas several times a second; a brief listing of all of them cost ~40 ms of
the server's CPU a call. Lone voters lead (serving); replicas of 3-voter groups whose
peers never start know no leader (not serving)."""

from __future__ import annotations

import pytest

from logcentric.tablets import TabletServerClient
from rpc.protocols.tserver_pb2 import CreateTabletRequest, MemberType, RaftConfigPB
from tests.support.procs import wait_for
from tests.tservers.helpers import SIX, open_manager
from tests.tservers.test_service import COLS, server  # noqa: F401  (the fixture)


def test_the_manager_lists_the_replicas_without_a_leader_and_counts_all(tmp_path):
    m = open_manager(tmp_path / "fs")
    try:
        for i in range(4):
            m.create_tablet(CreateTabletRequest(tablet_id=f"lone{i}", table_name="t", schema=SIX))
        for i in range(3):
            cfg = RaftConfigPB()
            for uuid, port in ((m.fs.uuid, 1), ("peer-a", 2), ("peer-b", 3)):
                cfg.peers.add(uuid=uuid, member_type=MemberType.VOTER, address=f"127.0.0.1:{port}")
            m.create_tablet(
                CreateTabletRequest(tablet_id=f"lost{i}", table_name="t", schema=SIX, config=cfg)
            )

        def lone_lead() -> bool:
            reps, _ = m.brief_reports()
            return all(r.role == "LEADER" for r in reps if r.tablet_id.startswith("lone"))

        wait_for(lone_lead, 30, "the lone voters leading")
        every, n = m.brief_reports()
        assert n == len(every) == 7
        reps, n = m.brief_reports(not_serving_only=True)
        assert n == 7
        assert sorted(r.tablet_id for r in reps) == ["lost0", "lost1", "lost2"]
        assert all(r.status == "RUNNING" and not r.leader_uuid for r in reps)
    finally:
        m.close()


@pytest.mark.integration
def test_the_server_answers_the_not_serving_listing(server):  # noqa: F811
    p = server()
    with TabletServerClient(p.address) as c:
        for t in ("t1", "t2"):
            c.create_tablet(t, COLS, table_name="tbl")

        def both_serve() -> bool:
            resp = c.list_tablets(not_serving_only=True)
            return resp.replicas == 2 and not resp.tablets

        wait_for(both_serve, 30, "both tablets serving")
        full = c.list_tablets()
        assert full.replicas == 2 and len(full.tablets) == 2
