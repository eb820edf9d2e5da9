"""The `tserver` tools that call a live tablet server, against CURVE servers (the default,
design/security.md section 4): `status`, `tablets --address`, `copies`, `copy-cancel` and
`copy-from-remote` take `--credentials FILE` and call with CURVE, the server's key given
(`--server-key`, `--source-key`) or asked of the coordinators the file lists; without
credentials they are refused at the handshake and say to give them.

A real CURVE coordinator node (embedded logstore) in this process with a bootstrap admin
key, two tablet servers' fs roots admitted as `tserver` principals, one of them a real
`tserver start` process (CURVE, --coordinator-keys); the tools are the real command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import logcentric
from coordinator.node import CoordinatorNode
from logcentric import Column
from rpc import credentials
from rpc.client import HandshakeFailed
from rpc.errors import RpcError
from rpc.keys import KeyPair
from rpc.protocols.tserver_pb2 import DataState
from tests.support.procs import free_port, wait_for
from tests.tservers.procs import REPO, TServerProcess
from tests.tservers.test_tserver_curve import Admin, node_config
from tservers.fs import FsLayout

pytestmark = pytest.mark.integration

WAIT_S = 90.0
COMMAND_TIMEOUT_S = 120.0


def tserver(*args: str) -> subprocess.CompletedProcess:
    """The real command, without $LOGCENTRIC_CREDENTIALS (the test says which file)."""
    env = {k: v for k, v in os.environ.items() if k != credentials.CREDENTIALS_ENV}
    return subprocess.run(
        [sys.executable, "-m", "tservers.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("tserver: error: ")]
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_tools_call_curve_servers_with_credentials(tmp_path):
    admin_pair = KeyPair.generate()
    source_fs = FsLayout.format(tmp_path / "source")
    target_fs = FsLayout.format(tmp_path / "target")  # stopped: copy-from-remote's target
    node = CoordinatorNode(
        node_config(tmp_path, admin_pair, "127.0.0.1:0", f"127.0.0.1:{free_port()}")
    )
    admin = Admin(node, admin_pair)
    source = None
    try:
        wait_for(admin.leads, WAIT_S, "the coordinator node leads")
        # A logged admin (the bootstrap key is not in the table pushed to tablet servers).
        ops = KeyPair.generate()
        admin.add("ops", ops.public, "user", "admin")
        admin_creds = tmp_path / "ops.credentials"
        credentials.write(
            admin_creds,
            credentials.document("ops", "user", ["admin"], ops, [(node.address, node.public_key)]),
        )
        for fs in (source_fs, target_fs):
            admin.add(fs.uuid, fs.public_key(), "tserver", "server")
        source = TServerProcess(
            source_fs.root,
            insecure=False,  # CURVE, the default: the coordinator's key given
            extra_args=[
                "--coordinators", node.address, "--coordinator-keys", node.public_key,
                "--fs-reserved-bytes", "0",
            ],
        ).start()  # fmt: skip

        def created() -> bool:
            try:
                with logcentric.connect(credentials=str(admin_creds), timeout_s=10) as client:
                    client.create_table(
                        "t", [Column("id", "int64", key=True)], num_tablets=1, replication_factor=1
                    )
                return True
            except RpcError as err:  # the server not enlisted yet
                assert "permission" not in str(err).lower(), err
                return False

        wait_for(created, WAIT_S, "CreateTable on the admitted CURVE tablet server")
        with logcentric.connect(credentials=str(admin_creds), timeout_s=30) as client:
            table = client.table("t")
            tablet = table.tablets()[0].tablet_id

            def written() -> bool:
                try:
                    with client.new_session() as session:
                        session.upsert(table, [{"id": i} for i in range(50)])
                except HandshakeFailed:  # the table with `ops` not pushed to the server yet
                    return False
                assert session.errors == []
                return True

            wait_for(written, WAIT_S, "50 rows written as ops")
        address, creds = source.address, str(admin_creds)

        # Without credentials: refused at the handshake, in one line saying what to give.
        for args in (("status",), ("tablets",), ("copies",), ("copy-cancel", "--tablet", tablet)):
            line = one_line_error(tserver(*args, "--address", address))
            assert "give --credentials FILE" in line, (args, line)

        # With them: the server's key asked of the coordinators the file lists.
        st = tserver("status", "--address", address, "--json", "--credentials", creds)
        assert st.returncode == 0, st.stderr
        assert json.loads(st.stdout)["uuid"] == source.uuid
        tablets = tserver("tablets", "--address", address, "--json", "--credentials", creds)
        assert tablets.returncode == 0, tablets.stderr
        assert [t["tablet_id"] for t in json.loads(tablets.stdout)["tablets"]] == [tablet]
        # Or given (`tserver show-key`): the coordinators are not asked.
        key = source_fs.public_key()
        copies = tserver(
            "copies", "--address", address, "--credentials", creds, "--server-key", key
        )
        assert copies.returncode == 0 and copies.stdout.strip() == "no tablet copies", copies
        # A wrong key: the server does not prove it holds it, nothing is sent.
        wrong = KeyPair.generate().public
        line = one_line_error(
            tserver("status", "--address", address, "--credentials", creds, "--server-key", wrong)
        )
        assert address in line
        # A key without credentials: whose key pair would call?
        line = one_line_error(tserver("status", "--address", address, "--server-key", key))
        assert "--server-key needs --credentials FILE" in line

        # copy-from-remote onto the stopped, admitted target: plaintext is refused at the
        # handshake; with the credentials (the source's key from the coordinators) it copies
        # over CURVE as the target server (its key pair in its fs root).
        plain = tserver(
            "copy-from-remote", "--fs-root", str(target_fs.root), "--tablet", tablet,
            "--source", address, "--timeout", "5",
        )  # fmt: skip
        line = one_line_error(plain)
        assert "give --credentials FILE" in line, line
        assert not FsLayout.open(target_fs.root).superblock_path(tablet).exists()
        copied = tserver(
            "copy-from-remote", "--fs-root", str(target_fs.root), "--tablet", tablet,
            "--source", address, "--credentials", creds,
        )  # fmt: skip
        assert copied.returncode == 0, copied.stderr
        assert f"copied tablet {tablet}" in copied.stdout, copied.stdout
        target = FsLayout.open(target_fs.root)
        assert target.read_superblock(tablet).data_state == DataState.READY
    finally:
        if source is not None:
            source.stop()
        admin.close()
        node.close()
