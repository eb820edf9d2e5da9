"""CURVE key pairs of processes and the rpc layer's CURVE settings (design/security.md §2).

A process's key pair lives in a directory as two files in zmq's certificate format (so
`zmq.auth.load_certificate` reads them too): `<name>.key` holds the public key,
`<name>.key_secret` the public and the secret key. Keys are z85 text (40 characters).
The secret file is created with mode 0600 (never wider, not even for an instant: it is
opened with that mode, written, fsynced and renamed into place); loading it refuses a file
that its group or others may read, with a message that says how to fix it.

`ServerCurve` (an RpcServer's key pair and the authorizer of its callers' keys) and
`ClientCurve` (a Transport's key pair and the public keys of the servers it calls, by UUID)
are the options that turn CURVE on in rpc/server.py and rpc/client.py; without them a
server and a client talk plaintext, as before.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
import zmq.utils.z85

KEY_CHARS = 40  # a 32-byte key in z85
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
SECRET_MODE = 0o600

# Who may call: public key (z85) -> the caller's principal (a name, a role, any object the
# server's handlers understand), or None for a key that is unknown or revoked. Called by the
# ZAP handler for every new connection and by the rpc server for every call, so it must be
# cheap (a dict lookup) and must not block.
Authorizer = Callable[[str], Any]


class KeyFileError(Exception):
    """A key file that is missing, malformed or not private enough."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A CURVE key pair as z85 text. `secret` is empty for a public key alone."""

    public: str
    secret: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if not is_z85_key(self.public):
            raise KeyFileError(f"not a CURVE public key (40 z85 characters): {self.public!r}")
        if self.secret and not is_z85_key(self.secret):
            raise KeyFileError("the secret key is not 40 z85 characters")

    @classmethod
    def generate(cls) -> KeyPair:
        public, secret = zmq.curve_keypair()
        return cls(public.decode("ascii"), secret.decode("ascii"))


def key_problem(text: str) -> str | None:
    """Why `text` is not a CURVE key in z85 text, or None. Decoded, not just looked at: 40
    characters of the z85 alphabet may still overflow a 32-bit group ("#" * 40) or give
    the all-zero key (no key at all)."""
    if not isinstance(text, str):
        return f"a key is text, got {type(text).__name__}"
    if len(text) != KEY_CHARS:
        return f"a key is {KEY_CHARS} characters of z85 text, got {len(text)}"
    try:
        raw = zmq.utils.z85.decode(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError, KeyError, struct.error, OverflowError):
        return "not z85 text that decodes to a 32-byte key"
    if len(raw) != 32 or zmq.utils.z85.encode(raw).decode("ascii") != text:
        return "not z85 text that decodes to a 32-byte key"
    if raw == bytes(32):
        return "the all-zero key is not a CURVE key"
    return None


def is_z85_key(text: str) -> bool:
    return key_problem(text) is None


def public_keys_arg(text: str) -> tuple[str, ...]:
    """An argparse type for KEY|FILE,...: each 40 z85 characters, or a file holding a public
    key (a zmq certificate such as keys/coordinator.key, or the 40 characters alone). z85
    has no comma. A bad item is an ArgumentTypeError saying why."""
    import argparse

    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if is_z85_key(item):
            out.append(item)
            continue
        if len(item) == KEY_CHARS and not os.path.exists(item):
            raise argparse.ArgumentTypeError(f"{item!r}: {key_problem(item)}")
        try:
            out.append(load_public_key(item))
        except KeyFileError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return tuple(out)


def public_key_arg(text: str) -> str:
    """An argparse type for one KEY|FILE (public_keys_arg's rule)."""
    import argparse

    found = public_keys_arg(text)
    if len(found) != 1:
        raise argparse.ArgumentTypeError(f"one public key (40 z85 characters or a file): {text!r}")
    return found[0]


def glue_key_arguments(argv: Sequence[str]) -> list[str]:
    """`argv` with every option followed by a list of public keys glued to it as
    `--option=KEYS`. A z85 key may begin with '-', which argparse takes for an option
    ("expected one argument"): one key in 85 does. Only a value of 40-character z85 keys
    (comma-separated) is glued; no option name is one."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if (
            word.startswith("--")
            and "=" not in word
            and nxt.startswith("-")
            and all(is_z85_key(k) for k in nxt.split(","))
        ):
            out.append(f"{word}={nxt}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def public_path(directory: str | os.PathLike, name: str) -> Path:
    return Path(directory) / f"{name}{PUBLIC_SUFFIX}"


def secret_path(directory: str | os.PathLike, name: str) -> Path:
    return Path(directory) / f"{name}{SECRET_SUFFIX}"


def _cert_text(kind: str, public: str, secret: str = "") -> str:
    lines = [
        f"#   ZeroMQ CURVE {kind} certificate (logcentric rpc/keys.py)",
        "metadata",
        "curve",
        f'    public-key = "{public}"',
    ]
    if secret:
        lines.append(f'    secret-key = "{secret}"')
    return "\n".join(lines) + "\n"


def _write_file(path: Path, text: str, mode: int) -> None:
    """Write `text` to `path` atomically: a temporary file made with `mode`, fsynced, renamed,
    the directory fsynced."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have narrowed it; never widened
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _make_dirs(directory: Path) -> None:
    """`directory` and its missing parents, made 0700, each one's entry fsynced in its
    parent: the files fsynced inside are reachable after a power loss only then."""
    missing = []
    d = directory
    while not d.exists():
        missing.append(d)
        d = d.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for made in reversed(missing):
        _fsync_dir(made.parent)


def create_keypair(directory: str | os.PathLike, name: str) -> KeyPair:
    """Make a new key pair in `directory` (created 0700 if missing) as `<name>.key` and
    `<name>.key_secret` (0600). Refuses to replace an existing pair: a process's key is
    its identity, and a new one must be admitted again."""
    directory = Path(directory)
    _make_dirs(directory)
    pub, sec = public_path(directory, name), secret_path(directory, name)
    for path in (pub, sec):
        if path.exists():
            raise KeyFileError(f"{path} exists already: a key pair is never replaced")
    pair = KeyPair.generate()
    # The secret first: a public file never exists without its secret.
    _write_file(sec, _cert_text("secret", pair.public, pair.secret), SECRET_MODE)
    _write_file(pub, _cert_text("public", pair.public), 0o644)
    return pair


def _read_cert(path: Path) -> tuple[str, str]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read key file {path}: {exc}") from None
    try:
        return public.decode("ascii"), (secret or b"").decode("ascii")
    except UnicodeDecodeError:
        raise KeyFileError(f"{path} holds a key that is not z85 text") from None


def check_private(path: str | os.PathLike) -> None:
    """Raise KeyFileError unless only its owner may read or write `path`."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise KeyFileError(f"no secret key file {path}") from None
    problem = private_file_problem(st, path, "secret key file", "make a new key pair")
    if problem:
        raise KeyFileError(problem)


def private_file_problem(st: os.stat_result, path, what: str, renew: str) -> str | None:
    """Why a file holding a secret (its stat result `st`) may not be used, or None: not a
    regular file, or readable or writable by its group or others."""
    if not stat.S_ISREG(st.st_mode):
        return f"{what} {path} is not a regular file"
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return (
            f"{what} {path} has mode {mode:04o}: its group or others may read its secret; "
            f"refusing to use it (fix: chmod 600 {path}, and {renew} if others may have "
            "read it)"
        )
    return None


def load_keypair(directory: str | os.PathLike, name: str) -> KeyPair:
    """The key pair `<name>` of `directory`; its secret file must be private (0600)."""
    sec = secret_path(directory, name)
    check_private(sec)
    public, secret = _read_cert(sec)
    if not secret:
        raise KeyFileError(f"{sec} holds no secret key")
    pair = KeyPair(public, secret)
    if zmq.curve_public(secret.encode("ascii")).decode("ascii") != public:
        raise KeyFileError(f"{sec}: the public key is not the secret key's")
    return pair


def load_or_create_keypair(directory: str | os.PathLike, name: str) -> KeyPair:
    """Load `<name>` from `directory`, making it first if neither of its files exists."""
    if not public_path(directory, name).exists() and not secret_path(directory, name).exists():
        return create_keypair(directory, name)
    return load_keypair(directory, name)


def load_public_key(path: str | os.PathLike) -> str:
    """The public key of a certificate file (`<name>.key`), or of a file holding only the
    40 z85 characters."""
    path = Path(path)
    try:
        text = path.read_text("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"cannot read public key file {path}: {exc}") from None
    if is_z85_key(text):
        return text
    public, _secret = _read_cert(path)
    return KeyPair(public).public


@dataclass(frozen=True, slots=True)
class ServerCurve:
    """An RpcServer's CURVE settings: its key pair and who may call it.

    `authorizer(public_key)` gives the caller's principal, or None to refuse. It decides at
    the handshake (ZAP: an unknown key never gets a connection, and nothing it sends is
    read) and again for every call (so an answer that changes, e.g. a revoked key, takes
    effect on the next call of a connection that is already open).

    `ready()` (None: always): whether the authorizer's table is loaded. Until it is (a
    coordinator node that started again and has not replayed its log), a key the authorizer
    does not know is not refused at the handshake (the client would take that as final:
    `KeyRefused`) but let through, and its calls are answered UNAVAILABLE (a client of a
    group asks another node) until the table is loaded, then judged as every call is. A key
    it knows is served at once. It must be cheap and must not block (an Event's is_set)."""

    keypair: KeyPair
    authorizer: Authorizer
    ready: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        assert self.keypair.secret, "a server needs its secret key"


@dataclass(slots=True)
class ClientCurve:
    """A Transport's CURVE settings: its key pair and the public keys of servers by UUID
    (a call to UUID U connects only to a server that proves it holds U's key). The mapping
    may be extended while in use (`add_server`)."""

    keypair: KeyPair
    server_keys: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.keypair.secret, "a client needs its secret key"
        for uuid, key in self.server_keys.items():
            KeyPair(key)  # validates
            assert uuid, "a server key goes with a UUID"

    def add_server(self, uuid: str, public_key: str) -> None:
        assert uuid
        KeyPair(public_key)  # validates
        self.server_keys[uuid] = public_key

    def server_key(self, uuid: str) -> str:
        return self.server_keys.get(uuid, "") if uuid else ""
