"""The README's snippets work exactly as printed.

Every ```sh or ```python fence preceded by the line `<!-- test: run -->` is run, in the
order of the README, in one fresh temporary directory, as a user would after
`source .venv/bin/activate`: this venv's `bin` first on PATH, a clusters file of the test's
own (`LOGCENTRIC_CONFIG`), nothing on PYTHONPATH and no PYSPARK_* variables. sh snippets run
with `bash -e`, Python snippets with `python` from that PATH, each as a file. The quick
start's `coordinator local-cluster up` makes the cluster the others use; whatever cluster
is left under the directory is stopped at the end.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from optools.localcluster import STATE_FILE, ClusterSpec, LocalCluster

README = Path(__file__).resolve().parents[1] / "README.md"
MARK = "<!-- test: run -->"
LANGUAGES = ("sh", "python")
SNIPPET_TIMEOUT_S = 600.0
FENCE_RE = re.compile(r"^```(\S*)\s*$")


@dataclass(frozen=True, slots=True)
class Snippet:
    language: str
    code: str
    line: int  # of the opening fence, 1-based
    shown_output: str  # the ```text block right after it, if any ("" otherwise)


def snippets(text: str) -> list[Snippet]:
    """The marked snippets of a Markdown text; a mark not followed by a sh or python fence is
    an error (a mark that silently stopped marking anything would drop a test)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        opening = FENCE_RE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if opening is None or opening.group(1) not in LANGUAGES:
            raise AssertionError(f"README line {i + 1}: {MARK} must precede a sh/python fence")
        body, end = _fenced(lines, i + 1)
        shown = ""
        after = FENCE_RE.match(lines[end + 1]) if end + 1 < len(lines) else None
        if after is not None and after.group(1) == "text":
            shown = "\n".join(_fenced(lines, end + 1)[0])
        out.append(Snippet(opening.group(1), "\n".join(body) + "\n", i + 2, shown))
    return out


def _fenced(lines: list[str], start: int) -> tuple[list[str], int]:
    """The lines inside the fence opened at `start`, and the index of its closing line."""
    for j in range(start + 1, len(lines)):
        if lines[j].strip() == "```":
            return lines[start + 1 : j], j
    raise AssertionError(f"README line {start + 1}: the fence is never closed")


def test_the_quick_start_the_client_and_spark_snippets_are_marked():
    marked = snippets(README.read_text())
    code = [s.code for s in marked]
    assert any("coordinator local-cluster up --dir" in c for c in code if c), code
    assert any('logcentric.connect(cluster="local")' in c for c in code)
    assert any('format("logcentric")' in c and "register" not in c for c in code)
    assert sum(s.language == "python" for s in marked) >= 2
    assert "local-cluster down" in marked[-1].code  # the last one stops the cluster


def test_a_mark_must_mark_a_runnable_fence():
    with pytest.raises(AssertionError, match="must precede"):
        snippets(f"{MARK}\n```text\nx\n```\n")
    found = snippets(f"a\n{MARK}\n```sh\necho hi\n```\n```text\nhi\n```\n")
    assert found == [Snippet("sh", "echo hi\n", 3, "hi")]


def user_env(tmp_path: Path) -> dict[str, str]:
    venv_bin = Path(sys.executable).parent
    drop = ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("LOGCENTRIC_")}
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv_bin.parent)
    env["LOGCENTRIC_CONFIG"] = str(tmp_path / "config" / "clusters.toml")
    return env


def stop_clusters_under(root: Path) -> None:
    for state in root.rglob(STATE_FILE):
        spec = ClusterSpec.load(state.parent)
        if spec is not None:
            LocalCluster(spec).down()


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_readme_snippets_run_exactly_as_printed(tmp_path):
    work = tmp_path / "user"
    work.mkdir()
    env = user_env(tmp_path)
    try:
        for n, snippet in enumerate(snippets(README.read_text())):
            path = work / f"snippet_{n}.{'py' if snippet.language == 'python' else 'sh'}"
            path.write_text(snippet.code)
            runner = ["bash", "-e"] if snippet.language == "sh" else ["python"]
            command = [*runner, path.name]
            proc = subprocess.run(
                command,
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=SNIPPET_TIMEOUT_S,
                check=False,
            )
            where = f"README line {snippet.line} ({snippet.language}):\n{snippet.code}"
            assert proc.returncode == 0, (
                f"{where}\nexit {proc.returncode}\n--- stdout\n{proc.stdout}\n"
                f"--- stderr\n{proc.stderr[-5000:]}"
            )
            # The printed example's line to connect is what the command prints.
            for line in snippet.shown_output.splitlines():
                if line.startswith("connect:"):
                    assert line in proc.stdout.splitlines(), f"{where}\n{proc.stdout}"
    finally:
        stop_clusters_under(work)
