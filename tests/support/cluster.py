"""A local cluster of real processes for tests: coordinators and tablet servers on 127.0.0.1.

Secure (CURVE, design/security.md section 5) unless a test passes `secure=False`, as
`coordinator local-cluster up` is: `cluster.client()` carries the admin's credentials, and a
raw RpcClient or CoordinatorClient needs `cluster.credentials()` (None for plaintext)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from optools.localcluster import LocalCluster


@contextlib.contextmanager
def local_cluster(
    root: Path,
    coordinators: int = 3,
    tservers: int = 2,
    lease_timeout_s: float = 1.0,
    secure: bool = True,
) -> Iterator[LocalCluster]:
    """Start a cluster under `root`; always stop every process, whatever happens."""
    cluster = LocalCluster.create(root, coordinators, tservers, lease_timeout_s, secure=secure)
    try:
        cluster.up(timeout_s=120)
        yield cluster
    finally:
        cluster.down()
