"""Seed 000's consensus metadata merge, done by every tablet copy before any data comes:

1. always adopt the highest term;
2. if remote term <= local term: keep the local vote in the local term;
3. always adopt the remote's Raft config.

The pure function (`merge_cmeta`) case by case, then the same cases on real files: a tablet
server process is the source, `tserver cmeta rewrite` sets the destination's local metadata
on a stopped server's root, and `tserver copy-from-remote --force` copies over it.
"""

from __future__ import annotations

import pytest

from rpc.protocols.tserver_pb2 import ConsensusMetaPB, MemberType, RaftConfigPB, RaftPeerPB
from tests.replication.helpers import TServerTrio
from tests.tservers.test_cli import tserver
from tservers.fs import FsLayout
from tservers.tablet_copy import merge_cmeta

T = "cm"


def cmeta(term: int, vote: str = "", peers=("a", "b", "c"), index: int = 7) -> ConsensusMetaPB:
    config = RaftConfigPB(
        opid_index=index,
        peers=[RaftPeerPB(uuid=u, address=f"{u}:1", member_type=MemberType.VOTER) for u in peers],
    )
    return ConsensusMetaPB(tablet_id=T, current_term=term, voted_for=vote, committed_config=config)


def test_no_local_metadata_adopts_the_remote_term_without_its_vote():
    merged = merge_cmeta(T, None, cmeta(4, vote="a"))
    assert (merged.current_term, merged.voted_for) == (4, "")  # the remote's vote is not ours
    assert merged.committed_config == cmeta(4).committed_config


def test_higher_local_term_and_its_vote_are_kept_config_is_the_remote_one():
    remote = cmeta(4, vote="a", peers=("a", "b", "d"), index=9)
    merged = merge_cmeta(T, cmeta(6, vote="c", peers=("x",), index=3), remote)
    assert (merged.current_term, merged.voted_for) == (6, "c")
    assert merged.committed_config == remote.committed_config


def test_equal_terms_keep_the_local_vote():
    merged = merge_cmeta(T, cmeta(4, vote="c"), cmeta(4, vote="a"))
    assert (merged.current_term, merged.voted_for) == (4, "c")


def test_higher_remote_term_drops_the_local_vote():
    remote = cmeta(5, vote="a", index=9)
    merged = merge_cmeta(T, cmeta(4, vote="c", index=3), remote)
    assert (merged.current_term, merged.voted_for) == (5, "")
    assert merged.committed_config.opid_index == 9


@pytest.mark.integration
def test_merge_cases_on_real_files(tmp_path):
    q = TServerTrio(tmp_path, n=2)
    try:
        q.start_all()
        q.create_tablet(T, members=[0])
        assert q.leader(T, among=[0]) == 0
        last = q.write(0, T, range(100)).op_id.index
        source = q.procs[0]
        remote_term = q.report(0, T).current_term
        assert remote_term >= 1
        remote_config = FsLayout.open(source.root).read_cmeta(T).committed_config
        q.procs[1].terminate()
        root = q.procs[1].root

        def copy(*extra: str) -> ConsensusMetaPB:
            r = tserver("copy-from-remote", "--fs-root", str(root), "--tablet", T,
                        "--source", source.address, *extra)  # fmt: skip
            assert r.returncode == 0, r.stderr
            return FsLayout.open(root).read_cmeta(T)

        def rewrite(term: int, vote: str) -> None:
            other = "elsewhere=127.0.0.1:1:VOTER"
            r = tserver("cmeta", "rewrite", "--fs-root", str(root), "--tablet", T,
                        "--term", str(term), "--voted-for", vote, "--force",
                        "--config-index", "999", "--peer", other)  # fmt: skip
            assert r.returncode == 0, r.stderr
            local = FsLayout.open(root).read_cmeta(T)
            assert (local.current_term, local.voted_for) == (term, vote)

        # No local replica: the remote term, no vote (the source's vote is its own).
        merged = copy()
        assert (merged.current_term, merged.voted_for) == (remote_term, "")
        assert merged.committed_config == remote_config

        # A higher local term with a vote in it: both kept; the remote config adopted.
        rewrite(remote_term + 5, "someone")
        merged = copy("--force")
        assert (merged.current_term, merged.voted_for) == (remote_term + 5, "someone")
        assert merged.committed_config == remote_config

        # The same term: the local vote kept.
        rewrite(remote_term, "other")
        merged = copy("--force")
        assert (merged.current_term, merged.voted_for) == (remote_term, "other")

        # A lower local term: the remote term, and no vote of ours in it.
        rewrite(remote_term - 1, "stale")
        merged = copy("--force")
        assert (merged.current_term, merged.voted_for) == (remote_term, "")
        assert merged.committed_config == remote_config

        # The copied replica starts from the copy with every write in its log (it is not a
        # member of the copied config: no leader talks to it, it does not serve scans).
        q.restart(1)
        report = q.report(1, T)
        assert report.status == "RUNNING" and report.last_op_id.index >= last
        assert report.current_term == remote_term
    finally:
        q.stop_all()
