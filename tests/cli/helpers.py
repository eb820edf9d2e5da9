"""Running the console scripts as a user does, for the command-line tests: real processes
of the installed `coordinator`, `logstore` and `tserver` scripts, Ctrl-C sent to a command's
process group, a server that accepts connections and never answers, and waiting for
conditions with a deadline."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

BIN = Path(sys.executable).parent  # the venv's bin: its console scripts
SCRIPTS = ("coordinator", "logstore", "tserver")
COMMAND_TIMEOUT_S = 180.0  # a command that hangs instead of ending fails the test here
# The console script started with Ctrl-C's default action in place: a test run started in
# the background of a non-interactive shell has SIGINT ignored, and a child inherits that
# (then Python installs no KeyboardInterrupt handler). exec keeps the default action.
_WITH_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def script(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"console script {name} is not installed in {BIN}"
    return str(path)


def env_with(config: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for a command: its own clusters file, no cluster named unless given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOGCENTRIC_")}
    env["PYTHONUNBUFFERED"] = "1"
    if config is not None:
        env["LOGCENTRIC_CONFIG"] = str(config)
    env.update(extra)
    return env


def run(
    name: str, *args: str, env: dict[str, str] | None = None, timeout_s: float = COMMAND_TIMEOUT_S
) -> subprocess.CompletedProcess:
    """Run a console script to its end; output captured as text."""
    return subprocess.run(
        [script(name), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env if env is not None else env_with(),
        stdin=subprocess.DEVNULL,
    )


def run_json(name: str, *args: str, env=None, ok_codes=(0,)):
    """Run a console script with --json given in `args`: its stdout must be one JSON
    document; returns it (and the process)."""
    out = run(name, *args, env=env)
    assert out.returncode in ok_codes, (args, out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout), out


def spawn(name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a console script in a process group (session) of its own, with Ctrl-C's
    default action, so that SIGINT can be sent to its group as a terminal would."""
    return subprocess.Popen(
        [sys.executable, "-c", _WITH_SIGINT, script(name), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env=env if env is not None else env_with(),
    )


def interrupt(proc: subprocess.Popen, timeout_s: float = COMMAND_TIMEOUT_S) -> tuple[str, str]:
    """Ctrl-C: SIGINT to the process group; returns (stdout, stderr) once it has ended."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate(timeout=30)
        raise AssertionError(f"no exit within {timeout_s}s of SIGINT; stderr:\n{err}") from None


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def group_gone(pgid: int) -> bool:
    """Whether no process is left in the process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def pid_running(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def without_insecure_warning(err: str) -> str:
    """stderr without the one line an --insecure daemon logs at start (it must be there)."""
    lines = err.splitlines(keepends=True)
    warnings = [line for line in lines if "INSECURE (--insecure)" in line]
    assert len(warnings) == 1, err
    return "".join(line for line in lines if line not in warnings)


def assert_interrupted(proc: subprocess.Popen, err: str, name: str) -> None:
    """One line on stderr, `NAME: interrupted`, exit status 130, nothing left running."""
    assert proc.returncode == 130, (proc.returncode, err)
    assert err.splitlines() == [f"{name}: interrupted"], err
    assert group_gone(proc.pid), f"processes left in the group of {proc.pid}"


def wait_for(cond, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.02)


class SilentServer:
    """A TCP port that accepts connections and never says a word: a command calling it
    waits for its whole deadline. `connected` is set once a client has connected."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self.connected = threading.Event()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # closed
                return
            self._conns.append(conn)
            self.connected.set()

    def close(self) -> None:
        self._sock.close()
        for c in self._conns:
            c.close()
        self._thread.join(10)


@contextlib.contextmanager
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every leaf command of a parser as its argv words: [("start",), ("fs", "format"), ...]."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += subcommands(sub, (*prefix, name)) or [(*prefix, name)]
    return found


def has_option(parser: argparse.ArgumentParser, words: tuple[str, ...], option: str) -> bool:
    for word in words:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[word]
    return any(option in a.option_strings for a in parser._actions)


def parsers() -> dict[str, argparse.ArgumentParser]:
    from logstore.cli import build_parser as logstore_parser
    from optools.coordinator_cli import build_parser as coordinator_parser
    from tservers.cli import build_parser as tserver_parser

    return {
        "coordinator": coordinator_parser(),
        "logstore": logstore_parser(),
        "tserver": tserver_parser(),
    }
