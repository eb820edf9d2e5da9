"""kill -9 of every replica at random moments under concurrent appends, several rounds.

After each restart: every acknowledged append is present exactly once at the id it was
acknowledged with, ids are contiguous, every replica agrees, and conditional appends work.
Replicas are real `logstore serve` processes with a low compaction threshold, so kills
also land during snapshots and journal trims. The kill moments are drawn as numbers of
acknowledged appends (seeded: LOGSTORE_CRASH_SEED), not as times.

On a failure the test prints the seed, every round's kill order and acknowledgement
counts, each replica's status and the warnings/errors of its log, and for each log the
acknowledged ids that are missing or changed (the replica logs stay in pytest's tmp dir).
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
from .procs import ReplicaProcess, make_replicas, remote

pytestmark = pytest.mark.integration

ROUNDS = int(os.environ.get("LOGSTORE_CRASH_ROUNDS", "4"))
WRITERS = 8
COND_WRITERS = 2


class Workload:
    def __init__(self, replicas: list[ReplicaProcess], rnd: int) -> None:
        self.replicas = replicas
        self.round = rnd
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked: dict[str, dict[int, bytes]] = {"kill": {}, "cond": {}}
        self.count = 0
        self.threads: list[threading.Thread] = []
        # A failed check in a writer thread (an id acknowledged twice, a conditional append
        # that got another id) ends that thread; finish() raises it in the test.
        self.failures: list[str] = []

    def start(self) -> None:
        for w in range(WRITERS):
            t = threading.Thread(
                target=self._guard, args=(self._plain, w), name=f"crash-writer-{w}"
            )
            self.threads.append(t)
        for w in range(COND_WRITERS):
            t = threading.Thread(target=self._guard, args=(self._cond, w), name=f"crash-cond-{w}")
            self.threads.append(t)
        for t in self.threads:
            t.start()

    def _guard(self, body, w: int) -> None:
        try:
            body(w)
        except BaseException as err:  # noqa: BLE001 - reported by finish()
            with self.lock:
                self.failures.append(f"{threading.current_thread().name}: {err!r}")
            self.stop.set()

    def _client(self, w: int) -> RemoteLogStore:
        n = len(self.replicas)
        order = self.replicas[w % n :] + self.replicas[: w % n]
        return remote(order, connect_timeout_s=1.0)

    def _record(self, log: str, new_id: int, payload: bytes) -> None:
        with self.lock:
            assert new_id not in self.acked[log], (
                f"{log}#{new_id} acknowledged twice in round {self.round}: "
                f"{self.acked[log][new_id]!r} and {payload!r}"
            )
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
                assert new_id == last + 1, f"conditional append expected {last + 1}, got {new_id}"
                self._record("cond", new_id, payload)

    def acks(self) -> int:
        with self.lock:
            return self.count

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)
            assert not t.is_alive(), t.name
        assert not self.failures, self.failures


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
        with remote([r], connect_timeout_s=5.0) as store:
            store.barrier(timeout_s=30.0)
            views.append({log: _read_all(store, log) for log in acked})
            for log in acked:
                last = store.last_id(log, timeout_s=10.0)
                assert last == len(views[-1][log]), (
                    f"{r.raft_address}: last_id({log}) = {last} but {len(views[-1][log])} "
                    "entries (none is ever invalidated here)"
                )
    for log, want in acked.items():
        entries = views[0][log]
        ids = [e.id for e in entries]
        gaps = [(a, b) for a, b in zip([0, *ids], ids, strict=False) if b != a + 1]
        assert not gaps, f"{log}: ids not contiguous at {gaps[:5]}"
        seen: dict[bytes, int] = {}
        twice = []
        for e in entries:
            if e.data in seen:
                twice.append((seen[e.data], e.id, e.data))
            seen[e.data] = e.id
        assert not twice, f"{log}: appends present twice (first id, second id, data): {twice[:5]}"
        by_id = {e.id: e.data for e in entries}
        wrong = [(i, p, by_id.get(i)) for i, p in sorted(want.items()) if by_id.get(i) != p]
        assert not wrong, (
            f"{log}: {len(wrong)} acknowledged appends lost or changed of {len(want)} "
            f"(id, acknowledged data, data now; last id {len(entries)}): {wrong[:10]}"
        )
        for r, v in zip(replicas[1:], views[1:], strict=True):
            if v[log] != entries:
                diff = next(
                    (k for k, (a, b) in enumerate(zip(v[log], entries, strict=False)) if a != b),
                    min(len(v[log]), len(entries)),
                )
                raise AssertionError(
                    f"{log}: {r.raft_address} disagrees with {replicas[0].raft_address} from "
                    f"position {diff} ({len(v[log])} vs {len(entries)} entries)"
                )


def _log_tail(path: str, lines: int = 40) -> str:
    """The warnings and errors at the end of one replica's log."""
    try:
        with open(path, errors="replace") as f:
            text = f.read().splitlines()
    except OSError as err:
        return f"    (no log: {err})"
    keep = [t for t in text if any(w in t for w in ("WARNING", "ERROR", "CRITICAL", "Trace"))]
    return "\n".join("    " + t for t in keep[-lines:]) or "    (no warnings)"


def _diagnose(replicas, acked, history, seed: int) -> str:
    """Everything needed to understand a failure without rerunning it."""
    out = [f"LOGSTORE_CRASH_SEED={seed} (rerun with it to replay the kill schedule)"]
    out += [f"  {h}" for h in history]
    out.append(
        "acknowledged: "
        + ", ".join(f"{k}: {len(v)} ids, max {max(v, default=0)}" for k, v in acked.items())
    )
    for r in replicas:
        out.append(
            f"replica {r.raft_address} rpc={r.rpc_address} alive={r.alive()} dir={r.data_dir}"
        )
        if r.alive():
            try:
                with remote([r], connect_timeout_s=2.0) as store:
                    st = store.status(timeout_s=5.0)
                    out.append(
                        f"    role={st.role} term={st.term} commit={st.commit_index} "
                        f"applied={st.applied_index} journal={st.journal_entries} entries "
                        f"from #{st.journal_first_index} snapshot={st.snapshot_bytes}B "
                        f"logs={{{', '.join(f'{x.log}: {x.last_id}' for x in st.logs)}}}"
                    )
                    for log, want in acked.items():
                        got = {e.id: e.data for e in _read_all(store, log)}
                        missing = sorted(i for i, p in want.items() if got.get(i) != p)
                        out.append(
                            f"    {log}: {len(got)} entries; acknowledged but missing "
                            f"or changed: {len(missing)} {missing[:10]}"
                        )
            except Exception as err:  # noqa: BLE001 - diagnostics must not hide the failure
                out.append(f"    status/read failed: {err!r}")
        out.append(_log_tail(r.log_path))
    return "\n".join(out)


def test_kill9_every_replica_under_concurrent_appends(tmp_path):
    seed = int(os.environ.get("LOGSTORE_CRASH_SEED", random.randrange(1 << 30)))
    print(f"LOGSTORE_CRASH_SEED={seed}")
    rng = random.Random(seed)
    replicas = make_replicas(tmp_path, 3, ["--compaction-min-entries", "300"], secure=True)
    acked: dict[str, dict[int, bytes]] = {"kill": {}, "cond": {}}
    history: list[str] = []
    try:
        for rnd in range(ROUNDS):
            for r in replicas:
                r.start()
            _verify(replicas, acked)
            work = Workload(replicas, rnd)
            work.start()
            try:
                order = rng.sample(range(3), 3)
                target1 = rng.randint(50, 600)
                history.append(f"round {rnd}: kill order {order}, 1st kill after {target1} acks")
                wait_for(lambda t=target1, w=work: w.acks() >= t, 120, "acks before the 1st kill")
                replicas[order[0]].kill()
                target2 = work.acks() + rng.randint(0, 400)
                history[-1] += f", 2nd and 3rd after {target2}"
                wait_for(lambda t=target2, w=work: w.acks() >= t, 120, "acks before the 2nd kill")
                replicas[order[1]].kill()
                replicas[order[2]].kill()
            finally:
                work.finish()
            history[-1] += f"; {work.acks()} acks in the round"
            for log in acked:
                for i, p in work.acked[log].items():
                    old = acked[log].get(i, p)
                    assert old == p, f"{log}#{i} acknowledged twice: {old!r} before, now {p!r}"
                    acked[log][i] = p
            print(f"round {rnd}: {work.acks()} acks; totals", {k: len(v) for k, v in acked.items()})
        for r in replicas:
            r.start()
        _verify(replicas, acked)
        with remote(replicas) as store:
            last = store.last_id("cond")
            assert store.append("cond", b"final", expected_id=last + 1) == last + 1
            with pytest.raises(LogConditionFailed):
                store.append("cond", b"stale", expected_id=last + 1)
    except BaseException:
        print(_diagnose(replicas, acked, history, seed))
        raise
    finally:
        for r in replicas:
            r.kill()
