"""`local-cluster` waits, after a kill or a stop, until the process has exited with all its
threads, so a restart on the same port can bind it. A process whose main thread has exited
reads an empty /proc/PID/cmdline while its other threads still hold its listening socket."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

from optools.localcluster import LocalCluster, NodeSpec, _alive, _exited
from tests.support.procs import free_port, wait_for

# The main thread exits (pthread_exit) while another thread keeps the listening socket open
# until the file 'release' appears.
HOLDER = textwrap.dedent(
    """
    import ctypes, os, socket, sys, threading, time
    s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
    def hold():
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.01)
        s.close()
    threading.Thread(target=hold).start()
    print("bound", flush=True)
    ctypes.CDLL(None).pthread_exit(None)
    """
)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_a_process_whose_main_thread_exited_still_holds_its_port(tmp_path):
    port = free_port()
    release = tmp_path / "release"
    marker = str(tmp_path / "holder-data")
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(port), str(release), marker],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "bound"
        # The main thread has gone: cmdline reads empty, the port is still bound.
        wait_for(
            lambda: open(f"/proc/{proc.pid}/cmdline", "rb").read() == b"", 30, "main thread gone"
        )
        assert not port_free(port)
        assert not _exited(proc.pid, marker), "taken for exited while a thread holds the port"
        # Running, as a process in the middle of an exec reads (an empty cmdline too).
        assert _alive(proc.pid, marker), "taken for not running while a thread still runs"
        node = NodeSpec(name="holder", data=marker, rpc=f"127.0.0.1:{port}", pid=proc.pid)
        cluster = LocalCluster.__new__(LocalCluster)
        assert not cluster._wait_gone(node, 0.5), "gone while a thread still runs"
        release.touch()
        assert cluster._wait_gone(node, 30.0)
        assert port_free(port), "gone, yet its port is still bound"
        assert not _alive(proc.pid, marker)
    finally:
        release.touch()
        proc.kill()
        proc.wait(30)


def test_a_pid_running_another_program_counts_as_exited(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        wait_for(lambda: b"sleep" in open(f"/proc/{other.pid}/cmdline", "rb").read(), 30, "exec")
        assert _exited(other.pid, str(tmp_path / "not-its-data"))
        assert not _exited(other.pid, "time.sleep")
    finally:
        other.kill()
        other.wait(30)
    assert _exited(other.pid, "time.sleep")  # reaped: /proc/PID is gone
    assert not _alive(other.pid, "time.sleep")


def test_a_zombie_is_not_running(tmp_path):
    """A zombie also reads an empty cmdline: its threads have all exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: _exited(child.pid, "never-named"), 30, "the child a zombie")
    try:
        assert os.path.exists(f"/proc/{child.pid}"), "reaped already"
        assert not _alive(child.pid, "never-named")
    finally:
        child.wait(30)
