"""Client histories under a leader kill and restart, checked for linearizability.

Four clients write (upsert, unique values) and read (a read-index scan at the leader) three
keys of one tablet with three replicas, while the leader is killed with -9 and later
restarted. Every operation is recorded with its invoke and response time and outcome: OK,
FAIL (certainly not applied: NOT_LEADER, refused before or lost after the proposal) or
UNKNOWN (timed out, connection lost: may or may not have been applied).
"""

from __future__ import annotations

import random
import threading
import time

import pyarrow as pa
import pytest

from rpc import errors
from rpc.protocols.tserver_pb2 import OpType
from tests.replication.helpers import TServerTrio
from tests.support.linearizability import HistoryRecorder, OpKind, Outcome, check_history
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

KEYS = (0, 1, 2)
CLIENTS = 4


def test_histories_under_leader_kill_are_linearizable(trio: TServerTrio):
    trio.create_tablet("lz")
    first = trio.leader("lz")
    rec = HistoryRecorder()
    stop = threading.Event()
    counts = {"ok": 0}
    hint = [first]

    def client(cid: int) -> None:
        rng = random.Random(cid)
        n = 0
        while not stop.is_set():
            key = rng.choice(KEYS)
            alive = trio.alive()
            if not alive:
                time.sleep(0.05)
                continue
            target = hint[0] if hint[0] in alive else rng.choice(alive)
            if rng.random() < 0.3:
                target = rng.choice(alive)  # followers too: they must refuse, never serve stale
            try:
                c = trio.client(target)
            except errors.RpcError:
                time.sleep(0.05)
                continue
            if rng.random() < 0.5:
                n += 1
                value = f"c{cid}-{n}"
                h = rec.invoke(OpKind.WRITE, key, value, client=f"c{cid}")
                table = pa.table({"id": pa.array([key], pa.int64()), "v": [value]})
                try:
                    c.write("lz", [(OpType.UPSERT, table)], schema_version=1)
                    rec.complete(h, Outcome.OK)
                    counts["ok"] += 1
                except errors.NotLeader as e:
                    rec.complete(h, Outcome.FAIL)
                    _follow(e, trio, hint)
                except (errors.TabletNotFound, errors.TabletDeleted, errors.InvalidName):
                    rec.complete(h, Outcome.FAIL)
                except Exception:  # noqa: BLE001 - timed out, connection lost, client closed
                    rec.complete(h, Outcome.UNKNOWN)
                    hint[0] = rng.choice(trio.alive() or [0])
            else:
                h = rec.invoke(OpKind.READ, key, client=f"c{cid}")
                try:
                    t = c.scan_table("lz", predicates=[("id", "=", key)])
                    vals = t.column("v").to_pylist() if t.num_columns else []
                    rec.complete(h, Outcome.OK, vals[0] if vals else None)
                except errors.NotLeader as e:
                    rec.complete(h, Outcome.FAIL)
                    _follow(e, trio, hint)
                except Exception:  # noqa: BLE001 - a read that failed constrains nothing
                    rec.complete(h, Outcome.UNKNOWN)
                    hint[0] = rng.choice(trio.alive() or [0])

    threads = [
        threading.Thread(target=client, args=(i,), name=f"lin-client-{i}", daemon=True)
        for i in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: counts["ok"] >= 40, 60, "writes before the kill")
        trio.kill9(first)
        before = counts["ok"]
        wait_for(lambda: counts["ok"] >= before + 40, 60, "writes after the kill")
        trio.restart(first)
        before = counts["ok"]
        wait_for(lambda: counts["ok"] >= before + 40, 60, "writes after the restart")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    history = rec.history()
    reads_ok = sum(1 for o in history if o.kind is OpKind.READ and o.outcome is Outcome.OK)
    assert reads_ok >= 20, "too few reads to say anything"
    result = check_history(history, initial=None, time_limit_s=60.0)
    assert result.ok, result.describe()


def _follow(err: errors.NotLeader, trio: TServerTrio, hint: list[int]) -> None:
    uuid = err.leader_hint.uuid
    for i, p in enumerate(trio.procs):
        if p.uuid == uuid:
            hint[0] = i
            return
    hint[0] = random.choice(trio.alive() or [0])
