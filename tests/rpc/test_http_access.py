"""rpc/http_access.py: the checks of the `--http-*` flags and of Basic credentials, with real
files (the daemons and real requests: tests/metrics/test_http_auth.py)."""

from __future__ import annotations

import base64
import logging

import pytest

from rpc.http_access import (
    HttpAccess,
    HttpConfigError,
    authorized,
    is_loopback_host,
    prepare_access,
    read_password_file,
    refusal_log,
)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    "host, loopback",
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("*", False),
        ("10.77.0.1", False),
        ("no-such-host.invalid", False),
    ],
)
def test_loopback_hosts(host, loopback):
    assert is_loopback_host(host) is loopback


def test_password_file(tmp_path):
    f = tmp_path / "pw"
    f.write_text("# readers\n\n  ops:s3cret:with:colons  \nbob:pw\n")
    f.chmod(0o600)
    assert read_password_file(str(f)) == ((b"ops", b"s3cret:with:colons"), (b"bob", b"pw"))
    f.chmod(0o640)
    with pytest.raises(HttpConfigError, match="mode 0640"):
        read_password_file(str(f))
    f.chmod(0o600)
    f.write_text("ops:good\njust-a-secret-line\n")
    with pytest.raises(HttpConfigError, match="line 2 is not user:password") as e:
        read_password_file(str(f))
    assert "just-a-secret-line" not in str(e.value)  # a malformed line is never echoed
    f.write_text("# nobody\n")
    with pytest.raises(HttpConfigError, match="no user:password line"):
        read_password_file(str(f))
    with pytest.raises(HttpConfigError, match="No such file"):
        read_password_file(str(tmp_path / "missing"))


def test_modes(tmp_path):
    f = tmp_path / "pw"
    f.write_text("ops:pw\n")
    f.chmod(0o600)
    assert prepare_access("127.0.0.1:0", HttpAccess()).users == ()
    with pytest.raises(HttpConfigError, match="not a loopback address"):
        prepare_access("0.0.0.0:0", HttpAccess())
    assert prepare_access("0.0.0.0:0", HttpAccess(public=True)).public
    assert prepare_access("0.0.0.0:0", HttpAccess(password_file=str(f))).users
    with pytest.raises(HttpConfigError, match="contradict"):
        prepare_access("0.0.0.0:0", HttpAccess(password_file=str(f), public=True))
    with pytest.raises(HttpConfigError, match="go together"):
        prepare_access("127.0.0.1:0", HttpAccess(tls_cert=str(f)))


def test_basic_credentials():
    users = ((b"ops", b"pw"), (b"bob", b"other"))
    assert authorized(basic("ops", "pw"), users)
    assert authorized(basic("bob", "other"), users)
    assert authorized("basic " + basic("ops", "pw").split()[1], users)  # scheme: any case
    for header in (
        "",
        basic("ops", "other"),  # another user's password
        basic("ops", "pw2"),
        basic("op", "pw"),
        basic("ops", ""),
        "Basic " + base64.b64encode(b"opspw").decode(),  # no colon
        "Basic !!!not-base64",
        "Bearer " + basic("ops", "pw").split()[1],
        "Basic " + "A" * 5000,
    ):
        assert not authorized(header, users), header
    assert not authorized(basic("ops", "pw"), ())


def test_refusals_are_logged_at_a_rate(caplog):
    logger = logging.getLogger("test.http_access")
    refusals = refusal_log(logger, burst=2, window_s=3600.0)
    with caplog.at_level(logging.WARNING, logger="test.http_access"):
        for i in range(5):
            refusals.warning("refused %d", i)
    assert [r.getMessage() for r in caplog.records] == ["refused 0", "refused 1"]
