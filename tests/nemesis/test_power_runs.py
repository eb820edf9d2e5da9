"""Power loss through the harness: a seeded schedule of the `power` fault kind (one node, one
node with its last write torn, every node at once) against a NemesisCluster whose every
data dir is a lazyfs mount, the register, set and DDL workloads running throughout, every
history checked: zero lost acknowledged writes, zero linearizability violations.

The scripted power-loss tests (and their broken builds) are test_power.py; the long runs
are `python -m tests.nemesis --faults power --duration N` (figures in design/nemesis.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.nemesis.cluster import NemesisCluster, available
from tests.nemesis.faults import Schedule
from tests.nemesis.runner import PowerFault, run
from tests.nemesis.workloads import Access, DdlWorkload, RegisterWorkload, SetWorkload

pytestmark = [
    pytest.mark.integration,
    pytest.mark.nemesis,
    pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse"),
]

SEED = 51  # draws node (a coordinator), all, and node-torn (a tablet server)
RUN_S = 24.0  # workload time (the cluster heals and checks after)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[NemesisCluster]:
    why = available()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("nemesis-power")
    with NemesisCluster.build(root, lazy_disks=True, secure=True) as c:
        yield c


def test_power_losses_lose_nothing_and_stay_linearizable(cluster: NemesisCluster) -> None:
    fault = PowerFault(cluster)
    schedule = Schedule.make(SEED, RUN_S, [fault], cluster.node_names)
    assert len(schedule.steps) >= 3
    access = Access.of(cluster)
    workloads = [
        RegisterWorkload(access, "power"),
        SetWorkload(access, "power"),
        DdlWorkload(access, "power"),
    ]
    result = run(cluster, schedule, [fault], workloads, tag="power")
    print(result.summary())
    assert len(result.injected) == len(schedule.steps)
    assert result.ok, result.summary()
    outcomes = result.outcomes()
    assert outcomes["register:OK"] > 0 and outcomes["set:OK"] > 0 and outcomes["ddl:OK"] > 0
