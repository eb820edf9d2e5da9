"""`logstore serve` answers appends without a worker thread waiting for each (LogStore.Append
is a deferred rpc handler, rpc/server.py): appends go on while every worker is busy."""

from __future__ import annotations

import threading

from logstore.remote import RemoteLogStore
from logstore.service import LogStoreServer, ServeConfig
from rpc import errors, privileged

from .helpers import FAST, PASSWORD, free_addresses, wait_for


def test_appends_are_answered_while_the_only_worker_is_busy(tmp_path):
    raft, dead = free_addresses(2)
    config = ServeConfig(
        raft_address=raft,
        peers=(),
        data_dir=str(tmp_path / "r0"),
        password=PASSWORD,
        workers=1,
        insecure=True,
        replica=FAST,
    )
    with LogStoreServer(config) as server:
        key = privileged.derive_key(PASSWORD)
        with RemoteLogStore([server.address], privileged_key=key) as store:
            store.barrier(timeout_s=20.0)
            first = store.append("log", b"a", timeout_s=10.0)
            # AddMember of an address where nobody listens holds the one worker while it
            # probes (up to logstore.replicated.MEMBER_PROBE_S, 10 s).
            outcome: list[BaseException] = []

            def add_member() -> None:
                try:
                    store.add_member(dead, timeout_s=20.0)
                except errors.RpcError as err:
                    outcome.append(err)

            t = threading.Thread(target=add_member)
            t.start()
            wait_for(lambda: server.rpc.stats()["inflight"] >= 1, what="AddMember on the worker")
            # Before, the append waited in the queue behind it and timed out.
            ids = [store.append("log", bytes([i]), timeout_s=3.0) for i in range(5)]
            assert ids == list(range(first + 1, first + 6))
            # A condition that fails is answered with the log's last id, as before.
            try:
                store.append("log", b"x", expected_id=first, timeout_s=3.0)
            except errors.ConditionFailed as err:
                assert err.last_id == first + 5  # type: ignore[attr-defined]
            else:
                raise AssertionError("a stale expected id was accepted")
            t.join(30)
            assert not t.is_alive() and len(outcome) == 1  # the probe found nobody there
