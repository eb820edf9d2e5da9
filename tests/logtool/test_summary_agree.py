"""`coordinator log --summary` counts one log the same, read live or from a data dir.

Coordinator nodes run as processes on a `logstore serve` replica (`coordinator start
--logstore`): two of them lead in turn (two epochs), enlist tablet servers that never
heartbeat (marked down: records invalidated) and renew their lease (each renewal
invalidating the one before). Once they are stopped the log no longer changes, and the
summary read live from the replica and the one read from the replica's data dir (the
replica still running) must agree on everything that belongs to the log: its last id, the
live records by type and bytes, the invalidated ids, pending operations, epochs and
undecodable records. Only what the source still holds of the invalidated records differs: a
data dir's journal holds them, a live read none.

The nodes run with CURVE, the default: both get the same bootstrap admin key (the first
logs it), the test calls each as that admin, and each silent server is admitted with a key
of its own and enlisted with it (a node enlists a UUID only from the key admitted for it).
"""

from __future__ import annotations

import pytest

from logcentric.meta import CoordinatorClient
from rpc import keys
from rpc.addresses import free_port
from rpc.credentials import Credentials
from rpc.errors import RpcError
from rpc.protocols import coordinator_pb2 as pb
from tests.coordinator.coordproc import Proc, wait_for
from tests.logstore.procs import make_replicas

from .conftest import one_doc, run_tool

pytestmark = pytest.mark.integration

LOG_FIELDS = (
    "last_id",
    "live",
    "live_bytes",
    "invalidated",
    "pending_operations",
    "epochs",
    "undecodable",
)


def _lead(tmp_path, name: str, store_address: str, enlist: list[str], admin: keys.KeyPair) -> None:
    """Run coordinator `name` on the external log until it leads, enlist servers, let a few
    renewals and server-down records land, stop it."""
    rpc = f"127.0.0.1:{free_port()}"
    node_key = keys.create_keypair(tmp_path / name / "keys", "coordinator").public
    admin_key_file = tmp_path / "admin.key"
    admin_key_file.write_text(admin.public + "\n")
    nodes = [(rpc, node_key)]
    creds = Credentials("admin", "user", ("admin",), admin, tuple(nodes))
    proc = Proc(
        [
            "-m", "optools.coordinator_cli", "start",
            "--id", name,
            "--data-dir", str(tmp_path / name),
            "--bind", rpc,
            "--logstore", store_address,
            "--lease-timeout-s", "1.0",
            "--tserver-timeout-s", "1.0",
            "--admin-public-key", str(admin_key_file),
        ],
        tmp_path / f"{name}.log",
    )  # fmt: skip
    try:
        with CoordinatorClient([rpc], timeout_s=10.0, credentials=creds) as client:

            def leads() -> bool:
                if not proc.alive():
                    raise AssertionError(f"{name} exited:\n{proc.text()[-3000:]}")
                try:
                    return client.status(rpc, timeout_s=1.0).role == "LEADER"
                except RpcError:
                    return False

            wait_for(leads, 90.0, f"{name} leading")
            for i, address in enumerate(enlist):
                uuid, pair = f"{name}-ts{i}", keys.KeyPair.generate()
                request = pb.AddPrincipalRequest(
                    request_id=client.next_request_id(), name=uuid, kind="tserver",
                    public_key=pair.public, roles=["server"],
                )  # fmt: skip
                client.call("AddPrincipal", request, pb.AddPrincipalResponse)
                server = Credentials(uuid, "tserver", ("server",), pair, tuple(nodes))
                with CoordinatorClient([rpc], timeout_s=10.0, credentials=server) as as_server:
                    as_server.enlist_server(uuid, address)

            def all_down() -> bool:
                servers = client.list_servers()
                mine = [s for s in servers if s.uuid.startswith(f"{name}-")]
                return len(mine) == len(enlist) and all(s.state == "DOWN" for s in mine)

            wait_for(all_down, 90.0, f"{name}'s silent servers marked down")
    finally:
        proc.stop()


def test_live_and_offline_summaries_of_one_log_agree(tmp_path):
    (replica,) = make_replicas(tmp_path, 1)
    replica.start()
    try:
        silent = [f"127.0.0.1:{free_port()}" for _ in range(2)]  # nothing listens there
        admin = keys.KeyPair.generate()
        _lead(tmp_path, "c1", replica.rpc_address, silent[:1], admin)
        _lead(tmp_path, "c2", replica.rpc_address, silent[1:], admin)
        # The writers are stopped: the log stays as it is. Read it both ways.
        live_code, live_text = run_tool("--address", replica.rpc_address, "--summary")
        dir_code, dir_text = run_tool("--data-dir", replica.data_dir, "--summary")
        assert (live_code, dir_code) == (0, 0), (live_text, dir_text)
        # The first line says what the log holds, then (in parentheses) what this source
        # still holds of its invalidated records.
        live_head = live_text.splitlines()[0].split(" ids invalidated")[0]
        dir_head = dir_text.splitlines()[0].split(" ids invalidated")[0]
        assert live_head == dir_head, (live_text, dir_text)

        live = one_doc(run_tool("--address", replica.rpc_address, "--summary", "--json")[1])
        offline = one_doc(run_tool("--data-dir", replica.data_dir, "--summary", "--json")[1])
    finally:
        replica.stop()
    assert {k: live[k] for k in LOG_FIELDS} == {k: offline[k] for k in LOG_FIELDS}
    assert {t: (r["live"], r["live_bytes"]) for t, r in live["by_type"].items() if r["live"]} == {
        t: (r["live"], r["live_bytes"]) for t, r in offline["by_type"].items() if r["live"]
    }
    assert live["epochs"] == 2 and live["pending_operations"] == 0
    # Renewals and the enlistments of the servers marked down were invalidated.
    assert live["invalidated"] == live["last_id"] - live["live"] > 0
    # What each source still holds of them: a live read none, the journal those after the
    # last snapshot (all of them unless the replica compacted meanwhile, after a minute).
    assert live["invalidated_held"] == 0 and live["gone_ids"] == live["invalidated"]
    assert offline["invalidated_held"] + offline["gone_ids"] == offline["invalidated"]
    assert live["source"]["kind"] == "live" and offline["source"]["kind"] == "data_dir"
