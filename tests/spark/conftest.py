"""Fixtures for the Spark tests: one small local[2] SparkSession per test module, and a real
local cluster (`coordinator local-cluster`: real processes) for the integration tests. The
cluster is secure (CURVE), as a new local cluster is: the data source is given the admin's
credentials file with its option "credentials" (`credentials_option`), and clients
`cluster.credentials()`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from logcentric.spark.session import build_session, ensure_python_env
from optools.localcluster import LocalCluster

CLUSTER_UP_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def spark():
    ensure_python_env()
    session = build_session("local[2]", "logcentric-tests", driver_memory="768m")
    yield session
    session.stop()


def start_cluster(root: Path, coordinators: int, tservers: int) -> Iterator[LocalCluster]:
    """A real cluster of processes (`coordinator local-cluster`), stopped afterwards."""
    cluster = LocalCluster.create(root, coordinators, tservers, lease_timeout_s=1.5)
    try:
        cluster.up(timeout_s=CLUSTER_UP_TIMEOUT_S)
        yield cluster
    finally:
        cluster.down()


def addresses(cluster: LocalCluster) -> str:
    """The "coordinators" option of the data source for this cluster."""
    return ",".join(cluster.spec.coordinator_addresses)


def credentials_path(cluster: LocalCluster) -> str | None:
    """The admin's credentials file of a secure cluster (None: plaintext)."""
    return str(cluster.spec.admin_credentials) if cluster.spec.secure else None


def credentials_option(cluster: LocalCluster) -> dict[str, str]:
    """The data source's "credentials" option for this cluster ({} for a plaintext one)."""
    path = credentials_path(cluster)
    return {"credentials": path} if path else {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    yield from start_cluster(tmp_path_factory.mktemp("cluster"), 1, 1)
