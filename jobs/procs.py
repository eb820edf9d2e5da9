"""Start and stop the project's server processes for jobs and tests.

Each process runs one console-script entry point with `sys.executable -m ...`, its output
going to a log file; `wait_line` waits (with a deadline) for the line a server prints once it
is serving. `ProcessGroup` stops everything it started, even on errors.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rpc.addresses import free_port

__all__ = ["Proc", "ProcessGroup", "free_port"]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path

    def wait_line(self, pattern: str, timeout_s: float) -> re.Match:
        """Wait until the process's log has a line matching `pattern`."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            for line in text.splitlines():
                match = regex.search(line)
                if match:
                    return match
            if self.popen.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with status {self.popen.returncode}; "
                    f"last lines of {self.log_path}:\n{tail(text)}"
                )
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.name} did not print /{pattern}/ in {timeout_s}s")
            time.sleep(0.05)

    def kill9(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(10)

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill9()


def tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.splitlines()[-lines:])


class ProcessGroup:
    """The processes of one job; a context manager that stops them all."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[Proc] = []

    def start(self, name: str, module: str, *args: str, env: dict | None = None) -> Proc:
        log_path = self.log_dir / f"{name}.log"
        out = open(log_path, "ab")  # noqa: SIM115 - the child owns it from here
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        finally:
            out.close()
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()
