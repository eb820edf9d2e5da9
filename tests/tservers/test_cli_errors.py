"""`tserver` refusals an operator sees: one line on stderr, a nonzero exit, no traceback.

Every test runs the real command as a process; the lock tests run a real tablet server on
the fs root the offline tool is pointed at.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from tests.support.cli import run_cli
from tests.tservers.helpers import create, open_manager
from tests.tservers.procs import REPO, TServerProcess
from tservers.fs import FsLayout

pytestmark = pytest.mark.integration  # every test runs the `tserver` command as a process

COMMAND_TIMEOUT_S = 60.0  # a command that hangs instead of failing fails the test here


def tserver(*args: str) -> subprocess.CompletedProcess:
    return run_cli("tservers.cli", *args, timeout_s=COMMAND_TIMEOUT_S)


def one_line_error(r: subprocess.CompletedProcess, code: int = 1) -> str:
    """The single `tserver: error: ...` line of a refused command."""
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("tserver: error: "), r.stderr
    return lines[0]


def usage_error(r: subprocess.CompletedProcess, flag: str) -> str:
    """argparse's refusal: usage, then one `tserver start: error: argument FLAG: ...` line."""
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2, (r.returncode, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tserver start: error: argument {flag}: "), r.stderr
    return last


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    assert tserver("fs", "format", "--fs-root", str(r)).returncode == 0
    return r


@pytest.fixture
def tablet_root(tmp_path):
    """An fs root holding tablet t1 (consensus metadata at term 1)."""
    r = tmp_path / "root"
    m = open_manager(r)
    create(m)
    m.close()
    return r


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--bind", "garbage", "not a host:port address: 'garbage'"),
        ("--bind", "127.0.0.1:99999", "not a host:port address: '127.0.0.1:99999'"),
        ("--coordinators", "127.0.0.1", "not a host:port address: '127.0.0.1'"),
        ("--coordinators", "127.0.0.1:7100,nohost", "not a host:port address: 'nohost'"),
        ("--log-level", "bogus", "unknown log level 'bogus'"),
    ],
)
def test_start_refuses_bad_flags(root, flag, value, says):
    r = tserver("start", "--fs-root", str(root), flag, value)
    assert says in usage_error(r, flag)
    assert not (root / "lock").exists()  # refused before the fs root was touched


def test_start_accepts_log_level_in_any_case(root):
    """`--log-level WARNING` and `warning` both run (an unknown one is refused above)."""
    for level in ("WARNING", "warning"):
        p = TServerProcess(root, extra_args=["--log-level", level]).start()
        try:
            assert p.terminate() == 0
        finally:
            p.stop()


def test_start_on_a_port_in_use(root):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        address = f"127.0.0.1:{held.getsockname()[1]}"
        # --insecure: a standalone server (this tests the bind's error, not security).
        r = tserver(
            "start", "--fs-root", str(root), "--bind", address, "--log-level", "warning",
            "--insecure",
        )  # fmt: skip
    line = one_line_error(r)
    assert line == f"tserver: error: cannot start: cannot bind {address}: Address already in use"
    # The failed start let go of the fs root: a server starts on it now.
    p = TServerProcess(root).start()
    p.stop()


def test_fs_format_under_a_file(tmp_path):
    (tmp_path / "file").write_text("not a directory\n")
    target = tmp_path / "file" / "x"
    line = one_line_error(tserver("fs", "format", "--fs-root", str(target)))
    assert line == f"tserver: error: cannot format {target}: Not a directory"


def test_help_names_no_internal_references():
    for args in (["--help"], ["copy-from-remote", "--help"], ["start", "--help"]):
        r = tserver(*args)
        assert r.returncode == 0, r.stderr
        assert not re.search(r"\bseed\b", r.stdout, re.IGNORECASE), r.stdout


@pytest.mark.parametrize(
    "args, problem",
    [
        (["--timeout", "0"], "argument --timeout: must be above 0"),
        (["--timeout", "-5"], "argument --timeout: must be above 0"),
        (["--rate-mb", "-1"], "argument --rate-mb: must be 0 (unthrottled) or above"),
        (["--rate-mb", "inf"], "argument --rate-mb: must be 0 (unthrottled) or above"),
    ],
)
def test_copy_from_remote_bad_numbers_are_usage_errors(tmp_path, args, problem):
    r = tserver(
        "copy-from-remote", "--fs-root", str(tmp_path), "--tablet", "t1",
        "--source", "127.0.0.1:1", *args,
    )  # fmt: skip
    assert r.returncode == 2 and problem in r.stderr, r.stderr


def test_cmeta_rewrite_refused_while_the_server_runs(tablet_root):
    before = FsLayout.open(tablet_root).read_cmeta("t1")
    assert before.current_term < 99
    rewrite = ("cmeta", "rewrite", "--fs-root", str(tablet_root), "--tablet", "t1")
    p = TServerProcess(tablet_root, extra_args=["--log-level", "warning"]).start()
    try:
        line = one_line_error(tserver(*rewrite, "--term", "99"))
        assert "refusing to rewrite" in line and "in use by another process" in line, line
        assert "tserver" in line.split("in use by another process", 1)[1]  # names the holder
        live = tserver("cmeta", "dump", "--fs-root", str(tablet_root), "--tablet", "t1")
        assert live.returncode == 0, live.stderr  # reading stays allowed beside the server
        assert "current_term: 99" not in live.stdout
        assert not list((tablet_root / "consensus-meta").glob("t1.backup-*"))
        assert p.terminate() == 0
    finally:
        p.stop()
    # Once the server stopped, the same rewrite goes through.
    done = tserver(*rewrite, "--term", "99")
    assert done.returncode == 0, done.stderr
    assert FsLayout.open(tablet_root).read_cmeta("t1").current_term == 99
    assert len(list((tablet_root / "consensus-meta").glob("t1.backup-*"))) == 1


def test_cmeta_rewrite_refused_while_a_copy_holds_the_root(tablet_root):
    """Offline tools exclude each other too: the lock names whichever process holds it."""
    code = (
        "import sys\n"
        "from tservers.fs import lock_root\n"
        "lock = lock_root(sys.argv[1], holder='tserver copy-from-remote')\n"
        "print('LOCKED', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(tablet_root)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "LOCKED"
        r = tserver("cmeta", "rewrite", "--fs-root", str(tablet_root), "--tablet", "t1")
        line = one_line_error(r)
        assert "copy-from-remote" in line, line
    finally:
        holder.kill()
        holder.wait(30)
