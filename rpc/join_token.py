"""Join tokens (design/security.md section 5): the text an admin hands to a new tablet server.

A token is a fresh random 32-byte CURVE secret key, written `lcjt1.<40 z85 characters>`. Its
public half is logged as a `join-token` principal (the coordinator log never holds the
secret, as a password store holds a hash); the tablet server derives the key pair from the
text and calls Coordinator.JoinServer with it. Pure: no sockets, no files; never logs.
"""

from __future__ import annotations

import os

import zmq
import zmq.utils.z85

from rpc.keys import KeyFileError, KeyPair, key_problem

PREFIX = "lcjt1."
SECRET_BYTES = 32
ENV = "LOGCENTRIC_JOIN_TOKEN"


class JoinTokenError(ValueError):
    """A text that is not a join token. The message never repeats the text (a secret)."""


def make() -> tuple[str, KeyPair]:
    """A new token's text and its key pair (secret from os.urandom)."""
    while True:
        secret = zmq.utils.z85.encode(os.urandom(SECRET_BYTES)).decode("ascii")
        if key_problem(secret) is None:  # the all-zero secret: 2^-256, but refused anyway
            break
    return PREFIX + secret, keypair_of(PREFIX + secret)


def keypair_of(token: str) -> KeyPair:
    """The key pair a token's text stands for; JoinTokenError for anything else."""
    token = token.strip()
    if not token.startswith(PREFIX):
        raise JoinTokenError(
            f"a join token starts with {PREFIX!r} (made by `coordinator join-token`)"
        )
    secret = token[len(PREFIX) :]
    problem = key_problem(secret)
    if problem is not None:
        raise JoinTokenError(f"the join token is damaged: {problem}")
    public = zmq.curve_public(secret.encode("ascii")).decode("ascii")
    try:
        return KeyPair(public, secret)
    except KeyFileError as e:  # pragma: no cover - a decoded secret always gives a key
        raise JoinTokenError(f"the join token is damaged: {e}") from None
