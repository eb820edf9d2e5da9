"""logcentric: the Python client of a logcentric cluster.

    import logcentric
    from logcentric import Column

    with logcentric.connect(cluster="local") as client:    # or connect("h1:p1,h2:p2,h3:p3")
        client.create_table("events", [Column("id", "int64", key=True), Column("v", "string")])
        table = client.table("events")
        with client.new_session() as session:
            session.upsert(table, [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
        print(session.errors)                               # per-row errors, if any
        print(table.to_arrow(predicates=[("id", ">=", 2)]))  # a pyarrow.Table

Arrow in and out: rows are written as a list of dicts or a `pyarrow.Table`, and scans return
Arrow. Every error the cluster answers is a `logcentric.LogcentricError` (one subclass per
status: `BadRequest`, `NotFound`, `AlreadyExists`, `Unavailable`, `TimedOut`, ...).

This package imports no server code: only the wire layer (`rpc`) and the generated protocol
modules (`rpc.protocols`). The Spark data source is `logcentric.spark` (the `spark` extra).
"""

from __future__ import annotations

from collections.abc import Sequence

from logcentric import clusters
from logcentric.client import (
    Client,
    Column,
    ReplicaInfo,
    RowError,
    Session,
    Table,
    TabletInfo,
)
from logcentric.errors import (
    AlreadyExists,
    BadRequest,
    IllegalState,
    LogcentricError,
    NotFound,
    NotLeader,
    PermissionDenied,
    TimedOut,
    Unauthenticated,
    Unavailable,
)

# Column types, as kudu-python names them (`logcentric.int64` is the string "int64").
int64 = "int64"
int32 = "int32"
double = "double"
bool_ = "bool"
string = "string"
binary = "binary"
timestamp = "timestamp"
COLUMN_TYPES = (int64, int32, double, bool_, string, binary, timestamp)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("logcentric")
    except metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = _version()


def connect(
    coordinators: str | Sequence[str] | None = None,
    *,
    cluster: str | None = None,
    timeout_s: float = 30.0,
    credentials: str | None = None,
) -> Client:
    """A `Client` of a cluster, named by its coordinator addresses ("h1:p1,h2:p2" or a list),
    by `cluster` (a name in the clusters file), or, with neither, by `LOGCENTRIC_COORDINATORS`
    or `LOGCENTRIC_CLUSTER`; then by the coordinators of a `credentials` file given here (it
    was written for its cluster), else by the clusters file's default (`logcentric.clusters`),
    else by the coordinators of the credentials file found otherwise. Raises `BadRequest`
    when nothing names a cluster, `NotFound` for an unknown name.

    `credentials`: a credentials file (design/client.md "Credentials"): CURVE, as its
    principal, to coordinators holding the keys it lists. Else `LOGCENTRIC_CREDENTIALS`, else
    the named cluster's `credentials` entry in the clusters file; none: plaintext. A file
    its group or others may read is refused (`BadRequest`)."""
    from rpc import credentials as creds

    found = creds.resolve(credentials, coordinators=coordinators, cluster=cluster)
    if (
        found is not None
        and not coordinators
        and not cluster
        and not _names_cluster(default_counts=credentials is None)
    ):
        return Client(list(found.addresses), timeout_s=timeout_s, credentials=found)
    return Client(
        list(clusters.resolve(coordinators, cluster)), timeout_s=timeout_s, credentials=found
    )


def _names_cluster(*, default_counts: bool = True) -> bool:
    """Whether the environment (or, if `default_counts`, the clusters file's default) names a
    cluster."""
    import os

    if os.environ.get(clusters.COORDINATORS_ENV, "").strip():
        return True
    if os.environ.get(clusters.CLUSTER_ENV, "").strip():
        return True
    return default_counts and bool(clusters.load()["default"])


__all__ = [
    "COLUMN_TYPES",
    "AlreadyExists",
    "BadRequest",
    "Client",
    "Column",
    "IllegalState",
    "LogcentricError",
    "NotFound",
    "NotLeader",
    "PermissionDenied",
    "ReplicaInfo",
    "RowError",
    "Session",
    "Table",
    "TabletInfo",
    "TimedOut",
    "Unauthenticated",
    "Unavailable",
    "__version__",
    "binary",
    "bool_",
    "clusters",
    "connect",
    "double",
    "int32",
    "int64",
    "string",
    "timestamp",
]
