"""One way to name a cluster: addresses, a name from the clusters file, or the environment.

This module lives in the wire layer so that every tool can use it (`tserver start --cluster`,
`logstore status --cluster`) without a server package importing the client package; users
meet it as `logcentric.clusters`, which re-exports it.

Every tool and `logcentric.connect` find a cluster's coordinators the same way, first match
wins:

1. coordinator addresses given explicitly (`--coordinators A,B,C`, `connect("A,B,C")`);
2. a cluster name given explicitly (`--cluster NAME`, `connect(cluster="NAME")`), looked up
   in the clusters file;
3. `LOGCENTRIC_COORDINATORS` (addresses), then `LOGCENTRIC_CLUSTER` (a name);
4. the clusters file's `default` cluster, if it names one.

The clusters file (like Kudu's kudurc) is TOML, at `$LOGCENTRIC_CONFIG`, else
`$XDG_CONFIG_HOME/logcentric/clusters.toml`, else `~/.config/logcentric/clusters.toml`:

    default = "local"
    [clusters.local]
    coordinators = ["127.0.0.1:7100", "127.0.0.1:7101", "127.0.0.1:7102"]
    credentials = "/home/me/.config/logcentric/local-admin.credentials"   # optional

`coordinator local-cluster up` registers its cluster there (as `local` unless `--name`).
A cluster's optional `credentials` is the credentials file (rpc/credentials.py) used when
the cluster is named (by --cluster, $LOGCENTRIC_CLUSTER or the default) and neither
--credentials nor $LOGCENTRIC_CREDENTIALS gives one.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import tomllib
from pathlib import Path

from rpc.addresses import parse_host_port
from rpc.errors import BadRequest, NotFound

COORDINATORS_ENV = "LOGCENTRIC_COORDINATORS"
CLUSTER_ENV = "LOGCENTRIC_CLUSTER"
CONFIG_ENV = "LOGCENTRIC_CONFIG"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
CLUSTERS_MAX = 1000
CONFIG_BYTES_MAX = 1 << 20


def config_path() -> Path:
    """Where the clusters file is (it need not exist)."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "logcentric" / "clusters.toml"


def parse_addresses(value: str | list[str] | tuple[str, ...], *, what: str) -> tuple[str, ...]:
    """HOST:PORT addresses from a comma-separated string or a list; each has a real port."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        if not isinstance(item, str):
            raise BadRequest(f"{what}: an address must be a string, got {item!r}")
        text = item.strip()
        if not text:
            continue
        try:
            _host, port = parse_host_port(text)
        except BadRequest:
            raise BadRequest(f"{what}: {text!r} is not HOST:PORT") from None
        if port == 0:
            raise BadRequest(f"{what}: {text!r} needs a real port, not 0")
        out.append(text)
    if not out:
        raise BadRequest(f"{what}: no coordinator address")
    return tuple(out)


def load(path: Path | None = None) -> dict:
    """The clusters file as {"default": str | None, "clusters": {name: (addresses...)},
    "credentials": {name: path}} (a cluster without a credentials entry is not in the last)."""
    path = path or config_path()
    try:
        with open(path, "rb") as f:
            raw = f.read(CONFIG_BYTES_MAX + 1)
    except FileNotFoundError:
        return {"default": None, "clusters": {}, "credentials": {}}
    except OSError as e:
        raise BadRequest(f"cannot read the clusters file {path}: {e.strerror}") from None
    if len(raw) > CONFIG_BYTES_MAX:
        raise BadRequest(f"the clusters file {path} is larger than {CONFIG_BYTES_MAX} bytes")
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise BadRequest(f"the clusters file {path} is not valid TOML: {e}") from None
    clusters = {}
    credentials = {}
    table = doc.get("clusters", {})
    if not isinstance(table, dict):
        raise BadRequest(f"the clusters file {path}: [clusters] must be a table")
    for name, entry in table.items():
        where = f"the clusters file {path}, cluster {name!r}"
        if not isinstance(entry, dict) or "coordinators" not in entry:
            raise BadRequest(f'{where}: needs coordinators = ["HOST:PORT", ...]')
        clusters[name] = parse_addresses(entry["coordinators"], what=where)
        if "credentials" in entry:
            if not isinstance(entry["credentials"], str) or not entry["credentials"].strip():
                raise BadRequest(f"{where}: credentials must be a file's path")
            credentials[name] = entry["credentials"].strip()
    default = doc.get("default")
    if default is not None and not isinstance(default, str):
        raise BadRequest(f"the clusters file {path}: default must be a cluster name")
    return {"default": default, "clusters": clusters, "credentials": credentials}


def _dump(doc: dict) -> str:
    lines = ["# logcentric clusters: `--cluster NAME` or logcentric.connect(cluster=NAME)"]
    if doc.get("default"):
        lines.append(f"default = {json.dumps(doc['default'])}")
    for name in sorted(doc["clusters"]):
        addresses = ", ".join(json.dumps(a) for a in doc["clusters"][name])
        lines += ["", f"[clusters.{json.dumps(name)}]", f"coordinators = [{addresses}]"]
        if doc.get("credentials", {}).get(name):
            lines.append(f"credentials = {json.dumps(doc['credentials'][name])}")
    return "\n".join(lines) + "\n"


def register(
    name: str,
    coordinators,
    *,
    make_default: bool = False,
    path: Path | None = None,
    credentials: str = "",
) -> Path:
    """Add or replace a named cluster in the clusters file (written atomically); returns the
    file's path. The first cluster registered becomes the default. `credentials`: the
    credentials file to use with it (none: the entry has none)."""
    if not NAME_RE.match(name):
        raise BadRequest(f"cluster name {name!r}: letters, digits, '_', '.', '-' (at most 64)")
    addresses = parse_addresses(coordinators, what=f"cluster {name!r}")
    path = path or config_path()
    doc = load(path)
    doc["clusters"][name] = addresses
    doc["credentials"].pop(name, None)
    if credentials:
        doc["credentials"][name] = str(Path(credentials).expanduser().resolve())
    if len(doc["clusters"]) > CLUSTERS_MAX:
        raise BadRequest(f"the clusters file {path} holds {CLUSTERS_MAX} clusters at most")
    if make_default or not doc.get("default"):
        doc["default"] = name
    _write(path, doc)
    return path


def _write(path: Path, doc: dict) -> None:
    """Replace the clusters file atomically (a reader sees the old file or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".clusters.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_dump(doc))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def unregister(name: str, *, path: Path | None = None) -> bool:
    """Remove a named cluster (and the default, if it named it); False if it was not there."""
    path = path or config_path()
    doc = load(path)
    if name not in doc["clusters"]:
        return False
    del doc["clusters"][name]
    doc["credentials"].pop(name, None)
    if doc.get("default") == name:
        doc["default"] = None
    _write(path, doc)
    return True


def unregister_if(name: str, coordinators, *, path: Path | None = None) -> bool:
    """Remove the named cluster only if it still names these coordinators (a cluster
    registered under the same name since, elsewhere, is kept); True if it was removed."""
    path = path or config_path()
    doc = load(path)
    if set(doc["clusters"].get(name, ())) != set(coordinators) or not coordinators:
        return False
    return unregister(name, path=path)


def resolve(coordinators=None, cluster: str | None = None) -> tuple[str, ...]:
    """The coordinator addresses to use (the order of precedence is the module's docstring).
    Raises BadRequest saying what to give when nothing names a cluster."""
    if coordinators:
        return parse_addresses(coordinators, what="coordinators")
    if cluster:
        return _named(cluster, "--cluster")
    env = os.environ.get(COORDINATORS_ENV, "").strip()
    if env:
        return parse_addresses(env, what=COORDINATORS_ENV)
    env_name = os.environ.get(CLUSTER_ENV, "").strip()
    if env_name:
        return _named(env_name, CLUSTER_ENV)
    doc = load()
    if doc["default"]:
        return _named(doc["default"], f"the default of {config_path()}")
    raise BadRequest(
        "no cluster named: give --coordinators HOST:PORT,... or --cluster NAME, or set "
        f"{COORDINATORS_ENV} (no default cluster in {config_path()})"
    )


def credentials_of(coordinators=None, cluster: str | None = None) -> str:
    """The `credentials` entry of the cluster that `resolve(coordinators, cluster)` names by
    name ("" when addresses name it, or the cluster has no entry)."""
    if coordinators:
        return ""
    name = cluster
    if not name:
        if os.environ.get(COORDINATORS_ENV, "").strip():
            return ""
        name = os.environ.get(CLUSTER_ENV, "").strip()
    doc = load()
    name = name or doc["default"]
    return doc["credentials"].get(name, "") if name else ""


def _named(name: str, source: str) -> tuple[str, ...]:
    doc = load()
    try:
        return doc["clusters"][name]
    except KeyError:
        known = ", ".join(sorted(doc["clusters"])) or "none"
        raise NotFound(
            f"cluster {name!r} (from {source}) is not in {config_path()} (known: {known})"
        ) from None
