"""Ctrl-C while a console script still imports its command (the first few tenths of a
second): one line and status 130 like any later Ctrl-C, not a traceback. The signal is sent
by the imported module itself, at a known point of its import, so that the test does not
depend on timing: once before a class whose `__set_name__` runs (where Python turns a
KeyboardInterrupt into a RuntimeError), once at the end of the module."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from optools import entry

SLOW_MODULE = textwrap.dedent(
    """
    import os, signal

    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives while this module imports


    class Named:
        def __set_name__(self, owner, name):
            os.kill(os.getpid(), signal.SIGINT)


    class Holder:
        attr = Named()


    def main():
        print("main ran")
        return 0
    """
)


def _run_entry(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    (tmp_path / "slow_cli.py").write_text(SLOW_MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        # Popen leaves SIGINT as the test runner has it (maybe ignored): restore the default
        # a terminal gives a command.
        preexec_fn=lambda: __import__("signal").signal(2, __import__("signal").default_int_handler),
    )


def test_ctrl_c_during_the_import_ends_with_one_line(tmp_path):
    done = _run_entry(
        tmp_path, "import sys; from optools.entry import _run; sys.exit(_run('demo', 'slow_cli'))"
    )
    assert done.returncode == entry.EXIT_INTERRUPTED, done.stderr
    assert done.stderr.strip().splitlines() == ["demo: interrupted"]
    assert "main ran" not in done.stdout


def test_the_same_import_without_the_entry_ends_in_a_traceback(tmp_path):
    """What the console scripts did before: import the command's module directly."""
    done = _run_entry(tmp_path, "import slow_cli; slow_cli.main()")
    assert done.returncode != 0
    assert "Traceback" in done.stderr


@pytest.mark.parametrize("script", ["coordinator", "logstore", "tserver"])
def test_every_console_script_goes_through_the_entry(script):
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == script]
    assert ep.value == f"optools.entry:{script}"
    assert getattr(entry, script)  # the function exists
