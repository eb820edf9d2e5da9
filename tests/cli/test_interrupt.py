"""Ctrl-C as a user presses it: SIGINT to the command's process group once it is at work.
Every command ends with exactly one line on stderr (`NAME: interrupted`), exit status 130,
no traceback and no process left; the daemons stop cleanly the same way; and
`coordinator local-cluster up` interrupted while starting stops every process it started
(checked by the pids it recorded in cluster.json)."""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import (
    assert_interrupted,
    env_with,
    group_gone,
    interrupt,
    kill_group,
    pid_running,
    run,
    silent_server,
    spawn,
    wait_for,
    without_insecure_warning,
)

pytestmark = pytest.mark.integration

CONNECT_TIMEOUT_S = 180.0  # the command reaches the silent server well within this
LONG_S = "600"  # a command's own deadline: far longer than the test waits

# Commands that call one address and wait for its answer; "ADDR" is the silent server.
WAITING_COMMANDS = [
    ("coordinator", ["tables", "--coordinators", "ADDR", "--timeout-s", LONG_S]),
    ("coordinator", ["servers", "--coordinators", "ADDR", "--timeout-s", LONG_S]),
    ("coordinator", ["describe", "t", "--coordinators", "ADDR", "--timeout-s", LONG_S]),
    ("coordinator", ["log", "--coordinators", "ADDR", "--timeout-s", "300"]),
    ("logstore", ["status", "--servers", "ADDR", "--timeout-s", "3600"]),
    ("logstore", ["read", "coordinator", "--coordinators", "ADDR", "--timeout-s", "3600"]),
    ("logstore", ["last-id", "coordinator", "--servers", "ADDR", "--timeout-s", "3600"]),
    ("tserver", ["tablets", "--address", "ADDR"]),
    ("tserver", ["status", "--address", "ADDR"]),
    ("tserver", ["copies", "--address", "ADDR"]),
]


@pytest.mark.parametrize(
    ("name", "argv"), WAITING_COMMANDS, ids=[f"{s} {a[0]}" for s, a in WAITING_COMMANDS]
)
def test_ctrl_c_ends_a_waiting_command_with_one_line(name, argv):
    with silent_server() as silent:
        proc = spawn(name, *[silent.address if a == "ADDR" else a for a in argv])
        try:
            # At work: it has connected to the server it waits for.
            wait_for(
                lambda: silent.connected.is_set() or proc.poll() is not None,
                CONNECT_TIMEOUT_S,
                "the command connecting",
            )
            assert proc.poll() is None, proc.communicate()
            _out, err = interrupt(proc)
        finally:
            kill_group(proc)
    assert "Traceback" not in err, err
    assert_interrupted(proc, err, name)


def _password_file(tmp_path):
    path = tmp_path / "password"
    path.write_text("a-test-password\n")
    return str(path)


@pytest.mark.parametrize("daemon", ["coordinator", "tserver", "logstore"])
def test_ctrl_c_stops_a_daemon_cleanly_with_one_line(tmp_path, daemon):
    from rpc.addresses import free_port

    if daemon == "coordinator":
        argv = ["--log-level", "WARNING", "start", "--id", "c", "--data-dir", str(tmp_path / "c"),
                "--bind", "127.0.0.1:0", "--raft", f"127.0.0.1:{free_port()}",
                "--password-file", _password_file(tmp_path)]  # fmt: skip
        ready = "coordinator c uuid="
    elif daemon == "tserver":
        root = tmp_path / "t"
        assert run("tserver", "fs", "format", "--fs-root", str(root)).returncode == 0
        # Standalone (no coordinators): CURVE would admit nobody, so plaintext, said.
        argv = ["start", "--fs-root", str(root), "--log-level", "warning",
                "--password-file", _password_file(tmp_path), "--insecure"]  # fmt: skip
        ready = "tserver "
    else:
        argv = ["serve", "--raft-address", f"127.0.0.1:{free_port()}", "--data-dir",
                str(tmp_path / "l"), "--password-file", _password_file(tmp_path)]  # fmt: skip
        ready = "logstore serving"
    proc = spawn(daemon, *argv)
    try:
        line = proc.stdout.readline()  # printed once it serves
        assert line.startswith(ready), (line, proc.poll())
        _out, err = interrupt(proc)
    finally:
        kill_group(proc)
    assert "Traceback" not in err, err
    if daemon == "tserver":
        err = without_insecure_warning(err)
    assert_interrupted(proc, err, daemon)


def test_sigterm_still_stops_a_daemon_with_status_0(tmp_path):
    import os
    import signal

    root = tmp_path / "t"
    assert run("tserver", "fs", "format", "--fs-root", str(root)).returncode == 0
    # Standalone (no coordinators): CURVE would admit nobody, so plaintext, said.
    proc = spawn("tserver", "start", "--fs-root", str(root), "--log-level", "warning",
                 "--password-file", _password_file(tmp_path), "--insecure")  # fmt: skip
    try:
        assert proc.stdout.readline().startswith("tserver ")
        os.kill(proc.pid, signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    finally:
        kill_group(proc)
    assert proc.returncode == 0 and without_insecure_warning(err) == "", err


def _recorded_pids(root) -> dict[str, int]:
    try:
        spec = json.loads((root / "cluster.json").read_text())
    except (OSError, ValueError):  # not written yet, or being replaced
        return {}
    return {n["name"]: n["pid"] for n in spec["coordinators"] + spec["tservers"] if n["pid"]}


def _group_members(pgid: int) -> list[str]:
    """The processes of group `pgid` (pid, state, command line), for a failure message."""
    from pathlib import Path

    found = []
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            found.append(f"{d.name} {fields[0]} {cmdline[:200]}")
    return found


def test_ctrl_c_during_local_cluster_up_stops_what_it_started(tmp_path):
    root = tmp_path / "cluster"
    env = env_with(tmp_path / "clusters.toml")
    proc = spawn(
        "coordinator", "local-cluster", "up", "--dir", str(root),
        "--coordinators", "3", "--tservers", "3", env=env,
    )  # fmt: skip
    pids: dict[str, int] = {}
    try:
        # Starting: every coordinator and the first tablet server are running; the others
        # are still to start, and the cluster is not ready before they have enlisted.
        pids = wait_for(
            lambda: (p := _recorded_pids(root)) and "tserver-0" in p and p,
            120,
            "local-cluster up starting its processes",
        )
        assert all(pid_running(pid) for pid in pids.values()), pids
        out, err = interrupt(proc)
    finally:
        kill_group(proc)
        # Whatever happened, stop what it left (by the same recorded pids).
        for pid in _recorded_pids(root).values():
            if pid_running(pid):
                import os
                import signal

                os.kill(pid, signal.SIGKILL)
    assert "cluster up" not in out, "the cluster was up before the interrupt: nothing tested"
    assert "Traceback" not in err, err
    assert proc.returncode == 130 and err.splitlines() == ["coordinator: interrupted"], err
    assert group_gone(proc.pid), _group_members(proc.pid)
    recorded = _recorded_pids(root)
    assert set(pids) <= set(recorded)
    left = {name: pid for name, pid in recorded.items() if pid_running(pid)}
    assert not left, f"processes left running: {left}"
    # Not registered: the cluster never came up.
    assert not (tmp_path / "clusters.toml").exists()


_SWEEP = r"""
import json, subprocess, sys, time
from optools.localcluster import _own_group_descendants, _sweep_own_group
sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
child = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(600)", *sleeper],
    stdout=subprocess.DEVNULL)
apart = subprocess.Popen(sleeper, start_new_session=True, stdout=subprocess.DEVNULL)
# A child that has exited and was never reaped (a zombie in the group), as one interrupted
# between its fork and its setsid is when its Popen never returned.
zombie = subprocess.Popen([sys.executable, "-c", "pass"])
deadline = time.monotonic() + 60
while len(_own_group_descendants()) < 3 and time.monotonic() < deadline:
    time.sleep(0.02)
while open(f"/proc/{zombie.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.02)
before = sorted(_own_group_descendants())
left = _sweep_own_group(30.0)
print(json.dumps({"before": before, "left": left, "child": child.pid, "apart": apart.pid,
                  "zombie": zombie.pid}))
"""


def test_the_sweep_of_an_interrupted_up_empties_its_own_group_and_nothing_else(tmp_path):
    """What an interrupted `up` does last (`_sweep_own_group`): its descendants still in its
    process group (a child, that child's child, a zombie child never reaped: what a Ctrl-C
    between fork and setsid leaves) are killed, reaped and gone; a child in a
    session of its own is not touched (the daemons are stopped by their pids instead)."""
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", _SWEEP],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the sweep must not reach the test's
    )
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        kill_group(proc)
    found = json.loads(out)
    try:
        assert proc.returncode == 0
        assert len(found["before"]) == 3, found
        assert {found["child"], found["zombie"]} <= set(found["before"]), found
        assert found["left"] == [], found
        assert not any(pid_running(pid) for pid in found["before"]), found
        assert pid_running(found["apart"]), "a process of another session was stopped"
    finally:
        if pid_running(found["apart"]):
            os.kill(found["apart"], signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    """The processes under `pid` (children, theirs, ...)."""
    from pathlib import Path

    parent_of = {}
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
        except (OSError, ValueError):
            continue
        if d.name.isdigit():
            parent_of[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parent_of.items() if pp == p]
        found += kids
        frontier += kids
    return found


@pytest.mark.spark
def test_ctrl_c_during_the_pipeline_ends_it_and_its_jvm_with_one_line(tmp_path):
    """`python -m jobs.pipeline` interrupted while Spark works (the sample Parquet being
    written or read): one line, exit 130, no traceback (py4j's "KeyboardInterrupt while
    sending command." included), and Spark's JVM and its Python workers gone, within a
    bound (the session's stop is bounded, then the JVM is ended)."""
    import subprocess
    import sys

    from tests.cli.helpers import _WITH_SIGINT

    env = env_with(tmp_path / "clusters.toml")
    root = tmp_path / "cluster"
    up = run("coordinator", "local-cluster", "up", "--dir", str(root), "--coordinators", "1",
             "--tservers", "1", "--insecure", env=env)  # fmt: skip
    assert up.returncode == 0, up.stderr
    workdir = tmp_path / "work"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WITH_SIGINT, sys.executable, "-m", "jobs.pipeline",
         "--cluster", "local", "--rows", "2000", "--workdir", str(workdir),
         "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True, start_new_session=True, env=env,
    )  # fmt: skip
    under: list[int] = []
    try:
        # At work: Spark is writing the sample Parquet (a job runs in the JVM).
        wait_for(
            lambda: (workdir / "orders.parquet").exists() or proc.poll() is not None,
            300,
            "the pipeline writing its sample Parquet",
        )
        assert proc.poll() is None, proc.communicate()
        under = _descendants(proc.pid)
        assert under, "no JVM under the pipeline"
        out, err = interrupt(proc, timeout_s=90)
    finally:
        kill_group(proc)
        run("coordinator", "local-cluster", "down", "--dir", str(root), env=env)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == 130 and err.splitlines() == ["pipeline: interrupted"], err
    assert group_gone(proc.pid), _group_members(proc.pid)
    left = [pid for pid in under if pid_running(pid)]
    assert not left, f"Spark's processes left running: {left}"
    assert "RESULT" not in out
