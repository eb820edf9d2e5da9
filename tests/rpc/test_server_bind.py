"""An RpcServer whose bind fails: start() raises at once and leaves no socket open.

zmq's Context.term() waits for every socket of its context to close, so a ROUTER socket left
open by a failed bind used to make close() (and the process that called it) hang forever.
Each check runs in a child process with a deadline: a hang fails the test instead of the run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # child processes serving on real sockets

REPO = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 30.0

# Run in the child: ports taken by a live RpcServer and by a plain listening socket, a
# garbage address and a host that is not this one; every failed start() is followed by
# close(), which must return (the parent's deadline catches a hang: no timing is asserted
# here). The live server must go on serving.
CHILD = textwrap.dedent(
    """
    import errno
    import socket

    from rpc import errors
    from rpc.client import RpcClient
    from rpc.server import RpcServer

    def failed_start(address, expected):
        server = RpcServer("u-failing", address)
        try:
            server.start()
        except Exception as exc:  # the type is checked once close() has returned
            err = exc
        else:
            raise AssertionError(f"start() on {address} did not fail")
        server.close()
        assert isinstance(err, expected), repr(err)
        print(f"{address}\\t{type(err).__name__}\\t{getattr(err, 'errno', '')}\\t{err}")
        return err

    live = RpcServer("u-live", "127.0.0.1:0").start()
    err = failed_start(live.address, OSError)
    assert err.errno == errno.EADDRINUSE, err.errno
    assert str(err) == f"cannot bind {live.address}: Address already in use", str(err)

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        failed_start(f"127.0.0.1:{held.getsockname()[1]}", OSError)

    failed_start("garbage", errors.BadRequest)
    failed_start("127.0.0.1:99999", errors.BadRequest)
    failed_start("192.0.2.1:0", OSError)  # TEST-NET-1: no interface of this host has it

    # The context-manager form: __enter__ raises, and nothing is left to keep the process.
    try:
        with RpcServer("u-with", live.address):
            raise AssertionError("entered a server that could not bind")
    except OSError as exc:
        assert exc.errno == errno.EADDRINUSE

    with RpcClient(live.address, caller_uuid="probe") as client:
        assert client.ping(timeout_s=5.0).uuid == "u-live"
    live.close()
    print("DONE")
    """
)


def test_failed_bind_raises_and_close_returns():
    r = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,  # a close() hanging in Context.term() fails here
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "DONE", r.stdout
    kinds = [line.split("\t")[1] for line in lines[:-1]]
    assert kinds == ["OSError", "OSError", "BadRequest", "BadRequest", "OSError"], r.stdout


def test_freed_port_binds_again():
    """After a failed start the address is not held by the failed server: once the server
    that had the port closes, a new one binds it."""
    code = textwrap.dedent(
        """
        from rpc.server import RpcServer

        first = RpcServer("u-first", "127.0.0.1:0").start()
        address = first.address
        loser = RpcServer("u-loser", address)
        try:
            loser.start()
        except Exception:  # OSError; any failure will do here, close() must not hang
            pass
        else:
            raise AssertionError("second bind succeeded")
        loser.close()
        first.close()
        with RpcServer("u-again", address) as again:
            assert again.address == address, (again.address, address)
        print("DONE")
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "DONE"
