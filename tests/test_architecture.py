"""The house's rules, read off the code's own imports (docs/architecture.md draws the map).

Data flows one way: sources → engine → metrics → staging → catalog → views → charts → CLI. So no
layer imports the API or the CLI above it; ingest and warehouse never import each other; the CLI
and the API reach a layer through its facade (its package), never its inner modules; metrics are
pure math; only the CLI imports typer and rich; only the cluster backend imports ray.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Installed name of each source folder (pyproject's package-dir).
FOLDERS = {"qkdb": "qkdb", "ingest": "qkdb.ingest", "warehouse": "qkdb.warehouse", "charts": "qkdb.charts"}


def _modules() -> dict[str, set[str]]:
    """Every module of the package (installed name) and the qkdb/typer/rich/ray modules it imports."""
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            imported = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    imported |= {a.name for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    # `from qkdb.x import y` may import the module qkdb.x.y: count both.
                    imported |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            out[name] = {m for m in imported if m.split(".")[0] in ("qkdb", "typer", "rich", "click", "ray")}
    return out


MODULES = _modules()


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _offenders(where: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    return sorted(
        f"{mod} imports {imp}"
        for mod, imports in MODULES.items() if _within(mod, where)
        for imp in imports
        if any(_within(imp, f) for f in forbidden) and not any(_within(imp, a) for a in allowed)
    )


def test_the_modules_are_found():
    assert {"qkdb.api", "qkdb.cli.app", "qkdb.ingest.sources.hub", "qkdb.warehouse.store",
            "qkdb.charts.figures.rq_vs_rk"} <= set(MODULES)


@pytest.mark.parametrize("layer", ["qkdb.ingest", "qkdb.warehouse", "qkdb.charts"])
def test_no_layer_imports_the_api_or_the_cli(layer):
    assert _offenders(layer, ("qkdb.api", "qkdb.cli", "qkdb.pipeline", "qkdb.query")) == []


def test_ingest_and_warehouse_never_import_each_other_and_charts_neither():
    assert _offenders("qkdb.ingest", ("qkdb.warehouse", "qkdb.charts")) == []
    assert _offenders("qkdb.warehouse", ("qkdb.ingest", "qkdb.charts")) == []
    assert _offenders("qkdb.charts", ("qkdb.ingest", "qkdb.warehouse")) == []


def test_inside_ingest_data_flows_one_way():
    # metrics: pure math; sources know nothing of running an ingest or of making datasets.
    assert _offenders("qkdb.ingest.metrics", ("qkdb.ingest",), allowed=("qkdb.ingest.metrics",)) == []
    assert _offenders("qkdb.ingest.sources", ("qkdb.ingest.engine", "qkdb.ingest.capture", "qkdb.ingest.metrics")) == []
    assert _offenders("qkdb.ingest.engine", ("qkdb.ingest.capture",)) == []


def test_the_cli_and_the_api_use_the_layers_facades():
    inner = ("qkdb.ingest.", "qkdb.warehouse.", "qkdb.charts.")
    found = sorted(
        f"{mod} imports {imp}"
        for mod, imports in MODULES.items()
        if _within(mod, "qkdb.cli") or mod in ("qkdb.api", "qkdb.pipeline", "qkdb.query", "qkdb.__main__")
        for imp in imports
        # `from qkdb.ingest import X` records qkdb.ingest.X too: fine when X is a name the facade offers.
        if imp.startswith(inner) and (ROOT / _source_of(imp)).exists() and not _offered(imp)
    )
    assert found == []


def _offered(module: str) -> bool:
    """Whether ``qkdb.<layer>.<name>`` is a name its layer's facade offers (``dir`` of the package)."""
    import importlib

    package, _, name = module.rpartition(".")
    return package.count(".") == 1 and name in dir(importlib.import_module(package))


def _source_of(module: str) -> str:
    """The source path a dotted qkdb module would live at (a file or a package folder)."""
    parts = module.split(".")
    folder = {"ingest": "ingest", "warehouse": "warehouse", "charts": "charts"}[parts[1]]
    path = Path(folder, *parts[2:])
    return str(path) if (ROOT / path).is_dir() else str(path.with_suffix(".py"))


def test_only_the_cli_imports_typer_and_rich():
    users = sorted(mod for mod, imports in MODULES.items()
                   if any(_within(i, t) for i in imports for t in ("typer", "rich", "click")))
    assert users and all(_within(m, "qkdb.cli") for m in users), users


def test_only_the_cluster_backend_imports_ray():
    # Ray is an optional extra: one module knows it, and loads it only when a cluster is asked for.
    users = sorted(mod for mod, imports in MODULES.items() if any(_within(i, "ray") for i in imports))
    assert users == ["qkdb.ingest.engine.cluster"], users


@pytest.mark.parametrize("args", [[], ["--help"], ["ingest", "--help"]])
def test_import_qkdb_and_its_help_never_load_ray(args):
    # What the installed ray would cost every command (~1 s, a thousand modules) is paid only by --cluster.
    code = (
        "import sys, qkdb\n"
        "if sys.argv[1:]:\n"
        "    from qkdb.cli.app import app\n"
        "    try:\n"
        "        app(sys.argv[1:], prog_name='qkdb')\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('ray' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr


def test_every_function_is_under_150_lines():
    # issue 47: a function longer than a screenful or three hides its steps (rope_planes was 154).
    long = sorted(
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for folder in FOLDERS for path in (ROOT / folder).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 >= 150
    )
    assert long == []
