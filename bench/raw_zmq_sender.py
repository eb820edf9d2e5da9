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
        for k, off, n in plan:
            ident, _ = router.recv_multipart()
            chunk = views[k][off : off + n] if views else payload[:n]
            frames = [ident, chunk]
            if spec.get("crc"):
                frames.insert(1, crc32c.crc32c(chunk).to_bytes(4, "little"))
            router.send_multipart(frames, copy=False)
            del chunk, frames  # no view of a map outlives the loop
    except zmq.Again:
        print("raw zmq sender: no request within the deadline", file=sys.stderr)
        return 1
    finally:
        router.close(linger=-1)  # every chunk sent before the maps go
        ctx.term()
        for v in views:
            v.release()
        for m in maps:
            m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
