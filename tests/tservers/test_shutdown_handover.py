"""A graceful stop hands leadership over first (issue 28, design/consensus.md section 8,
"Fourth step"): three real tablet server processes, 20 tablets of three voters each, idle
until every group is quiet. The server that leads the most is sent SIGTERM. Before it
closes it hands the leadership of every group it leads to a follower on a live server
(TimeoutNow: the target campaigns at once), so by the time the process has exited every
tablet has a leader on the two survivors, elected in the very next term (one election,
none after a timeout), and its log says "handed over N of N".

Without it, the stopping leader's groups only woke (its farewell heartbeat) and elected
once their election timeout passed after it was gone; at a restart of thousands of
replicas those elections were a storm (design/consensus.md, "Where the rest goes").

And a stop whose followers cannot answer (both other servers SIGSTOPped) still ends: the
hand-over gives up on followers not heard from, within its deadline, and says how many
groups it left."""

from __future__ import annotations

import os
import signal

import pytest

from tests.consensus.test_quiescence import _quiet_cluster, _sent, _tick_settle
from tests.replication.helpers import TServerTrio
from tests.support.procs import wait_for
from tservers.consensus import AppendRequest, Role, TimeoutNow
from tservers.raft_driver import QUIET_GROUPS_ENV
from tservers.server import LEADERSHIP_HANDOVER_ENV

TABLETS = [f"h{i:02d}" for i in range(20)]
EXIT_WAIT_S = 60.0  # for a loaded machine; the hand-over's own deadline is a few seconds


def test_core_quiet_leader_hands_over_with_one_message():
    """The pure core: a quiet leader's transfer with heartbeat=False sends the caught-up
    target its TimeoutNow and nothing else; the target leads in the next term, and a
    replica told to stop campaigning (its server is stopping) never campaigns again,
    even when its new leader goes silent, while it still follows."""
    c = _quiet_cluster()
    a, b = c.cores["a"], c.cores["b"]
    term = a.term
    assert {v for v, caught_up in a.handover_targets() if caught_up} == {"b", "c"}
    a.stop_campaigning()
    c.readies["a"].clear()
    assert a.transfer_leadership("b", heartbeat=False).status.name == "OK"
    rd = a.ready()
    assert [type(m) for m in rd.messages] == [TimeoutNow], rd.messages
    assert rd.messages[0].recipient == "b"
    for m in rd.messages:
        c.deliver(m)
    c.settle()
    assert b.role is Role.LEADER and b.term == term + 1
    assert a.role is Role.FOLLOWER and a.leader_uuid == "b"
    assert any(isinstance(m, AppendRequest) for m in _sent(c, "b"))
    c.down.add("b")  # the new leader silent: "c" elects, "a" (stopping) never campaigns
    _tick_settle(c, 10 * 10)
    assert a.role is Role.FOLLOWER
    assert c.cores["c"].role is Role.LEADER


def _log(proc) -> str:
    return proc.err_path.read_text(errors="replace") if proc.err_path.exists() else ""


def _reports(trio: TServerTrio, i: int) -> dict:
    return {r.tablet_id: r for r in trio.client(i).list_tablets().tablets}


def _led(trio: TServerTrio, among) -> dict[str, tuple[int, int]]:
    """tablet -> (server index, term) of its leader among `among` (the highest term)."""
    best: dict[str, tuple[int, int]] = {}
    for i in among:
        for tid, r in _reports(trio, i).items():
            if r.role == "LEADER" and (tid not in best or r.current_term > best[tid][1]):
                best[tid] = (i, r.current_term)
    return best


def _leaders(trio: TServerTrio, among) -> dict[str, tuple[int, int]] | None:
    """`_led`, or None while some tablet has no leader among `among`."""
    best = _led(trio, among)
    return best if set(best) >= set(TABLETS) else None


def _quiet(trio: TServerTrio) -> bool:
    """Every tablet's leader logged going quiet (at debug level)."""
    leaders = _leaders(trio, range(3))
    if leaders is None:
        return False
    logs = [_log(p) for p in trio.procs]
    return all(f"{tid}/{trio.procs[i].uuid} quiet at" in logs[i] for tid, (i, _) in leaders.items())


def _cluster(tmp_path, monkeypatch, handover_s: str | None) -> tuple[TServerTrio, int]:
    monkeypatch.delenv(QUIET_GROUPS_ENV, raising=False)  # quiet groups on (the default)
    if handover_s is None:
        monkeypatch.delenv(LEADERSHIP_HANDOVER_ENV, raising=False)
    else:
        monkeypatch.setenv(LEADERSHIP_HANDOVER_ENV, handover_s)
    trio = TServerTrio(tmp_path, extra_args=["--log-level", "debug"])
    trio.start_all()
    for tid in TABLETS:
        trio.create_tablet(tid)
    wait_for(lambda: _quiet(trio), 60, "every group quiet", interval_s=0.2)
    leaders = _leaders(trio, range(3))
    assert leaders is not None
    counts = [sum(1 for i, _ in leaders.values() if i == k) for k in range(3)]
    return trio, max(range(3), key=lambda k: counts[k])


@pytest.mark.integration
def test_sigterm_hands_leadership_to_the_survivors(tmp_path, monkeypatch):
    trio, victim = _cluster(tmp_path, monkeypatch, None)
    try:
        before = _leaders(trio, range(3))
        assert before is not None
        led = sorted(tid for tid, (i, _) in before.items() if i == victim)
        assert led  # 20 tablets on 3 servers: the one leading most leads some
        survivors = [i for i in range(3) if i != victim]

        trio._drop_client(victim)
        assert trio.procs[victim].terminate(EXIT_WAIT_S) == 0

        # The process is gone: no election has had time to run after it (a follower waits
        # an election timeout and more). Every tablet is led on the survivors already.
        after = _led(trio, survivors)
        missing = sorted(set(TABLETS) - set(after))
        assert not missing, f"tablets without a leader on the survivors: {missing}"
        for tid in led:
            # One election: the target's, in the term after its old leader's.
            assert after[tid][1] == before[tid][1] + 1, (tid, before[tid], after[tid])
        for tid in set(TABLETS) - set(led):
            assert after[tid] == before[tid], (tid, before[tid], after[tid])
        text = _log(trio.procs[victim])
        line = f"leadership handed over for {len(led)} of {len(led)} tablets led here"
        assert line in text, [ln for ln in text.splitlines() if "handed over" in ln]
        assert "; 0 left, 0 of them still led here" in text
        if len(led) >= 2:  # spread over both survivors (the fewest given so far first)
            assert {after[tid][0] for tid in led} == set(survivors)
    finally:
        trio.stop_all()


@pytest.mark.integration
def test_sigterm_with_unreachable_followers_still_stops(tmp_path, monkeypatch):
    trio, victim = _cluster(tmp_path, monkeypatch, "3")
    others = [i for i in range(3) if i != victim]
    stopped: list[int] = []
    try:
        before = _leaders(trio, range(3))
        assert before is not None
        led = sum(1 for i, _ in before.values() if i == victim)
        for i in others:  # alive to the victim a moment ago, answering nothing from now on
            os.kill(trio.procs[i].proc.pid, signal.SIGSTOP)
            stopped.append(i)
        trio._drop_client(victim)
        assert trio.procs[victim].terminate(EXIT_WAIT_S) == 0
        text = _log(trio.procs[victim])
        assert f"leadership handed over for 0 of {led} tablets led here" in text, [
            ln for ln in text.splitlines() if "handed over" in ln
        ]
        assert f"; {led} left, " in text
        assert "(deadline 3.0 s, or no live follower answered" in text
    finally:
        for i in stopped:
            os.kill(trio.procs[i].proc.pid, signal.SIGCONT)
        trio.stop_all()
