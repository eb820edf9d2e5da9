"""rpc: the ZeroMQ wire layer shared by every service (design/wire-protocol.md).

`rpc.server.RpcServer` serves methods on a ROUTER socket; `rpc.client.RpcClient` calls them
over DEALER sockets owned by a `rpc.client.Transport`; `rpc.errors` maps every wire status
code to one exception class.
"""
