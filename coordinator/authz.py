"""The role table (design/security.md section 3): kept in `rpc/authz.py`, so that tablet
servers check calls against it too without importing the coordinator; re-exported here."""

from rpc.authz import (  # noqa: F401
    _ADMIN,
    _ANY,
    _READ,
    _SERVER,
    ADMIN,
    IMPLIES,
    METHOD_ROLES,
    READER,
    ROLES,
    SERVER,
    WRITER,
    authorize,
    expand,
    needed,
)
