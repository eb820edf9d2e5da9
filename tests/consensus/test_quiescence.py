"""Quiet groups (issue 28, design/consensus.md "Quiet groups"): an idle leader whose peers
hold its whole log sends one heartbeat marked quiesce and stops heartbeating; its followers
stop their election timers. Anything wakes the group: a proposal, a read index, a config
change or a transfer at the leader, any other message, the driver's word that a member's
server is dead (`peer_down`). Plain function calls on the pure core."""

from __future__ import annotations

import random
import time

import pytest

from tests.consensus.test_raft_core import Cluster, make
from tests.consensus.test_raft_core import T as TID
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for
from tservers.consensus import (
    AppendRequest,
    ConfigChange,
    ConfigChangeType,
    HardState,
    MemberType,
    ProposalStatus,
    RaftConfig,
    RaftOptions,
    Role,
    VoteRequest,
)
from tservers.consensus.raft_core import QUIET_TICKS_MAX
from tservers.raft_driver import (
    FAREWELL_REPEATS,
    LATE_ROUND_INTERVALS,
    QUIET_GROUPS_ENV,
    DriverOptions,
    RaftDriver,
)

T = 10
OPTS = RaftOptions(election_timeout_ticks=T, heartbeat_interval_ticks=2, quiesce=True)


def _three(options: RaftOptions = OPTS) -> Cluster:
    cfg = RaftConfig.of_voters("a", "b", "c")
    return Cluster(*(make(u, cfg, options=options) for u in ("a", "b", "c")))


def _elect(c: Cluster, uuid: str = "a"):
    core = c.cores[uuid]
    for _ in range(3 * T):
        core.tick()
        if core.role is not Role.FOLLOWER:
            break
    c.settle()
    assert core.role is Role.LEADER
    return core


def _tick_settle(c: Cluster, n: int) -> None:
    """n ticks of every live core, settling after each (messages delivered at once)."""
    for _ in range(n):
        for u, core in c.cores.items():
            if u not in c.down:
                core.tick()
        c.settle()


def _quiet_cluster(options: RaftOptions = OPTS) -> Cluster:
    c = _three(options)
    a = _elect(c)
    a.propose(b"w")
    c.settle()
    _tick_settle(c, 2 * options.heartbeat_interval_ticks + 1)
    assert all(core.quiesced for core in c.cores.values()), {
        u: core.quiesced for u, core in c.cores.items()
    }
    return c


def _sent(c: Cluster, uuid: str) -> list:
    return [m for rd in c.readies[uuid] for m in rd.messages]


def test_idle_group_goes_quiet_and_then_sends_nothing():
    c = _quiet_cluster()
    a, b = c.cores["a"], c.cores["b"]
    assert a.role is Role.LEADER and b.leader_uuid == "a"
    quiesce_msgs = [m for m in _sent(c, "a") if isinstance(m, AppendRequest) and m.quiesce]
    assert {m.recipient for m in quiesce_msgs} == {"b", "c"}
    assert all(
        not m.entries and m.prev_log_index == m.leader_commit == a.last_index for m in quiesce_msgs
    )
    for core in c.cores.values():
        assert core.ticks_to_next_event() == QUIET_TICKS_MAX
    before = {u: len(c.readies[u]) for u in "abc"}
    _tick_settle(c, 50 * T)  # far past any election timeout or check-quorum
    assert {u: len(c.readies[u]) for u in "abc"} == before  # not one message, not one Ready
    assert a.role is Role.LEADER and a.term == c.cores["b"].term


def test_no_quiet_while_a_follower_is_behind_or_unreachable():
    c = _three()
    a = _elect(c)
    c.down = {"c"}
    a.propose(b"w")
    c.settle()
    _tick_settle(c, 4 * OPTS.heartbeat_interval_ticks)
    assert not a.quiesced and not c.cores["b"].quiesced
    heartbeats = [m for m in _sent(c, "a") if isinstance(m, AppendRequest)]
    assert heartbeats and not any(m.quiesce for m in heartbeats)
    c.down = set()  # c comes back: it catches up, then the group goes quiet
    _tick_settle(c, 3 * OPTS.heartbeat_interval_ticks)
    assert all(core.quiesced for core in c.cores.values())
    assert c.cores["c"].commit_index == a.last_index


def test_no_quiet_with_uncommitted_entries_or_a_pending_read():
    c = _three()
    a = _elect(c)
    c.down = {"b", "c"}
    a.propose(b"w")  # cannot commit
    _tick_settle(c, 3)
    assert not a.quiesced
    c.down = set()
    c.settle()
    a.read_index(7)
    # The read's heartbeat is answered, but the read is released only in the next Ready:
    # a leader ticks with it pending first.
    for core in c.cores.values():
        core.tick()
    assert not a.quiesced


def test_a_proposal_wakes_the_leader_and_its_followers():
    c = _quiet_cluster()
    a, b = c.cores["a"], c.cores["b"]
    r = a.propose(b"x")
    assert r.status is ProposalStatus.OK and not a.quiesced
    c.settle()
    assert not b.quiesced and not c.cores["c"].quiesced  # the append woke them
    assert b.commit_index >= r.index - 1
    _tick_settle(c, 2 * OPTS.heartbeat_interval_ticks + 1)  # idle again: quiet again
    assert all(core.quiesced for core in c.cores.values())
    assert all(core.commit_index == r.index for core in c.cores.values())


def test_a_read_index_wakes_and_does_the_normal_round():
    c = _quiet_cluster()
    a = c.cores["a"]
    n_before = len(_sent(c, "a"))
    a.read_index(42)
    assert not a.quiesced
    c.settle()
    new = _sent(c, "a")[n_before:]
    assert {m.recipient for m in new if isinstance(m, AppendRequest)} == {"b", "c"}
    reads = [r for rd in c.readies["a"] for r in rd.reads]
    assert [(r.request_id, r.status) for r in reads] == [(42, ProposalStatus.OK)]


def test_a_read_index_at_a_quiet_leader_cut_off_is_not_answered_ok():
    """The read's round is real: a quiet leader whose peers are gone confirms nothing."""
    c = _quiet_cluster()
    a = c.cores["a"]
    c.down = {"b", "c"}
    a.read_index(1)
    c.settle()
    _tick_settle(c, 3 * T)
    reads = [r for rd in c.readies["a"] for r in rd.reads]
    assert all(r.status is not ProposalStatus.OK for r in reads)
    assert a.role is not Role.LEADER  # check-quorum ran once awake


def test_config_change_and_transfer_wake_the_leader():
    c = _quiet_cluster()
    a = c.cores["a"]
    r = a.change_config(
        ConfigChange(ConfigChangeType.CHANGE_MEMBER_TYPE, "c", MemberType.NON_VOTER)
    )
    assert r.status is ProposalStatus.OK and not a.quiesced
    c.settle()
    _tick_settle(c, 2 * OPTS.heartbeat_interval_ticks + 1)
    assert a.quiesced
    a.transfer_leadership("b")
    assert not a.quiesced
    c.settle()
    assert c.cores["b"].role is Role.LEADER


def test_peer_down_wakes_a_quiet_follower_and_an_election_follows():
    c = _quiet_cluster()
    a, b, cc = c.cores["a"], c.cores["b"], c.cores["c"]
    term = a.term
    c.down = {"a"}  # the leader's server dies: it sends nothing more
    _tick_settle(c, 10 * T)
    assert b.quiesced and cc.quiesced and b.leader_uuid == "a"  # nothing wakes them alone
    b.peer_down("a")
    cc.peer_down("a")
    assert not b.quiesced and not cc.quiesced
    assert b.ticks_to_next_event() >= T  # the election timer restarts, randomized
    _tick_settle(c, 3 * T)
    leaders = [u for u in "bc" if c.cores[u].role is Role.LEADER]
    assert len(leaders) == 1 and c.cores[leaders[0]].term > term


def test_peer_down_of_an_unrelated_server_leaves_the_group_quiet():
    c = _quiet_cluster()
    for core in c.cores.values():
        core.peer_down("zz")
    assert all(core.quiesced for core in c.cores.values())


def test_peer_down_at_a_quiet_leader_lets_check_quorum_work():
    c = _quiet_cluster()
    a = c.cores["a"]
    c.down = {"b", "c"}
    _tick_settle(c, 10 * T)
    assert a.role is Role.LEADER and a.quiesced  # quiet: no check-quorum step-down
    a.peer_down("b")
    assert a.quiesced  # c alive: a and c are still a majority, nothing to do
    a.peer_down("c")
    assert not a.quiesced  # no live majority left
    sent = [m for m in a.ready().messages if isinstance(m, AppendRequest)]
    assert {m.recipient for m in sent} == {"b", "c"}  # heartbeats at once
    _tick_settle(c, 2 * T)
    assert a.role is not Role.LEADER


def _restarted(c: Cluster, uuid: str):
    """`uuid`'s core rebuilt from its durable state (a restart: awake, no leader known)."""
    old = c.cores[uuid]
    st = old.status()
    c.cores[uuid] = make(
        uuid,
        RaftConfig.of_voters("a", "b", "c"),
        options=OPTS,
        hard_state=HardState(st.term, st.voted_for),
        entries=old.entries(),
        applied_index=st.applied_index,
    )
    return c.cores[uuid]


def test_one_dead_follower_wakes_nobody_and_its_return_is_probed():
    """A follower's server dies: the quiet leader and the other follower stay quiet (no
    heartbeats to a dead server, in thousands of groups). When it is heard from again the
    leader, still quiet, sends it the quiesce heartbeat it missed: the restarted follower,
    its log matching, learns its leader and goes quiet; nothing else is sent."""
    c = _quiet_cluster()
    a, b = c.cores["a"], c.cores["b"]
    c.down = {"c"}
    a.peer_down("c")
    b.peer_down("c")
    assert a.quiesced and b.quiesced
    before = len(c.readies["a"])
    _tick_settle(c, 10 * T)
    assert len(c.readies["a"]) == before  # not one heartbeat meanwhile
    cc = _restarted(c, "c")
    assert not cc.quiesced and cc.leader_uuid is None
    c.down = set()
    a.peer_up("c")
    b.peer_up("c")
    assert a.quiesced and b.quiesced
    sent = a.ready().messages
    assert [(type(m), m.recipient, m.quiesce) for m in sent] == [(AppendRequest, "c", True)]
    for m in sent:
        cc.step(m)
    c.settle()
    assert cc.quiesced and cc.leader_uuid == "a" and cc.term == a.term
    assert a.quiesced and b.quiesced  # the answer (whole log held) keeps the leader quiet


def _write_while_c_is_dead(c: Cluster):
    """c's server dies and is declared dead; the leader a commits a write with b and goes
    quiet again without c's answer. Returns a."""
    a = c.cores["a"]
    c.down = {"c"}
    for core in (a, c.cores["b"]):
        core.peer_down("c")
    a.propose(b"w2")
    c.settle()
    _tick_settle(c, 3 * OPTS.heartbeat_interval_ticks)
    assert a.quiesced
    return a


def test_a_returned_follower_that_is_behind_wakes_its_leader_and_catches_up():
    """Writes committed while a follower's server was dead: the quiesce heartbeat sent when
    it is heard from again does not match its log; its rejection wakes the leader, which
    catches it up, and the group goes quiet again."""
    c = _quiet_cluster()
    a = _write_while_c_is_dead(c)
    cc = _restarted(c, "c")
    assert cc.last_index < a.last_index
    c.down = set()
    a.peer_up("c")
    c.cores["b"].peer_up("c")
    c.settle()
    assert not a.quiesced  # woken by the rejection
    _tick_settle(c, 3 * OPTS.heartbeat_interval_ticks)
    assert cc.commit_index == cc.last_index == a.last_index
    assert all(k.quiesced for k in c.cores.values())


def test_a_leader_goes_quiet_without_a_dead_followers_answer():
    """Woken by a write while a follower's server is dead: the leader commits with the live
    follower and goes quiet again without the dead one's answer; the write reaches the dead
    follower once its server is back."""
    c = _quiet_cluster()
    a, cc = _write_while_c_is_dead(c), c.cores["c"]
    assert a.commit_index == a.last_index
    assert cc.last_index < a.last_index
    c.down = set()
    a.peer_up("c")
    c.settle()
    _tick_settle(c, 3 * OPTS.heartbeat_interval_ticks)
    assert cc.commit_index == a.last_index and all(k.quiesced for k in c.cores.values())


def test_a_probe_of_a_dead_follower_leaves_the_leader_quiet():
    """The driver's probe of a server declared dead: one heartbeat to it alone; the leader
    stays quiet. A probe from a follower, or of a stranger, sends nothing."""
    c = _quiet_cluster()
    a, b = c.cores["a"], c.cores["b"]
    c.down = {"c"}
    a.peer_down("c")
    assert a.probe("c")
    sent = a.ready().messages
    assert [(type(m), m.recipient) for m in sent] == [(AppendRequest, "c")]
    assert a.quiesced
    assert not b.probe("c") and not a.probe("zz")
    assert not b.ready().messages and not a.ready().messages


def test_no_quiet_without_a_live_majority():
    c = _three()
    a = _elect(c)
    a.propose(b"w")
    c.settle()
    c.down = {"b", "c"}
    a.peer_down("b")
    a.peer_down("c")
    _tick_settle(c, 3 * OPTS.heartbeat_interval_ticks)
    assert not a.quiesced


def test_one_woken_follower_wakes_the_group_by_its_pre_vote():
    """A follower woken alone (its driver saw the leader's server die first, or the leader's
    replica stopped) campaigns; its pre-vote wakes the others, which refuse while they count
    their lease, and the leader heartbeats again if it is alive."""
    c = _quiet_cluster()
    a, b, cc = c.cores["a"], c.cores["b"], c.cores["c"]
    b.peer_down("a")
    _tick_settle(c, 3 * T)
    assert a.role is Role.LEADER and b.leader_uuid == "a" and cc.leader_uuid == "a"
    assert a.term == b.term == cc.term  # the alive leader kept its term
    _tick_settle(c, 3 * OPTS.heartbeat_interval_ticks)
    assert all(core.quiesced for core in c.cores.values())


def test_a_stale_quiesce_message_is_ignored():
    c = _three()
    a = _elect(c)
    old_term = a.term
    # b and c elect b in a higher term; a hears nothing of it.
    c.down = {"a"}
    b, cc = c.cores["b"], c.cores["c"]
    for _ in range(6 * T):
        _tick_settle(c, 1)
        if b.role is Role.LEADER or cc.role is Role.LEADER:
            break
    if cc.role is Role.LEADER:
        b, cc = cc, b
    assert b.role is Role.LEADER and b.term > old_term
    stale = AppendRequest(
        TID, "a", cc.uuid, old_term, cc.last_index, cc.last_term, (), cc.commit_index, quiesce=True
    )
    cc.step(stale)
    assert not cc.quiesced and cc.leader_uuid == b.uuid
    # The same in the current term from a server that is not the leader: refused, not quiet.
    forged = AppendRequest(
        TID, "a", cc.uuid, cc.term, cc.last_index, cc.last_term, (), cc.commit_index, quiesce=True
    )
    cc.step(forged)
    assert not cc.quiesced and cc.refused_messages >= 1


def test_a_quiesce_heartbeat_over_a_mismatched_log_does_not_quiet():
    c = _three()
    a = _elect(c)
    cc = c.cores["c"]
    c.down = {"c"}
    a.propose(b"w")
    c.settle()
    assert cc.last_index < a.last_index
    m = AppendRequest(
        TID, "a", "c", a.term, a.last_index, a.last_term, (), a.commit_index, quiesce=True
    )
    cc.step(m)
    assert not cc.quiesced  # its log does not reach prev: rejected, awake


def test_any_other_message_wakes_a_quiet_follower():
    c = _quiet_cluster()
    b = c.cores["b"]
    b.step(VoteRequest(TID, "c", "b", b.term + 1, b.last_term, b.last_index, pre_vote=True))
    assert not b.quiesced
    vote = [m for m in b.ready().messages if m.recipient == "c"]
    assert vote and not vote[0].granted  # it still counts its leader's lease


def test_quiet_is_off_by_default():
    opts = RaftOptions(election_timeout_ticks=T, heartbeat_interval_ticks=2)
    c = _three(opts)
    a = _elect(c)
    a.propose(b"w")
    c.settle()
    _tick_settle(c, 5 * T)
    assert not any(core.quiesced for core in c.cores.values())
    assert not any(m.quiesce for m in _sent(c, "a") if isinstance(m, AppendRequest))


def test_the_driver_turns_quiet_groups_on_unless_told_not_to(monkeypatch):
    monkeypatch.delenv(QUIET_GROUPS_ENV, raising=False)
    assert DriverOptions().raft.quiesce
    monkeypatch.setenv(QUIET_GROUPS_ENV, "0")
    assert not DriverOptions().raft.quiesce
    monkeypatch.setenv(QUIET_GROUPS_ENV, "1")
    assert DriverOptions().raft.quiesce


def test_restart_starts_awake():
    c = _quiet_cluster()
    b = c.cores["b"]
    st = b.status()
    again = make(
        "b",
        RaftConfig.of_voters("a", "b", "c"),
        options=OPTS,
        hard_state=HardState(st.term, st.voted_for),
        entries=b.entries(),
        applied_index=st.applied_index,
    )
    assert not again.quiesced and again.ticks_to_next_event() <= 2 * T


def _heal(c: Cluster) -> None:
    """The dead servers come back; the others' drivers hear them again (`peer_up`)."""
    for dead in c.down:
        for u in "abc":
            if u != dead:
                c.cores[u].peer_up(dead)
    c.down = set()


def test_random_idle_and_busy_periods_keep_logs_and_commits_agreeing():
    """Random proposals, reads, quiet spells and dead peers: the group always comes back,
    commits every proposal, and never has two leaders in a term."""
    rnd = random.Random(5)
    c = _quiet_cluster()
    leaders_by_term: dict[int, set[str]] = {}
    for _ in range(300):
        x = rnd.random()
        leader = next((u for u, k in c.cores.items() if k.role is Role.LEADER), None)
        if x < 0.2 and leader:
            c.cores[leader].propose(b"p")
        elif x < 0.3 and leader:
            c.cores[leader].read_index(rnd.randrange(1 << 30))
        elif x < 0.35:
            _heal(c)
            dead = rnd.choice("abc")
            c.down = {dead}
            for u in "abc":
                if u != dead:
                    c.cores[u].peer_down(dead)
        elif x < 0.45:
            _heal(c)
        _tick_settle(c, rnd.randint(1, 6))
        for u, k in c.cores.items():
            if k.role is Role.LEADER:
                leaders_by_term.setdefault(k.term, set()).add(u)
    assert all(len(v) == 1 for v in leaders_by_term.values()), leaders_by_term
    _heal(c)
    for u in "abc":
        for v in "abc":
            if u != v:
                c.cores[u].peer_down(v)
    for u in "abc":
        for v in "abc":
            if u != v:
                c.cores[u].peer_up(v)
    _tick_settle(c, 6 * T)
    leader = [u for u, k in c.cores.items() if k.role is Role.LEADER]
    assert len(leader) == 1
    lk = c.cores[leader[0]]
    lk.propose(b"last")
    c.settle()
    _tick_settle(c, 6)
    ents = {u: [(e.term, e.index) for e in k.entries()] for u, k in c.cores.items()}
    assert ents["a"] == ents["b"] == ents["c"]
    assert all(k.commit_index == lk.last_index for k in c.cores.values())
    assert all(k.quiesced for k in c.cores.values())


def test_a_leaders_farewell_is_sent_again_at_the_next_liveness_rounds(monkeypatch):
    """The last heartbeat of a leader replica that stops while its server lives on (deleted,
    failed) is all that wakes its quiet followers: one lost (a full peer queue) left them
    without a leader while this server kept answering liveness. It is repeated."""
    d = RaftDriver("a", appender=None, options=DriverOptions(raft=OPTS))  # never started
    sent: list = []
    monkeypatch.setattr(d, "_send", lambda msgs: sent.append(list(msgs)))
    farewell = [AppendRequest(TID, "a", "b", 3, 5, 3, (), 5)]
    d._round([("farewell", farewell)])
    for _ in range(FAREWELL_REPEATS + 3):
        d._liveness(time.monotonic(), {})
    assert sent == [farewell] * (1 + FAREWELL_REPEATS)


def test_liveness_hears_only_the_peers_of_its_groups():
    """An empty batch is a liveness message from its rpc caller; only servers named by a
    config are tracked (a stranger's uuids cannot grow the map)."""
    d = RaftDriver("me", appender=None)  # never started
    d.learn_addresses({"p1": "127.0.0.1:1"})
    assert d.deliver([], {}, "p1") == 0
    d.deliver([], {}, "stranger")
    assert set(d._heard) == {"p1"}


# ---------------------------------------------------------------- real processes


def _log_has(proc, text: str) -> bool:
    return proc.err_path.exists() and text in proc.err_path.read_text(errors="replace")


@pytest.mark.integration
def test_real_servers_go_quiet_and_fail_over_when_the_leaders_server_dies(tmp_path, monkeypatch):
    """Three tablet server processes, one tablet: once idle, its leader and both followers
    go quiet (their debug lines); kill -9 of the leader's server is seen by the survivors'
    liveness exchange, which wakes the quiet group; they elect a leader and take writes.
    A read at a quiet leader wakes it and is served."""
    monkeypatch.delenv(QUIET_GROUPS_ENV, raising=False)  # on by default
    trio = TServerTrio(tmp_path, extra_args=["--log-level", "debug"])
    try:
        trio.start_all()
        trio.create_tablet("q1")
        trio.write_anywhere("q1", range(10))
        lead = trio.leader("q1")
        followers = [i for i in range(3) if i != lead]
        p = trio.procs
        wait_for(lambda: _log_has(p[lead], "q1/" + p[lead].uuid + " quiet at"), 30, "quiet")
        for f in followers:
            wait_for(
                lambda f=f: _log_has(p[f], f"q1/{p[f].uuid} quiet, following {p[lead].uuid}"),
                30,
                "a quiet follower",
            )
        # A scan at the quiet leader: its read index wakes the group for one round.
        assert trio.scan_ids(lead, "q1") == list(range(10))
        trio.write(lead, "q1", [10])
        wait_for(
            lambda: p[lead].err_path.read_text().count(f"q1/{p[lead].uuid} quiet at") >= 2,
            30,
            "quiet again",
        )
        for f in followers:
            wait_for(
                lambda f=f: (
                    p[f].err_path.read_text().count(f"q1/{p[f].uuid} quiet, following") >= 2
                ),
                30,
                "quiet followers again",
            )
        trio.kill9(lead)
        wait_for(
            lambda: all(_log_has(p[f], "1 quiet groups woke") for f in followers),
            30,
            "the survivors to declare the leader's server dead",
        )
        trio.write_anywhere("q1", [11])
        new = trio.leader("q1", among=followers)
        assert trio.scan_ids(new, "q1") == list(range(12))
    finally:
        trio.stop_all()


@pytest.mark.integration
def test_a_dead_follower_wakes_no_group_and_rejoins_its_leaders_term(tmp_path, monkeypatch):
    """Three tablet server processes, two tablets, quiet. Kill -9 of a server that leads
    neither: the survivors declare it dead and wake no group (a leader needs no answer from
    a dead server to stay quiet; before, each woke and heartbeat it five times a second
    until it came back: the load behind the restart storm of thousands of replicas). A write
    meanwhile commits and its group goes quiet again without the dead follower. Restarted,
    it is heard from again, its leaders wake, and it rejoins each tablet in its leader's
    term holding every write."""
    monkeypatch.delenv(QUIET_GROUPS_ENV, raising=False)  # on by default
    trio = TServerTrio(tmp_path, extra_args=["--log-level", "debug"])
    tablets = ("d1", "d2")
    try:
        trio.start_all()
        p = trio.procs
        for t in tablets:
            trio.create_tablet(t)
            trio.write_anywhere(t, range(5))
        leaders = {t: trio.leader(t) for t in tablets}
        dead = next(i for i in range(3) if i not in leaders.values())
        for t in tablets:
            for i in range(3):
                if i != leaders[t]:
                    wait_for(
                        lambda t=t, i=i: _log_has(p[i], f"{t}/{p[i].uuid} quiet, following"),
                        30,
                        f"{t} quiet on server {i}",
                    )
        terms = {t: trio.report(leaders[t], t).current_term for t in tablets}
        trio.kill9(dead)
        line = f"peer servers {p[dead].uuid} not heard from"
        for i in range(3):
            if i == dead:
                continue
            wait_for(lambda i=i: _log_has(p[i], line), 30, f"server {i} to declare {dead} dead")
            said = [ln for ln in p[i].err_path.read_text().splitlines() if line in ln]
            assert all(ln.endswith(": 0 quiet groups woke") for ln in said), said
        lead = leaders["d1"]
        trio.write(lead, "d1", [100])
        last = trio.report(lead, "d1").last_op_id.index
        wait_for(
            lambda: _log_has(p[lead], f"d1/{p[lead].uuid} quiet at {last}"),
            30,
            "d1's leader quiet again without the dead follower's answer",
        )
        before = p[dead].err_path.stat().st_size  # the restarted server appends to it
        trio.restart(dead)
        wait_for(
            lambda: _log_has(p[lead], f"peer servers {p[dead].uuid} heard from again"),
            60,
            "the leader's server to hear the restarted one",
        )
        p = trio.procs

        def since_restart() -> str:
            with open(p[dead].err_path, errors="replace") as f:
                f.seek(before)
                return f.read()

        for t in tablets:
            want = f"{t}/{p[dead].uuid} quiet, following {p[leaders[t]].uuid}"
            wait_for(lambda want=want: want in since_restart(), 60, f"{t} quiet again")
            assert trio.report(dead, t).current_term == terms[t]
        assert trio.report(dead, "d1").last_op_id.index == last
        trio.kill9(lead)  # the restarted follower holds the write made while it was dead
        new = trio.leader("d1", among=[i for i in range(3) if i != lead])
        assert trio.scan_ids(new, "d1") == [*range(5), 100]
    finally:
        trio.stop_all()


def test_a_late_liveness_round_does_not_declare_a_peer_dead_on_a_short_silence():
    """A round that comes long after the one before (this process did not run: its peers'
    pings may still wait in its socket) declares a peer dead only after three election
    timeouts of silence; the next round on time declares it after one, as always."""
    d = RaftDriver("me", appender=None, options=DriverOptions(raft=OPTS))  # never started
    d.learn_addresses({"p1": "127.0.0.1:1"})
    t0 = 1000.0
    d._watch, d._watch_refreshed_s = {"p1"}, t0
    tick_s = d.options.tick_interval_s
    timeout_s = OPTS.election_timeout_ticks * tick_s
    interval_s = OPTS.heartbeat_interval_ticks * tick_s
    d._heard["p1"] = t0
    d._liveness(t0 + interval_s, {})
    late = t0 + 1.5 * timeout_s + LATE_ROUND_INTERVALS * interval_s  # stalled meanwhile
    d._liveness(late, {})
    assert d.late_liveness_rounds == 1 and "p1" not in d.peers_down
    d._liveness(late + interval_s, {})  # on time again: one timeout of silence is enough
    assert "p1" in d.peers_down and d.peers_declared_down == 1
    # A late round still declares a silence of three timeouts.
    d._heard["p2"] = t0
    d._watch = {"p1", "p2"}
    d._liveness(t0 + 3.5 * timeout_s + 10 * interval_s, {})
    assert d.late_liveness_rounds == 2 and "p2" in d.peers_down
