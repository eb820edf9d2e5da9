"""A local cluster of real processes for tests: coordinators and tablet servers on 127.0.0.1."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from optools.localcluster import LocalCluster


@contextlib.contextmanager
def local_cluster(
    root: Path, coordinators: int = 3, tservers: int = 2, lease_timeout_s: float = 1.0
) -> Iterator[LocalCluster]:
    """Start a cluster under `root`; always stop every process, whatever happens."""
    cluster = LocalCluster.create(root, coordinators, tservers, lease_timeout_s)
    try:
        cluster.up(timeout_s=120)
        yield cluster
    finally:
        cluster.down()
