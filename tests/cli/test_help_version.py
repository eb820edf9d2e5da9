"""Every console script and every subcommand: `--help` works (exit 0, usage on stdout), and
`--version` prints `NAME VERSION` from the installed distribution's metadata."""

from __future__ import annotations

from importlib import metadata

import pytest

from tests.cli.helpers import SCRIPTS, parsers, run, subcommands

VERSION = metadata.version("logcentric")
ALL_COMMANDS = [(name, words) for name, p in parsers().items() for words in subcommands(p)]


@pytest.mark.parametrize("name", SCRIPTS)
def test_version(name):
    out = run(name, "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{name} {VERSION}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_of_the_script(name):
    out = run(name, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: {name}") and "--version" in out.stdout


@pytest.mark.parametrize(
    ("name", "words"), ALL_COMMANDS, ids=[" ".join((n, *w)) for n, w in ALL_COMMANDS]
)
def test_help_of_every_subcommand(name, words):
    out = run(name, *words, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: {name} {' '.join(words)}"), out.stdout
    assert "Traceback" not in out.stderr


def test_the_commands_walked_are_all_there():
    """The walk above finds the subcommands the brief names (no silent empty list)."""
    found = {(n, w) for n, w in ALL_COMMANDS}
    for expected in [
        ("coordinator", ("start",)),
        ("coordinator", ("status",)),
        ("coordinator", ("clusters",)),
        ("coordinator", ("local-cluster", "up")),
        ("coordinator", ("local-cluster", "down")),
        ("coordinator", ("log",)),
        ("coordinator", ("retire-tserver",)),
        ("logstore", ("serve",)),
        ("logstore", ("last-id",)),
        ("tserver", ("status",)),
        ("tserver", ("quarantine", "list")),
        ("tserver", ("fs", "uuid")),
    ]:
        assert expected in found
