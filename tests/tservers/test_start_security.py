"""`tserver start` is CURVE by default (design/security.md section 4, issue 22): without its
coordinators' keys it refuses in one line, `--insecure` is loud, and with
`--coordinator-keys` it serves CURVE only. Real `tserver` processes and sockets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rpc import credentials
from rpc.client import HandshakeFailed, RpcClient
from rpc.keys import ClientCurve, KeyPair
from tests.support.cli import run_cli
from tests.support.procs import free_port
from tests.tservers.procs import REPO, TServerProcess
from tservers.fs import FsLayout

pytestmark = pytest.mark.integration  # every test runs `tserver start` as a process

COMMAND_TIMEOUT_S = 60.0
PING_TIMEOUT_S = 5.0


def tserver(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    if env is None:
        return run_cli("tservers.cli", *args, timeout_s=COMMAND_TIMEOUT_S)
    return subprocess.run(
        [sys.executable, "-m", "tservers.cli", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("tserver: error: "), r.stderr
    return lines[0]


@pytest.fixture
def root(tmp_path) -> Path:
    r = tmp_path / "root"
    FsLayout.format(r)
    return r


def test_default_start_without_keys_refuses_naming_both_ways_and_insecure(root):
    """No keys: standalone, with --coordinators only, and a cluster without a credentials
    file each refuse in one line that names --coordinator-keys, --cluster and --insecure;
    nothing was served and the fs root's lock was never taken."""
    nobody = f"127.0.0.1:{free_port()}"
    config = root.parent / "clusters.toml"
    config.write_text(f'[clusters.plain]\ncoordinators = ["{nobody}"]\n')
    for args, env in (
        ((), None),
        (("--coordinators", nobody), None),
        (("--cluster", "plain"), {"LOGCENTRIC_CONFIG": str(config)}),
    ):
        line = one_line_error(tserver("start", "--fs-root", str(root), *args, env=env))
        for words in ("CURVE", "--coordinator-keys", "--cluster NAME", "--insecure"):
            assert words in line, (args, line)
        assert not (root / "lock").exists(), args
    standalone = one_line_error(tserver("start", "--fs-root", str(root)))
    assert "standalone" in standalone and "admit nobody" in standalone


def test_insecure_and_coordinator_keys_exclude_each_other(root):
    key = KeyPair.generate().public
    line = one_line_error(
        tserver(
            "start", "--fs-root", str(root), "--insecure",
            "--coordinators", f"127.0.0.1:{free_port()}", "--coordinator-keys", key,
        )
    )  # fmt: skip
    assert "--coordinator-keys" in line and "--insecure" in line


def test_insecure_beyond_loopback_still_needs_the_password(root):
    line = one_line_error(
        tserver("start", "--fs-root", str(root), "--insecure", "--bind", "0.0.0.0:0")
    )
    assert "needs the cluster's password" in line and "--password-file" in line


def test_insecure_logs_a_warning_and_says_insecure_in_its_start_line(root):
    p = TServerProcess(root, insecure=True).start()  # --insecure, said explicitly
    try:
        start_line = p.out_path.read_text().splitlines()[0]
        assert start_line.startswith(f"tserver {p.uuid} serving on {p.address}")
        assert "INSECURE" in start_line and "curve-key" not in start_line
        warnings = [
            ln
            for ln in p.err_path.read_text().splitlines()
            if " WARNING " in ln and "--insecure" in ln
        ]
        assert len(warnings) == 1, p.err_path.read_text()
        for words in ("INSECURE", "plaintext", "unauthenticated", "write, scan", p.address):
            assert words in warnings[0], warnings[0]
        with RpcClient(p.address, "test") as c:  # plaintext answers
            assert c.ping(timeout_s=PING_TIMEOUT_S).uuid == p.uuid
    finally:
        p.stop()


def test_with_coordinator_keys_it_serves_curve_only(root):
    """Started with a coordinator's key (nobody at its address): it serves CURVE, says its
    key in the start line; a plaintext client gets nothing, the coordinator's key (admitted
    as the server role) gets its ping answered by the server holding the key `show-key`
    prints."""
    coordinator = KeyPair.generate()
    server_key = FsLayout(root, FsLayout.read_instance(root).uuid).public_key()
    p = TServerProcess(
        root,
        insecure=False,
        extra_args=[
            "--coordinators", f"127.0.0.1:{free_port()}",
            "--coordinator-keys", coordinator.public,
        ],
    ).start()  # fmt: skip
    try:
        start_line = p.out_path.read_text().splitlines()[0]
        assert start_line.endswith(f"curve-key={server_key}"), start_line
        assert "INSECURE" not in p.out_path.read_text() + p.err_path.read_text()
        with RpcClient(p.address, "plain") as c, pytest.raises(HandshakeFailed):
            c.ping(timeout_s=PING_TIMEOUT_S)
        with RpcClient(
            p.address, "coordinator", curve=ClientCurve(coordinator), server_key=server_key
        ) as c:
            assert c.ping(timeout_s=PING_TIMEOUT_S).uuid == p.uuid
    finally:
        p.stop()


def test_with_cluster_the_keys_come_from_its_credentials_file(root, tmp_path):
    """`--cluster NAME`: the coordinators' keys of the credentials file the clusters file
    names for it; a file without a key for one of the addresses refuses the start."""
    coordinator = KeyPair.generate()
    address = f"127.0.0.1:{free_port()}"
    other = f"127.0.0.1:{free_port()}"
    good = tmp_path / "good.credentials"
    credentials.write(
        good,
        credentials.document(
            "admin", "user", ["admin"], KeyPair.generate(), [(address, coordinator.public)]
        ),
    )
    partial = tmp_path / "partial.credentials"
    credentials.write(
        partial,
        credentials.document(
            "admin", "user", ["admin"], KeyPair.generate(), [(address, coordinator.public)]
        ),
    )
    config = tmp_path / "clusters.toml"
    config.write_text(
        f'[clusters.good]\ncoordinators = ["{address}"]\ncredentials = "{good}"\n'
        f'[clusters.partial]\ncoordinators = ["{address}", "{other}"]\n'
        f'credentials = "{partial}"\n'
    )
    env = {"LOGCENTRIC_CONFIG": str(config)}
    line = one_line_error(tserver("start", "--fs-root", str(root), "--cluster", "partial", env=env))
    assert f"no public key for coordinator {other}" in line and "--insecure" in line
    server_key = FsLayout(root, FsLayout.read_instance(root).uuid).public_key()
    p = TServerProcess(root, insecure=False, extra_args=["--cluster", "good"], env=env).start()
    try:
        assert p.out_path.read_text().splitlines()[0].endswith(f"curve-key={server_key}")
        with RpcClient(p.address, "plain") as c, pytest.raises(HandshakeFailed):
            c.ping(timeout_s=PING_TIMEOUT_S)
        with RpcClient(
            p.address, "coordinator", curve=ClientCurve(coordinator), server_key=server_key
        ) as c:
            assert c.ping(timeout_s=PING_TIMEOUT_S).uuid == p.uuid
    finally:
        p.stop()


def test_help_says_curve_is_the_default():
    r = tserver("start", "--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "CURVE on every connection (encrypted, authenticated), the default" in text, text
    assert "--insecure run plaintext and unauthenticated" in text, text
