"""The sending end of bench/replication.py's raw zmq transfer, as a process of its own.

A tablet copy runs between two server processes (on two machines in a cluster): each end
has its own zmq I/O thread and its own CPU caches. A raw transfer whose sender is a thread
of the receiving process shares both with the receiver, which no transfer between two
servers can; this sender gives the bench the two-process figure as well.

Reads one JSON object on stdin: {"plan": [[file index, offset, length], ...], "sources":
[paths] (mapped and sent as slices; empty: one in-memory buffer sent again and again),
"crc": bool (send each chunk's CRC32C, 4 bytes little-endian, as a frame before it)}.
Binds a ROUTER on 127.0.0.1, prints its port, answers one request per chunk in plan order,
then exits. Not a server: it serves exactly one transfer for the bench and exits, and has a
deadline (`--timeout-s`) on every receive.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import sys

import crc32c
import zmq


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--timeout-s", type=float, default=60.0, help="deadline for each request")
    args = ap.parse_args()
    spec = json.load(sys.stdin)
    plan = [tuple(x) for x in spec["plan"]]
    maps = []
    for src in spec.get("sources") or ():
        with open(src, "rb") as f:
            maps.append(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ))
    views = [memoryview(m) for m in maps]
    payload = memoryview(os.urandom(max((n for _, _, n in plan), default=0)))
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVTIMEO, int(args.timeout_s * 1000))
    port = router.bind_to_random_port("tcp://127.0.0.1")
    print(port, flush=True)
    try:
        serve(router, plan, views or [payload], crc=bool(spec.get("crc")), one_buffer=not views)
    except zmq.Again:
        print("raw zmq sender: no request within the deadline", file=sys.stderr)
        return 1
    finally:
        # Every chunk sent (within the deadline) before the process exits. The maps go with
        # it: pyzmq drops its references to the slices it sent from a thread of its own,
        # possibly after term(), so closing them here could find them still in use.
        router.close(linger=int(args.timeout_s * 1000))
        ctx.term()
    return 0


def serve(
    router: zmq.Socket, plan: list, views: list[memoryview], *, crc: bool, one_buffer: bool
) -> None:
    """Answer one request per chunk of `plan` ((file index, offset, length)) in order, with
    a slice of `views[file index]` (of `views[0]` for every chunk with `one_buffer`), sent
    without a copy; with `crc` its CRC32C (4 bytes little-endian) as a frame before it."""
    for k, off, n in plan:
        ident, _ = router.recv_multipart()
        chunk = views[0][:n] if one_buffer else views[k][off : off + n]
        frames = [ident, chunk]
        if crc:
            frames.insert(1, crc32c.crc32c(chunk).to_bytes(4, "little"))
        router.send_multipart(frames, copy=False)
        del chunk, frames  # no view of a map outlives the loop


if __name__ == "__main__":
    sys.exit(main())
