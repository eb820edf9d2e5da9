"""A tablet server's CURVE key pair (design/security.md section 2): made by `tserver fs
format` in <fs-root>/keys (secret 0600, directory 0700), loaded at start (made then, and
logged, for a root formatted before keys existed), printed by `tserver show-key`."""

from __future__ import annotations

import json
import logging
import os
import stat

import pytest
import zmq

from rpc import keys
from rpc.keys import KeyPair
from tests.support.cli import run_cli
from tservers.fs import KEY_NAME, FsError, FsLayout
from tservers.server import TabletServer, TServerConfig


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_format_makes_a_private_key_pair(tmp_path):
    old = os.umask(0)  # the modes must not depend on the umask
    try:
        fs = FsLayout.format(tmp_path / "root")
    finally:
        os.umask(old)
    secret = keys.secret_path(fs.keys_dir, KEY_NAME)
    assert _mode(fs.keys_dir) == 0o700
    assert _mode(secret) == 0o600
    pair = keys.load_keypair(fs.keys_dir, KEY_NAME)
    assert zmq.curve_public(pair.secret.encode()).decode() == pair.public
    assert fs.public_key() == pair.public
    # Another root, another identity.
    assert FsLayout.format(tmp_path / "other").public_key() != pair.public


def test_start_loads_the_formatted_key(tmp_path):
    fs = FsLayout.format(tmp_path / "root")
    with TabletServer(TServerConfig(fs_root=fs.root)) as server:
        assert server.keypair.public == fs.public_key()


def test_an_older_root_gets_its_key_at_start_and_says_so(tmp_path, caplog):
    fs = FsLayout.format(tmp_path / "root")
    for name in (keys.secret_path(fs.keys_dir, KEY_NAME), keys.public_path(fs.keys_dir, KEY_NAME)):
        name.unlink()
    fs.keys_dir.rmdir()  # as a root formatted before keys existed
    with pytest.raises(FsError, match="no key pair yet"):
        fs.public_key()
    with caplog.at_level(logging.WARNING, logger="tservers.server"):
        server = TabletServer(TServerConfig(fs_root=fs.root))
    try:
        made = server.keypair.public
        assert made == fs.public_key()
        assert _mode(keys.secret_path(fs.keys_dir, KEY_NAME)) == 0o600
        assert any(made in r.getMessage() and "made a key pair" in r.getMessage()
                   for r in caplog.records)  # fmt: skip
    finally:
        server.close()
    caplog.clear()
    # The next start loads it, says nothing, and the key stays the same.
    with caplog.at_level(logging.WARNING, logger="tservers.server"):
        server = TabletServer(TServerConfig(fs_root=fs.root))
    try:
        assert server.keypair.public == made
        assert not any("made a key pair" in r.getMessage() for r in caplog.records)
    finally:
        server.close()


def test_a_secret_others_may_read_is_refused_at_start(tmp_path):
    fs = FsLayout.format(tmp_path / "root")
    secret = keys.secret_path(fs.keys_dir, KEY_NAME)
    os.chmod(secret, 0o640)
    with pytest.raises(FsError, match="chmod 600"):
        TabletServer(TServerConfig(fs_root=fs.root))
    # The refusal released the fs root's lock: fixed, it starts.
    os.chmod(secret, 0o600)
    TabletServer(TServerConfig(fs_root=fs.root)).close()


@pytest.mark.integration
def test_show_key_cli(tmp_path):
    root = tmp_path / "root"
    r = run_cli("tservers.cli", "fs", "format", "--fs-root", str(root))
    assert r.returncode == 0, r.stderr
    uuid = r.stdout.strip()
    shown = run_cli("tservers.cli", "show-key", "--fs-root", str(root))
    assert shown.returncode == 0, shown.stderr
    key = shown.stdout.strip()
    assert keys.is_z85_key(key) and key == FsLayout(root, uuid).public_key()
    as_json = run_cli("tservers.cli", "show-key", "--fs-root", str(root), "--json")
    assert json.loads(as_json.stdout) == {"fs_root": str(root), "uuid": uuid, "public_key": key}
    missing = run_cli("tservers.cli", "show-key", "--fs-root", str(tmp_path / "nothing"))
    assert missing.returncode == 1 and "not formatted" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.mark.integration
def test_start_curve_flags_are_checked(tmp_path):
    root = tmp_path / "root"
    FsLayout.format(root)
    key = KeyPair.generate().public
    mismatch = run_cli(
        "tservers.cli", "start", "--fs-root", str(root), "--curve",
        "--coordinators", "127.0.0.1:1,127.0.0.1:2", "--coordinator-keys", key,
    )  # fmt: skip
    assert mismatch.returncode == 1, mismatch.stderr
    assert "one coordinator public key per coordinator address" in mismatch.stderr
    assert "Traceback" not in mismatch.stderr
    bad = run_cli(
        "tservers.cli", "start", "--fs-root", str(root), "--curve",
        "--coordinators", "127.0.0.1:1", "--coordinator-keys", str(tmp_path / "nothing.key"),
    )  # fmt: skip
    assert bad.returncode == 2 and "cannot read public key file" in bad.stderr
