"""Runs one lifecycle action on an fs root in its own process, so crash points can end it.

    python -m tests.tservers.lifecycle_driver ROOT ACTION
ACTION: setup (create t1 and t2, write rows), delete (delete t1), begin_copy (t1), open,
flush (t2), compact (t1, after deleting 3 rows), write (one row to t2).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows


def main() -> int:
    root, action = Path(sys.argv[1]), sys.argv[2]
    m = open_manager(root)
    if action == "setup":
        for tid in ("t1", "t2"):
            t = create(m, tid)
            for b in range(3):
                t.write(
                    1, [(OpType.INSERT, ipc(six_rows(range(b * 100, b * 100 + 100))))], deadline()
                )
        m.tablet("t1").flush()
        m.tablet("t1").write(1, [(OpType.INSERT, ipc(six_rows([1000])))], deadline())
    elif action == "delete":
        m.delete_tablet("t1")
    elif action == "begin_copy":
        m.begin_copy("t1")
    elif action == "flush":
        t = m.tablet("t2")
        t.write(1, [(OpType.UPSERT, ipc(six_rows(range(50, 60))))], deadline())
        t.flush()
    elif action == "compact":
        t = m.tablet("t1")
        for b in range(3):
            t.write(1, [(OpType.DELETE, ipc(six_rows([b])))], deadline())
            t.flush()
        t.compact()
    elif action == "write":
        m.tablet("t2").write(1, [(OpType.INSERT, ipc(six_rows([7777])))], deadline())
    elif action != "open":
        raise SystemExit(f"unknown action {action}")
    m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
