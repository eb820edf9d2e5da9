"""A tablet server keeps the principals table across its restart (design/security.md section
4): `<fs-root>/principals`, CRC-checked, 0600. Real files; then real processes: a restarted
tablet server of a secure cluster serves an admitted reader's scan while no coordinator
answers (before, it refused every client until its first heartbeat answer)."""

from __future__ import annotations

import os
import stat

import pyarrow as pa
import pytest

import logcentric
from logcentric import Column
from logcentric.tablets import TabletServerClient
from optools.localcluster import LocalCluster
from rpc.keys import KeyPair
from rpc.protocols import coordinator_pb2 as cpb
from tests.support.procs import wait_for
from tservers.principals import PrincipalCache

READER = KeyPair.generate()
OWN = KeyPair.generate()


def table(version: int, *entries: tuple[str, str, str, str]) -> cpb.PrincipalsTable:
    t = cpb.PrincipalsTable(version=version)
    for name, key, role, state in entries:
        t.entries.add(name=name, kind="user", public_key=key, roles=[role], state=state)
    return t


def test_the_table_is_kept_and_read_back(tmp_path):
    path = tmp_path / "principals"
    cache = PrincipalCache("ts", OWN.public, path=path)
    assert cache.authorize_key(READER.public) is None and not path.exists()
    cache.heard_leader(table(7, ("rita", READER.public, "reader", "active")))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = PrincipalCache("ts", OWN.public, path=path)
    assert again.version == 7
    assert again.authorize_key(READER.public).roles == ("reader",)
    # A revocation pushed later is kept too: the revoked key is not admitted after a restart.
    again.heard_leader(table(8, ("rita", READER.public, "reader", "revoked")))
    third = PrincipalCache("ts", OWN.public, path=path)
    assert third.version == 8 and third.authorize_key(READER.public) is None


def test_a_damaged_file_is_not_used(tmp_path, caplog):
    path = tmp_path / "principals"
    PrincipalCache("ts", OWN.public, path=path).heard_leader(
        table(7, ("rita", READER.public, "reader", "active"))
    )
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    cache = PrincipalCache("ts", OWN.public, path=path)
    assert cache.version == 0 and cache.authorize_key(READER.public) is None
    assert "not used" in caplog.text
    # Its own key is admitted whatever the file holds.
    assert cache.authorize_key(OWN.public) is not None


@pytest.mark.integration
def test_a_restarted_tablet_server_serves_admitted_users_before_any_heartbeat(tmp_path):
    cluster = LocalCluster.create(tmp_path / "c", 1, 1, 1.0, secure=True)
    try:
        cluster.up(timeout_s=120)
        admin_file = str(cluster.spec.admin_credentials)
        with logcentric.connect(credentials=admin_file, timeout_s=60) as admin:
            admin.create_table(
                "t", [Column("id", "int64", key=True)], num_tablets=1, replication_factor=1
            )
            with admin.new_session() as session:
                session.insert(admin.table("t"), pa.table({"id": [1, 2, 3]}))
            (tablet,) = admin.table("t").tablets()
            (replica,) = tablet.replicas
            keypair = admin.credentials.keypair
        # No coordinator answers from here: the tablet server restarts on what it kept.
        cluster.stop(cluster.spec.coordinators[0])
        cluster.stop(cluster.spec.tservers[0])
        cluster.start_tserver(0)
        with TabletServerClient(
            replica.address,
            replica.server_uuid,
            timeout_s=10,
            keypair=keypair,
            server_key=replica.public_key,
        ) as ts:

            def scans() -> int:
                try:
                    return ts.scan_table(tablet.tablet_id).num_rows
                except logcentric.errors.RpcError as e:
                    if "not admitted" in str(e) or "handshake" in str(e).lower():
                        raise AssertionError(f"the restarted server refused the admin: {e}") from e
                    return 0  # the tablet is still opening

            assert wait_for(scans, 60, "a scan of the restarted server") == 3
    finally:
        cluster.down()
