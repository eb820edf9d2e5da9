"""A principal's credentials file: who it is, its CURVE key pair, and the coordinators it may
trust (design/client.md "Credentials", design/security.md section 5).

JSON, one document, mode 0600 (refused when its group or others may read it):

    {
      "format": "logcentric-credentials/1",
      "name": "alice",
      "kind": "user",
      "roles": ["reader"],
      "public_key": "<40 z85 characters>",
      "secret_key": "<40 z85 characters>",
      "coordinators": [{"address": "10.0.0.1:7100", "public_key": "<40 z85>"}, ...]
    }

The coordinators' public keys are what make the file safe to use on a shared network: the
client connects to the node at each address only if it proves (CURVE) that it holds the key
listed with it. An entry without a key (a file written for a plaintext cluster) cannot be
used to connect with CURVE; `Credentials.server_key` says so when asked.

Where a tool or the client finds the file (first match wins, `find_path`): the explicit
`--credentials FILE` / `credentials=`, else $LOGCENTRIC_CREDENTIALS, else the `credentials`
entry of the named cluster in the clusters file (rpc/clusters.py). None of them: plaintext.

This module is in the wire layer (the client package and the tools both use it; it imports
no server code).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from rpc import keys
from rpc.addresses import parse_host_port
from rpc.errors import BadRequest, Unauthenticated
from rpc.keys import ClientCurve, KeyPair, is_z85_key

FORMAT = "logcentric-credentials/1"
CREDENTIALS_ENV = "LOGCENTRIC_CREDENTIALS"
FILE_BYTES_MAX = 1 << 20
MODE = 0o600


class CredentialsError(BadRequest):
    """A credentials file that cannot be used: missing, not private, malformed."""


@dataclass(frozen=True, slots=True)
class Credentials:
    name: str
    kind: str
    roles: tuple[str, ...]
    keypair: KeyPair = field(repr=False)
    # (address, public key) of every coordinator node; a key may be "" (unknown).
    coordinators: tuple[tuple[str, str], ...]
    path: str = ""

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(address for address, _key in self.coordinators)

    def coordinator_keys(self) -> dict[str, str]:
        return {address: key for address, key in self.coordinators if key}

    def client_curve(self) -> ClientCurve:
        """A fresh ClientCurve with this principal's key pair (no server keys yet)."""
        return ClientCurve(self.keypair)

    def server_key(self, address: str) -> str:
        """The public key of the coordinator at `address`; Unauthenticated (nothing sent)
        when the file lists no key for it."""
        for known, key in self.coordinators:
            if known == address and key:
                return key
        where = f" ({self.path})" if self.path else ""
        raise Unauthenticated(
            f"the credentials file{where} has no public key for coordinator {address}: "
            "add it to its coordinators (the node's `coordinator show-key`), or use a file "
            "written for this cluster"
        )

    def document(self) -> dict:
        return document(self.name, self.kind, self.roles, self.keypair, list(self.coordinators))


def document(
    name: str,
    kind: str,
    roles: Sequence[str],
    keypair: KeyPair,
    coordinators: Sequence[tuple[str, str]],
) -> dict:
    assert keypair.secret, "a credentials file holds the secret key"
    return {
        "format": FORMAT,
        "name": name,
        "kind": kind,
        "roles": list(roles),
        "public_key": keypair.public,
        "secret_key": keypair.secret,
        "coordinators": [
            {"address": address, "public_key": key} if key else {"address": address}
            for address, key in coordinators
        ],
    }


def write(path: str | os.PathLike, doc: dict) -> None:
    """Create `path` with mode 0600 (never over an existing file: FileExistsError), write
    and fsync it and its directory."""
    data = (json.dumps(doc, indent=2) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MODE)
    try:
        os.fchmod(fd, MODE)  # whatever the umask
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(Path(path).resolve().parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load(path: str | os.PathLike) -> Credentials:
    """The credentials in `path`. CredentialsError (one line saying what to fix) when it is
    missing, its group or others may read it, it is not the format, or its keys do not fit."""
    path = str(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise CredentialsError(f"cannot read credentials file {path}: {e.strerror}") from None
    try:
        problem = keys.private_file_problem(
            os.fstat(fd), path, "credentials file", "have the principal's key replaced"
        )
        if problem:
            raise CredentialsError(problem)
        raw = os.read(fd, FILE_BYTES_MAX + 1)
    finally:
        os.close(fd)
    if len(raw) > FILE_BYTES_MAX:
        raise CredentialsError(f"credentials file {path} is larger than {FILE_BYTES_MAX} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CredentialsError(f"credentials file {path} is not JSON: {e}") from None
    return parse(doc, path)


def parse(doc, path: str = "") -> Credentials:
    where = f"credentials file {path}" if path else "credentials"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CredentialsError(f"{where}: not a {FORMAT} document")
    name, kind = doc.get("name"), doc.get("kind", "user")
    if not isinstance(name, str) or not name or not isinstance(kind, str):
        raise CredentialsError(f"{where}: needs a principal name")
    roles = doc.get("roles", [])
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise CredentialsError(f"{where}: roles must be a list of names")
    public, secret = doc.get("public_key"), doc.get("secret_key")
    if not is_z85_key(public) or not is_z85_key(secret):
        raise CredentialsError(f"{where}: public_key and secret_key must be 40 z85 characters")
    if zmq.curve_public(secret.encode("ascii")).decode("ascii") != public:
        raise CredentialsError(f"{where}: the public key is not the secret key's")
    entries = doc.get("coordinators", [])
    if not isinstance(entries, list):
        raise CredentialsError(f"{where}: coordinators must be a list")
    coordinators = []
    for entry in entries:
        if isinstance(entry, str):  # an address alone (a file for a plaintext cluster)
            entry = {"address": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("address"), str):
            raise CredentialsError(f"{where}: a coordinator is {{'address', 'public_key'}}")
        address, key = entry["address"].strip(), entry.get("public_key", "") or ""
        try:
            parse_host_port(address)
        except BadRequest:
            raise CredentialsError(f"{where}: coordinator {address!r} is not HOST:PORT") from None
        if key and not is_z85_key(key):
            raise CredentialsError(
                f"{where}: the public key of coordinator {address} is not 40 z85 characters"
            )
        coordinators.append((address, key))
    return Credentials(name, kind, tuple(roles), KeyPair(public, secret), tuple(coordinators), path)


def find_path(explicit: str | os.PathLike | None = None, cluster_entry: str = "") -> str:
    """The credentials file to use ("" for none): `explicit`, else $LOGCENTRIC_CREDENTIALS,
    else the cluster's clusters-file entry."""
    if explicit:
        return str(Path(explicit).expanduser())
    env = os.environ.get(CREDENTIALS_ENV, "").strip()
    if env:
        return str(Path(env).expanduser())
    return str(Path(cluster_entry).expanduser()) if cluster_entry else ""


def resolve(
    explicit: str | os.PathLike | None = None,
    *,
    coordinators=None,
    cluster: str | None = None,
) -> Credentials | None:
    """The credentials named by `explicit`, the environment, or the clusters file's entry of
    the cluster the same arguments name (rpc.clusters.credentials_of); None: plaintext."""
    from rpc import clusters

    entry = "" if explicit else clusters.credentials_of(coordinators, cluster)
    path = find_path(explicit, entry)
    return load(path) if path else None
