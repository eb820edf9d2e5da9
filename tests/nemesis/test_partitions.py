"""Network partitions and pauses against real processes, every history checked.

First the harness is shown able to fail: a deliberately broken client (reads served from a
stale cache) is caught by the linearizability checker, and acknowledged inserts that were
never sent are caught by the set checker, with the history, schedule and timeline written.
A broken server build (a test-only switch, design/nemesis.md) is caught too: tablet
servers scanning without the read index. Then one seeded run
whose schedule holds every partition kind (isolate, majority/minority split, bridge,
one-way loss) and one of pauses: zero lost acknowledged writes, zero linearizability
violations. One cluster (3 coordinators, 3 tablet servers in network namespaces) serves the
module; every run heals before it checks. Needs root, `ip` and iptables
(scripts/ensure_nemesis.sh); skips, saying why, without them.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from logcentric.meta import CoordinatorClient
from optools.localcluster import _pings
from rpc import credentials, errors
from rpc.protocols import coordinator_pb2 as pb
from tests.nemesis.cluster import RPC_PORT, NemesisCluster, available
from tests.nemesis.faults import LEADER, TABLET_LEADER_OF, Schedule, Step
from tests.nemesis.net import NetFault, drops_of
from tests.nemesis.runner import PauseFault, RunResult, run
from tests.nemesis.workloads import Access, DdlWorkload, RegisterWorkload, SetWorkload
from tservers.fs import FsLayout
from tservers.service import UNSAFE_READS_ENV

pytestmark = [pytest.mark.integration, pytest.mark.nemesis]

RUN_S = 15.0  # workload time of each seeded run (the cluster heals and checks after)
SEED = 26
# Seed 3 draws every partition kind in 26 s: one-way, split, isolate @leader, bridge.
PARTITIONS_SEED, PARTITIONS_RUN_S = 3, 26.0
BROKEN_RUN_S = 16.0  # workload time of each run of a broken server build and its fix


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[NemesisCluster]:
    why = available()
    if why:
        pytest.skip(why)
    with NemesisCluster.build(tmp_path_factory.mktemp("nemesis"), secure=True) as c:
        yield c


def _workloads(cluster: NemesisCluster, tag: str, **flags) -> list:
    access = Access.of(cluster)
    return [
        RegisterWorkload(access, tag, stale_cache=flags.get("stale_cache", False)),
        SetWorkload(access, tag, ack_unsent=flags.get("ack_unsent", False)),
        DdlWorkload(access, tag),
    ]


def _connects(cluster: NemesisCluster, src: str, dst: str) -> bool:
    """Whether a TCP connection from `src`'s namespace to `dst`'s rpc port opens within 2 s."""
    code = (
        "import socket,sys\n"
        "try:\n"
        f"    socket.create_connection(({cluster.ip_of[dst]!r}, {RPC_PORT}), timeout=2.0).close()\n"
        "except OSError:\n"
        "    sys.exit(1)\n"
    )
    proc = subprocess.run(
        ["ip", "netns", "exec", cluster.ns_of[src], sys.executable, "-c", code],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    return proc.returncode == 0


def _report(result: RunResult) -> None:
    print(result.summary())  # shown with -s, and in the report of a failure


def test_cluster_runs_secure_in_its_namespaces(cluster: NemesisCluster) -> None:
    """The nemesis cluster is a CURVE one: the admin's credentials name every coordinator by
    the namespace address the clients use, every tablet server is admitted (its UUID and the
    key in its data dir), and a client without keys gets no answer from any node."""
    creds = credentials.load(cluster.spec.admin_credentials)
    assert cluster.spec.secure and "admin" in creds.roles
    assert list(creds.addresses) == cluster.spec.coordinator_addresses
    assert all(a.startswith("10.77.0.") for a in creds.addresses), creds.addresses
    assert len(creds.coordinator_keys()) == len(cluster.spec.coordinators)
    with cluster.client(timeout_s=10.0) as meta:
        principals = meta.call(
            "ListPrincipals", pb.ListPrincipalsRequest(), pb.ListPrincipalsResponse, 10.0
        ).principals
        live = {s.address for s in meta.list_servers() if s.state == "LIVE"}
    admitted = {p.name for p in principals if p.kind == "tserver" and p.state == "active"}
    for node in cluster.spec.tservers:
        uuid = FsLayout.read_instance(Path(node.data)).uuid
        assert uuid in admitted, (node.name, uuid, admitted)
        assert node.rpc in live
    with CoordinatorClient(cluster.spec.coordinator_addresses, timeout_s=3.0) as plain:
        for node in cluster.spec.coordinators:
            with pytest.raises(errors.RpcError):
                plain.status(node.rpc, timeout_s=2.0)
    assert not any(_pings(n.rpc) for n in cluster.spec.tservers)


def test_harness_catches_a_client_serving_stale_reads(cluster: NemesisCluster) -> None:
    """The broken build: a client that serves reads of a key from its cache once another
    client's write of it was acknowledged. Under partitions, the checker must flag it and
    the run must leave its history, schedule and timeline beside the node logs."""
    fault = NetFault(cluster, modes=("split",))
    schedule = Schedule.make(SEED, 12.0, [fault], cluster.node_names)
    workload = RegisterWorkload(Access.of(cluster), "stale", stale_cache=True)
    result = run(cluster, schedule, [fault], [workload], tag="stale")
    _report(result)
    assert not result.errors
    assert any("register:" in a and "NOT linearizable" in a for a in result.anomalies), (
        result.anomalies
    )
    assert result.artifacts is not None
    history = [
        json.loads(line) for line in (result.artifacts / "history.jsonl").read_text().splitlines()
    ]
    assert len(history) == len(result.events) > 0
    assert Schedule.load(result.artifacts / "schedule.json") == schedule
    page = (result.artifacts / "timeline.html").read_text()
    assert "<svg" in page and "register-0" in page and "NOT linearizable" in page


def test_harness_catches_acknowledged_inserts_never_sent(cluster: NemesisCluster) -> None:
    """The broken build: every tenth insert acknowledged without being sent (a write
    acknowledged before it is durable, at its extreme): the set checker names them lost."""
    fault = NetFault(cluster, modes=("isolate",))
    schedule = Schedule.make(SEED, 8.0, [fault], cluster.node_names)
    workload = SetWorkload(Access.of(cluster), "unsent", ack_unsent=True)
    result = run(cluster, schedule, [fault], [workload], tag="unsent")
    _report(result)
    assert not result.errors
    assert any("acknowledged insert(s) lost" in a for a in result.anomalies), result.anomalies
    assert result.artifacts is not None and (result.artifacts / "timeline.html").exists()


def test_harness_catches_ddl_retried_without_its_request_id(cluster: NemesisCluster) -> None:
    """The broken build: a DDL client whose acknowledged creates are sent again as new
    requests (a retry that lost its request id): the DDL checker flags the second answer."""
    fault = PauseFault(cluster)
    schedule = Schedule.make(SEED, 6.0, [fault], cluster.node_names)
    workload = DdlWorkload(Access.of(cluster), "noid", lose_request_ids=True)
    result = run(cluster, schedule, [fault], [workload], tag="noid")
    _report(result)
    assert not result.errors
    assert any("answered AlreadyExists" in a for a in result.anomalies), result.anomalies


def test_harness_catches_tservers_reading_without_read_index(cluster: NemesisCluster) -> None:
    """A broken server build: tablet servers that serve scans without the read index
    (LOGCENTRIC_TEST_UNSAFE_READS=any), so a replica cut off from its group (a deposed
    leader) answers from its own state. Isolating the tablet server that leads the register
    table's tablets must be flagged NOT linearizable; the same seeded schedule against the
    real build must not."""
    access = Access.of(cluster)
    tservers = [n.name for n in cluster.spec.tservers]
    results = {}
    for switch in ("", "any"):  # the real build as the cluster runs, then the broken one
        tag = f"reads-{switch or 'safe'}"
        register = RegisterWorkload(access, tag)
        fault = NetFault(
            cluster, modes=("isolate",), isolate_from=(TABLET_LEADER_OF + register.table_name,)
        )
        schedule = Schedule.make(SEED, BROKEN_RUN_S, [fault], cluster.node_names)
        if switch:
            cluster.restart_with_env(tservers, {UNSAFE_READS_ENV: switch})
        try:
            results[switch] = run(cluster, schedule, [fault], [register], tag=tag)
        finally:
            if switch:
                cluster.restart_with_env(tservers, {})
        _report(results[switch])
        assert len(results[switch].injected) == len(schedule.steps) >= 2
        assert not results[switch].errors
    assert any("register:" in a and "NOT linearizable" in a for a in results["any"].anomalies), (
        results["any"].anomalies
    )
    # The real build: no anomaly at all. A write resent after an unknown outcome is not
    # applied twice (request ids, design/tservers.md "Exactly-once writes"; it was, seed 26).
    assert results[""].ok, results[""].summary()


def test_partitions_cut_tcp_between_namespaces_and_heal(cluster: NemesisCluster) -> None:
    """The faults really cut: isolate, split and one-way drop what they say and nothing
    else, clients in the root namespace still reach every node, and heal restores all."""
    fault = NetFault(cluster)
    c0, c1, c2 = (n.name for n in cluster.spec.coordinators)
    t0 = cluster.spec.tservers[0].name
    assert _connects(cluster, c0, t0) and _connects(cluster, t0, c0)
    try:
        fault.inject(Step(0.0, "partition", "isolate", (t0,), 1.0))
        assert not _connects(cluster, c0, t0) and not _connects(cluster, t0, c1)
        assert _connects(cluster, c0, c1)
        fault.inject(Step(0.0, "partition", "split", (f"{c0}", f"{c1},{c2},{t0}"), 1.0))
        assert not _connects(cluster, c1, c0) and not _connects(cluster, c0, t0)
        assert _connects(cluster, c1, c2) and _connects(cluster, t0, c2)
        with Access.of(cluster).connect(10.0) as client:
            for node in cluster.spec.coordinators:  # the test process reaches every node
                client.meta.status(node.rpc, timeout_s=5.0)
        # One way: t0 -> c0 packets are lost (its SYNs), c0 -> t0 still arrive; TCP needs
        # both ways, so both connects fail, and the rule sits in c0's namespace only.
        fault.inject(Step(0.0, "partition", "oneway", (t0, c0), 1.0))
        assert not _connects(cluster, t0, c0) and _connects(cluster, t0, c1)
        assert drops_of(Step(0.0, "partition", "oneway", (t0, c0), 1.0), cluster.node_names) == {
            (t0, c0)
        }
        # A symbolic target: the coordinator leader when the fault is injected.
        applied = fault.inject(Step(0.0, "partition", "isolate", (LEADER,), 1.0))
        (leader,) = applied.targets
        assert leader in (c0, c1, c2)
        others = [c for c in (c0, c1, c2) if c != leader]
        assert not _connects(cluster, others[0], leader) and _connects(cluster, *others)
    finally:
        fault.heal()
    assert _connects(cluster, c0, t0) and _connects(cluster, t0, c0) and _connects(cluster, c1, c0)


def test_same_seed_same_schedule(tmp_path) -> None:
    cluster = NemesisCluster.build(tmp_path, secure=True)  # its spec only: nothing is started
    faults = [NetFault(cluster), PauseFault(cluster)]
    a = Schedule.make(7, 120.0, faults, cluster.node_names)
    b = Schedule.make(7, 120.0, faults, cluster.node_names)
    c = Schedule.make(8, 120.0, faults, cluster.node_names)
    assert a == b and a != c
    assert len(a.steps) >= 10 and {s.kind for s in a.steps} == {"partition", "pause"}
    assert all(x.offset_s + x.hold_s < y.offset_s for x, y in itertools.pairwise(a.steps))


def test_every_partition_kind_loses_nothing_and_stays_linearizable(
    cluster: NemesisCluster,
) -> None:
    """One seeded run whose schedule draws each partition kind once (one-way, split, an
    isolate of the coordinator leader, bridge), all three workloads: zero anomalies."""
    fault = NetFault(cluster)
    schedule = Schedule.make(PARTITIONS_SEED, PARTITIONS_RUN_S, [fault], cluster.node_names)
    assert {s.action for s in schedule.steps} == {"isolate", "split", "bridge", "oneway"}
    result = run(cluster, schedule, [fault], _workloads(cluster, "parts"), tag="parts")
    _report(result)
    assert len(result.injected) == len(schedule.steps)
    assert result.ok, result.summary()
    assert result.outcomes()["register:OK"] > 0 and result.outcomes()["set:OK"] > 0


def test_pauses_longer_than_the_lease_lose_nothing(cluster: NemesisCluster) -> None:
    fault = PauseFault(cluster)
    schedule = Schedule.make(SEED, RUN_S, [fault], cluster.node_names)
    assert all(s.hold_s > cluster.spec.lease_timeout_s for s in schedule.steps)
    result = run(cluster, schedule, [fault], _workloads(cluster, "pause"), tag="pause")
    _report(result)
    assert len(result.injected) == len(schedule.steps) > 0
    assert result.ok, result.summary()
