"""The credentials file (rpc/credentials.py) and where tools find it: written 0600 whatever
the umask and never over a file, refused when its group or others may read it or when its
keys do not fit, and found by the flag, then LOGCENTRIC_CREDENTIALS, then the named
cluster's entry in the clusters file (rpc/clusters.py)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from rpc import clusters, credentials
from rpc.errors import BadRequest, Unauthenticated
from rpc.keys import KeyPair


def doc(name="alice", coordinators=(("127.0.0.1:7100", ""),)) -> dict:
    return credentials.document(name, "user", ["reader"], KeyPair.generate(), coordinators)


def test_written_private_and_loaded_back(tmp_path):
    node = KeyPair.generate().public
    path = tmp_path / "alice.credentials"
    old = os.umask(0)
    try:
        credentials.write(path, doc(coordinators=[("10.0.0.1:7100", node), ("10.0.0.2:7100", "")]))
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(FileExistsError):
        credentials.write(path, doc())
    creds = credentials.load(path)
    assert (creds.name, creds.kind, creds.roles) == ("alice", "user", ("reader",))
    assert creds.addresses == ("10.0.0.1:7100", "10.0.0.2:7100")
    assert creds.server_key("10.0.0.1:7100") == node
    with pytest.raises(Unauthenticated, match="no public key for coordinator 10.0.0.2:7100"):
        creds.server_key("10.0.0.2:7100")
    assert creds.client_curve().keypair == creds.keypair


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_a_file_others_may_read_is_refused(tmp_path, mode):
    path = tmp_path / "c.credentials"
    credentials.write(path, doc())
    os.chmod(path, mode)
    with pytest.raises(credentials.CredentialsError, match=f"mode {mode:04o}.*chmod 600"):
        credentials.load(path)


def test_malformed_files_are_refused_in_one_line(tmp_path):
    def refused(document, words: str) -> None:
        path = tmp_path / f"bad-{len(list(tmp_path.iterdir()))}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(
            fd, document.encode() if isinstance(document, str) else json.dumps(document).encode()
        )
        os.close(fd)
        with pytest.raises(BadRequest, match=words) as info:
            credentials.load(path)
        assert "\n" not in str(info.value)

    good = doc()
    refused("{not json", "not JSON")
    refused({**good, "format": "other/1"}, "not a logcentric-credentials/1")
    other = KeyPair.generate()
    refused({**good, "secret_key": other.secret}, "not the secret key's")
    refused({**good, "public_key": "short"}, "40 z85")
    refused({**good, "coordinators": [{"address": "nohost"}]}, "not HOST:PORT")
    refused({**good, "coordinators": [{"address": "h:1", "public_key": "x" * 12}]}, "not 40 z85")
    with pytest.raises(credentials.CredentialsError, match="cannot read"):
        credentials.load(tmp_path / "missing")


def test_found_by_flag_then_environment_then_the_clusters_file(tmp_path, monkeypatch):
    monkeypatch.setenv(clusters.CONFIG_ENV, str(tmp_path / "clusters.toml"))
    monkeypatch.delenv(credentials.CREDENTIALS_ENV, raising=False)
    monkeypatch.delenv(clusters.COORDINATORS_ENV, raising=False)
    monkeypatch.delenv(clusters.CLUSTER_ENV, raising=False)
    entry, env, flag = (tmp_path / n for n in ("entry.cred", "env.cred", "flag.cred"))
    for path, name in ((entry, "entry"), (env, "env"), (flag, "flag")):
        credentials.write(path, doc(name))
    clusters.register("secure", ["127.0.0.1:7100"], credentials=str(entry))
    clusters.register("plain", ["127.0.0.1:7200"])
    text = (tmp_path / "clusters.toml").read_text()
    assert f'credentials = "{entry}"' in text
    assert clusters.load()["credentials"] == {"secure": str(entry)}

    assert credentials.resolve(cluster="secure").name == "entry"
    assert credentials.resolve().name == "entry"  # the default cluster (the first one)
    assert credentials.resolve(cluster="plain") is None
    assert credentials.resolve(coordinators="127.0.0.1:7100") is None  # named by address
    monkeypatch.setenv(clusters.CLUSTER_ENV, "plain")
    assert credentials.resolve() is None
    monkeypatch.setenv(credentials.CREDENTIALS_ENV, str(env))
    assert credentials.resolve(cluster="secure").name == "env"
    assert credentials.resolve(str(flag), cluster="secure").name == "flag"
    # re-registering without credentials drops the entry; unregistering drops it too
    clusters.register("secure", ["127.0.0.1:7100"])
    assert clusters.load()["credentials"] == {}
