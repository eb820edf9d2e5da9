"""Client library: `meta.CoordinatorClient` (the coordinator protocol: leader discovery,
request ids, bounded retries) and `tablets.TabletServerClient` (the data path of one tablet
server). Imports no server code."""
