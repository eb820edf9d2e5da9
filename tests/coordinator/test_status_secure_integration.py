"""`coordinator status` (the ksck, optools/admin.py) on a secure local cluster: a tablet
server that hosts no replica is in no tablet location, so its key comes from its tserver
principal; asked without one, it was reported as not answering ListTablets (a plaintext
call to a CURVE server) and the cluster as UNHEALTHY for good (a retired, drained server:
test_replication_integration's last step)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration


def test_status_asks_a_server_without_replicas_with_its_admitted_key(tmp_path):
    with local_cluster(tmp_path / "c", coordinators=1, tservers=1) as cluster:
        assert cluster.spec.secure
        out = subprocess.run(
            [sys.executable, "-m", "optools.coordinator_cli", "status",
             "--coordinators", ",".join(cluster.spec.coordinator_addresses),
             "--credentials", str(cluster.spec.admin_credentials)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert "did not answer" not in out.stdout, out.stdout
        assert "0 replicas" in out.stdout, out.stdout
