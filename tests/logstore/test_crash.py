"""kill -9 of every replica at random moments under concurrent appends, several rounds.

After each restart: every acknowledged append is present exactly once at the id it was
acknowledged with, ids are contiguous, every replica agrees, and conditional appends work.
Replicas are real `logstore serve` processes with a low compaction threshold, so kills
also land during snapshots and journal trims. The kill moments are drawn as numbers of
acknowledged appends (seeded: LOGSTORE_CRASH_SEED), not as times.
"""

from __future__ import annotations

import os
import random
import threading

import pytest

from logstore.api import LogConditionFailed
from logstore.remote import RemoteLogStore
from rpc.errors import RpcError

from .helpers import wait_for
from .procs import make_replicas

pytestmark = pytest.mark.integration

ROUNDS = int(os.environ.get("LOGSTORE_CRASH_ROUNDS", "4"))
WRITERS = 8
COND_WRITERS = 2


class Workload:
    def __init__(self, rpc_addresses: list[str], rnd: int) -> None:
        self.rpc = rpc_addresses
        self.round = rnd
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked: dict[str, dict[int, bytes]] = {"kill": {}, "cond": {}}
        self.count = 0
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for w in range(WRITERS):
            t = threading.Thread(target=self._plain, args=(w,), name=f"crash-writer-{w}")
            self.threads.append(t)
        for w in range(COND_WRITERS):
            t = threading.Thread(target=self._cond, args=(w,), name=f"crash-cond-{w}")
            self.threads.append(t)
        for t in self.threads:
            t.start()

    def _client(self, w: int) -> RemoteLogStore:
        order = self.rpc[w % len(self.rpc) :] + self.rpc[: w % len(self.rpc)]
        return RemoteLogStore(order, connect_timeout_s=1.0)

    def _record(self, log: str, new_id: int, payload: bytes) -> None:
        with self.lock:
            assert new_id not in self.acked[log], (log, new_id)
            self.acked[log][new_id] = payload
            self.count += 1

    def _plain(self, w: int) -> None:
        with self._client(w) as store:
            k = 0
            while not self.stop.is_set():
                payload = b"r%d-w%d-%d" % (self.round, w, k)
                k += 1
                try:
                    new_id = store.append("kill", payload, timeout_s=3.0)
                except RpcError:
                    continue
                self._record("kill", new_id, payload)

    def _cond(self, w: int) -> None:
        with self._client(w) as store:
            k = 0
            while not self.stop.is_set():
                payload = b"c%d-w%d-%d" % (self.round, w, k)
                k += 1
                try:
                    last = store.last_id("cond", timeout_s=3.0)
                    new_id = store.append("cond", payload, expected_id=last + 1, timeout_s=3.0)
                except LogConditionFailed:
                    continue
                except RpcError:
                    continue
                assert new_id == last + 1
                self._record("cond", new_id, payload)

    def acks(self) -> int:
        with self.lock:
            return self.count

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
            assert not t.is_alive(), t.name


def _read_all(store: RemoteLogStore, log: str) -> list:
    out = []
    from_id = 1
    while True:
        page = store.read(log, from_id, 10_000, timeout_s=10.0)
        out.extend(page)
        if len(page) < 10_000:
            return out
        from_id = page[-1].id + 1


def _verify(replicas, acked: dict[str, dict[int, bytes]]) -> None:
    views = []
    for r in replicas:
        with RemoteLogStore([r.rpc_address], connect_timeout_s=5.0) as store:
            store.barrier(timeout_s=30.0)
            views.append({log: _read_all(store, log) for log in acked})
            for log in acked:
                assert store.last_id(log) == len(views[-1][log])
    for log, want in acked.items():
        entries = views[0][log]
        assert [e.id for e in entries] == list(range(1, len(entries) + 1)), "ids not contiguous"
        payloads = [e.data for e in entries]
        assert len(set(payloads)) == len(payloads), "an append is present twice"
        by_id = {e.id: e.data for e in entries}
        for i, payload in want.items():
            assert by_id.get(i) == payload, f"acknowledged {log}#{i} lost or changed"
        for v in views[1:]:
            assert v[log] == entries, "replicas disagree"


def test_kill9_every_replica_under_concurrent_appends(tmp_path):
    seed = int(os.environ.get("LOGSTORE_CRASH_SEED", random.randrange(1 << 30)))
    print(f"LOGSTORE_CRASH_SEED={seed}")
    rng = random.Random(seed)
    replicas = make_replicas(tmp_path, 3, ["--compaction-min-entries", "300"])
    rpc = [r.rpc_address for r in replicas]
    acked: dict[str, dict[int, bytes]] = {"kill": {}, "cond": {}}
    try:
        for rnd in range(ROUNDS):
            for r in replicas:
                r.start()
            _verify(replicas, acked)
            work = Workload(rpc, rnd)
            work.start()
            try:
                order = rng.sample(range(3), 3)
                target = rng.randint(50, 600)
                wait_for(lambda t=target, w=work: w.acks() >= t, 120, "acks before the 1st kill")
                replicas[order[0]].kill()
                target = work.acks() + rng.randint(0, 400)
                wait_for(lambda t=target, w=work: w.acks() >= t, 120, "acks before the 2nd kill")
                replicas[order[1]].kill()
                replicas[order[2]].kill()
            finally:
                work.finish()
            for log in acked:
                for i, p in work.acked[log].items():
                    assert acked[log].get(i, p) == p, f"{log}#{i} acknowledged twice"
                    acked[log][i] = p
            print(f"round {rnd}: {work.acks()} acks; totals", {k: len(v) for k, v in acked.items()})
        for r in replicas:
            r.start()
        _verify(replicas, acked)
        with RemoteLogStore(rpc) as store:
            last = store.last_id("cond")
            assert store.append("cond", b"final", expected_id=last + 1) == last + 1
            with pytest.raises(LogConditionFailed):
                store.append("cond", b"stale", expected_id=last + 1)
    finally:
        for r in replicas:
            r.kill()
