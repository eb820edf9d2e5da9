"""Fixtures for the Spark tests: one small local[2] SparkSession per test module, and a real
local cluster (`coordinator local-cluster up/down` as subprocesses) for the integration tests."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_tables.session import REPO_ROOT, build_session, ensure_python_env

CLUSTER_UP_TIMEOUT_S = 180.0
CLUSTER_DOWN_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def spark():
    ensure_python_env()
    session = build_session(
        "local[2]",
        "logcentric-tests",
        driver_memory="768m",
        extra_conf={"spark.sql.python.filterPushdown.enabled": "true"},
    )
    yield session
    session.stop()


class LocalCluster:
    """A cluster started by `coordinator local-cluster up`; `down` stops it."""

    def __init__(self, root: Path, coordinators: int, tservers: int) -> None:
        self.root = root
        self.coordinators_n = coordinators
        self.tservers_n = tservers
        self.addresses: list[str] = []

    def up(self) -> None:
        out = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "local-cluster", "up", "--dir",
             str(self.root), "--coordinators", str(self.coordinators_n), "--tservers",
             str(self.tservers_n)],
            capture_output=True, text=True, timeout=CLUSTER_UP_TIMEOUT_S, cwd=REPO_ROOT,
        )  # fmt: skip
        if out.returncode != 0:
            raise RuntimeError(f"local-cluster up failed:\n{out.stdout}\n{out.stderr}")
        match = re.search(r"coordinators:\s*(\S+)", out.stdout)
        if not match:
            raise RuntimeError(f"local-cluster up printed no coordinators:\n{out.stdout}")
        self.addresses = match.group(1).split(",")

    def down(self) -> None:
        subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "local-cluster", "down", "--dir",
             str(self.root)],
            capture_output=True, text=True, timeout=CLUSTER_DOWN_TIMEOUT_S, cwd=REPO_ROOT,
        )  # fmt: skip

    @property
    def coordinators(self) -> str:
        return ",".join(self.addresses)


def start_cluster(root: Path, coordinators: int, tservers: int) -> Iterator[LocalCluster]:
    cluster = LocalCluster(root, coordinators, tservers)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    yield from start_cluster(tmp_path_factory.mktemp("cluster"), 1, 1)
