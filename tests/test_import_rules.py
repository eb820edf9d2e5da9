"""The import rules of design/architecture.md ("Imports run one way"), checked on every module.

Each module of the installed packages (and `jobs/`) is parsed with `ast`, and every import it
makes is read: at the top, inside functions and classes, under `if TYPE_CHECKING`, relative
ones resolved against the module's package, and `importlib.import_module` / `__import__` of a
literal name. An import of a first-party package that the importing package may not use is a
violation; the test lists them all, one a line, not only the first.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Which first-party packages each package may import (besides itself), as
# design/architecture.md states them. A package not listed here is not checked (tests, bench,
# scripts); `jobs` is the top and may import any of them.
FIRST_PARTY = (
    "rpc",
    "logstore",
    "coordinator",
    "tservers",
    "logcentric",
    "pyspark_logcentric",
    "optools",
    "jobs",
)
ALLOWED: dict[str, frozenset[str]] = {
    # The wire layer and what every server and tool shares: the bottom.
    "rpc": frozenset(),
    "logstore": frozenset({"rpc"}),
    # The coordinator talks to tablet servers only through their protocol messages.
    "coordinator": frozenset({"logstore", "rpc"}),
    "tservers": frozenset({"rpc"}),
    # The user package imports no server code.
    "logcentric": frozenset({"rpc"}),
    "pyspark_logcentric": frozenset({"logcentric"}),
    "optools": frozenset({"logcentric", "coordinator", "logstore", "tservers", "rpc"}),
    "jobs": frozenset(FIRST_PARTY),
}
# Inside the user package the Spark data source sits on top: `logcentric.spark` imports
# `logcentric`, never the reverse (the core must import without pyspark).
SPARK = "logcentric.spark"


@dataclass(frozen=True, slots=True)
class Import:
    module: str  # dotted name of the importing module
    line: int
    target: str  # dotted name imported (absolute)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of `from <level dots><name> import ...` inside `module`."""
    base = module.split(".")
    if not is_package:
        base.pop()  # a module's relative imports start from its package
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def imports_of(source: str, module: str, is_package: bool = False) -> list[Import]:
    """Every import that the source of `module` makes, wherever it stands in the file."""
    found: list[Import] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                target = _resolve(module, is_package, node.level, node.module)
            found.append(Import(module, node.lineno, target))
            # `from pkg import sub` may import the module pkg.sub: count it too.
            found += [Import(module, node.lineno, f"{target}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            if node.args and isinstance(node.args[0], ast.Constant):
                if isinstance(node.args[0].value, str):
                    found.append(Import(module, node.lineno, node.args[0].value))
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def violations_of(imports: list[Import]) -> list[str]:
    """One line per import statement against the rules (a `from a import b, c` that breaks a
    rule once is named once)."""
    out: list[str] = []
    seen: set[tuple[str, int, str]] = set()
    for imp in imports:
        own = imp.module.split(".")[0]
        other = imp.target.split(".")[0]
        if own not in ALLOWED or other not in FIRST_PARTY:
            continue
        why = None
        if other != own and other not in ALLOWED[own]:
            why = f"{own} may not import {other}"
        elif own == "logcentric" and not _under(imp.module, SPARK) and _under(imp.target, SPARK):
            why = f"the user package's core may not import {SPARK}"
        if why and (imp.module, imp.line, why) not in seen:
            seen.add((imp.module, imp.line, why))
            out.append(f"{imp.module} (line {imp.line}) imports {imp.target}: {why}")
    return out


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _all_modules() -> list[Path]:
    paths: list[Path] = []
    for package in ALLOWED:
        paths += sorted((ROOT / package).rglob("*.py"))
    return paths


def test_every_module_follows_the_import_rules() -> None:
    violations: list[str] = []
    for path in _all_modules():
        module = module_name(path)
        imports = imports_of(path.read_text(), module, path.name == "__init__.py")
        violations += violations_of(imports)
    assert not violations, "imports against design/architecture.md:\n" + "\n".join(
        sorted(set(violations))
    )


def test_the_rules_cover_every_package() -> None:
    # Each checked package exists and has modules with imports, so a renamed or moved package
    # does not leave the check above with nothing to read.
    for package in ALLOWED:
        paths = sorted((ROOT / package).rglob("*.py"))
        assert paths, f"no modules under {package}/"
        assert any(
            imports_of(p.read_text(), module_name(p), p.name == "__init__.py") for p in paths
        ), f"no imports read under {package}/"
    # Every top-level Python package of the checkout is either checked or known not to be.
    unchecked = {"tests", "bench", "scripts"}
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages - unchecked <= set(ALLOWED), packages - unchecked - set(ALLOWED)


def test_the_reader_finds_imports_wherever_they_stand() -> None:
    source = """
import rpc.client
from logstore import api
from . import sibling
from ..spark import datasource

def later():
    from optools.admin import main
    import coordinator.node as node

class C:
    def m(self):
        importlib.import_module("tservers.fs")
        __import__("jobs")

if TYPE_CHECKING:
    from logcentric import Client
"""
    got = {i.target for i in imports_of(source, "logcentric.x.y")}
    assert {
        "rpc.client",
        "logstore",
        "logstore.api",
        "logcentric.x",
        "logcentric.x.sibling",
        "logcentric.spark",
        "logcentric.spark.datasource",
        "optools.admin",
        "coordinator.node",
        "tservers.fs",
        "jobs",
        "logcentric",
    } <= got
    lines = violations_of(imports_of(source, "logcentric.x.y"))
    # logstore, optools, coordinator, tservers, jobs, once each (logcentric is its own)
    assert len([v for v in lines if "logcentric may not import" in v]) == 5
    assert any("logcentric.spark" in v for v in lines)
    # A server package importing the user package, and the coordinator a tablet server's code.
    assert violations_of(imports_of("from logcentric.meta import C", "tservers.cli"))
    assert violations_of(imports_of("from tservers import schema_rules", "coordinator.x"))
    assert not violations_of(imports_of("from rpc import schema_rules", "coordinator.x"))
    assert not violations_of(imports_of("from logcentric import meta", "optools.admin"))
