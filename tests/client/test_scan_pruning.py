"""Client-side tablet pruning against a real local cluster (1 coordinator, 2 tablet servers):
a scan whose predicates pin the hash key reads only the tablets that can hold it, returns what
an unpruned scan of every tablet returns (a model test over random keys and predicates), and
contacts only the owning tablet's server (the servers' own per-method rpc counts)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from logcentric.client import Client, Column
from logcentric.partition import bucket_of_key
from tests.metrics.support import scrape, value
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

TABLETS = 6
INT_KEY = [Column("id", "int64", key=True), Column("v", "int32", nullable=True)]
PAIR_KEY = [
    Column("s", "string", key=True),
    Column("n", "int32", key=True),
    Column("v", "int32", nullable=True),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with local_cluster(tmp_path_factory.mktemp("cluster"), coordinators=1, tservers=2) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    with Client(
        cluster.spec.coordinator_addresses, timeout_s=60, credentials=cluster.credentials()
    ) as c:
        yield c


@pytest.fixture(scope="module")
def int_table(client):
    client.create_table("prune_int", INT_KEY, num_tablets=TABLETS, replication_factor=1)
    t = client.table("prune_int")
    with client.new_session(flush_rows_max=5_000) as s:
        s.insert(t, [{"id": i * 3, "v": None if i % 7 == 0 else i % 10} for i in range(600)])
    assert s.errors == []
    return t


@pytest.fixture(scope="module")
def pair_table(client):
    client.create_table("prune_pair", PAIR_KEY, num_tablets=TABLETS, replication_factor=1)
    t = client.table("prune_pair")
    rows = [{"s": s, "n": n, "v": n % 3} for s in ("a", "b", "é", "") for n in range(-20, 20)]
    with client.new_session(flush_rows_max=5_000) as s:
        s.insert(t, rows)
    assert s.errors == []
    return t


def unpruned(t, predicates) -> list[dict]:
    """Every tablet scanned with the predicates: what the scan returned before pruning."""
    rows = [
        r
        for tab in t.tablets()
        for b in t.scan_tablet(tab.tablet_id, None, predicates)
        for r in b.to_pylist()
    ]
    return sorted(rows, key=lambda r: [r[k] for k in t.key_columns])


def pruned(t, predicates) -> list[dict]:
    rows = t.to_arrow(predicates=predicates).to_pylist()
    return sorted(rows, key=lambda r: [r[k] for k in t.key_columns])


def int_predicates(rng: random.Random) -> list[tuple]:
    key = lambda: rng.randrange(-5, 1805)  # noqa: E731  (a third of them exist)
    shape = rng.randrange(6)
    if shape == 0:
        preds = [("id", "=", key())]
    elif shape == 1:
        preds = [("id", "in", [key() for _ in range(rng.randrange(0, 5))])]
    elif shape == 2:
        low = key()
        preds = [("id", ">=", low), ("id", "<", low + rng.randrange(0, 12))]
    elif shape == 3:
        preds = [("id", "in", [key() for _ in range(4)]), ("id", ">", key())]
    elif shape == 4:
        preds = [("id", "=", key()), ("id", "=", key())]  # mostly a contradiction
    else:
        preds = [("id", "<=", key())]  # not pinned: every tablet
    if rng.random() < 0.4:
        preds.append(rng.choice([("v", "is null"), ("v", "<", 5), ("v", "in", [1, 2])]))
    return preds


def pair_predicates(rng: random.Random) -> list[tuple]:
    s = lambda: rng.choice(["a", "b", "é", "", "zz"])  # noqa: E731
    n = lambda: rng.randrange(-22, 22)  # noqa: E731
    shape = rng.randrange(4)
    if shape == 0:
        preds = [("s", "=", s()), ("n", "=", n())]
    elif shape == 1:
        preds = [("s", "in", [s(), s()]), ("n", "in", [n(), n(), n()])]
    elif shape == 2:
        low = n()
        preds = [("s", "=", s()), ("n", ">", low), ("n", "<=", low + rng.randrange(0, 6))]
    else:
        preds = [("n", "=", n())]  # s open: every tablet
    if rng.random() < 0.4:
        preds.append(("v", "=", rng.randrange(3)))
    return preds


def test_pruned_scans_equal_unpruned_scans(int_table, pair_table):
    rng = random.Random(25)
    pruned_scans = 0
    for t, make in ((int_table, int_predicates), (pair_table, pair_predicates)):
        for _ in range(40):
            preds = make(rng)
            chosen = t.scan_tablets(preds)
            assert 1 <= len(chosen) <= TABLETS
            pruned_scans += len(chosen) < TABLETS
            assert pruned(t, preds) == unpruned(t, preds), preds
    assert pruned_scans >= 40  # most shapes pin the key


def test_a_pinned_key_reads_its_own_tablet_alone(int_table):
    t = int_table
    for k in (0, 3, 300, 1797, 5):
        (tablet,) = t.scan_tablets([("id", "=", k)])
        assert tablet.hash_bucket == bucket_of_key([k], [pa.int64()], TABLETS)
    keys = [3, 6, 9]
    buckets = {bucket_of_key([k], [pa.int64()], TABLETS) for k in keys}
    assert {x.hash_bucket for x in t.scan_tablets([("id", "in", keys)])} == buckets
    # Wrong values prune nothing: every tablet server refuses them, as before pruning.
    assert len(t.scan_tablets([("id", "=", "x")])) == TABLETS
    assert len(t.scan_tablets([("v", "=", 1)])) == TABLETS
    # A scan that can match nothing still asks one tablet (which checks the predicates).
    assert len(t.scan_tablets([("id", "=", 1), ("id", "=", 2)])) == 1


def _scan_calls(cluster) -> dict[str, float]:
    """TServer.Scan calls answered OK, per tablet server address (their /metrics)."""
    return {
        node.rpc: value(
            scrape(f"http://{node.http}"),
            "logcentric_rpc_calls",
            method="TServer.Scan",
            status="OK",
        )
        for node in cluster.spec.tservers
    }


def test_only_the_owning_tablet_server_is_asked(cluster, int_table):
    """The tablet servers' own counts: a point scan is one Scan call, at the server of the
    key's tablet; an unpruned scan is one per tablet."""
    t = int_table
    hosts = {x.tablet_id: x.replicas[0].address for x in t.tablets()}
    assert len(set(hosts.values())) == 2, hosts  # both servers hold tablets
    for k in (0, 3, 33, 300, 1797):
        before = _scan_calls(cluster)
        assert t.to_arrow(predicates=[("id", "=", k)]).to_pylist() == [
            {"id": k, "v": None if (k // 3) % 7 == 0 else (k // 3) % 10}
        ]
        after = _scan_calls(cluster)
        (tablet,) = t.scan_tablets([("id", "=", k)])
        owner = hosts[tablet.tablet_id]
        assert {a: after[a] - before[a] for a in after} == {
            a: 1.0 if a == owner else 0.0 for a in after
        }, k
    before = _scan_calls(cluster)
    assert t.to_arrow(predicates=[("id", ">=", 0)]).num_rows == 600
    after = _scan_calls(cluster)
    assert sum(after.values()) - sum(before.values()) == TABLETS
