"""Workloads the nemesis runs against a cluster, and the checker of each one's history.

- RegisterWorkload: a register per key on a replicated table (reads and upserts), checked
  for linearizability (tests/support/linearizability.py).
- SetWorkload: an append-only set of rows: every acknowledged insert is present exactly
  once at the end; an insert of unknown outcome may be present or absent, never twice.
- DdlWorkload: coordinator creates and drops with request ids: every acknowledged create
  is in the catalog exactly once (unless dropped), every acknowledged drop is gone, and
  no retry answers differently from the first execution (ALREADY_EXISTS for a create this
  client made once, NOT_FOUND for a drop of a table it created).

Every client reaches the cluster through its `Access`: the coordinator addresses and, for a
secure cluster (the nemesis runs secure: CURVE, design/security.md), the admin's credentials
file, with which every client, workload and final check connects.

Each client is a thread with its own `logcentric.Client`, recording every operation in a
shared `Recorder` (invoke and completion on one monotonic clock, outcome OK, FAIL or
UNKNOWN). An operation that raised is UNKNOWN when it may have taken effect (a write), FAIL
when it cannot have (a read). `stale_cache` (RegisterWorkload, test-only) serves reads from
a per-client cache: the deliberately broken client the harness must catch.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

import logcentric
from logcentric.partition import bucket_of_key
from rpc import credentials as creds_mod
from rpc import errors
from tests.support.linearizability import Operation, OpKind, Outcome, check_history

if TYPE_CHECKING:
    from logcentric.meta import CoordinatorClient
    from optools.localcluster import LocalCluster

logger = logging.getLogger("nemesis.workloads")

OPS_MAX = 200_000  # per run
CLIENT_TIMEOUT_S = 5.0  # each operation gives up after about this long (outcome unknown)
FINAL_TIMEOUT_S = 90.0  # the final reads after healing
VALUE_STRIDE = 1_000_000_000  # client i writes values i * VALUE_STRIDE + seq: all unique
ANOMALIES_MAX = 50
ERROR_CHARS_MAX = 300


@dataclass(frozen=True, slots=True)
class Access:
    """How the harness's clients reach a cluster: its coordinator addresses and the
    credentials file they connect with (a secure cluster's admin's; None: plaintext)."""

    coordinators: tuple[str, ...]
    credentials: str | None

    @staticmethod
    def of(cluster: LocalCluster) -> Access:
        spec = cluster.spec
        return Access(
            tuple(spec.coordinator_addresses),
            str(spec.admin_credentials) if spec.secure else None,
        )

    def connect(self, timeout_s: float) -> logcentric.Client:
        return logcentric.connect(
            list(self.coordinators), timeout_s=timeout_s, credentials=self.credentials
        )

    def meta(self, timeout_s: float, addresses: list[str] | None = None) -> CoordinatorClient:
        """A coordinator client (of `addresses`, default every coordinator)."""
        from logcentric.meta import CoordinatorClient

        creds = None if self.credentials is None else creds_mod.load(Path(self.credentials))
        return CoordinatorClient(
            list(addresses or self.coordinators), timeout_s=timeout_s, credentials=creds
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One operation of a history (times in seconds since the run's start)."""

    workload: str
    client: str
    op: str  # read, write, insert, create, drop
    key: object
    value: object
    invoke_s: float
    response_s: float | None  # None: never answered
    outcome: str  # OK, FAIL, UNKNOWN
    error: str = ""  # the exception's class and message when it raised

    def to_dict(self) -> dict:
        return asdict(self)


class Recorder:
    """Thread-safe history of Events."""

    def __init__(self, t0: float, ops_max: int = OPS_MAX) -> None:
        self.t0 = t0
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._ops_max = ops_max

    def run(
        self, workload: str, client: str, op: str, key: object, value: object,
        fn: Callable[[], object], unknown_on_error: bool,
    ) -> tuple[str, object]:  # fmt: skip
        """Run `fn` as one operation and record it; returns (outcome, its result)."""
        invoke = time.monotonic() - self.t0
        result: object = None
        error = ""
        try:
            result = fn()
            outcome = "OK"
        except (errors.RpcError, OSError) as exc:
            outcome = "UNKNOWN" if unknown_on_error else "FAIL"
            result = exc
            error = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS_MAX]
        response = time.monotonic() - self.t0
        if op == "read" and outcome == "OK":
            value = result
        with self._lock:
            assert len(self._events) < self._ops_max, "history too long"
            self._events.append(
                Event(workload, client, op, key, value, invoke,
                      None if outcome == "UNKNOWN" else response, outcome, error)
            )  # fmt: skip
        return outcome, result

    def acknowledged_write_after(self, key: object, t_s: float) -> bool:
        """Whether some client's write of `key` invoked after `t_s` was acknowledged."""
        with self._lock:
            return any(
                e.op == "write" and e.key == key and e.outcome == "OK" and e.invoke_s > t_s
                for e in reversed(self._events)
            )

    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)


def _retry(fn: Callable[[], object], what: str, timeout_s: float = FINAL_TIMEOUT_S) -> object:
    """`fn` until it succeeds (the cluster recovers after healing), for setup and final reads."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return fn()
        except (errors.RpcError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{what}: still failing after {timeout_s:.0f}s: {exc}"
                ) from exc
            time.sleep(0.5)


class Workload:
    """Base: `setup` once, `worker` per client thread until `stop`, `check` at the end."""

    name = "?"
    clients = 1

    def __init__(self, access: Access, tag: str) -> None:
        self.access = access
        self.tag = tag

    def connect(self) -> logcentric.Client:
        return self.access.connect(CLIENT_TIMEOUT_S)

    def setup(self) -> None:
        pass

    def worker(self, index: int, rng: random.Random, rec: Recorder, stop: threading.Event) -> None:
        raise NotImplementedError

    def check(self, events: list[Event]) -> list[str]:
        """Anomalies (empty: the history is correct). May read the healed cluster."""
        raise NotImplementedError


def _create_table(access: Access, name: str, columns: list, tablets: int) -> None:
    with access.connect(30.0) as client:

        def create() -> None:
            try:
                client.create_table(name, columns, num_tablets=tablets, replication_factor=3)
            except errors.AlreadyExists:
                pass

        _retry(create, f"create table {name}")
        # Until every tablet takes writes (replicas elected): a write of nothing fails fast.
        _retry(lambda: client.table(name).count(), f"scan new table {name}")


class RegisterWorkload(Workload):
    name = "register"

    def __init__(
        self, access: Access, tag: str, keys: int = 4, clients: int = 4,
        stale_cache: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(access, tag)
        self.table_name = f"nemesis_register_{tag}"
        self.keys = keys
        self.clients = clients
        self.stale_cache = stale_cache

    def setup(self) -> None:
        columns = [logcentric.Column("k", "int64", key=True), logcentric.Column("v", "int64")]
        _create_table(self.access, self.table_name, columns, tablets=2)

    def read(self, client: logcentric.Client, key: int) -> int | None:
        table = client.table(self.table_name)
        bucket = bucket_of_key((key,), [pa.int64()], table.num_buckets())
        tablet = table.tablet_for_bucket(bucket)
        rows = []
        for batch in table.scan_tablet(tablet.tablet_id, predicates=[("k", "=", key)]):
            rows.extend(batch.to_pylist())
        assert len(rows) <= 1, rows
        return rows[0]["v"] if rows else None

    def write(self, client: logcentric.Client, key: int, value: int) -> None:
        session = client.new_session()
        session.upsert(client.table(self.table_name), [{"k": key, "v": value}])
        refused = session.flush()
        if refused:  # a refused upsert is an operating error: its outcome is not OK
            raise errors.Unavailable(f"upsert refused: {refused}")
        # Not closed on a failure: a failed flush keeps its rows, close() would resend them.
        session.close()

    def worker(self, index: int, rng: random.Random, rec: Recorder, stop: threading.Event) -> None:
        name = f"{self.name}-{index}"
        broken = self.stale_cache and index == 0
        cache: dict[int, tuple[int | None, float]] = {}  # key -> (value, when it was read)
        seq = 0
        with self.connect() as client:
            while not stop.is_set():
                key = rng.randrange(self.keys)
                if broken and key in cache:
                    # The broken client: its cached value once another client's write of
                    # the key was acknowledged since (waiting for one, so that the stale
                    # read is certain to happen, not left to the interleaving).
                    value, read_s = cache[key]
                    while not stop.is_set() and not rec.acknowledged_write_after(key, read_s):
                        stop.wait(0.05)
                    if not stop.is_set():
                        rec.run(self.name, name, "read", key, None, lambda v=value: v, False)
                        cache[key] = (value, time.monotonic() - rec.t0)  # once per write
                    continue
                if broken or rng.random() < 0.5:
                    outcome, value = rec.run(
                        self.name, name, "read", key, None, lambda k=key: self.read(client, k),
                        False,
                    )  # fmt: skip
                    if outcome == "OK" and broken:
                        cache[key] = (value, time.monotonic() - rec.t0)  # type: ignore[assignment]
                else:
                    seq += 1
                    value = index * VALUE_STRIDE + seq
                    rec.run(
                        self.name, name, "write", key, value,
                        lambda k=key, v=value: self.write(client, k, v), True,
                    )  # fmt: skip

    def check(self, events: list[Event]) -> list[str]:
        ops = [
            Operation(
                OpKind.READ if e.op == "read" else OpKind.WRITE,
                e.key,
                e.value,
                e.invoke_s,
                e.response_s,
                Outcome(e.outcome),
                e.client,
            )  # fmt: skip
            for e in events
            if e.workload == self.name
        ]
        result = check_history(ops, initial=None, step_limit=20_000_000, time_limit_s=120.0)
        if result.ok:
            return []
        return [f"register: {result.describe()}"]


class SetWorkload(Workload):
    name = "set"

    def __init__(self, access: Access, tag: str, clients: int = 2,
                 ack_unsent: bool = False) -> None:  # fmt: skip
        super().__init__(access, tag)
        self.table_name = f"nemesis_set_{tag}"
        self.clients = clients
        # Test-only breakage: every 10th insert is acknowledged without being sent.
        self.ack_unsent = ack_unsent

    def setup(self) -> None:
        columns = [logcentric.Column("k", "int64", key=True), logcentric.Column("c", "string")]
        _create_table(self.access, self.table_name, columns, tablets=3)

    def insert(self, client: logcentric.Client, key: int, name: str) -> None:
        if self.ack_unsent and key % 10 == 0:
            return
        session = client.new_session()
        session.insert(client.table(self.table_name), [{"k": key, "c": name}])
        refused = session.flush()
        # ALREADY_EXISTS: a resend of this very insert found it written (keys are unique).
        if any(r.status != "ALREADY_EXISTS" for r in refused):
            raise errors.Unavailable(f"insert refused: {refused}")
        session.close()

    def worker(self, index: int, rng: random.Random, rec: Recorder, stop: threading.Event) -> None:
        name = f"{self.name}-{index}"
        seq = 0
        with self.connect() as client:
            while not stop.is_set():
                seq += 1
                key = index * VALUE_STRIDE + seq
                rec.run(self.name, name, "insert", key, key,
                        lambda k=key: self.insert(client, k, name), True)  # fmt: skip

    def check(self, events: list[Event]) -> list[str]:
        mine = [e for e in events if e.workload == self.name]
        with self.access.connect(30.0) as client:

            def scan() -> list[int]:
                client._forget(self.table_name)
                return client.table(self.table_name).to_arrow(projection=["k"])["k"].to_pylist()

            keys = _retry(scan, f"final scan of {self.table_name}")
        return check_set(mine, keys)  # type: ignore[arg-type]


class DdlWorkload(Workload):
    name = "ddl"

    def __init__(self, access: Access, tag: str, clients: int = 1,
                 lose_request_ids: bool = False) -> None:  # fmt: skip
        super().__init__(access, tag)
        self.prefix = f"nemesis_ddl_{tag}_"
        self.clients = clients
        # Test-only breakage: every acknowledged create is retried as a new request (another
        # client id, so another request id), as a client that lost its request id would.
        self.lose_request_ids = lose_request_ids

    def worker(self, index: int, rng: random.Random, rec: Recorder, stop: threading.Event) -> None:
        name = f"{self.name}-{index}"
        columns = [logcentric.Column("k", "int64", key=True)]
        created: list[str] = []  # tables this client asked to create, not yet asked to drop
        seq = 0
        with self.connect() as client:
            while not stop.is_set():
                if created and rng.random() < 0.4:
                    table = created.pop(rng.randrange(len(created)))
                    rec.run(self.name, name, "drop", table, None,
                            lambda t=table: client.drop_table(t), True)  # fmt: skip
                else:
                    seq += 1
                    table = f"{self.prefix}{index}_{seq}"
                    created.append(table)
                    outcome, _ = rec.run(
                        self.name, name, "create", table, None,
                        lambda t=table: client.create_table(
                            t, columns, num_tablets=1, replication_factor=1
                        ),
                        True,
                    )  # fmt: skip
                    if self.lose_request_ids and outcome == "OK":
                        with self.connect() as other:
                            rec.run(
                                self.name, name, "create", table, None,
                                lambda t=table: other.create_table(
                                    t, columns, num_tablets=1, replication_factor=1
                                ),
                                True,
                            )  # fmt: skip
                stop.wait(0.2)  # DDL is slow and heavy: a few per second at most

    def check(self, events: list[Event]) -> list[str]:
        mine = [e for e in events if e.workload == self.name]
        with self.access.connect(30.0) as client:
            names = _retry(client.list_tables, "final list of tables")
        listed = [n for n in names if n.startswith(self.prefix)]  # type: ignore[union-attr]
        return check_ddl(mine, listed)


def check_set(events: list[Event], final_keys: list[int]) -> list[str]:
    """The set's anomalies: an acknowledged insert missing from the final keys, a key
    present twice, a key never inserted. Inserts of unknown outcome may be either way."""
    counts = Counter(final_keys)
    attempted = {e.key for e in events}
    anomalies = []
    lost = sorted(e.key for e in events if e.outcome == "OK" and counts[e.key] == 0)
    dup = sorted(k for k, n in counts.items() if n > 1)
    phantom = sorted(k for k in counts if k not in attempted)
    if lost:
        anomalies.append(f"set: {len(lost)} acknowledged insert(s) lost: {lost[:20]}")
    if dup:
        anomalies.append(f"set: {len(dup)} row(s) present more than once: {dup[:20]}")
    if phantom:
        anomalies.append(f"set: {len(phantom)} row(s) never inserted: {phantom[:20]}")
    return anomalies


def check_ddl(events: list[Event], listed_names: list[str]) -> list[str]:
    """The DDL history's anomalies against the final catalog's table names (each client
    creates a name once, and drops only names it created)."""
    listed = Counter(listed_names)
    creates = {e.key: e for e in events if e.op == "create"}
    drops = {e.key: e for e in events if e.op == "drop"}
    anomalies = []
    for table, n in listed.items():
        if n > 1:
            anomalies.append(f"ddl: table {table} listed {n} times")
        if table not in creates:
            anomalies.append(f"ddl: table {table} in the catalog, never created")
        elif table in drops and drops[table].outcome == "OK":
            anomalies.append(f"ddl: table {table} dropped (acknowledged), still listed")
    for table, e in creates.items():
        if e.outcome == "OK" and table not in drops and not listed[table]:
            anomalies.append(f"ddl: acknowledged create of {table} lost")
    # A retry that answered differently: each name is created once, so a create can only
    # come back ALREADY_EXISTS if its own retry executed it twice (request ids failed);
    # likewise NOT_FOUND for the one drop of a table whose create was acknowledged.
    for e in events:
        if e.op == "create" and e.error.startswith("AlreadyExists"):
            anomalies.append(f"ddl: create of {e.key} answered {e.error}")
        created = creates.get(e.key)
        if e.op == "drop" and e.error.startswith("NotFound") and created is not None:
            if created.outcome == "OK":
                anomalies.append(f"ddl: drop of {e.key} (created) answered {e.error}")
    return anomalies[:ANOMALIES_MAX]
