"""Lean multipart send/receive for the hot path.

pyzmq's send_multipart/recv_multipart combine enum flags per frame, which costs more than
the rest of a small call; these do the same with plain integers.
"""

from __future__ import annotations

import zmq

_NOBLOCK = int(zmq.NOBLOCK)
_SNDMORE = int(zmq.SNDMORE)


def send_frames(sock: zmq.Socket, frames: list) -> None:
    """Send all frames without blocking; raises zmq.Again if the first cannot be queued.

    zmq queues a multipart message atomically once its first frame is accepted, so a
    later frame of the same message does not fail with Again.
    """
    last = len(frames) - 1
    for i, frame in enumerate(frames):
        sock.send(frame, _NOBLOCK | (_SNDMORE if i < last else 0), copy=False)


def recv_frames(sock: zmq.Socket) -> list:
    """Receive one whole multipart message without blocking (zmq.Again if none)."""
    frame = sock.recv(_NOBLOCK, copy=False)
    frames = [frame]
    while frame.more:
        frame = sock.recv(_NOBLOCK, copy=False)
        frames.append(frame)
    return frames
