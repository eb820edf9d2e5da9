"""Unit tests of the pure Raft core as plain function calls (no simulator randomness)."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from tservers.consensus import (
    AppendRequest,
    AppendResponse,
    ConfigChange,
    ConfigChangeType,
    CopyReason,
    Entry,
    EntryType,
    HardState,
    Member,
    MemberType,
    Message,
    OpId,
    ProposalStatus,
    RaftConfig,
    RaftCore,
    RaftOptions,
    Ready,
    ReplicaStatus,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    missing_replica_response,
)

T = "tablet-a"
OPTS = RaftOptions(election_timeout_ticks=5, heartbeat_interval_ticks=1)


def make(uuid: str, cfg: RaftConfig, **kw) -> RaftCore:
    return RaftCore(
        uuid, T, options=kw.pop("options", OPTS), rng=random.Random(uuid), base_config=cfg, **kw
    )


class Cluster:
    """Drives cores synchronously: persist each Ready, then deliver its messages."""

    def __init__(self, *cores: RaftCore) -> None:
        self.cores = {c.uuid: c for c in cores}
        self.applied: dict[str, list[Entry]] = defaultdict(list)
        self.readies: dict[str, list[Ready]] = defaultdict(list)
        self.down: set[str] = set()
        self.missing: set[str] = set()  # DOES_NOT_EXIST servers

    def flush(self, uuid: str) -> list[Message]:
        core = self.cores[uuid]
        out: list[Message] = []
        while core.has_ready():
            rd = core.ready()
            self.readies[uuid].append(rd)
            out.extend(rd.messages)
            if rd.entries:
                core.persisted(rd.entries[-1].index, rd.entries[-1].term)
            self.applied[uuid].extend(rd.committed_entries)
        return out

    def settle(self, rounds_max: int = 200) -> None:
        for _ in range(rounds_max):
            msgs: list[Message] = []
            for u in list(self.cores):
                if u not in self.down:
                    msgs.extend(self.flush(u))
            if not msgs:
                return
            for m in msgs:
                self.deliver(m)
        raise AssertionError("cluster did not settle")

    def deliver(self, m: Message) -> None:
        if m.recipient in self.down:
            return
        if m.recipient in self.missing:
            resp = missing_replica_response(m, ReplicaStatus.TABLET_NOT_FOUND)
            if resp is not None:
                self.deliver(resp)
            return
        self.cores[m.recipient].step(m)

    def elect(self, uuid: str) -> RaftCore:
        core = self.cores[uuid]
        for _ in range(3 * OPTS.election_timeout_ticks):
            core.tick()
            if core.role is not Role.FOLLOWER:
                break
        self.settle()
        assert core.role is Role.LEADER
        return core

    def tick_all(self, n: int = 1) -> None:
        for _ in range(n):
            for u, c in self.cores.items():
                if u not in self.down:
                    c.tick()
            self.settle()


def three(pre_vote: bool = True) -> Cluster:
    cfg = RaftConfig.of_voters("a", "b", "c")
    opts = RaftOptions(election_timeout_ticks=5, heartbeat_interval_ticks=1, pre_vote=pre_vote)
    return Cluster(*(make(u, cfg, options=opts) for u in ("a", "b", "c")))


def test_single_voter_elects_itself_and_commits_only_after_persisting() -> None:
    a = make("a", RaftConfig.of_voters("a"))
    for _ in range(2 * OPTS.election_timeout_ticks):
        a.tick()
    assert a.role is Role.LEADER and a.term == 1
    rd = a.ready()
    assert rd.hard_state == HardState(1, "a")
    assert [e.entry_type for e in rd.entries] == [EntryType.NOOP]
    assert rd.committed_entries == ()
    assert a.commit_index == 0  # not durable yet: the leader does not count itself
    a.persisted(1, 1)
    assert a.commit_index == 1
    assert [e.index for e in a.ready().committed_entries] == [1]


def test_pre_vote_does_not_change_term_then_real_vote_persists_before_sending() -> None:
    c = three()
    a = c.cores["a"]
    for _ in range(2 * OPTS.election_timeout_ticks):
        a.tick()
        if a.role is not Role.FOLLOWER:
            break
    assert a.role is Role.PRE_CANDIDATE and a.term == 0
    rd = a.ready()
    assert rd.hard_state is None
    assert all(isinstance(m, VoteRequest) and m.pre_vote and m.term == 1 for m in rd.messages)
    for m in rd.messages:
        c.deliver(m)
    # Pre-votes granted by b and c without either changing its term or vote.
    for u in ("b", "c"):
        rd_u = c.cores[u].ready()
        assert rd_u.hard_state is None
        (resp,) = rd_u.messages
        assert isinstance(resp, VoteResponse) and resp.granted and resp.pre_vote
        c.deliver(resp)
    assert a.role is Role.CANDIDATE and a.term == 1
    rd = a.ready()
    # The real vote requests leave in the same Ready as the hard state they depend on.
    assert rd.hard_state == HardState(1, "a")
    assert {m.recipient for m in rd.messages} == {"b", "c"}
    for m in rd.messages:
        c.deliver(m)
    rd_b = c.cores["b"].ready()
    assert rd_b.hard_state == HardState(1, "a")
    (resp,) = rd_b.messages
    assert isinstance(resp, VoteResponse) and resp.granted and not resp.pre_vote


def test_vote_is_remembered_in_term_and_after_restart() -> None:
    cfg = RaftConfig.of_voters("a", "b", "c")
    b = make("b", cfg)
    b.step(VoteRequest(T, "a", "b", 3, 0, 0))
    rd = b.ready()
    assert rd.hard_state == HardState(3, "a")
    assert rd.messages[0].granted  # type: ignore[union-attr]
    b.step(VoteRequest(T, "c", "b", 3, 0, 0))
    assert not b.ready().messages[0].granted  # type: ignore[union-attr]
    # Restart from the persisted hard state: still refuses c in term 3.
    b2 = make("b", cfg, hard_state=rd.hard_state)
    b2.step(VoteRequest(T, "c", "b", 3, 5, 5))
    resp = b2.ready().messages[0]
    assert isinstance(resp, VoteResponse) and not resp.granted
    # A stale term is refused with the current term.
    b2.step(VoteRequest(T, "c", "b", 2, 5, 5))
    resp = b2.ready().messages[0]
    assert isinstance(resp, VoteResponse) and not resp.granted and resp.term == 3


def test_vote_refused_to_candidate_with_older_log() -> None:
    cfg = RaftConfig.of_voters("a", "b", "c")
    log = [Entry(1, 1, EntryType.NOOP), Entry(2, 2, EntryType.NOOP)]
    b = make("b", cfg, hard_state=HardState(2, None), entries=log)
    b.step(VoteRequest(T, "a", "b", 3, last_log_term=1, last_log_index=5))
    assert not b.ready().messages[0].granted  # type: ignore[union-attr]
    b.step(VoteRequest(T, "c", "b", 3, last_log_term=2, last_log_index=2))
    assert b.ready().messages[0].granted  # type: ignore[union-attr]


def test_three_node_replication_and_commit_needs_majority_of_voters() -> None:
    c = three()
    a = c.elect("a")
    assert {x.role for x in c.cores.values()} == {Role.LEADER, Role.FOLLOWER}
    res = a.propose(b"x")
    assert res.status is ProposalStatus.OK and res.index == 2
    c.down = {"b", "c"}
    c.settle()
    assert a.commit_index == 1  # only the leader has it durable
    c.down = {"c"}
    c.tick_all(2)  # a lost append is resent after a heartbeat interval without progress
    assert a.commit_index == 2
    c.tick_all(1)  # the next heartbeat carries the commit index to b
    assert [e.payload for e in c.applied["b"] if e.entry_type is EntryType.WRITE] == [b"x"]


def test_leader_counts_itself_only_after_its_own_persist() -> None:
    c = three()
    a = c.elect("a")
    before = a.commit_index
    res = a.propose(b"y")
    rd = a.ready()  # the leader has not persisted its entry yet
    assert [e.index for e in rd.entries] == [res.index]
    for m in rd.messages:
        if m.recipient == "b":
            c.deliver(m)
    for m in c.flush("b"):
        c.deliver(m)
    # b has it durable, c does not, and the leader's own copy is not durable: 1 of 3.
    assert a.commit_index == before
    a.persisted(res.index, res.term)
    assert a.commit_index == res.index
    assert [e.payload for e in a.ready().committed_entries] == [b"y"]


def test_conflicting_suffix_is_truncated_and_rewritten() -> None:
    cfg = RaftConfig.of_voters("a", "b", "c")
    old = [
        Entry(1, 1, EntryType.NOOP),
        Entry(1, 2, EntryType.WRITE, b"keep"),
        Entry(2, 3, EntryType.WRITE, b"lost1"),
        Entry(2, 4, EntryType.WRITE, b"lost2"),
    ]
    b = make("b", cfg, hard_state=HardState(2, None), entries=old, applied_index=2)
    # A leader of term 3 whose log is 1,2 then (3,3): prev (2, term 1) matches.
    new = (Entry(3, 3, EntryType.NOOP),)
    b.step(AppendRequest(T, "c", "b", 3, 2, 1, new, leader_commit=3))
    rd = b.ready()
    assert rd.hard_state == HardState(3, None)
    assert rd.entries == new  # the driver truncates at index 3, then appends
    assert b.last_index == 3 and b.term_at(3) == 3
    (resp,) = rd.messages
    assert isinstance(resp, AppendResponse) and resp.success and resp.match_index == 3
    # The stale durability ack of the truncated (4, term 2) is ignored.
    b.persisted(4, 2)
    assert b.ready().committed_entries == ()
    b.persisted(3, 3)
    assert [e.index for e in b.ready().committed_entries] == [3]


def test_mismatched_prev_is_rejected_with_a_hint() -> None:
    cfg = RaftConfig.of_voters("a", "b", "c")
    b = make("b", cfg, hard_state=HardState(1, None), entries=[Entry(1, 1, EntryType.NOOP)])
    b.step(AppendRequest(T, "a", "b", 2, 7, 2, (), leader_commit=0))
    (resp,) = b.ready().messages
    assert isinstance(resp, AppendResponse) and not resp.success
    assert resp.reject_index == 7 and resp.hint_index == 1


def test_stale_leader_steps_down_on_higher_term() -> None:
    c = three()
    a = c.elect("a")
    a.step(AppendResponse(T, "b", "a", a.term + 1, success=False))
    assert a.role is Role.FOLLOWER and a.term == 2
    assert a.propose(b"x").status is ProposalStatus.NOT_LEADER


def test_non_voter_acks_do_not_count_for_commit() -> None:
    cfg = RaftConfig(
        (
            Member("a", MemberType.VOTER),
            Member("b", MemberType.VOTER),
            Member("c", MemberType.VOTER),
            Member("d", MemberType.NON_VOTER),
        )
    )
    c = Cluster(*(make(u, cfg) for u in "abcd"))
    a = c.elect("a")
    c.down = {"b", "c"}
    res = a.propose(b"x")
    c.settle()
    assert c.cores["d"].last_index == res.index  # d has it durable
    assert a.commit_index < res.index


def _leader_with_committed_term(c: Cluster, uuid: str = "a") -> RaftCore:
    a = c.elect(uuid)
    c.settle()
    assert a.commit_index == a.last_index
    return a


def test_config_change_cas_pending_and_own_term_rules() -> None:
    c = three()
    a = c.cores["a"]
    change = ConfigChange(ConfigChangeType.ADD_MEMBER, "d", MemberType.NON_VOTER, promote=True)
    assert a.change_config(change).status is ProposalStatus.NOT_LEADER
    for _ in range(3 * OPTS.election_timeout_ticks):
        a.tick()
        if a.role is not Role.FOLLOWER:
            break
    c.settle()
    assert a.role is Role.LEADER
    assert a.committed_config_index() == 0
    assert a.change_config(change, cas_config_index=5).status is ProposalStatus.CAS_FAILED
    c.down = {"b", "c"}
    b_ready = a.propose(b"w")
    assert b_ready.status is ProposalStatus.OK
    c.down = set()
    c.settle()
    res = a.change_config(change, cas_config_index=0)
    assert res.status is ProposalStatus.OK
    # Pending: another change (even with the right CAS) is refused until it commits.
    c.down = {"b", "c"}
    other = ConfigChange(ConfigChangeType.REMOVE_MEMBER, "c")
    assert a.change_config(other, cas_config_index=0).status is ProposalStatus.ALREADY_IN_PROGRESS
    c.down = set()
    c.missing = {"d"}
    c.settle()
    assert a.committed_config_index() == res.index
    assert a.change_config(other, cas_config_index=0).status is ProposalStatus.CAS_FAILED
    assert a.change_config(other, cas_config_index=res.index).status is ProposalStatus.OK


def test_no_config_change_before_commit_in_own_term() -> None:
    c = three()
    a = c.cores["a"]
    for _ in range(3 * OPTS.election_timeout_ticks):
        a.tick()
        if a.role is not Role.FOLLOWER:
            break
    for _ in range(4):  # deliver votes but not the appends of the no-op
        for m in c.flush("a") + c.flush("b") + c.flush("c"):
            if not isinstance(m, AppendRequest):
                c.deliver(m)
    assert a.role is Role.LEADER and a.commit_index == 0
    change = ConfigChange(ConfigChangeType.REMOVE_MEMBER, "c")
    assert a.change_config(change).status is ProposalStatus.UNAVAILABLE


def test_missing_replica_gets_copy_then_non_voter_is_promoted() -> None:
    cfg = RaftConfig.of_voters("a", "b", "c")
    c = Cluster(*(make(u, cfg) for u in "abc"))
    a = _leader_with_committed_term(c)
    res = a.change_config(
        ConfigChange(ConfigChangeType.ADD_MEMBER, "d", MemberType.NON_VOTER, promote=True),
        cas_config_index=0,
    )
    assert res.status is ProposalStatus.OK
    c.missing = {"d"}
    c.settle()
    copies = [r for rd in c.readies["a"] for r in rd.copy_requests]
    assert copies and copies[0].peer_uuid == "d"
    assert copies[0].reason is CopyReason.TABLET_NOT_FOUND and copies[0].leader_term == a.term
    # "Copy" d: it starts from a's durable state (the driver's tablet copy).
    c.missing = set()
    c.cores["d"] = make("d", cfg, hard_state=HardState(a.term, None), entries=list(a.entries()))
    c.tick_all(2)
    assert a.config.is_voter("d")
    assert a.committed_config().is_voter("d")
    assert a.committed_config().member("d").promote is False  # type: ignore[union-attr]


def test_leader_transfers_leadership_before_removing_itself() -> None:
    c = three()
    a = _leader_with_committed_term(c)
    res = a.change_config(
        ConfigChange(ConfigChangeType.REMOVE_MEMBER, "a"), a.committed_config_index()
    )
    assert res.status is ProposalStatus.UNAVAILABLE and res.leader_hint in ("b", "c")
    assert not any(e.entry_type is EntryType.CONFIG for e in a.entries())
    msgs = c.flush("a")
    assert any(isinstance(m, TimeoutNow) and m.recipient == res.leader_hint for m in msgs)
    for m in msgs:
        c.deliver(m)
    c.settle()
    new = c.cores[res.leader_hint]  # type: ignore[index]
    assert new.role is Role.LEADER and a.role is Role.FOLLOWER
    c.tick_all(1)
    res2 = new.change_config(ConfigChange(ConfigChangeType.REMOVE_MEMBER, "a"), 0)
    assert res2.status is ProposalStatus.OK
    c.settle()
    assert not new.committed_config().member("a")


def test_leader_demoting_itself_also_transfers() -> None:
    c = three()
    a = _leader_with_committed_term(c)
    change = ConfigChange(ConfigChangeType.CHANGE_MEMBER_TYPE, "a", MemberType.NON_VOTER)
    assert a.change_config(change).status is ProposalStatus.UNAVAILABLE


def test_tombstoned_replica_votes_with_last_op_id_and_answers_deleted() -> None:
    cfg = RaftConfig.of_voters("a", "b", "c")
    t = RaftCore.tombstoned(
        "c",
        T,
        options=OPTS,
        rng=random.Random(1),
        hard_state=HardState(4, "b"),
        last_op_id=OpId(4, 10),
        config=cfg,
    )
    assert t.role is Role.VOTE_ONLY
    for _ in range(50):
        t.tick()
    assert t.role is Role.VOTE_ONLY and not t.has_ready()  # never campaigns
    t.step(VoteRequest(T, "a", "c", 5, last_log_term=4, last_log_index=9))
    rd = t.ready()
    assert rd.hard_state == HardState(5, None)
    assert not rd.messages[0].granted  # type: ignore[union-attr]
    t.step(VoteRequest(T, "b", "c", 5, last_log_term=4, last_log_index=10))
    rd = t.ready()
    assert rd.hard_state == HardState(5, "b") and rd.messages[0].granted  # type: ignore[union-attr]
    t.step(AppendRequest(T, "b", "c", 5, 10, 4, (), leader_commit=10))
    (resp,) = t.ready().messages
    assert isinstance(resp, AppendResponse) and resp.status is ReplicaStatus.TABLET_DELETED
    # The leader turns that answer into a tablet copy request.
    c = three()
    a = _leader_with_committed_term(c)
    a.step(AppendResponse(T, "c", "a", a.term, success=False, status=ReplicaStatus.TABLET_DELETED))
    (req,) = a.ready().copy_requests
    assert req.peer_uuid == "c" and req.reason is CopyReason.TABLET_DELETED


def test_failed_replica_is_not_copied_over() -> None:
    """A FAILED replica (corrupt WAL at bootstrap) answers TABLET_FAILED: no copy request
    (the coordinator replaces it), and it never needs one, whatever it answers next."""
    c = three()
    a = _leader_with_committed_term(c)
    a.step(AppendResponse(T, "c", "a", a.term, success=False, status=ReplicaStatus.TABLET_FAILED))
    assert not a.peer_needs_copy("c")
    for _ in range(3 * OPTS.heartbeat_interval_ticks):
        a.tick()
    rd = a.ready()
    assert not rd.copy_requests
    assert a.role is Role.LEADER


def test_does_not_exist_replica_does_not_vote() -> None:
    req = VoteRequest(T, "a", "d", 3, 1, 1)
    resp = missing_replica_response(req, ReplicaStatus.TABLET_NOT_FOUND)
    assert isinstance(resp, VoteResponse) and not resp.granted and resp.term == 0
    cfg = RaftConfig.of_voters("a", "d")
    a = make("a", cfg, hard_state=HardState(2, None))
    for _ in range(3 * OPTS.election_timeout_ticks):
        a.tick()
    a.ready()
    a.step(
        VoteResponse(T, "d", "a", 0, False, pre_vote=True, status=ReplicaStatus.TABLET_NOT_FOUND)
    )
    assert a.role is Role.PRE_CANDIDATE and a.term == 2


def test_read_index_needs_a_heartbeat_round_and_applied_commit() -> None:
    c = three()
    a = _leader_with_committed_term(c)
    a.propose(b"v")
    c.settle()
    commit = a.commit_index
    a.read_index(1)
    rd = a.ready()
    assert rd.reads == ()
    heartbeats = [m for m in rd.messages if isinstance(m, AppendRequest)]
    assert {m.recipient for m in heartbeats} == {"b", "c"}
    assert all(m.read_seq >= 1 for m in heartbeats)
    # One follower's answer makes a majority with the leader.
    c.deliver(heartbeats[0])
    for m in c.flush(heartbeats[0].recipient):
        c.deliver(m)
    (read,) = a.ready().reads
    assert read.request_id == 1 and read.status is ProposalStatus.OK and read.read_index == commit


def test_read_index_fails_when_leadership_is_lost() -> None:
    c = three()
    a = _leader_with_committed_term(c)
    a.read_index(9)
    a.ready()
    a.step(AppendResponse(T, "b", "a", a.term + 1, success=False))
    (read,) = a.ready().reads
    assert read.request_id == 9 and read.status is ProposalStatus.NOT_LEADER
    a.read_index(10)
    (read,) = a.ready().reads
    assert read.status is ProposalStatus.NOT_LEADER


def test_peer_behind_compaction_needs_tablet_copy() -> None:
    c = three()
    a = _leader_with_committed_term(c)
    c.down = {"c"}
    for i in range(5):
        a.propose(b"%d" % i)
    c.settle()
    a.compact(a.commit_index - 1)
    assert a.first_index == a.commit_index
    c.down = set()
    # c answers with its old position; a can no longer send what c needs.
    c.cores["c"].step(AppendRequest(T, "a", "c", a.term, a.last_index, a.last_term, (), 0))
    for m in c.flush("c"):
        c.deliver(m)
    reqs = [r for r in a.ready().copy_requests]
    assert reqs and reqs[0].peer_uuid == "c" and reqs[0].reason is CopyReason.LOG_COMPACTED


def test_restart_recovers_config_from_log_and_keeps_log() -> None:
    cfg = RaftConfig.of_voters("a", "b")
    new_cfg = cfg.with_member(Member("c", MemberType.NON_VOTER, promote=True))
    log = [Entry(1, 1, EntryType.NOOP), Entry(1, 2, EntryType.CONFIG, config=new_cfg)]
    a = make("a", cfg, hard_state=HardState(1, "a"), entries=log)
    assert a.config == new_cfg and a.committed_config() == cfg  # not known committed yet
    b = make("b", cfg, hard_state=HardState(1, "a"), entries=log, applied_index=2)
    assert b.committed_config() == new_cfg and b.committed_config_index() == 2


def test_proposals_are_bounded() -> None:
    opts = RaftOptions(
        election_timeout_ticks=5, heartbeat_interval_ticks=1, uncommitted_entries_max=3
    )
    c = Cluster(*(make(u, RaftConfig.of_voters("a", "b", "c"), options=opts) for u in "abc"))
    a = c.elect("a")
    c.down = {"b", "c"}
    statuses = [a.propose(b"x").status for _ in range(5)]
    assert statuses.count(ProposalStatus.OK) == 3 and statuses[-1] is ProposalStatus.THROTTLED


def test_core_is_deterministic() -> None:
    def run() -> list[object]:
        c = three()
        a = c.elect("a")
        for i in range(5):
            a.propose(b"%d" % i)
        c.tick_all(3)
        return [(u, r) for u in "abc" for r in c.readies[u]]

    assert run() == run()


@pytest.mark.parametrize("pre_vote", [True, False])
def test_elections_with_and_without_pre_vote(pre_vote: bool) -> None:
    c = three(pre_vote)
    a = c.elect("a")
    c.down = {"a"}
    c.tick_all(4 * OPTS.election_timeout_ticks)
    leaders = [x for x in c.cores.values() if x.role is Role.LEADER and x.uuid != "a"]
    assert len(leaders) == 1 and leaders[0].term > a.term


def test_strict_reconfig_check_refuses_a_change_that_loses_quorum() -> None:
    c = three()
    a = _leader_with_committed_term(c)
    c.down = {"c"}
    c.tick_all(3 * OPTS.election_timeout_ticks)  # c silent for longer than an election timeout
    assert a.role is Role.LEADER
    add_voter = ConfigChange(ConfigChangeType.ADD_MEMBER, "d", MemberType.VOTER)
    res = a.change_config(add_voter, a.committed_config_index())
    assert res.status is ProposalStatus.ILLEGAL_STATE and "healthy" in res.message
    add_learner = ConfigChange(ConfigChangeType.ADD_MEMBER, "d", MemberType.NON_VOTER, True)
    assert a.change_config(add_learner, a.committed_config_index()).status is ProposalStatus.OK


def test_strict_reconfig_check_at_a_new_leader_asks_to_retry_until_it_knows() -> None:
    """A voter the new leader has not heard from yet is not known unhealthy: its no-op
    commits with one follower while the other's first answer is still on its way. A change
    needing that voter is UNAVAILABLE (retry) for an election timeout, then refused."""
    c = three()
    c.down = {"c"}
    a = _leader_with_committed_term(c)  # elected and committed with b alone
    remove_b = ConfigChange(ConfigChangeType.REMOVE_MEMBER, "b")
    res = a.change_config(remove_b, a.committed_config_index())
    assert res.status is ProposalStatus.UNAVAILABLE and "retry" in res.message
    c.tick_all(OPTS.election_timeout_ticks + 1)  # c still silent, b answering
    assert a.role is Role.LEADER
    res = a.change_config(remove_b, a.committed_config_index())
    assert res.status is ProposalStatus.ILLEGAL_STATE and "healthy" in res.message
    c.down = set()
    c.tick_all(2)  # c answers a heartbeat
    assert a.change_config(remove_b, a.committed_config_index()).status is ProposalStatus.OK


def test_check_quorum_leader_steps_down_when_isolated() -> None:
    c = three()
    a = _leader_with_committed_term(c)
    c.down = {"b", "c"}
    for _ in range(2 * OPTS.election_timeout_ticks + 1):
        a.tick()
        c.flush("a")
    assert a.role is Role.FOLLOWER and a.leader_uuid is None


def test_transfer_gives_up_after_an_election_timeout() -> None:
    c = three()
    a = _leader_with_committed_term(c)
    c.down = {"b"}
    assert a.transfer_leadership("b").status is ProposalStatus.OK
    assert a.propose(b"x").status is ProposalStatus.UNAVAILABLE
    c.tick_all(OPTS.election_timeout_ticks)
    assert a.role is Role.LEADER
    assert a.propose(b"x").status is ProposalStatus.OK


def test_follower_with_leader_ignores_disruptive_votes() -> None:
    c = three()
    a = _leader_with_committed_term(c)
    b = c.cores["b"]
    b.step(VoteRequest(T, "c", "b", a.term + 5, a.last_term, a.last_index + 10))
    (resp,) = b.ready().messages
    assert isinstance(resp, VoteResponse) and not resp.granted and b.term == a.term
    b.step(
        VoteRequest(T, "c", "b", a.term + 1, a.last_term, a.last_index, leadership_transfer=True)
    )
    rd = b.ready()
    assert rd.hard_state == HardState(a.term + 1, "c")


def test_replica_demoted_by_an_uncommitted_entry_still_campaigns_and_hands_over() -> None:
    """Found by the simulator (seed 6, 1500 steps): b alone holds the entry demoting b;
    a cannot win (b refuses: a's log is behind) and b must not sit still."""
    cfg = RaftConfig.of_voters("a", "b")
    demoted = RaftConfig((Member("a", MemberType.VOTER), Member("b", MemberType.NON_VOTER)))
    noop = Entry(1, 1, EntryType.NOOP)
    a = make("a", cfg, hard_state=HardState(1, None), entries=[noop])
    b = make(
        "b", cfg, hard_state=HardState(1, None),
        entries=[noop, Entry(1, 2, EntryType.CONFIG, config=demoted)],
    )  # fmt: skip
    c = Cluster(a, b)
    assert not b.config.is_voter("b")
    for _ in range(3 * OPTS.election_timeout_ticks):
        b.tick()
        c.settle()
        if b.role is Role.LEADER or a.role is Role.LEADER:
            break
    # b led just long enough to commit the demotion, then handed over to a.
    assert b.commit_index >= 2 or a.commit_index >= 2
    c.tick_all(3 * OPTS.election_timeout_ticks)
    assert a.role is Role.LEADER and b.role is Role.FOLLOWER
    assert a.committed_config() == demoted
    assert a.propose(b"after").status is ProposalStatus.OK


def test_appends_are_bounded_in_bytes_per_request_and_in_flight() -> None:
    """A peer that acknowledges nothing gets at most `inflight_bytes_max` of payload
    unacknowledged (plus the request that crossed it); once it answers, the rest follows in
    AppendRequests of at most `append_bytes_max` (one entry at least, however big), and the
    logs match."""
    opts = RaftOptions(
        election_timeout_ticks=5,
        heartbeat_interval_ticks=1,
        append_bytes_max=100,
        inflight_bytes_max=300,
    )
    c = Cluster(*(make(u, RaftConfig.of_voters("a", "b", "c"), options=opts) for u in "abc"))
    a = _leader_with_committed_term(c)
    c.down = {"b", "c"}
    sizes = [40] * 12 + [250] + [40] * 5
    sent: list[AppendRequest] = []
    for i, n in enumerate(sizes):
        assert a.propose(bytes([65 + i % 26]) * n).status is ProposalStatus.OK
        sent += [m for m in c.flush("a") if isinstance(m, AppendRequest) and m.recipient == "b"]
    carried = sum(len(e.payload) for m in sent for e in m.entries)
    assert 300 <= carried < 300 + 100  # stopped at the in-flight budget
    first = len(c.readies["a"])
    c.down = set()
    c.tick_all(4)
    for u in "bc":
        assert c.cores[u].entries() == a.entries()
    assert [len(e.payload) for e in a.entries() if e.entry_type is EntryType.WRITE] == sizes
    later = [
        m
        for rd in c.readies["a"][first:]
        for m in rd.messages
        if isinstance(m, AppendRequest) and m.recipient == "b" and m.entries
    ]
    per_request = [(len(m.entries), sum(len(e.payload) for e in m.entries)) for m in later]
    assert all(b <= 100 or n == 1 for n, b in per_request), per_request
    assert (1, 250) in per_request  # the big entry went alone
    assert max(n for n, _ in per_request) >= 2  # cut by bytes, not one entry at a time


def test_retain_point_is_the_lowest_index_within_the_byte_budget() -> None:
    """Against brute force, before and after compaction (the running count's base moves)."""
    sizes = [10, 20, 0, 30, 40, 50]
    log = [Entry(1, i, EntryType.WRITE, b"x" * n) for i, n in enumerate(sizes, start=1)]
    a = make("a", RaftConfig.of_voters("a"), hard_state=HardState(1, "a"), entries=log)
    a.persisted(len(sizes), 1)

    def brute(snap: int, upto: int, budget: int) -> int:
        return min(i for i in range(snap, upto + 1) if sum(sizes[i:upto]) <= budget)

    for snap in (0, 2):
        if snap:
            for _ in range(3 * OPTS.election_timeout_ticks):
                a.tick()
            while a.has_ready():
                rd = a.ready()
                if rd.entries:
                    a.persisted(rd.entries[-1].index, rd.entries[-1].term)
            a.compact(snap)
            assert a.first_index == snap + 1
        assert a.log_bytes == sum(sizes[snap:]) + 0  # the NOOP of its term has no payload
        for upto in range(snap, len(sizes) + 1):
            for budget in range(0, 160, 5):
                assert a.retain_point(upto, budget) == brute(snap, upto, budget), (
                    snap,
                    upto,
                    budget,
                )
