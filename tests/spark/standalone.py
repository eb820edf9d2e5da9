"""A real standalone Spark cluster on 127.0.0.1 for tests: one master and one worker,
started with pyspark's own `spark-class`, each in its own process group, always stopped.

The master's JSON page (`http://127.0.0.1:<webui>/json/`) says which workers are alive and
which applications ran; the worker's `--work-dir` holds one folder per application with one
folder per executor (its stdout and stderr), which is how a test sees that an application
really ran on the worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyspark

from rpc.addresses import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0
HTTP_TIMEOUT_S = 5.0


def spark_env(**extra: str) -> dict[str, str]:
    """The environment for Spark's scripts: this venv's Spark, loopback only, no PYTHONPATH
    (what a Python started by Spark may import is each test's choice)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    env.update(extra)
    return env


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # the group is gone already
        pass


class StandaloneSpark:
    """`spark://127.0.0.1:<port>` with one worker of `cores` cores; a context manager."""

    def __init__(
        self, root: Path, *, cores: int = 1, memory: str = "1g", worker_env: dict | None = None
    ) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.port, self.webui_port, self.worker_webui_port = free_port(), free_port(), free_port()
        self.work_dir = root / "work"
        self.cores, self.memory = cores, memory
        self.worker_env = worker_env
        self._procs: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        with open(self.root / f"{name}.log", "wb") as out:
            self._procs.append(
                subprocess.Popen(
                    [str(VENV_BIN / "spark-class"), *args],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    cwd=self.root,
                    start_new_session=True,  # its own process group: stopped as one
                )
            )

    def start(self) -> None:
        # No REST submission server: it would take the fixed port 6066.
        props = self.root / "master.properties"
        props.write_text("spark.master.rest.enabled false\n")
        self._spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.webui_port),
                "--properties-file",
                str(props),
            ],  # fmt: skip
            spark_env(),
        )
        self._spawn(
            "worker",
            [
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--webui-port",
                str(self.worker_webui_port),
                "--work-dir",
                str(self.work_dir),
            ],  # fmt: skip
            self.worker_env or spark_env(),
        )
        self._wait(
            lambda state: state is not None and state.get("aliveworkers", 0) >= 1,
            "an alive worker",
        )

    def state(self) -> dict | None:
        """The master's JSON page, or None while it does not answer."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as answer:
                return json.loads(answer.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def _wait(self, ready, what: str) -> dict:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for proc, name in zip(self._procs, ("master", "worker"), strict=False):
                if proc.poll() is not None:
                    raise RuntimeError(f"the Spark {name} exited: {self.log_tail(name)}")
            state = self.state()
            if ready(state):
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {what} in {START_TIMEOUT_S}s: {state}")
            time.sleep(0.5)

    def completed_app(self, name: str) -> dict:
        """The master's record of the finished application called `name` (waits for it:
        the master learns of the end a moment after the driver exits)."""
        state = self._wait(
            lambda s: s is not None and any(a["name"] == name for a in s["completedapps"]),
            f"completed application {name!r}",
        )
        return next(a for a in state["completedapps"] if a["name"] == name)

    def executor_logs(self, app_id: str) -> list[Path]:
        """The stderr of each executor the worker ran for the application."""
        return sorted((self.work_dir / app_id).glob("*/stderr"))

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.root / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to each process group (the worker's holds its executors), then SIGKILL to
        whatever of it is left."""
        for proc in reversed(self._procs):
            _signal_group(proc, signal.SIGTERM)
        for proc in reversed(self._procs):
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)
            proc.wait(STOP_TIMEOUT_S)
        self._procs.clear()

    def __enter__(self) -> StandaloneSpark:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
