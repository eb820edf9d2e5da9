"""The services' protocols, generated from their .proto files (scripts/gen_protos.py).

`coordinator.proto` (the coordinator's API and the records of its log) and `tserver.proto`
(the tablet server's API, WAL and metadata records) live here, in the wire layer, so that the
client package and every server import them without importing each other's code.
"""
