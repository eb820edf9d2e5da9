"""A leader hint names the current lease holder or nothing (issue 27, section 4): a leader
woken after a SIGSTOP past its lease answered NOT_LEADER naming itself. Plain calls of the
pure LeaseKeeper, then real coordinator processes: SIGSTOP the leader past its lease, ask
it while it is stopped, SIGCONT, read its answers."""

from __future__ import annotations

import signal
import threading

import pytest

from coordinator.leases import LeaseConfig, LeaseKeeper, LeaseValue, Role
from rpc.errors import NotLeader, RpcError
from rpc.protocols import coordinator_pb2 as pb

CFG = LeaseConfig(lease_timeout_s=1.0, renew_interval_s=0.2, drift_margin_s=0.1)


def leader(uuid: str = "a") -> LeaseKeeper:
    """A keeper that took over at t=1.0 (takeover record id 1)."""
    k = LeaseKeeper(uuid, f"{uuid}:1", CFG, seed=1)
    k.observe_entries(0, [])
    k.observe_tail(0.0, 0)
    k.observe_live_leases(0, {})
    action = k.poll(1.0)
    assert action is not None and action.lease.takeover
    k.append_succeeded(1.0, action.expected_id)
    assert k.role is Role.LEADER and k.epoch == 1
    return k


def test_a_serving_leader_names_itself():
    k = leader()
    hint = k.hint(1.5)
    assert (hint.uuid, hint.address, hint.epoch) == ("a", "a:1", 1)


def test_a_leader_woken_past_its_lease_names_nobody_not_itself():
    k = leader()
    woken = 1.0 + CFG.lease_timeout_s + 5.0  # paused well past its lease
    assert k.role is Role.LEADER and not k.is_serving(woken)  # poll has not run yet
    assert not k.hint(woken)
    k.poll(woken)  # steps down
    assert k.role is Role.FOLLOWER
    assert not k.hint(woken)
    # Its log read shows the new holder's takeover: that one is named from then on.
    k.observe_entries(3, [(2, None, ()), (3, LeaseValue("b", "b:1", 0, True), ())])
    k.observe_tail(woken + 0.01, 3)
    hint = k.hint(woken + 0.02)
    assert (hint.uuid, hint.epoch) == ("b", 3)


def test_a_follower_stops_naming_a_holder_whose_lease_has_ended():
    k = LeaseKeeper("x", "x:1", CFG, seed=1)
    k.observe_entries(1, [(1, LeaseValue("b", "b:1", 0, True), ())])
    k.observe_tail(10.0, 1)
    assert k.hint(10.5).uuid == "b"
    # The tail unchanged for a whole lease timeout: b's lease has ended, whoever takes
    # over is not known yet.
    assert not k.hint(10.0 + CFG.lease_timeout_s)
    # b renews (a new tail): named again.
    k.observe_entries(2, [(2, LeaseValue("b", "b:1", 1, False), ())])
    k.observe_tail(11.5, 2)
    assert k.hint(11.6).uuid == "b" and k.hint(11.6).epoch == 1


def test_a_follower_that_stepped_down_does_not_name_its_own_old_lease():
    k = leader()
    k.step_down(1.2, "test")
    assert not k.hint(1.3)


@pytest.mark.integration
def test_a_leader_woken_after_sigstop_never_hints_at_itself(tmp_path):
    from logcentric.meta import CoordinatorClient, SilenceWatch
    from tests.coordinator.coordproc import CoordinatorGroup, wait_for

    group = CoordinatorGroup(tmp_path, 3)
    watch = SilenceWatch("test-watch")
    try:
        for i in range(3):
            group.start(i)
        group.wait_started()
        group.wait_admin()
        with CoordinatorClient(
            group.rpc, timeout_s=30.0, watch=watch, credentials=group.credentials
        ) as client:
            old = group.leader_index(client, 60.0)
            old_address = group.rpc[old]
            old_uuid = client.get_leader(old_address).leader_uuid
            others = [a for j, a in enumerate(group.rpc) if j != old]
            proc = group.procs[old]
            assert proc is not None

            def ask(timeout_s: float) -> object:
                try:
                    return client.call_at(
                        old_address,
                        "ListTables",
                        pb.ListTablesRequest(),
                        pb.ListTablesResponse,
                        timeout_s,
                        patience_s=timeout_s,  # through the watch: counted in flight
                    )
                except RpcError as e:
                    return e

            def new_leader() -> str:
                for address in others:
                    try:
                        if client.status(address, timeout_s=1.0).role == "LEADER":
                            return address
                    except RpcError:
                        pass
                return ""

            answers: list[object] = []
            askers = [
                threading.Thread(target=lambda: answers.append(ask(60.0)), daemon=True)
                for _ in range(4)
            ]
            proc.p.send_signal(signal.SIGSTOP)
            try:
                new_address = wait_for(new_leader, 60, "a takeover while it is stopped")
                # Requests sent while it is stopped wait in its socket: they are the first
                # things it answers when woken, before its lease thread reads the log.
                for t in askers:
                    t.start()
                wait_for(lambda: watch.in_flight() == len(askers), 30, "requests sent")
            finally:
                proc.p.send_signal(signal.SIGCONT)
            for t in askers:
                t.join(90)
            assert len(answers) == len(askers), answers

            def names_the_new_leader() -> bool:
                answers.append(ask(10.0))
                last = answers[-1]
                return isinstance(last, NotLeader) and last.leader_hint.address == new_address

            # Then until it names the new holder (once it has read the log).
            wait_for(names_the_new_leader, 60, "a hint at the new leader")
            for answer in answers:
                assert isinstance(answer, NotLeader), answers  # it never served again
                hint = answer.leader_hint
                assert hint.uuid != old_uuid and hint.address != old_address, answer
                assert hint.address in ("", new_address), answer
    finally:
        watch.close()
        group.close()
