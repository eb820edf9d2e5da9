"""A tablet server process for integration tests: start, wait until serving, stop or kill.

`tserver start` runs CURVE by default and refuses to start without its coordinators' keys
(design/security.md section 4). The servers of these tests run alone or beside a plaintext
test cluster: they test storage, consensus and the tools, not security, so the harness says
`--insecure` explicitly unless a test asks for CURVE (`insecure=False`, with
`--coordinator-keys` among its `extra_args`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.procs import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]


class TServerProcess:
    def __init__(self, root: Path, *, extra_args=(), env=None, insecure: bool = True) -> None:
        self.root = root
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.extra_args = list(extra_args)
        assert not (insecure and {"--curve", "--coordinator-keys"} & set(self.extra_args)), (
            "CURVE flags with insecure=True: pass insecure=False"
        )
        # Said explicitly: plaintext, unauthenticated (these servers test storage and
        # consensus, not security); the start line then says INSECURE.
        self.security_args = ["--insecure"] if insecure else []
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.uuid = ""

    def start(self, timeout_s: float = 60.0) -> TServerProcess:
        out = self.root.parent / f"{self.root.name}.{self.port}.out"
        self.out_path = out
        self.err_path = out.with_suffix(".err")
        env = dict(os.environ)
        env.update(self.env or {})
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tservers.cli",
                "start",
                "--fs-root",
                str(self.root),
                "--bind",
                self.address,
                "--log-level",
                "info",
                *self.security_args,
                *self.extra_args,
            ],
            cwd=REPO,
            env=env,
            stdout=open(out, "w"),
            stderr=open(self.err_path, "a"),  # a restart (same port) appends
        )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"tserver exited {self.proc.returncode}: {self.err_path.read_text()}"
                )
            text = out.read_text()
            return "serving on" in text

        wait_for(ready, timeout_s, "tserver to serve")
        self.uuid = out.read_text().split()[1]
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(30)

    def terminate(self, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def joined(cluster, root: Path, *, extra_args=(), env=None) -> TServerProcess:
    """A tablet server process (not started) for `cluster`, a LocalCluster, on the formatted
    fs root `root`: on a secure cluster admitted first, as the admin (a `tserver` principal
    named by its UUID with its key, the server role), and run CURVE with the coordinators'
    keys (the admin's credentials list them); on a plaintext cluster, `--insecure`. Either
    way it enlists with the cluster's coordinators and holds the cluster's password."""
    addresses = cluster.spec.coordinator_addresses
    args = [
        "--coordinators", ",".join(addresses),
        "--password-file", str(cluster.spec.password_file),
    ]  # fmt: skip
    creds = cluster.credentials()
    if creds is None:
        return TServerProcess(root, extra_args=[*args, *extra_args], env=env, insecure=True)
    admit(cluster, root)
    keys = ",".join(creds.server_key(address) for address in addresses)
    return TServerProcess(
        root, extra_args=[*args, "--coordinator-keys", keys, *extra_args], env=env, insecure=False
    )


def admit(cluster, root: Path) -> str:
    """Admit the tablet server of the formatted fs root `root` to the secure LocalCluster
    `cluster`, as its admin: a `tserver` principal named by its UUID with its public key and
    the server role. Returns the UUID."""
    from rpc.protocols import coordinator_pb2 as pb
    from tservers.fs import FsLayout

    fs = FsLayout(root, FsLayout.read_instance(root).uuid)
    with cluster.client(timeout_s=30.0) as client:
        request = pb.AddPrincipalRequest(
            request_id=client.next_request_id(),
            name=fs.uuid,
            kind="tserver",
            public_key=fs.public_key(),
            roles=["server"],
        )
        client.call("AddPrincipal", request, pb.AddPrincipalResponse)
    return fs.uuid
