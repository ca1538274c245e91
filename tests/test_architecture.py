"""The package tree is the architecture: layers import only downwards, the core never imports Spark.

Read from the source with ``ast`` (imports inside functions count too), so a lazy import that breaks a
rule is caught as surely as one at the top of a module.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parent.parent / "lib"
PACKAGE = LIB / "kraftlake"

# Lowest first: a module may import its own layer and the layers before it, never one after it.
LAYERS = ("metadata", "codec", "storage", "image", "raft", "controller", "sim", "report", "spark", "cli")
# Where pyspark and pandas may be imported: the Spark shell and the storage engine that talks to Spark.
SPARK_FACING = ("kraftlake.spark", "kraftlake.storage")
# The storage engine's Spark-facing modules.
SPARK_ENGINE_MODULES = ("kraftlake.storage.native", "kraftlake.storage.datasource")


def module_name(path: Path) -> str:
    parts = path.relative_to(LIB).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``kraftlake``, ``pyspark`` and ``pandas`` import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            # `from kraftlake.x import y` may name a module y: it is imported too
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                      if f"{node.module}.{a.name}" in MODULES]
    return [(line, name) for line, name in found if name.split(".")[0] in ("kraftlake", "pyspark", "pandas")]


def test_every_module_lives_in_a_layer() -> None:
    loose = [m for m in MODULES if m != "kraftlake" and layer(m) is None]
    assert not loose, f"modules outside the layer packages {LAYERS}: {loose}"


def test_layers_import_only_downwards() -> None:
    upward = []
    for module, path in MODULES.items():
        mine = layer(module)
        for line, imported in imports(path):
            theirs = layer(imported)
            if mine and theirs and LAYERS.index(theirs) > LAYERS.index(mine):
                upward.append(f"{path.relative_to(LIB)}:{line} ({mine}) imports {imported} ({theirs})")
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_import_cycle_between_modules() -> None:
    """Module-level imports only: a cycle there makes import order matter and hides which module owns what."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        targets = set()
        for node in tree.body:  # top level only: what importing the module imports
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            targets |= {n for n in names if n in MODULES and n != module and not module.startswith(n + ".")}
        # a package's __init__ is imported with each of its modules: not a cycle of theirs
        graph[module] = {t for t in targets if not (t == module.rsplit(".", 1)[0])}

    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_only_the_spark_shell_names_pyspark_or_pandas() -> None:
    offenders = [f"{path.relative_to(LIB)}:{line} imports {name}"
                 for module, path in MODULES.items() if not module.startswith(SPARK_FACING)
                 for line, name in imports(path) if name.split(".")[0] in ("pyspark", "pandas")]
    assert not offenders, "\n".join(offenders)


# The pure core loads neither; storage, the simulators and the CLI load no pyspark (pandas may come with
# pyarrow.dataset, which imports it whenever it is installed: not ours to import, and no Spark).
PURE = ("metadata", "codec", "image", "raft", "controller")
IMPORT_GROUPS = {
    "pure core": ([m for m in MODULES if layer(m) in PURE], ("pyspark", "pandas")),
    "storage, simulators, report, cli": ([m for m in MODULES if layer(m) in ("storage", "sim", "report", "cli")
                                  and m not in SPARK_ENGINE_MODULES], ("pyspark",)),
}


@pytest.mark.parametrize("group", sorted(IMPORT_GROUPS))
def test_importing_outside_the_shell_loads_no_spark(group: str) -> None:
    """A fresh interpreter imports every module of the group, then looks at what got loaded: jobs parse
    arguments, print help and replay logs without a JVM or Spark's Python side."""
    wanted, forbidden = IMPORT_GROUPS[group]
    code = ("import importlib, sys\n"
            f"for name in {wanted!r}:\n"
            "    importlib.import_module(name)\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r})[:3])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(LIB)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing the {group} loaded {out.stdout.strip()}"
    assert len(wanted) >= 5


REPO = LIB.parent
JOBS = sorted((REPO / "jobs").glob("*.py"))


@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.name)
def test_a_job_only_calls_the_library(job: Path) -> None:
    """Options and logic live in the library (``kraftlake.cli.<job>``, ``benchmarks``), where tests reach
    them; a job file is what spark-submit runs, so no job can grow logic another job or a test needs. Every
    job runs its main through ``kraftlake.cli.launcher.run_job``."""
    wanted = "benchmarks.suite" if job.stem == "bench" else f"kraftlake.cli.{job.stem}"
    tree = ast.parse(job.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | \
               {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"sys", "pathlib"} == {wanted, "kraftlake.cli.launcher"}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "run_job"]
    assert [c.args[0].value for c in calls] == [job.stem], f"{job.name} must call run_job({job.stem!r}, main)"
    functions = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert functions == [], f"{job.name} defines {functions}: that belongs in {wanted}"


def test_no_test_reaches_into_jobs() -> None:
    offenders = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if path.name == Path(__file__).name:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value == "jobs" or \
                    isinstance(node, ast.Attribute) and node.attr == "spec_from_file_location":
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, f"tests reaching into jobs/ (import the kraftlake.cli modules instead): {offenders}"
