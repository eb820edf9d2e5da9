"""One way to name a cluster: addresses, a name from the clusters file, or the environment.

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

`coordinator local-cluster up` registers its cluster there (as `local` unless `--name`);
`coordinator clusters` lists it. The implementation is `rpc.clusters` (the server tools use
it too, and no server package imports this one); this module is its public name.
"""

from __future__ import annotations

from rpc.clusters import (
    CLUSTER_ENV,
    CLUSTERS_MAX,
    CONFIG_BYTES_MAX,
    CONFIG_ENV,
    COORDINATORS_ENV,
    NAME_RE,
    config_path,
    credentials_of,
    load,
    parse_addresses,
    register,
    resolve,
    unregister,
    unregister_if,
)

__all__ = [
    "CLUSTER_ENV",
    "CLUSTERS_MAX",
    "CONFIG_BYTES_MAX",
    "CONFIG_ENV",
    "COORDINATORS_ENV",
    "NAME_RE",
    "config_path",
    "credentials_of",
    "load",
    "parse_addresses",
    "register",
    "resolve",
    "unregister",
    "unregister_if",
]
