"""The benchmark scripts import only names their sibling scripts define (an AST walk: nothing is imported).

A benchmark runs for minutes to hours and is run by hand, so a name moved out of a sibling script (as
``pipeline_fidelity.models`` was, into ``fidelity_common``) would otherwise break it unseen until someone runs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))


def top_level_names(tree: ast.Module) -> set[str]:
    """The names a module defines at its top level: functions, classes, assignments and imports."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def sibling_imports(tree: ast.Module) -> list[tuple[int, str, str]]:
    """``(line, sibling script, name)`` of every ``from sibling import name`` in ``tree``."""
    return [(node.lineno, node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and not node.level
            and (BENCHMARKS / f"{node.module}.py").exists() for alias in node.names]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_name_a_benchmark_imports_from_a_sibling_is_defined_there(script):
    missing = [f"{script.name}:{line}: {sibling}.{name}"
               for line, sibling, name in sibling_imports(ast.parse(script.read_text()))
               if name not in top_level_names(ast.parse((BENCHMARKS / f"{sibling}.py").read_text()))]
    assert not missing, f"names no sibling script defines: {missing}"


def test_the_check_finds_a_name_that_moved_away():
    tree = ast.parse("from pipeline_fidelity import models\nfrom fidelity_common import outside_models\n")
    found = sibling_imports(tree)
    assert found == [(1, "pipeline_fidelity", "models"), (2, "fidelity_common", "outside_models")]
    assert "models" not in top_level_names(ast.parse((BENCHMARKS / "pipeline_fidelity.py").read_text()))
