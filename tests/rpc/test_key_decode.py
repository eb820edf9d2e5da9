"""CURVE keys are validated by decoding them, wherever they come in (design/security.md).

"#" * 40 is 40 characters of the z85 alphabet whose groups overflow 32 bits (zmq's decoder
raised struct.error, uncaught); "0" * 40 decodes to the all-zero key. Both were taken as
keys: a tserver start crashed with a traceback, and the coordinator recorded them as the
keys of active principals.
"""

from __future__ import annotations

import json

import pytest

from coordinator.node import CoordinatorNode
from coordinator.ops.principals import key_problem
from rpc import credentials
from rpc.errors import BadRequest
from rpc.keys import KeyFileError, KeyPair, glue_key_arguments, is_z85_key
from tests.support.procs import free_port, wait_for
from tests.tservers.test_cli_errors import tserver
from tests.tservers.test_tserver_curve import Admin, node_config

BAD_KEYS = ("#" * 40, "0" * 40, "%" * 40)


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_refused_not_raised(key):
    assert not is_z85_key(key)
    assert key_problem(key)
    with pytest.raises(KeyFileError):
        KeyPair(key)
    assert is_z85_key(KeyPair.generate().public)


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_credentials_file_with_a_bad_coordinator_key(tmp_path, key):
    pair = KeyPair.generate()
    doc = {
        "format": credentials.FORMAT,
        "name": "alice",
        "public_key": pair.public,
        "secret_key": pair.secret,
        "coordinators": [{"address": "127.0.0.1:7100", "public_key": key}],
    }
    path = tmp_path / "creds.json"
    path.write_text(json.dumps(doc))
    path.chmod(0o600)
    with pytest.raises(credentials.CredentialsError, match="coordinator 127.0.0.1:7100"):
        credentials.load(path)


@pytest.mark.integration
@pytest.mark.parametrize("key", ["#" * 40, "0" * 40])
def test_tserver_start_with_a_bad_coordinator_key(tmp_path, key):
    root = tmp_path / "root"
    assert tserver("fs", "format", "--fs-root", str(root)).returncode == 0
    r = tserver(
        "start", "--fs-root", str(root), "--curve", "--coordinator-keys", key,
        "--coordinators", "127.0.0.1:1",
    )  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode != 0
    assert "--coordinator-keys" in r.stderr.strip().splitlines()[-1], r.stderr


@pytest.mark.integration
def test_the_coordinator_refuses_a_principal_with_an_undecodable_key(tmp_path):
    admin_pair = KeyPair.generate()
    node = CoordinatorNode(
        node_config(tmp_path, admin_pair, "127.0.0.1:0", f"127.0.0.1:{free_port()}")
    )
    admin = Admin(node, admin_pair)
    try:
        wait_for(admin.leads, 30.0, "the coordinator node leads")
        for i, key in enumerate(("#" * 40, "0" * 40)):
            with pytest.raises(BadRequest, match="public key"):
                admin.add(f"bob{i}", key, "user", "reader")
            assert f"bob{i}" not in node.catalog.principals
        admin.add("carol", KeyPair.generate().public, "user", "reader")  # a good key goes in
        assert node.catalog.principals["carol"].state == "active"
    finally:
        admin.close()
        node.close()


def _key_starting_with_dash() -> str:
    while True:  # one key in 85 does
        key = KeyPair.generate().public
        if key.startswith("-"):
            return key


def test_key_lists_beginning_with_a_dash_are_glued_to_their_option():
    key, other = _key_starting_with_dash(), KeyPair.generate().public
    assert glue_key_arguments(["start", "--coordinator-keys", key, "--curve"]) == [
        "start", f"--coordinator-keys={key}", "--curve",
    ]  # fmt: skip
    both = f"{key},{other}"
    assert glue_key_arguments(["--client-keys", both]) == [f"--client-keys={both}"]
    # Anything else stays as it is: options, paths, a key not beginning with '-'.
    for argv in (["--curve", "--insecure"], ["--coordinator-keys", "-k.key"], ["--x", other]):
        assert glue_key_arguments(argv) == argv


@pytest.mark.integration
def test_tserver_start_takes_a_key_beginning_with_a_dash(tmp_path):
    """Before, argparse read such a key as an option: 'expected one argument' (local-cluster
    up failed so for one tablet server start in 85)."""
    root = tmp_path / "root"
    assert tserver("fs", "format", "--fs-root", str(root)).returncode == 0
    (root / "keys" / "tserver.key_secret").chmod(0o644)  # the start stops after parsing
    r = tserver(
        "start", "--fs-root", str(root), "--coordinator-keys", _key_starting_with_dash(),
        "--coordinators", "127.0.0.1:1",
    )  # fmt: skip
    assert r.returncode != 0
    assert "expected one argument" not in r.stderr, r.stderr
    assert "chmod 600" in r.stderr, r.stderr
