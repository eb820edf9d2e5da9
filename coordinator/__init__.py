"""coordinator: the cluster's brain (design/coordinator.md).

All durable state is the coordinator log in logstore; `node.CoordinatorNode` runs one node
(lease keeper, replay thread, engine, RPC service); `client` holds the client side.
"""
