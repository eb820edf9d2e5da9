"""Extreme values in every consensus and tablet copy rpc, sent to every replica of a tablet
(issue 27, section 2).

A Raft message with term 2^64-1 sent to each replica of a tablet had left the tablet FAILED
on all three servers ("Value out of range" in the driver at the next election), and FAILED
again after every restart. Here three real tablet servers host one tablet; raw rpcs (the
right recipient uuid, senders that are the tablet's real members or a stranger) carry
0, 2^62, 2^63-1, 2^64-1, negative values of signed fields, huge lists, empty ids, ids and
addresses of the wrong shape in every field of TServer.Consensus (every message kind, their
entries and configs), ChangeConfig, DeleteTablet's CAS, StartTabletCopy, BeginCopySession,
FetchCopyChunk, EndCopySession and CancelTabletCopy; then members gone wrong send valid but
absurd terms and answers. Every answer must be OK or a typed error (never INTERNAL or no
answer); the out-of-range ones BAD_REQUEST. Then the tablet must serve writes and scans,
no replica FAILED, no absurd term persisted, and the same after a kill -9 and restart of
every server.
"""

from __future__ import annotations

import collections
import functools

import pytest

from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    AppendRequestPB,
    AppendResponsePB,
    BeginCopySessionRequest,
    BeginCopySessionResponse,
    CancelTabletCopyRequest,
    CancelTabletCopyResponse,
    ChangeConfigRequest,
    ChangeConfigResponse,
    ConfigChangeTypePB,
    ConsensusMessagePB,
    ConsensusRequest,
    ConsensusResponse,
    DataState,
    DeleteTabletRequest,
    DeleteTabletResponse,
    EndCopySessionRequest,
    EndCopySessionResponse,
    EntryType,
    FetchCopyChunkRequest,
    FetchCopyChunkResponse,
    LogEntryPB,
    MemberType,
    OpIdPB,
    RaftConfigPB,
    RaftPeerPB,
    RowBlockPB,
    StartTabletCopyRequest,
    StartTabletCopyResponse,
    TimeoutNowPB,
    VoteRequestPB,
    VoteResponsePB,
    WriteOpPB,
)
from tests.support.procs import free_port, wait_for

pytestmark = pytest.mark.integration

TABLET = "edge-tablet"
STRANGER = "feedfacefeedfacefeedfacefeedface"
# The bounds of design/consensus.md ("Bounds"), written out: the test does not take them
# from the code under test.
BOUND = (1 << 62) - 1
JUMP = 1 << 20
# Past the jump from the recipient's term as last reported (its term may have moved on by
# a few elections since: far less than the margin).
PAST_JUMP = JUMP + 1000
HUGE = [1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]  # beyond every term and index bound
EXTREME = [0, *HUGE]
BAD_IDS = ["", "a/b", "../../x", "x" * 65, "é", "a b"]
BAD_ADDRESSES = ["nohost", "127.0.0.1:0", "127.0.0.1:70000", "a" * 300 + ":1", "h/x:1"]
CALL_TIMEOUT_S = 15.0
SERVE_DEADLINE_S = 90.0


class Tally:
    """Answers by label: every one must be OK or a typed error, never INTERNAL or none."""

    def __init__(self) -> None:
        self.answers: dict[str, list[str]] = collections.defaultdict(list)
        self.clients: dict[str, RpcClient] = {}  # one per server address, for every call

    def close(self) -> None:
        for rc in self.clients.values():
            rc.close()
        self.clients.clear()

    def call(self, trio, i: int, label: str, method: str, req, resp_type) -> str:
        p = trio.procs[i]
        rc = self.clients.get(p.address)
        if rc is None:
            rc = self.clients[p.address] = RpcClient(p.address, "edge-test")
        try:
            rc.call(p.uuid, method, req, resp_type, timeout_s=CALL_TIMEOUT_S)
            status = "OK"
        except errors.RpcError as e:
            status = e.status_name
        self.answers[label].append(status)
        assert status not in ("INTERNAL", "TIMED_OUT", "UNAVAILABLE"), (label, status)
        return status

    def not_bad_request(self, prefix: str) -> list[tuple[str, list[str]]]:
        return [
            (k, v)
            for k, v in self.answers.items()
            if k.startswith(prefix) and any(s != "BAD_REQUEST" for s in v)
        ]


@functools.cache
def dead_address() -> str:
    """An address nobody listens on (the stranger's)."""
    return f"127.0.0.1:{free_port()}"


def state(trio) -> dict[int, tuple[int, int, int]]:
    """Per server: (current term, last index, last term) of its replica."""
    out = {}
    for i in range(3):
        r = trio.report(i, TABLET)
        assert r is not None, (
            f"server {i} does not report the replica (gone, or ListTablets failed)"
        )
        out[i] = (r.current_term, r.last_op_id.index, r.last_op_id.term)
    return out


def message(trio, sender: int | None, recipient: int, term: int) -> ConsensusMessagePB:
    if sender is None:
        uuid, address = STRANGER, dead_address()
    else:
        uuid, address = trio.procs[sender].uuid, trio.procs[sender].address
    return ConsensusMessagePB(
        tablet_id=TABLET,
        sender=uuid,
        recipient=trio.procs[recipient].uuid,
        term=term,
        sender_address=address,
    )


def consensus_cases(trio, recipient: int, term: int, last_index: int, last_term: int):
    """(label, messages): extreme values in every field of every message kind, from the
    tablet's other members and from a stranger. A label starting with "range:" has a value
    beyond the bounds (it must be answered BAD_REQUEST)."""
    cases = []
    senders = [s for s in range(3) if s != recipient] + [None]

    def add(label: str, build) -> None:
        for s in senders:
            m = message(trio, s, recipient, term)
            build(m)
            cases.append((f"{label} from {s}", [m]))

    def vote(m, **kw):
        v = dict(last_log_term=last_term, last_log_index=last_index)
        v.update(kw)
        m.vote_request.CopyFrom(VoteRequestPB(**v))

    def append(m, entries=(), **kw):
        a = dict(prev_log_index=last_index, prev_log_term=last_term, leader_commit=last_index)
        a.update(kw)
        m.append_request.CopyFrom(AppendRequestPB(entries=list(entries), **a))

    def noop(t: int, i: int) -> LogEntryPB:
        return LogEntryPB(term=t, index=i, type=EntryType.NO_OP)

    for v in EXTREME:
        kind = "range" if v in HUGE else "value"
        for pre in (False, True):
            add(
                f"{kind}: vote term={v} pre={pre}",
                lambda m, v=v, pre=pre: (
                    setattr(m, "term", v),
                    vote(m, pre_vote=pre, last_log_term=min(v, last_term)),
                ),
            )
        add(f"{kind}: vote last_log_index={v}", lambda m, v=v: vote(m, last_log_index=v))
        add(f"{kind}: vote last_log_term={v}", lambda m, v=v: vote(m, last_log_term=v))
        add(
            f"{kind}: transfer vote term={v}",
            lambda m, v=v: (
                setattr(m, "term", v),
                vote(m, leadership_transfer=True, last_log_term=0),
            ),
        )
        add(
            f"{kind}: vote response term={v}",
            lambda m, v=v: (
                setattr(m, "term", v),
                m.vote_response.CopyFrom(VoteResponsePB(granted=True)),
            ),
        )
        for field in ("prev_log_index", "prev_log_term", "leader_commit", "read_seq"):
            add(f"{kind}: append {field}={v}", lambda m, f=field, v=v: append(m, **{f: v}))
        add(
            f"{kind}: append term={v}",
            lambda m, v=v: (setattr(m, "term", v), append(m, prev_log_term=min(v, last_term))),
        )
        add(f"{kind}: append entry term={v}", lambda m, v=v: append(m, [noop(v, last_index + 1)]))
        add(f"{kind}: append entry index={v}", lambda m, v=v: append(m, [noop(term, v)]))
        for field in ("match_index", "reject_index", "hint_index", "read_seq"):
            add(
                f"{kind}: answer {field}={v}",
                lambda m, f=field, v=v: m.append_response.CopyFrom(
                    AppendResponsePB(success=f == "match_index", **{f: v})
                ),
            )
        add(
            f"{kind}: answer term={v}",
            lambda m, v=v: (setattr(m, "term", v), m.append_response.CopyFrom(AppendResponsePB())),
        )
        add(
            f"{kind}: timeout_now term={v}",
            lambda m, v=v: (setattr(m, "term", v), m.timeout_now.CopyFrom(TimeoutNowPB())),
        )
    # A config entry's index (int64) out of range. (No entry is ever valid here: one that
    # passed would be a forged entry in the name of the leader, which only authentication
    # can refuse.)
    for v in (-(1 << 63), -2, 1 << 62, (1 << 63) - 1):
        add(
            f"range: config opid_index={v}",
            lambda m, v=v: append(
                m,
                [
                    LogEntryPB(
                        term=term,
                        index=last_index + 1,
                        type=EntryType.CONFIG_CHANGE,
                        config=RaftConfigPB(
                            opid_index=v,
                            peers=[
                                RaftPeerPB(uuid=trio.procs[0].uuid, member_type=MemberType.VOTER)
                            ],
                        ),
                    )
                ],
            ),
        )
    # Enums out of range, huge lists, bodies of the wrong shape.
    for st in (4, 99, (1 << 31) - 1):
        add(
            f"range: vote response status={st}",
            lambda m, st=st: m.vote_response.CopyFrom(VoteResponsePB(status=st)),
        )
        add(
            f"range: answer status={st}",
            lambda m, st=st: m.append_response.CopyFrom(AppendResponsePB(status=st)),
        )
        add(
            f"range: entry type={st}",
            lambda m, st=st: append(m, [LogEntryPB(term=term, index=last_index + 1, type=st)]),
        )
    add(
        "range: 5000 entries",
        lambda m: append(m, [noop(term, last_index + 1 + k) for k in range(5000)]),
    )
    add(
        "range: config of 100 peers",
        lambda m: append(
            m,
            [
                LogEntryPB(
                    term=term,
                    index=last_index + 1,
                    type=EntryType.CONFIG_CHANGE,
                    config=RaftConfigPB(
                        peers=[
                            RaftPeerPB(uuid=f"p{k}", member_type=MemberType.VOTER)
                            for k in range(100)
                        ]
                    ),
                )
            ],
        ),
    )
    add(
        "range: config peer of bad shape",
        lambda m: append(
            m,
            [
                LogEntryPB(
                    term=term,
                    index=last_index + 1,
                    type=EntryType.CONFIG_CHANGE,
                    config=RaftConfigPB(
                        peers=[
                            RaftPeerPB(uuid="../x", address="h/x:1", member_type=MemberType.VOTER)
                        ]
                    ),
                )
            ],
        ),
    )
    add(
        "range: write of 100 blocks",
        lambda m: append(
            m,
            [
                LogEntryPB(
                    term=term,
                    index=last_index + 1,
                    type=EntryType.WRITE,
                    write=WriteOpPB(schema_version=1, blocks=[RowBlockPB(op=1)] * 100),
                )
            ],
        ),
    )
    add(
        "range: write with op 77",
        lambda m: append(
            m,
            [
                LogEntryPB(
                    term=term,
                    index=last_index + 1,
                    type=EntryType.WRITE,
                    write=WriteOpPB(schema_version=1, blocks=[RowBlockPB(op=77)]),
                )
            ],
        ),
    )
    add("range: no kind", lambda m: None)
    # Ids and addresses of the wrong shape.
    for bad in BAD_IDS:
        add(
            f"range: tablet id {bad!r}",
            lambda m, b=bad: (setattr(m, "tablet_id", b), m.timeout_now.CopyFrom(TimeoutNowPB())),
        )
        add(
            f"range: sender {bad!r}",
            lambda m, b=bad: (setattr(m, "sender", b), m.timeout_now.CopyFrom(TimeoutNowPB())),
        )
    for bad in BAD_ADDRESSES:
        add(
            f"range: sender address {bad!r}",
            lambda m, b=bad: (
                setattr(m, "sender_address", b),
                m.timeout_now.CopyFrom(TimeoutNowPB()),
            ),
        )
    # A huge batch.
    one = message(trio, None, recipient, term)
    one.timeout_now.CopyFrom(TimeoutNowPB())
    cases.append(("range: batch of 5000", [one] * 5000))
    return cases


def member_gone_wrong_cases(trio, recipient: int, term: int, last_index: int):
    """Valid on the wire, but absurd: terms at the bound or past the jump from a member,
    answers naming what was never sent, a second leader in the term, a TimeoutNow from a
    server that does not lead."""
    cases = []
    for s in [s for s in range(3) if s != recipient]:
        for t in (BOUND, term + PAST_JUMP):
            m = message(trio, s, recipient, t)
            m.append_request.CopyFrom(AppendRequestPB(prev_log_index=0, prev_log_term=0))
            cases.append((f"absurd: append term={t} from {s}", [m]))
            m = message(trio, s, recipient, t)
            m.vote_request.CopyFrom(
                VoteRequestPB(last_log_term=t, last_log_index=BOUND, leadership_transfer=True)
            )
            cases.append((f"absurd: transfer vote term={t} from {s}", [m]))
            m = message(trio, s, recipient, t)
            m.append_response.CopyFrom(AppendResponsePB())
            cases.append((f"absurd: answer term={t} from {s}", [m]))
        m = message(trio, s, recipient, term)
        m.append_response.CopyFrom(
            AppendResponsePB(success=True, match_index=BOUND, read_seq=BOUND)
        )
        cases.append((f"absurd: answer match={BOUND} from {s}", [m]))
        m = message(trio, s, recipient, term)
        m.append_response.CopyFrom(AppendResponsePB(reject_index=BOUND, hint_index=BOUND))
        cases.append((f"absurd: rejection at {BOUND} from {s}", [m]))
        m = message(trio, s, recipient, term)
        m.append_request.CopyFrom(
            AppendRequestPB(prev_log_index=last_index + 5, prev_log_term=term, leader_commit=BOUND)
        )
        cases.append((f"absurd: a second leader in term {term} from {s}", [m]))
        m = message(trio, s, recipient, term)
        m.timeout_now.CopyFrom(TimeoutNowPB())
        cases.append((f"absurd: timeout_now from {s}", [m]))
    return cases


def send_consensus(trio, tally: Tally, cases, recipient: int) -> None:
    for label, msgs in cases:
        req = ConsensusRequest(messages=msgs)
        tally.call(trio, recipient, label, "TServer.Consensus", req, ConsensusResponse)


def copy_and_config_cases(trio, i: int, term: int):
    """(label, method, request, response type) for the tablet copy and config rpcs."""
    own, other = trio.procs[i], trio.procs[(i + 1) % 3]
    dead = dead_address()
    out = []

    def start(label: str, **kw) -> None:
        base = dict(
            tablet_id=TABLET,
            source_uuid=other.uuid,
            source_address=other.address,
            caller_term=term,
            expected_state=DataState.READY,
        )
        base.update(kw)
        req = StartTabletCopyRequest(**base)
        out.append((label, "TServer.StartTabletCopy", req, StartTabletCopyResponse))

    for v in HUGE:
        start(f"range: copy caller_term={v}", caller_term=v)
        start(f"range: copy last_op_id.term={v}", last_op_id=OpIdPB(term=v, index=1))
        start(f"range: copy last_op_id.index={v}", last_op_id=OpIdPB(term=1, index=v))
    start("range: copy caller_term=0", caller_term=0)
    start("range: copy expected_state=99", expected_state=99)
    start("range: copy from itself", source_uuid=own.uuid, source_address=own.address)
    for bad in BAD_IDS:
        start(f"range: copy source_uuid {bad!r}", source_uuid=bad)
        start(f"range: copy tablet_id {bad!r}", tablet_id=bad)
        out.append(
            (
                f"range: begin tablet {bad!r}",
                "TServer.BeginCopySession",
                BeginCopySessionRequest(tablet_id=bad),
                BeginCopySessionResponse,
            )
        )
        out.append(
            (
                f"range: cancel tablet {bad!r}",
                "TServer.CancelTabletCopy",
                CancelTabletCopyRequest(tablet_id=bad),
                CancelTabletCopyResponse,
            )
        )
        out.append(
            (
                f"range: end session {bad!r}",
                "TServer.EndCopySession",
                EndCopySessionRequest(session_id=bad),
                EndCopySessionResponse,
            )
        )
        out.append(
            (
                f"range: fetch session {bad!r}",
                "TServer.FetchCopyChunk",
                FetchCopyChunkRequest(session_id=bad, kind="wal", name="wal-000000001"),
                FetchCopyChunkResponse,
            )
        )
    for bad in BAD_ADDRESSES + [""]:
        start(f"range: copy source_address {bad!r}", source_address=bad)
    # Valid on the wire, refused by the replica: a stranger as source, a caller term past
    # the jump (nothing may replace a running replica on their word).
    start("absurd: copy from a stranger", source_uuid=STRANGER, source_address=dead)
    start(f"absurd: copy caller_term={term + PAST_JUMP}", caller_term=term + PAST_JUMP)

    def change(label: str, **kw) -> None:
        base = dict(
            tablet_id=TABLET,
            type=ConfigChangeTypePB.ADD_SERVER,
            peer=RaftPeerPB(uuid=STRANGER, address=dead, member_type=MemberType.NON_VOTER),
            cas_config_index=(1 << 63) - 1,
        )
        base.update(kw)
        out.append(
            (label, "TServer.ChangeConfig", ChangeConfigRequest(**base), ChangeConfigResponse)
        )

    for cas in (-(1 << 63), -2, (1 << 63) - 1, 1 << 62):
        change(f"range: change cas={cas}", cas_config_index=cas)
        # DeleteTablet deletes when the committed config index is at most its CAS: below -1
        # it only fails (CAS_FAILED), above INDEX_MAX it is refused.
        out.append(
            (
                f"{'cas' if cas < 0 else 'range'}: delete cas={cas}",
                "TServer.DeleteTablet",
                DeleteTabletRequest(tablet_id=TABLET, cas_config_index=cas),
                DeleteTabletResponse,
            )
        )
    for bad in BAD_IDS[1:]:
        change(
            f"range: change peer uuid {bad!r}",
            peer=RaftPeerPB(uuid=bad, address=dead, member_type=MemberType.NON_VOTER),
        )
    for bad in BAD_ADDRESSES:
        change(
            f"range: change peer address {bad!r}",
            peer=RaftPeerPB(uuid=STRANGER, address=bad, member_type=MemberType.NON_VOTER),
        )
    return out


def fetch_cases(trio, tally: Tally, i: int) -> None:
    """A real copy session on server i, fetched with extreme offsets, sizes, kinds and names,
    then ended."""
    p = trio.procs[i]
    with RpcClient(p.address, "edge-test") as rc:
        begin = rc.call(
            p.uuid,
            "TServer.BeginCopySession",
            BeginCopySessionRequest(tablet_id=TABLET),
            BeginCopySessionResponse,
        )
    f = begin.files[0]
    sid = begin.session_id
    reqs = []
    for off in (f.size_bytes + 1, *HUGE):
        reqs.append(
            (
                "value: fetch offset",
                FetchCopyChunkRequest(session_id=sid, kind=f.kind, name=f.name, offset=off),
            )
        )
    for n in (0, 1, (1 << 32) - 1):
        reqs.append(
            (
                "value: fetch bytes_max",
                FetchCopyChunkRequest(session_id=sid, kind=f.kind, name=f.name, bytes_max=n),
            )
        )
    for kind, name in (
        ("", f.name),
        ("x" * 1000, f.name),
        (f.kind, "../../instance"),
        (f.kind, ""),
        (f.kind, "x" * 10_000),
    ):
        reqs.append(
            ("value: fetch file", FetchCopyChunkRequest(session_id=sid, kind=kind, name=name))
        )
    for label, req in reqs:
        status = tally.call(trio, i, label, "TServer.FetchCopyChunk", req, FetchCopyChunkResponse)
        assert status in ("OK", "BAD_REQUEST", "NOT_FOUND"), (label, req, status)
    tally.call(
        trio,
        i,
        "value: end",
        "TServer.EndCopySession",
        EndCopySessionRequest(session_id=sid),
        EndCopySessionResponse,
    )


def serving(trio, ids, deadline_s: float = SERVE_DEADLINE_S) -> None:
    """Writes `ids` at whoever leads and scans them there; a failure names each replica's
    state."""
    try:
        trio.write_anywhere(TABLET, ids, deadline_s=deadline_s)
    except AssertionError as e:
        reports = [trio.report(i, TABLET) for i in range(3)]
        states = [(r.status, r.role, r.current_term, r.error) if r else None for r in reports]
        raise AssertionError(f"{e}; replicas: {states}") from None
    leader = trio.leader(TABLET, timeout_s=deadline_s)

    def scanned():
        try:
            return set(ids) <= set(trio.scan_ids(leader, TABLET))
        except errors.RpcError:
            return False

    wait_for(scanned, deadline_s, "a scan with the rows just written", interval_s=0.2)


def no_failed_replica(trio) -> None:
    def healthy():
        reports = [trio.report(i, TABLET) for i in range(3)]
        if any(r is None for r in reports):
            return False
        bad = [(r.status, r.error) for r in reports if r.status != "RUNNING"]
        assert not any(s == "FAILED" for s, _ in bad), bad
        return not bad and all(r.role in ("LEADER", "FOLLOWER") for r in reports)

    wait_for(healthy, SERVE_DEADLINE_S, "every replica RUNNING", interval_s=0.2)


def test_extreme_values_in_every_consensus_and_copy_rpc_leave_the_tablet_serving(trio) -> None:
    trio.create_tablet(TABLET)
    serving(trio, range(0, 10))
    tally = Tally()
    try:
        check_everything(trio, tally)
    finally:
        tally.close()


def check_everything(trio, tally: Tally) -> None:
    before = state(trio)

    # 1. Out-of-range and malformed values in every field of every Raft message, to every
    # replica; then it must still serve (a term of 2^64-1 failed it on every replica).
    for i in range(3):
        term, last_index, last_term = state(trio)[i]
        send_consensus(trio, tally, consensus_cases(trio, i, term, last_index, last_term), i)
    serving(trio, range(10, 15))
    no_failed_replica(trio)
    # 2. The same for the config and tablet copy rpcs, and a real copy session fetched with
    # extreme offsets, sizes and names.
    for i in range(3):
        term = state(trio)[i][0]
        for label, method, req, resp in copy_and_config_cases(trio, i, term):
            tally.call(trio, i, label, method, req, resp)
        fetch_cases(trio, tally, i)
    # 3. Members gone wrong: valid on the wire, absurd for the replica.
    for i in range(3):
        term, last_index, _ = state(trio)[i]
        send_consensus(trio, tally, member_gone_wrong_cases(trio, i, term, last_index), i)

    # The tablet serves, no replica failed, no absurd term was adopted.
    serving(trio, range(15, 20))
    no_failed_replica(trio)
    terms = {i: s[0] for i, s in state(trio).items()}
    assert max(terms.values()) < max(s[0] for s in before.values()) + 1000, terms

    # 4. A member gone wrong within the jump: a plausible higher term is adopted (Raft needs
    # it), the tablet elects again and goes on.
    for i in range(3):
        term = state(trio)[i][0]
        sender = (i + 1) % 3
        m = message(trio, sender, i, term + 500)
        m.append_request.CopyFrom(AppendRequestPB(prev_log_index=0, prev_log_term=0))
        tally.call(
            trio,
            i,
            f"value: append term+500 from {sender}",
            "TServer.Consensus",
            ConsensusRequest(messages=[m]),
            ConsensusResponse,
        )
    serving(trio, range(20, 30))
    no_failed_replica(trio)

    # 5. kill -9 and restart every server: it still serves, from what is on disk.
    for i in range(3):
        trio.kill9(i)
    for i in range(3):
        trio.restart(i)
    serving(trio, range(30, 40))
    no_failed_replica(trio)
    terms = {i: s[0] for i, s in state(trio).items()}
    assert max(terms.values()) < max(s[0] for s in before.values()) + 2000, terms
    leader = trio.leader(TABLET)
    assert trio.scan_ids(leader, TABLET) == list(range(40))

    # Every value beyond the bounds was refused where it was decoded.
    assert not tally.not_bad_request("range:"), tally.not_bad_request("range:")[:10]
    assert all(
        s
        in (
            "OK",
            "BAD_REQUEST",
            "ILLEGAL_STATE",
            "INVALID_TERM",
            "CAS_FAILED",
            "NOT_FOUND",
            "NOT_LEADER",
            "INVALID_NAME",
        )
        for v in tally.answers.values()
        for s in v
    ), {k: v for k, v in tally.answers.items()}
    cas = [s for k, v in tally.answers.items() if k.startswith("cas:") for s in v]
    assert cas and set(cas) == {"CAS_FAILED"}, cas
    absurd_copies = [v for k, v in tally.answers.items() if k.startswith("absurd: copy")]
    assert absurd_copies and all(
        s in ("ILLEGAL_STATE", "INVALID_TERM") for v in absurd_copies for s in v
    ), absurd_copies
