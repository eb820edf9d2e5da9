"""`coordinator users`: the principals of the coordinator log (design/security.md section 3).

    coordinator users add NAME --role R [--role R2] [--public-key FILE] [--out FILE]
    coordinator users list [--json]
    coordinator users set-roles NAME --role R ...
    coordinator users revoke NAME
    coordinator join-token [--ttl-s S]

`add` without --public-key makes a CURVE key pair (zmq.curve_keypair) and writes the
credentials file (rpc/credentials.py; default ./NAME.credentials, mode 0600, never over an
existing file): the key pair, the name and roles, and the cluster's coordinators with their
public keys (from the caller's own credentials file, else from each node's Status). The
file is written before the principal is logged and removed again when the cluster refuses
it, so a logged key always has its secret saved. With --public-key (the key's Z85 text, or
a zmq certificate file) only the public key is logged and no file is written.

The methods are the admin role's. On a CURVE cluster the caller's credentials file
(--credentials, $LOGCENTRIC_CREDENTIALS, or the cluster's clusters-file entry) must be an
admin's; on a plaintext cluster they are guarded by the cluster's password
(rpc/privileged.py): --password-file, else $COORDINATOR_PASSWORD or $LOGCENTRIC_PASSWORD.
Every change carries a request id, so the client's own retries (a new leader, a lost
answer) get the first answer instead of a second change.

`join-token` (design/security.md section 5) makes a one-use join token for one new tablet
server: a fresh random secret, printed as `lcjt1.<z85>` (rpc/join_token.py), whose public
half only is logged as a `join-token` principal with the `join` role and a deadline the
coordinator leader counts on its wall clock (--ttl-s). `tserver start --curve --join-token
TOKEN` (or $LOGCENTRIC_JOIN_TOKEN) admits that server's key with it, once.
"""

from __future__ import annotations

import argparse
import os

from coordinator.ops.principals import (
    JOIN_TOKEN_KIND,
    JOIN_TOKEN_TTL_S_DEFAULT,
    JOIN_TOKEN_TTL_S_MAX,
    KINDS,
    ROLES,
    key_problem,
)
from optools.admin import coordinators_for, credentials_of
from rpc import errors as rpc_errors
from rpc.console import UsageError, add_cluster_arguments, add_json, print_json
from rpc.errors import RpcError

# Answers after which the AddPrincipal may or may not have been logged.
_OUTCOME_UNKNOWN = (rpc_errors.TimedOut, rpc_errors.Unavailable, rpc_errors.Cancelled)

DEFAULT_TIMEOUT_S = 10.0
CREDENTIALS_FORMAT = "logcentric-credentials/1"
KEY_FILE_BYTES_MAX = 64 * 1024


def _roles(values: list[str]) -> list[str]:
    """--role given once or more, each possibly comma-separated."""
    out: list[str] = []
    for value in values:
        for role in (r.strip() for r in value.split(",")):
            if role and role not in out:
                out.append(role)
    unknown = [r for r in out if r not in ROLES]
    if unknown:
        raise UsageError(f"unknown role {unknown[0]!r}; roles: {', '.join(ROLES)}")
    return out


def _timeout(value: str) -> float:
    from optools.admin import timeout_arg

    return timeout_arg(value)


def _client(args):
    from logcentric.meta import CoordinatorClient
    from rpc import privileged

    password = privileged.read_password(
        args.password_file, "COORDINATOR_PASSWORD", "coordinator"
    ) or os.environ.get(privileged.PASSWORD_ENV)
    key = privileged.derive_key(password) if password else None
    return CoordinatorClient(
        args.coordinators,
        timeout_s=args.timeout_s,
        privileged_key=key,
        credentials=credentials_of(args),
    )


def _addresses(args) -> list[str]:
    """The coordinators (`optools.admin.coordinators_for`)."""
    return coordinators_for(args, args.coordinators, args.cluster)


def _coordinator_entries(args, client) -> list[tuple[str, str]]:
    """(address, public key) of every coordinator, for a new credentials file: the caller's
    credentials file's keys where it has them, else each node's own Status answer (over a
    channel the caller already trusts: CURVE with a key it holds, or plaintext)."""
    creds = credentials_of(args)
    known = creds.coordinator_keys() if creds is not None else {}
    out = []
    for address in args.coordinators:
        key = known.get(address, "")
        if not key and creds is None:
            try:
                key = client.status(address, timeout_s=min(args.timeout_s, 3.0)).public_key
            except RpcError:
                key = ""
        out.append((address, key))
    return out


def read_public_key(path: str, who: str = "coordinator users add") -> str:
    """The Z85 public key in `path`: a zmq certificate (`public-key = "..."`) or the key's
    40 characters alone. One-line SystemExit when it is neither."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(KEY_FILE_BYTES_MAX)
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"{who}: cannot read public key file {path}: {e}") from None
    if "public-key" in text:
        import zmq.auth

        try:
            public, _secret = zmq.auth.load_certificate(path)
        except (ValueError, OSError) as e:
            raise SystemExit(f"{who}: {path}: not a certificate: {e}") from None
        key = public.decode()
    else:
        key = text.strip()
    if (problem := key_problem(key)) is not None:
        raise SystemExit(f"{who}: {path}: {problem}")
    return key


def write_credentials(path: str, document: dict) -> None:
    """Create `path` with mode 0600 (never over an existing file), write and fsync it."""
    from rpc import credentials

    try:
        credentials.write(path, document)
    except FileExistsError:
        raise SystemExit(f"coordinator users add: {path} exists; give another --out FILE") from None


def cmd_add(args) -> int:
    from rpc import credentials
    from rpc.keys import KeyPair
    from rpc.protocols import coordinator_pb2 as pb

    roles = _roles(args.role)
    args.coordinators = _addresses(args)
    out = None
    if args.public_key:
        if args.out:
            raise UsageError("--out writes a new key pair's credentials: not with --public-key")
        public = read_public_key(args.public_key)
    keypair = None if args.public_key else KeyPair.generate()
    try:
        with _client(args) as client:
            if keypair is not None:
                public = keypair.public
                target = args.out or f"{args.name}.credentials"
                document = credentials.document(
                    args.name, args.kind, roles, keypair, _coordinator_entries(args, client)
                )
                write_credentials(target, document)  # refuses an existing file: never ours
                out = target
            request = pb.AddPrincipalRequest(
                request_id=client.next_request_id(),
                name=args.name,
                kind=args.kind,
                public_key=public,
                roles=roles,
            )
            client.call("AddPrincipal", request, pb.AddPrincipalResponse)
    except RpcError as err:
        if out is None:
            raise
        if isinstance(err, _OUTCOME_UNKNOWN):
            # The key may be logged already: its secret is kept, and the user told so.
            raise type(err)(
                f"{err.message}; the outcome is unknown: the credentials stay in {out} "
                f"(`coordinator users list` shows whether {args.name} was added)"
            ) from None
        os.unlink(out)  # refused: the secret of a key never logged goes
        raise
    if args.json:
        print_json(
            {
                "name": args.name,
                "kind": args.kind,
                "roles": roles,
                "public_key": public,
                "credentials_file": os.path.abspath(out) if out else None,
            }
        )
        return 0
    where = f"; credentials in {out} (mode 0600: keep it secret)" if out else ""
    print(f"added {args.kind} {args.name} ({', '.join(roles)}) key {public}{where}")
    return 0


def principal_fields(p) -> dict:
    return {
        "name": p.name,
        "kind": p.kind,
        "roles": list(p.roles),
        "state": p.state,
        "pending": p.pending,
        "public_key": p.public_key,
        "record_id": p.record_id,
        # join tokens: the deadline (the coordinator leader's wall clock, Unix ms) and
        # whether it has passed by this machine's clock; tablet servers: the token they
        # joined with (a spent token is no principal any more: it shows here)
        "expires_unix_ms": p.expires_unix_ms,
        "expired": bool(p.expires_unix_ms) and p.expires_unix_ms <= _now_ms(),
        "join_token": p.join_token,
    }


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)


def _utc(unix_ms: int) -> str:
    import datetime

    when = datetime.datetime.fromtimestamp(unix_ms / 1000, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _state_words(p) -> str:
    state = p.state + (" (changing)" if p.pending else "")
    if p.kind == JOIN_TOKEN_KIND and p.expires_unix_ms:
        if p.state == "active" and p.expires_unix_ms <= _now_ms():
            state = "expired"
        state += f", unused, expires {_utc(p.expires_unix_ms)}"
    if p.join_token:
        state += f", joined with token {p.join_token} (spent)"
    return state


def cmd_list(args) -> int:
    from rpc.protocols import coordinator_pb2 as pb

    args.coordinators = _addresses(args)
    with _client(args) as client:
        answer = client.call(
            "ListPrincipals", pb.ListPrincipalsRequest(), pb.ListPrincipalsResponse
        )
    if args.json:
        print_json([principal_fields(p) for p in answer.principals])
        return 0
    if not answer.principals:
        print("no principals (coordinator users add NAME --role R)")
        return 0
    for p in answer.principals:
        print(f"{p.name}\t{p.kind}\t{','.join(p.roles)}\t{_state_words(p)}\t{p.public_key}")
    return 0


def _ttl(value: str) -> int:
    try:
        ttl = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {value!r}") from None
    if not 0 < ttl <= JOIN_TOKEN_TTL_S_MAX:
        raise argparse.ArgumentTypeError(f"1..{JOIN_TOKEN_TTL_S_MAX} s, got {ttl}")
    return ttl


def cmd_join_token(args) -> int:
    """Log a new token's public half; print the token (the secret) once, to stdout only."""
    from coordinator.ops.principals import join_token_name
    from rpc import join_token
    from rpc.protocols import coordinator_pb2 as pb

    text, pair = join_token.make()
    name = join_token_name(pair.public)
    args.coordinators = _addresses(args)
    with _client(args) as client:
        request = pb.AddPrincipalRequest(
            request_id=client.next_request_id(),
            name=name,
            kind=JOIN_TOKEN_KIND,
            public_key=pair.public,
            roles=["join"],
            ttl_s=args.ttl_s,
        )
        client.call("AddPrincipal", request, pb.AddPrincipalResponse)
        listed = client.call(
            "ListPrincipals", pb.ListPrincipalsRequest(), pb.ListPrincipalsResponse
        )
    expires = next((p.expires_unix_ms for p in listed.principals if p.name == name), 0)
    if args.json:
        print_json(
            {
                "token": text,
                "name": name,
                "public_key": pair.public,
                "ttl_s": args.ttl_s,
                "expires_unix_ms": expires,
            }
        )
        return 0
    print(text)
    import sys

    print(
        f"join token {name}: admits one tablet server, once, until "
        f"{_utc(expires) if expires else f'{args.ttl_s} s from now'} (the coordinator "
        "leader's clock): `tserver start --curve --join-token TOKEN` or $LOGCENTRIC_JOIN_TOKEN. "
        f"Keep it secret; `coordinator users revoke {name}` withdraws it.",
        file=sys.stderr,
    )
    return 0


def cmd_revoke(args) -> int:
    from rpc.protocols import coordinator_pb2 as pb

    args.coordinators = _addresses(args)
    with _client(args) as client:
        request = pb.RevokePrincipalRequest(request_id=client.next_request_id(), name=args.name)
        client.call("RevokePrincipal", request, pb.RevokePrincipalResponse)
    if args.json:
        print_json({"name": args.name, "state": "revoked"})
    else:
        print(f"revoked {args.name}: its key is refused from now on")
    return 0


def cmd_set_roles(args) -> int:
    from rpc.protocols import coordinator_pb2 as pb

    roles = _roles(args.role)
    args.coordinators = _addresses(args)
    with _client(args) as client:
        request = pb.SetPrincipalRolesRequest(
            request_id=client.next_request_id(), name=args.name, roles=roles
        )
        client.call("SetPrincipalRoles", request, pb.SetPrincipalRolesResponse)
    if args.json:
        print_json({"name": args.name, "roles": roles})
    else:
        print(f"{args.name} now has: {', '.join(roles)}")
    return 0


def _common(p: argparse.ArgumentParser, what: str) -> None:
    from optools.admin import add_credentials_argument

    add_cluster_arguments(p)
    add_credentials_argument(p)
    p.add_argument(
        "--timeout-s",
        type=_timeout,
        default=DEFAULT_TIMEOUT_S,
        help="total time for the request (default %(default)s)",
    )
    p.add_argument(
        "--password-file",
        default=None,
        help="the cluster's password (also COORDINATOR_PASSWORD or LOGCENTRIC_PASSWORD): "
        "the admin methods answer only a caller who holds it until roles are enforced",
    )
    add_json(p, what)


def add_commands(sub) -> None:
    """`users add|list|set-roles|revoke` on the `coordinator` command's subparsers."""
    users = sub.add_parser(
        "users",
        help="principals (users, servers) with their keys and roles",
        description=__doc__.splitlines()[0],
    )
    cmds = users.add_subparsers(dest="users_command", required=True)
    p = cmds.add_parser("add", help="add a principal; makes its key pair and credentials file")
    p.add_argument("name", help="letters, digits and . _ @ : + - (up to 128 bytes)")
    p.add_argument(
        "--role",
        action="append",
        required=True,
        help=f"one of {', '.join(ROLES)}; repeat or comma-separate for several",
    )
    p.add_argument(
        "--kind",
        choices=[k for k in KINDS if k != JOIN_TOKEN_KIND],  # tokens: `coordinator join-token`
        default="user",
        help="default %(default)s",
    )
    p.add_argument(
        "--public-key",
        metavar="FILE",
        help="log this public key (Z85 text or a zmq certificate) instead of making a pair",
    )
    p.add_argument(
        "--out", metavar="FILE", help="the credentials file (default ./NAME.credentials)"
    )
    _common(p, "the principal added and its credentials file")
    p.set_defaults(func=cmd_add)
    p = cmds.add_parser("list", help="every principal: kind, roles, state, public key")
    _common(p, "a list of principals")
    p.set_defaults(func=cmd_list)
    p = cmds.add_parser("set-roles", help="replace a principal's roles")
    p.add_argument("name")
    p.add_argument("--role", action="append", required=True, help=f"one of {', '.join(ROLES)}")
    _common(p, "the principal and its roles")
    p.set_defaults(func=cmd_set_roles)
    p = cmds.add_parser("revoke", help="revoke a principal: its key is refused from then on")
    p.add_argument("name")
    _common(p, "the principal revoked")
    p.set_defaults(func=cmd_revoke)
    # `coordinator join-token`: on the coordinator command itself, beside `users`.
    p = sub.add_parser(
        "join-token",
        help="make a one-use token that admits one new tablet server (admin)",
        description="Log the public half of a fresh one-use join token (kind join-token, "
        "role join, a deadline) and print the token: give it to `tserver start --curve "
        "--join-token TOKEN` (or $LOGCENTRIC_JOIN_TOKEN). design/security.md section 5.",
    )
    p.add_argument(
        "--ttl-s",
        type=_ttl,
        default=JOIN_TOKEN_TTL_S_DEFAULT,
        help="seconds until it expires, counted by the coordinator leader's wall clock "
        f"(default %(default)s, at most {JOIN_TOKEN_TTL_S_MAX})",
    )
    _common(p, "the token, its principal's name, public key and deadline")
    p.set_defaults(func=cmd_join_token)
