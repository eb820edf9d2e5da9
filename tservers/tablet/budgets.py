"""Server-wide memory bounds of the tablets, apart from the modules that apply them so that
the command line (`tserver start --help`) names their defaults without importing those."""

# The memstores of all tablets together, estimated (`TabletManager._flush_for_memory`,
# `Tablet.memstore_bytes`): ~4.9M rows of the tests' six columns at ~220 bytes a row.
MEMSTORE_BYTES_MAX_DEFAULT = 1 << 30
