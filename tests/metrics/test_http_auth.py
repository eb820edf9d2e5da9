"""Who may read a daemon's HTTP endpoint (rpc/http_access.py, design/security.md section 8),
with real daemons and real HTTP(S) requests:

- `--http` beyond loopback without a mode: `coordinator start`, `tserver start` and
  `logstore serve` each refuse to start, in one line, naming the flags;
- a tablet server on 0.0.0.0 with `--http-password-file` and a self-signed certificate
  (made here by the `openssl` CLI): HTTPS; every page and /metrics answer 401 with
  WWW-Authenticate without or with wrong credentials, 200 with them; /healthz and /readyz
  answer without; a password file others may read is refused;
- `--http-public`: a WARNING at start, pages without credentials;
- a secure coordinator node with a password file: /log, /ops, /tables/NAME answer 401
  without credentials and name nothing, 200 with them; /healthz and /readyz name no table,
  key or principal; `coordinator status --json` still works (RPC, not HTTP).
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rpc.keys import KeyPair
from tests.coordinator.coordproc import ROOT, CoordinatorGroup
from tests.metrics.test_daemon_endpoints import Daemon, outputs_on_failure
from tests.support.procs import free_port, wait_for

pytestmark = pytest.mark.integration

WAIT_S = 120.0
REFUSE_S = 60.0
USER, PASSWORD = "ops", "correct horse battery staple"


def request(
    url: str, auth: tuple[str, str] | None = None, context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one GET (an HTTP error status is returned, not raised)."""
    req = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=10.0, context=context) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def password_file(path: Path, mode: int = 0o600) -> Path:
    path.write_text(f"# the console's readers\n{USER}:{PASSWORD}\nother:x:y\n")
    path.chmod(mode)
    return path


def self_signed(tmp_path: Path) -> tuple[Path, Path, ssl.SSLContext]:
    """A certificate for 127.0.0.1 made by the openssl CLI, and a client context trusting it."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    cert, key = tmp_path / "http.crt", tmp_path / "http.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    key.chmod(0o600)
    context = ssl.create_default_context(cafile=str(cert))
    return cert, key, context


def format_tserver(root: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(root)],
        check=True,
        capture_output=True,
    )


def tserver_args(root: Path, http: str, *extra: str) -> list[str]:
    nobody = f"127.0.0.1:{free_port()}"  # no coordinator listens there: the page still serves
    return [
        "tservers.cli", "start", "--fs-root", str(root), "--coordinators", nobody,
        f"--coordinator-keys={KeyPair.generate().public}", "--http", http, *extra,
    ]  # fmt: skip


def run_refused(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=REFUSE_S,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("bind", ["0.0.0.0", "[::]"])
@pytest.mark.parametrize("daemon", ["coordinator", "tserver", "logstore"])
def test_public_bind_without_a_mode_is_refused(tmp_path, daemon, bind):
    http = f"{bind}:{free_port()}"
    if daemon == "coordinator":
        args = [
            "optools.coordinator_cli", "start", "--id", "c0", "--data-dir", str(tmp_path / "c"),
            "--bind", f"127.0.0.1:{free_port()}", "--raft", f"127.0.0.1:{free_port()}",
            "--insecure-dev", "--http", http,
        ]  # fmt: skip
    elif daemon == "tserver":
        format_tserver(tmp_path / "ts")
        args = tserver_args(tmp_path / "ts", http)
    else:
        args = [
            "logstore.cli", "serve", "--raft-address", f"127.0.0.1:{free_port()}",
            "--data-dir", str(tmp_path / "ls"), "--insecure-dev", "--http", http,
        ]  # fmt: skip
    out = run_refused(args)
    assert out.returncode != 0, out
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert "not a loopback address" in lines[0]
    assert "--http-password-file" in lines[0] and "--http-public" in lines[0], lines[0]
    assert "Traceback" not in out.stderr + out.stdout


def test_password_and_tls_on_every_interface(tmp_path):
    format_tserver(tmp_path / "ts")
    cert, key, context = self_signed(tmp_path)
    secrets = password_file(tmp_path / "http.passwords")
    port = free_port()
    d = Daemon(
        tserver_args(
            tmp_path / "ts", f"0.0.0.0:{port}",
            "--http-password-file", str(secrets),
            "--http-tls-cert", str(cert), "--http-tls-key", str(key),
        ),
        tmp_path / "ts.out",
    )  # fmt: skip
    base = f"https://127.0.0.1:{port}"
    with outputs_on_failure([d]):
        try:
            wait_for(
                lambda: d.running() and f"http=https://0.0.0.0:{port}" in d.text(),
                WAIT_S,
                "the tserver serves HTTPS",
                0.1,
            )
            for path in ("/", "/tablets.json", "/metrics", "/no-such-page"):
                for auth in (None, (USER, "wrong"), ("nobody", PASSWORD), (USER, "")):
                    status, headers, body = request(base + path, auth, context)
                    assert status == 401, (path, auth, status)
                    assert headers["WWW-Authenticate"].startswith("Basic realm="), headers
                    assert body == b"authentication required\n", body  # nothing else said
            status, _, body = request(base + "/tablets.json", (USER, PASSWORD), context)
            assert status == 200 and isinstance(json.loads(body), dict), body[:200]
            status, _, body = request(base + "/metrics", ("other", "x:y"), context)
            assert status == 200 and b"logcentric_tserver_tablets" in body
            # The probes answer anyone, and say nothing about the cluster.
            status, _, body = request(base + "/healthz", None, context)
            assert status == 200 and json.loads(body)["ok"] is True
            status, _, body = request(base + "/readyz", None, context)
            assert status == 503 and json.loads(body)["ready"] is False
            # Plain HTTP on the HTTPS port is no way around it.
            with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
                request(f"http://127.0.0.1:{port}/tablets.json", (USER, PASSWORD))
            text = d.text()
            assert "refused GET from 127.0.0.1: no credentials" in text
            assert "refused GET from 127.0.0.1: wrong credentials" in text
            assert PASSWORD not in text
        finally:
            d.kill()


def test_password_file_others_may_read_is_refused(tmp_path):
    format_tserver(tmp_path / "ts")
    secrets = password_file(tmp_path / "http.passwords", mode=0o644)
    out = run_refused(
        tserver_args(
            tmp_path / "ts", f"0.0.0.0:{free_port()}", "--http-password-file", str(secrets)
        )
    )
    assert out.returncode != 0
    assert "mode 0644" in out.stderr and "chmod 600" in out.stderr, out.stderr
    assert PASSWORD not in out.stderr + out.stdout


def test_public_mode_warns_and_serves_without_credentials(tmp_path):
    format_tserver(tmp_path / "ts")
    port = free_port()
    d = Daemon(
        tserver_args(tmp_path / "ts", f"0.0.0.0:{port}", "--http-public"), tmp_path / "ts.out"
    )
    with outputs_on_failure([d]):
        try:
            wait_for(
                lambda: d.running() and f"http=http://0.0.0.0:{port}" in d.text(),
                WAIT_S,
                "the tserver serves",
                0.1,
            )
            assert request(f"http://127.0.0.1:{port}/tablets.json")[0] == 200
            warnings = [ln for ln in d.text().splitlines() if "PUBLIC (--http-public)" in ln]
            assert len(warnings) == 1 and "WARNING" in warnings[0], d.text()
        finally:
            d.kill()


def test_coordinator_console_needs_the_password(tmp_path):
    group = CoordinatorGroup(tmp_path, n=1)
    secrets = password_file(tmp_path / "http.passwords")
    port = free_port()
    proc = group.start(
        0, extra=("--http", f"127.0.0.1:{port}", "--http-password-file", str(secrets))
    )
    base = f"http://127.0.0.1:{port}"
    try:
        group.wait_started()
        group.wait_admin()  # the bootstrap admin is logged: a principal /log names
        wait_for(lambda: request(base + "/readyz")[0] == 200, WAIT_S, "the node is ready")
        for path in ("/", "/log", "/ops", "/leases", "/tables/anything", "/metrics"):
            status, headers, body = request(base + path)
            assert status == 401, (path, status)
            assert "WWW-Authenticate" in headers
            assert body == b"authentication required\n"
        status, _, body = request(base + "/log", (USER, PASSWORD))
        assert status == 200 and b"admin" in body  # the bootstrap admin's Principal record
        principal_key = group.credentials.keypair.public if group.credentials else ""
        for path in ("/healthz", "/readyz"):
            status, _, body = request(base + path)
            assert status == 200
            assert b"admin" not in body and principal_key.encode() not in body, body
        status_json = subprocess.run(
            [
                sys.executable, "-m", "optools.coordinator_cli", "status", "--json",
                "--credentials", str(group.admin_credentials_file),
            ],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip
        doc = json.loads(status_json.stdout)
        assert doc["nodes"][0]["role"] == "LEADER", doc
    finally:
        proc.kill()
