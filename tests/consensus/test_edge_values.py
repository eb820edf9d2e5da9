"""Extreme values at the consensus edge (issue 27, section 2).

Every field of every Raft message, of ChangeConfig and of the tablet copy messages is
range-checked where it is decoded (tservers/consensus_wire.py, tservers/tablet_copy.py):
0, 2^62, 2^63-1, 2^64-1, negative values of signed fields, huge lists, empty ids and ids of
the wrong shape are refused, and the bounds themselves pass. The pure core then refuses to
adopt a higher term from a stranger or one more than TERM_JUMP_MAX ahead, a second leader
in a term, and answers naming what was never sent; the driver refuses durable state beyond
the bounds. Plain function calls, no processes.
"""

from __future__ import annotations

import random

import pytest

from rpc import errors
from rpc.protocols.tserver_pb2 import (
    BeginCopySessionResponse,
    ConsensusMessagePB,
    ConsensusMetaPB,
    ConsensusRequest,
    CopyFilePB,
    DataState,
    LogEntryPB,
    OpIdPB,
    RaftConfigPB,
    RowBlockPB,
    StartTabletCopyRequest,
    SuperblockPB,
    WriteOpPB,
)
from rpc.protocols.tserver_pb2 import EntryType as EntryTypePB
from rpc.protocols.tserver_pb2 import MemberType as MemberTypePB
from tservers.consensus import (
    INDEX_MAX,
    TERM_JUMP_MAX,
    TERM_MAX,
    AppendRequest,
    AppendResponse,
    Entry,
    EntryType,
    HardState,
    Member,
    MemberType,
    OpId,
    RaftConfig,
    RaftCore,
    RaftOptions,
    ReplicaStatus,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from tservers.consensus_wire import (
    APPEND_ENTRIES_MAX,
    BATCH_MESSAGES_MAX,
    CONFIG_PEERS_MAX,
    WRITE_BLOCKS_MAX,
    WireError,
    check_message_pb,
    decode_request,
    message_from_pb,
    message_to_pb,
)
from tservers.raft_driver import check_durable_state
from tservers.tablet_copy import (
    COPY_FILE_BYTES_MAX,
    COPY_FILES_MAX,
    check_begin_response,
    check_session_id,
    check_start_request,
)

T = "tablet-a"
A, B, C = "aaaa", "bbbb", "cccc"
ADDR = "127.0.0.1:7050"
U64 = (1 << 64) - 1
I63 = (1 << 63) - 1
# Values beyond every term / index bound (a uint64 field holds all of them; -1 does not fit
# one: protobuf itself refuses to set it, see test_negative_values_do_not_fit_uint64).
BEYOND = [TERM_MAX + 1, 1 << 62, I63, 1 << 63, U64]
BAD_IDS = ["", " ", "a/b", "../x", "a" * 65, "é", "a b", "x\x00", "-" * 70, "a:b"]
BAD_TABLET_IDS = ["", "a/b", "a.b", "x" * 65, "é", "a b"]
BAD_ADDRESSES = [
    "nohost",
    "host:",
    ":7050",
    "host:0",
    "host:65536",
    "host:99999999999999999999",
    "host:-1",
    "host:port",
    "ho st:7050",
    "h/x:7050",
    "a" * 300 + ":7050",
    "tcp://:1",
]


# ------------------------------------------------------------------ wire messages
def entry_pb(term: int, index: int) -> LogEntryPB:
    return LogEntryPB(term=term, index=index, type=EntryTypePB.NO_OP)


def config_pb(opid_index: int = 5) -> RaftConfigPB:
    pb = RaftConfigPB(opid_index=opid_index)
    for u in (A, B, C):
        pb.peers.add(uuid=u, address=ADDR, member_type=MemberTypePB.VOTER)
    return pb


def valid_messages() -> dict[str, ConsensusMessagePB]:
    """One valid message of each kind, from B to A, every field set."""
    w = WriteOpPB(schema_version=1, blocks=[RowBlockPB(op=1, arrow_ipc=b"x")])
    entries = [
        Entry(3, 11, EntryType.NOOP),
        Entry(3, 12, EntryType.WRITE, w.SerializeToString()),
        Entry(4, 13, EntryType.CONFIG, b"", RaftConfig.of_voters(A, B, C)),
    ]
    msgs = {
        "vote_request": VoteRequest(T, B, A, 5, 4, 10, pre_vote=True, leadership_transfer=True),
        "vote_response": VoteResponse(T, B, A, 5, True, pre_vote=True),
        "append_request": AppendRequest(T, B, A, 5, 10, 3, tuple(entries), 9, read_seq=7),
        "append_response": AppendResponse(T, B, A, 5, False, 3, 10, 8, 7),
        "timeout_now": TimeoutNow(T, B, A, 5),
    }
    return {k: message_to_pb(m, ADDR) for k, m in msgs.items()}


def mutated(kind: str, mutate) -> ConsensusMessagePB:
    pb = valid_messages()[kind]
    mutate(pb)
    return pb


def refused(pb: ConsensusMessagePB) -> str:
    with pytest.raises(WireError) as ei:
        check_message_pb(pb)
        message_from_pb(pb)
    return str(ei.value)


def test_valid_messages_pass_and_round_trip() -> None:
    for kind, pb in valid_messages().items():
        check_message_pb(pb)
        m = message_from_pb(pb)
        assert message_from_pb(message_to_pb(m, ADDR)) == m, kind
    msgs, addresses = decode_request(ConsensusRequest(messages=list(valid_messages().values())))
    assert len(msgs) == 5 and addresses == {B: ADDR}


def test_the_bounds_themselves_pass() -> None:
    top = message_to_pb(
        AppendRequest(
            T,
            B,
            A,
            TERM_MAX,
            INDEX_MAX - 1,
            TERM_MAX,
            (Entry(TERM_MAX, INDEX_MAX, EntryType.NOOP),),
            INDEX_MAX,
            read_seq=INDEX_MAX,
        ),
        ADDR,
    )
    check_message_pb(top)
    resp = message_to_pb(
        AppendResponse(T, B, A, TERM_MAX, True, INDEX_MAX, INDEX_MAX, INDEX_MAX, INDEX_MAX), ""
    )
    check_message_pb(resp)
    vote = message_to_pb(VoteRequest(T, B, A, TERM_MAX, TERM_MAX, INDEX_MAX), "")
    check_message_pb(vote)
    # Answers may carry term 0 (a server without the replica answers votes so).
    check_message_pb(message_to_pb(VoteResponse(T, B, A, 0, False), ""))


def test_negative_values_do_not_fit_uint64() -> None:
    for field in ("term",):
        with pytest.raises(ValueError):
            setattr(ConsensusMessagePB(), field, -1)
    with pytest.raises(ValueError):
        ConsensusMessagePB(term=1 << 64)


@pytest.mark.parametrize("value", BEYOND)
def test_every_term_and_index_beyond_the_bounds_is_refused(value: int) -> None:
    fields = {
        "vote_request": ["term", "vote_request.last_log_term", "vote_request.last_log_index"],
        "vote_response": ["term"],
        "append_request": [
            "term",
            "append_request.prev_log_index",
            "append_request.prev_log_term",
            "append_request.leader_commit",
            "append_request.read_seq",
            "append_request.entries.0.term",
            "append_request.entries.2.term",
        ],
        "append_response": [
            "term",
            "append_response.match_index",
            "append_response.reject_index",
            "append_response.hint_index",
            "append_response.read_seq",
        ],
        "timeout_now": ["term"],
    }
    for kind, paths in fields.items():
        for path in paths:

            def set_path(pb, path=path):
                *parents, name = path.split(".")
                obj = pb
                for p in parents:
                    obj = obj[int(p)] if p.isdigit() else getattr(obj, p)
                setattr(obj, name, value)

            refused(mutated(kind, set_path))


def test_entry_indexes_beyond_the_bounds_are_refused() -> None:
    for value in BEYOND:
        # An entry index past INDEX_MAX, or prev + count past it.
        pb = mutated("append_request", lambda m: None)
        del pb.append_request.entries[1:]
        pb.append_request.prev_log_index = value - 1 if value - 1 <= U64 else value
        pb.append_request.entries[0].index = value
        refused(pb)
    pb = mutated("append_request", lambda m: None)
    pb.append_request.prev_log_index = INDEX_MAX - 1  # three entries: the last past the bound
    for i, e in enumerate(pb.append_request.entries):
        e.index = INDEX_MAX + i
    refused(pb)


def test_requests_need_a_term_and_terms_stay_ordered() -> None:
    for kind in ("vote_request", "append_request", "timeout_now"):
        refused(mutated(kind, lambda m: setattr(m, "term", 0)))
    # A candidate's last log term above its term; a leader's prev term or entry term above
    # its term; entry terms going down; an entry term 0; a gap in the entries.
    refused(mutated("vote_request", lambda m: setattr(m.vote_request, "last_log_term", 6)))
    refused(mutated("append_request", lambda m: setattr(m.append_request, "prev_log_term", 6)))
    refused(mutated("append_request", lambda m: setattr(m.append_request.entries[2], "term", 6)))
    refused(mutated("append_request", lambda m: setattr(m.append_request.entries[2], "term", 2)))
    refused(mutated("append_request", lambda m: setattr(m.append_request.entries[0], "term", 0)))
    refused(mutated("append_request", lambda m: setattr(m.append_request.entries[1], "index", 99)))
    refused(mutated("append_request", lambda m: setattr(m.append_request, "prev_log_term", 4)))


def test_ids_and_addresses_of_wrong_shape_are_refused() -> None:
    for kind in valid_messages():
        for bad in BAD_IDS:
            refused(mutated(kind, lambda m, bad=bad: setattr(m, "sender", bad)))
            refused(mutated(kind, lambda m, bad=bad: setattr(m, "recipient", bad)))
        for bad in BAD_TABLET_IDS:
            refused(mutated(kind, lambda m, bad=bad: setattr(m, "tablet_id", bad)))
        for bad in BAD_ADDRESSES:
            refused(mutated(kind, lambda m, bad=bad: setattr(m, "sender_address", bad)))
        refused(mutated(kind, lambda m: setattr(m, "sender", A)))  # to itself
    assert "unknown kind" in refused(ConsensusMessagePB(tablet_id=T, sender=B, recipient=A, term=1))


def test_enums_out_of_range_are_refused() -> None:
    for value in (4, 99, 1 << 30):
        refused(mutated("vote_response", lambda m, v=value: setattr(m.vote_response, "status", v)))
        refused(
            mutated("append_response", lambda m, v=value: setattr(m.append_response, "status", v))
        )
        refused(
            mutated(
                "append_request", lambda m, v=value: setattr(m.append_request.entries[0], "type", v)
            )
        )
    bad_success = mutated("append_response", lambda m: setattr(m.append_response, "success", True))
    bad_success.append_response.status = 2
    refused(bad_success)


def test_entry_bodies_and_configs_are_checked() -> None:
    def entry(i: int):
        return lambda m: m.append_request.entries[i]

    # A NO_OP with a body, a WRITE without one, a CONFIG with a write.
    refused(mutated("append_request", lambda m: entry(0)(m).write.SetInParent()))
    refused(mutated("append_request", lambda m: entry(1)(m).ClearField("write")))
    refused(mutated("append_request", lambda m: entry(2)(m).write.SetInParent()))
    refused(mutated("append_request", lambda m: entry(2)(m).ClearField("config")))
    # Write blocks: too many, unknown operations.
    refused(
        mutated(
            "append_request",
            lambda m: entry(1)(m).write.blocks.extend([RowBlockPB(op=1)] * WRITE_BLOCKS_MAX),
        )
    )
    for op in (0, 5, 1 << 30):
        refused(
            mutated(
                "append_request", lambda m, op=op: setattr(entry(1)(m).write.blocks[0], "op", op)
            )
        )
    # Configs: index out of range, too many peers, bad peer ids and addresses, no voter,
    # unknown member type.
    for opid in (-2, -(1 << 63), INDEX_MAX + 1, I63):
        refused(
            mutated(
                "append_request", lambda m, o=opid: setattr(entry(2)(m).config, "opid_index", o)
            )
        )
    many = RaftConfigPB(opid_index=13)
    for i in range(CONFIG_PEERS_MAX + 1):
        many.peers.add(uuid=f"p{i}", member_type=MemberTypePB.VOTER)
    refused(mutated("append_request", lambda m: entry(2)(m).config.CopyFrom(many)))
    for bad in BAD_IDS:
        refused(
            mutated(
                "append_request", lambda m, b=bad: setattr(entry(2)(m).config.peers[0], "uuid", b)
            )
        )
    for bad in BAD_ADDRESSES:
        refused(
            mutated(
                "append_request",
                lambda m, b=bad: setattr(entry(2)(m).config.peers[0], "address", b),
            )
        )
    no_voter = mutated("append_request", lambda m: None)
    for p in no_voter.append_request.entries[2].config.peers:
        p.member_type = MemberTypePB.NON_VOTER
    refused(no_voter)
    refused(
        mutated("append_request", lambda m: setattr(entry(2)(m).config.peers[0], "member_type", 7))
    )
    twice = mutated("append_request", lambda m: None)
    twice.append_request.entries[2].config.peers[1].uuid = A
    refused(twice)


def test_huge_lists_are_refused() -> None:
    pb = mutated("append_request", lambda m: None)
    del pb.append_request.entries[:]
    pb.append_request.entries.extend(entry_pb(3, 11 + i) for i in range(APPEND_ENTRIES_MAX + 1))
    assert "entries" in refused(pb)
    one = valid_messages()["timeout_now"]
    with pytest.raises(WireError, match="batch"):
        decode_request(ConsensusRequest(messages=[one] * (BATCH_MESSAGES_MAX + 1)))
    decode_request(ConsensusRequest(messages=[one] * BATCH_MESSAGES_MAX))
    # One bad message refuses the batch: nothing is delivered.
    bad = mutated("timeout_now", lambda m: setattr(m, "term", U64))
    with pytest.raises(WireError):
        decode_request(ConsensusRequest(messages=[one, one, bad]))


# ------------------------------------------------------------------ the core
OPTS = RaftOptions(election_timeout_ticks=5, heartbeat_interval_ticks=1)
CFG = RaftConfig.of_voters(A, B, C)


def core(uuid: str = A, cfg: RaftConfig = CFG, term: int = 5, **kw) -> RaftCore:
    c = RaftCore(
        uuid,
        T,
        options=OPTS,
        rng=random.Random(uuid),
        base_config=cfg,
        hard_state=HardState(term, None),
        **kw,
    )
    c.ready()
    return c


def leader(term: int = 5) -> RaftCore:
    """A, leader of `term` over A, B, C, with one NOOP entry committed."""
    a = core(term=term - 1)
    for _ in range(4 * OPTS.election_timeout_ticks):
        a.tick()
        if a.role is Role.PRE_CANDIDATE:
            break
    a.step(VoteResponse(T, B, A, term, True, pre_vote=True))
    a.step(VoteResponse(T, B, A, term, True))
    assert a.role is Role.LEADER and a.term == term
    rd = a.ready()
    a.persisted(rd.entries[-1].index, rd.entries[-1].term)
    a.step(AppendResponse(T, B, A, term, True, match_index=1))
    assert a.commit_index == 1
    a.ready()
    return a


def test_a_term_jump_from_a_stranger_is_not_adopted() -> None:
    a = core()
    for msg in (
        VoteRequest(T, "zzzz", A, 6, 9, 99),
        AppendRequest(T, "zzzz", A, 6, 0, 0, (), 0),
        AppendResponse(T, "zzzz", A, 6, False),
        VoteResponse(T, "zzzz", A, 6, False),
    ):
        a.step(msg)
        assert a.term == 5 and not a.has_ready(), msg
    assert a.refused_messages == 4 and "not a voter" in a.last_refusal


def test_a_non_voter_member_does_not_raise_the_term() -> None:
    cfg = CFG.with_member(Member("dddd", MemberType.NON_VOTER))
    a = core(cfg=cfg)
    a.step(AppendRequest(T, "dddd", A, 6, 0, 0, (), 0))
    assert a.term == 5 and a.refused_messages == 1


def test_a_voter_of_an_uncommitted_config_entry_may_raise_the_term() -> None:
    """Members of configs in the log count too (a demoted candidate may have to lead)."""
    cfg2 = CFG.with_member(Member("dddd", MemberType.VOTER))
    a = core(entries=[Entry(5, 1, EntryType.CONFIG, b"", cfg2)], applied_index=0)
    a.step(VoteRequest(T, "dddd", A, 7, 5, 1))
    assert a.term == 7 and a.refused_messages == 0


def test_a_member_gone_wrong_cannot_push_the_term_past_the_jump() -> None:
    a = core()
    for term in (5 + TERM_JUMP_MAX + 1, TERM_MAX, TERM_MAX + 1, U64):
        a.step(AppendRequest(T, B, A, term, 0, 0, (), 0))
        a.step(VoteRequest(T, B, A, term, 0, 0))
        assert a.term == 5 and not a.has_ready()
    assert "jump" in a.last_refusal or "above" in a.last_refusal
    # Within the jump it is adopted, as Raft wants (and persisted before any answer).
    a.step(AppendRequest(T, B, A, 5 + TERM_JUMP_MAX, 0, 0, (), 0))
    assert a.term == 5 + TERM_JUMP_MAX
    assert a.ready().hard_state == HardState(5 + TERM_JUMP_MAX, None)


def test_pre_vote_is_kept() -> None:
    """A pre-vote from a voter is answered without changing the term; from a stranger it
    is dropped."""
    a = core()  # no leader known: not in a lease
    a.step(VoteRequest(T, B, A, 6, 0, 0, pre_vote=True))
    rd = a.ready()
    assert a.term == 5 and rd.hard_state is None
    assert [(m.granted, m.pre_vote, m.term) for m in rd.messages] == [(True, True, 6)]
    a.step(VoteRequest(T, "zzzz", A, 6, 0, 0, pre_vote=True))
    assert not a.has_ready()


def test_timeout_now_only_from_our_leader_in_our_term() -> None:
    a = core()
    a.step(AppendRequest(T, B, A, 5, 0, 0, (), 0))  # B leads term 5
    a.ready()
    a.step(TimeoutNow(T, C, A, 5))  # not our leader
    a.step(TimeoutNow(T, B, A, 6))  # not our term
    assert a.role is Role.FOLLOWER and a.term == 5 and a.refused_messages == 2
    a.step(TimeoutNow(T, B, A, 5))
    assert a.role is Role.CANDIDATE and a.term == 6


def test_a_second_leader_in_a_term_is_dropped_not_an_assertion() -> None:
    a = leader()
    a.step(AppendRequest(T, B, A, 5, 1, 5, (Entry(5, 2, EntryType.NOOP),), 2))
    assert a.role is Role.LEADER and a.last_index == 1 and a.refused_messages == 1
    f = core()
    f.step(AppendRequest(T, B, A, 5, 0, 0, (), 0))
    f.ready()
    f.step(AppendRequest(T, C, A, 5, 0, 0, (Entry(5, 1, EntryType.NOOP),), 1))
    assert f.leader_uuid == B and f.last_index == 0 and f.refused_messages == 1


def test_answers_naming_what_was_never_sent_are_dropped() -> None:
    a = leader()
    for resp in (
        AppendResponse(T, B, A, 5, True, match_index=2),
        AppendResponse(T, B, A, 5, True, match_index=INDEX_MAX),
        AppendResponse(T, B, A, 5, False, reject_index=INDEX_MAX, hint_index=INDEX_MAX),
        AppendResponse(T, B, A, 5, True, match_index=1, read_seq=INDEX_MAX),
    ):
        a.step(resp)
        rd = a.ready()  # used to fail an assertion (next past the log) in the next append
        assert a.role is Role.LEADER and a.commit_index == 1
        assert all(m.prev_log_index <= 1 for m in rd.messages if isinstance(m, AppendRequest))
    assert a.refused_messages == 4
    # A read is not confirmed by a forged read sequence.
    a.read_index(1)
    a.step(AppendResponse(T, C, A, 5, True, match_index=1, read_seq=INDEX_MAX))
    assert not a.ready().reads


def test_no_election_at_the_term_limit() -> None:
    a = core(term=TERM_MAX)
    for _ in range(4 * OPTS.election_timeout_ticks):
        a.tick()
    assert a.term == TERM_MAX and a.role is Role.FOLLOWER
    assert all(m.term <= TERM_MAX for m in a.ready().messages)


def test_tombstone_answers_an_unknown_leader_in_its_term_without_adopting_it() -> None:
    t = RaftCore.tombstoned(
        A,
        T,
        options=OPTS,
        rng=random.Random(1),
        hard_state=HardState(5, None),
        last_op_id=OpId(5, 9),
        config=CFG,
    )
    t.step(AppendRequest(T, "eeee", A, 8, 20, 8, (), 20))
    rd = t.ready()
    assert rd.hard_state is None and t.term == 5
    assert [(m.term, m.status) for m in rd.messages] == [(8, ReplicaStatus.TABLET_DELETED)]
    t.step(AppendRequest(T, "eeee", A, U64, 20, 8, (), 20))
    t.step(VoteRequest(T, "eeee", A, 8, 8, 20))
    assert not t.has_ready() and t.term == 5
    t.step(AppendRequest(T, B, A, 8, 20, 8, (), 20))  # a voter it knows: adopted
    assert t.term == 8 and t.ready().hard_state == HardState(8, None)


# ------------------------------------------------------------------ durable state
def test_durable_state_beyond_the_bounds_fails_the_replica_clearly() -> None:
    ok = ConsensusMetaPB(tablet_id=T, current_term=TERM_MAX, committed_config=config_pb())
    check_durable_state(T, ok, OpId(3, 10), [entry_pb(3, 11)])
    for term in (TERM_MAX + 1, U64):
        cm = ConsensusMetaPB(tablet_id=T, current_term=term, committed_config=config_pb())
        with pytest.raises(WireError, match="cannot hold an election"):
            check_durable_state(T, cm, OpId(3, 10), [])
        with pytest.raises(WireError):
            check_durable_state(T, ok, OpId(3, 10), [entry_pb(term, 11)])
    with pytest.raises(WireError):
        check_durable_state(T, ok, OpId(3, INDEX_MAX + 1), [])


# ------------------------------------------------------------------ tablet copy
OWN = "ownserver"


def start_req(**kw) -> StartTabletCopyRequest:
    base = dict(
        tablet_id=T,
        source_uuid=B,
        source_address=ADDR,
        caller_term=5,
        expected_state=DataState.READY,
    )
    base.update(kw)
    return StartTabletCopyRequest(**base)


def test_start_tablet_copy_fields_are_range_checked() -> None:
    check_start_request(start_req(), OWN)
    top = OpIdPB(term=TERM_MAX, index=INDEX_MAX)
    check_start_request(start_req(caller_term=TERM_MAX, last_op_id=top), OWN)
    bad = [
        start_req(caller_term=0),
        start_req(source_uuid=OWN),
        start_req(expected_state=99),
    ]
    bad += [start_req(caller_term=v) for v in BEYOND]
    bad += [start_req(last_op_id=OpIdPB(term=v, index=1)) for v in BEYOND]
    bad += [start_req(last_op_id=OpIdPB(term=1, index=v)) for v in BEYOND]
    bad += [start_req(source_uuid=v) for v in BAD_IDS]
    bad += [start_req(source_address=v) for v in BAD_ADDRESSES + [""]]
    bad += [start_req(tablet_id=v) for v in BAD_TABLET_IDS]
    for req in bad:
        with pytest.raises(errors.BadRequest):
            check_start_request(req, OWN)


def begin_resp(**kw) -> BeginCopySessionResponse:
    sb = SuperblockPB(
        tablet_id=T,
        data_state=DataState.READY,
        blocks=["block-000000001.arrow"],
        flushed_index=10,
        flushed_term=3,
        next_block_id=2,
    )
    cm = ConsensusMetaPB(tablet_id=T, current_term=5, voted_for=B, committed_config=config_pb())
    files = [
        CopyFilePB(kind="data", name="block-000000001.arrow", size_bytes=100),
        CopyFilePB(kind="wal", name="wal-000000001", size_bytes=0),
    ]
    resp = BeginCopySessionResponse(
        session_id="0123456789abcdef", superblock=sb, cmeta=cm, files=files
    )
    for path, value in kw.items():
        *parents, name = path.split("__")
        obj = resp
        for p in parents:
            obj = obj[int(p)] if p.isdigit() else getattr(obj, p)
        setattr(obj, name, value)
    return resp


def test_the_sources_begin_answer_is_checked_before_anything_is_written() -> None:
    check_begin_response(begin_resp(), T)
    bad = [
        begin_resp(session_id=""),
        begin_resp(session_id="../../x"),
        begin_resp(superblock__tablet_id="other"),
        begin_resp(files__0__name="../../../etc/passwd"),
        begin_resp(files__0__name=".."),
        begin_resp(files__0__name="a/b"),
        begin_resp(files__0__kind="x"),
        begin_resp(files__0__size_bytes=COPY_FILE_BYTES_MAX + 1),
        begin_resp(files__0__size_bytes=U64),
        begin_resp(files__1__name="block-000000001.arrow", files__1__kind="data"),
        begin_resp(cmeta__voted_for="a/b"),
        begin_resp(cmeta__current_term=2),  # below the flushed term
        begin_resp(cmeta__committed_config__opid_index=-2),
    ]
    for v in BEYOND:
        bad += [
            begin_resp(cmeta__current_term=v),
            begin_resp(superblock__flushed_index=v),
            begin_resp(superblock__flushed_term=v),
            begin_resp(superblock__next_block_id=v + 1 if v < U64 else v),
        ]
    missing = begin_resp()
    missing.superblock.blocks.append("block-000000002.arrow")
    bad.append(missing)
    many = begin_resp()
    many.files.extend(CopyFilePB(kind="wal", name=f"w{i}") for i in range(COPY_FILES_MAX))
    bad.append(many)
    for resp in bad:
        with pytest.raises(errors.Corruption):
            check_begin_response(resp, T)


def test_session_ids_of_wrong_shape_are_refused() -> None:
    check_session_id("0123456789abcdef")
    for bad in ["", "XYZ", "../a", "a" * 65, "0123 4567"]:
        with pytest.raises(errors.BadRequest):
            check_session_id(bad)
