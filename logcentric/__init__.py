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
    TimedOut,
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
) -> Client:
    """A `Client` of a cluster, named by its coordinator addresses ("h1:p1,h2:p2" or a list),
    by `cluster` (a name in the clusters file), or, with neither, by `LOGCENTRIC_COORDINATORS`,
    `LOGCENTRIC_CLUSTER` or the clusters file's default (`logcentric.clusters`). Raises
    `BadRequest` when nothing names a cluster, `NotFound` for an unknown name."""
    return Client(list(clusters.resolve(coordinators, cluster)), timeout_s=timeout_s)


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
    "ReplicaInfo",
    "RowError",
    "Session",
    "Table",
    "TabletInfo",
    "TimedOut",
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
