"""optools: the operator tools (design/logtool.md, design/client.md).

The `coordinator` command line (`coordinator_cli.py`), cluster checks and admin commands
(`admin.py`), the local cluster of real processes (`localcluster.py`) and the coordinator log
inspector (`logtool*.py`). They stand above both the client package (`logcentric`) and the
server packages; nothing below imports them.
"""
