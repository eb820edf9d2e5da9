"""Messages that had misled: a port out of range said "(a port is needed)"; a missing
password named the internal `allow_insecure_dev` instead of the flag `--insecure-dev`."""

from __future__ import annotations

import pytest

from tests.cli.helpers import run

OUT_OF_RANGE = [
    ("coordinator", ["status", "--coordinators", "localhost:99999"], "--coordinators"),
    ("coordinator", ["log", "--coordinators", "localhost:99999"], "--coordinators"),
    (
        "coordinator",
        [
            "start",
            "--id",
            "x",
            "--data-dir",
            "/nonexistent",
            "--raft",
            "127.0.0.1:70000",
            "--insecure-dev",
        ],
        "--raft",
    ),  # fmt: skip
    ("logstore", ["status", "--servers", "localhost:99999"], "--servers"),
    ("logstore", ["status", "--coordinators", "localhost:99999"], "--coordinators"),
    ("tserver", ["tablets", "--address", "localhost:99999"], "--address"),
]


@pytest.mark.parametrize(
    ("name", "argv", "flag"), OUT_OF_RANGE, ids=[a[0] for _, a, _ in OUT_OF_RANGE]
)
def test_a_port_out_of_range_says_so(name, argv, flag):
    out = run(name, *argv)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert flag in last and "is out of range 0..65535" in last, last
    assert "a port is needed" not in last


def test_an_address_without_a_port_still_says_a_port_is_needed():
    out = run("coordinator", "status", "--coordinators", "127.0.0.1")
    assert out.returncode == 2 and "(a port is needed)" in out.stderr.splitlines()[-1]


def test_a_missing_password_names_the_flag(tmp_path):
    from rpc.addresses import free_port

    raft = f"127.0.0.1:{free_port()}"
    out = run("coordinator", "start", "--id", "x", "--data-dir", str(tmp_path / "c"),
              "--bind", "127.0.0.1:0", "--raft", raft)  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.splitlines() == [
        "coordinator: cannot start: no cluster password: give --password-file FILE (or "
        "$COORDINATOR_PASSWORD), or --insecure-dev for a single-node development group on "
        "127.0.0.1"
    ]
    assert not (tmp_path / "c").exists()  # refused before anything was written
    # With peers, --insecure-dev does not help: the message says what does.
    out = run("coordinator", "start", "--id", "x", "--data-dir", str(tmp_path / "c"),
              "--raft", raft, "--peers", f"127.0.0.1:{free_port()}", "--insecure-dev")  # fmt: skip
    assert out.returncode == 1 and "allow_insecure_dev" not in out.stderr
    assert "several nodes needs the cluster password" in out.stderr
    out = run("logstore", "serve", "--raft-address", raft, "--data-dir", str(tmp_path / "l"))
    assert out.returncode == 1 and "allow_insecure_dev" not in out.stderr, out.stderr
    assert "--insecure-dev" in out.stderr and len(out.stderr.splitlines()) == 1
