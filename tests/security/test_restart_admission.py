"""A coordinator node that starts again does not refuse a key it has not loaded yet
(design/security.md section 3, "Admission while a node loads its keys"), real processes.

The flake: a client whose first address was a coordinator node that had just restarted got
KeyRefused from it (the CURVE handshake's ZAP refusal, final for the client) although every
other node admitted its key. The node's rpc server binds, with its ZAP handler, before its
replay has put the principals table in the catalog: a key it has not replayed yet is
"unknown" there. Here the window is held open without any timing: the user is added while
node c0 is down and the other two nodes are paused (SIGSTOP) before c0 starts again, so c0's
replica lacks the user's record and cannot catch up (no quorum) until they resume. The user
calls at once; c0 must not refuse (on the old code it did: KeyRefused, the call failed), and
once the others resume the call succeeds and c0 itself serves the user. A key nobody
admitted is still refused by c0 at the handshake once it has loaded its keys.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from logcentric.meta import CoordinatorClient
from rpc import errors, keys
from rpc.client import KeyRefused
from rpc.credentials import Credentials
from tests.coordinator.coordproc import CoordinatorGroup
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

WAIT_S = 90.0
CALL_TIMEOUT_S = 60.0


def admits(creds: Credentials, address: str) -> bool:
    """Whether the node at `address` serves `creds` (a new connection: the handshake)."""
    with CoordinatorClient([address], credentials=creds, timeout_s=5) as c:
        try:
            c.status(address, timeout_s=2)
        except errors.RpcError:
            return False
    return True


def test_a_restarted_node_does_not_refuse_a_key_it_has_not_loaded(tmp_path):
    group = CoordinatorGroup(tmp_path, 3)
    paused: list[int] = []
    try:
        for i in range(3):
            group.start(i)
        group.wait_started()
        group.wait_admin()
        group.procs[0].kill()

        # A reader added while c0 is down: c0's replica has never seen her record.
        ursula = keys.KeyPair.generate()
        group.add_principal("ursula", "user", ursula.public, ["reader"], WAIT_S)
        assert group.credentials is not None
        creds = Credentials("ursula", "user", ("reader",), ursula, group.credentials.coordinators)
        assert creds.addresses[0] == group.rpc[0]  # her first address is c0
        # Both replayed her (a follower refuses her until its replay applies her record).
        for address in group.rpc[1:]:
            wait_for(lambda a=address: admits(creds, a), WAIT_S, f"{address} admits ursula")

        # c1 and c2 paused: c0 starts again with no quorum, so it cannot learn her.
        for i in (1, 2):
            os.kill(group.procs[i].p.pid, signal.SIGSTOP)
            paused.append(i)
        c0 = group.start(0)
        wait_for(lambda: " rpc=" in c0.text(), WAIT_S, "c0 bound its rpc port")

        outcome: dict[str, object] = {}
        done = threading.Event()

        def call() -> None:
            try:
                with CoordinatorClient(group.rpc, credentials=creds, timeout_s=CALL_TIMEOUT_S) as c:
                    outcome["tables"] = c.list_tables()
            except BaseException as e:  # noqa: BLE001 - reported by the assertion below
                outcome["error"] = e
            finally:
                done.set()

        caller = threading.Thread(target=call, name="ursula-call", daemon=True)
        caller.start()
        # c0 has answered her handshake (refused it, on the old code, which ends the call).
        wait_for(lambda: done.is_set() or ursula.public in c0.text(), WAIT_S, "c0 saw ursula's key")
        for i in paused:
            os.kill(group.procs[i].p.pid, signal.SIGCONT)
        paused.clear()
        assert done.wait(CALL_TIMEOUT_S + 30), "ursula's call did not end"
        caller.join(5)
        error = outcome.get("error")
        assert error is None, f"ursula's call failed: {type(error).__name__}: {error}"
        assert outcome["tables"] == []
        text = c0.text()
        assert "let key " + ursula.public in text, text[-3000:]
        assert (
            "refused a connection at the CURVE handshake: unknown key " + ursula.public not in text
        )

        # Once c0 has loaded its keys (c1/c2 back: a quorum), it serves her itself...
        wait_for(lambda: "admitted keys loaded" in c0.text(), WAIT_S, "c0 loaded its keys")
        with CoordinatorClient([group.rpc[0]], credentials=creds, timeout_s=30) as only_c0:
            assert only_c0.status(group.rpc[0], timeout_s=10).public_key == group.node_keys[0]
        # ...and refuses a key nobody admitted, at the handshake, as before.
        stranger = Credentials(
            "stranger", "user", ("reader",), keys.KeyPair.generate(), group.credentials.coordinators
        )
        with CoordinatorClient([group.rpc[0]], credentials=stranger, timeout_s=10) as c:
            with pytest.raises(KeyRefused):
                c.status(group.rpc[0], timeout_s=5)
    finally:
        for i in paused:
            os.kill(group.procs[i].p.pid, signal.SIGCONT)
        group.close()
