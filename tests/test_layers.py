"""Imports go one way: every project module imports only modules of its own layer or the layers below it.

The layers, bottom to top (the data path: graph -> simulator -> placers -> environments -> encoders ->
policies -> training -> the command line):

0. ``placement_env.checks``, ``placement_env.json_files``: validators and files;
1. ``placement_env.cluster``;
2. ``placement_env.graph``;
3. ``placement_env.sim``;
4. ``placement_env.importers``;
5. ``placement_env.zoo``;
6. ``placement_env.cli``;
7. ``baselines``;
8. ``placement_env.envs`` and the package ``placement_env`` itself (its facade re-exports every layer);
9. ``placement_env.__main__``;
10. ``graph_encoders``;
11. ``agents`` (policies and algorithms);
12. ``agents.training``;
13. ``agents.experiments``;
14. ``train`` (train.py).

Every import statement counts, at module level or inside a function: an import inside a function is
no way around a layer. This is an AST walk, so the test itself imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("placement_env", "baselines", "graph_encoders", "agents")
LAYERS: tuple[tuple[str, ...], ...] = (
    ("placement_env.checks", "placement_env.json_files"),
    ("placement_env.cluster",),
    ("placement_env.graph",),
    ("placement_env.sim",),
    ("placement_env.importers",),
    ("placement_env.zoo",),
    ("placement_env.cli",),
    ("baselines",),
    ("placement_env.envs", "placement_env"),
    ("placement_env.__main__",),
    ("graph_encoders",),
    ("agents",),
    ("agents.training",),
    ("agents.experiments",),
    ("train",),
)


def layer_of(module: str) -> int:
    """The layer of a module: that of the longest prefix listed in :data:`LAYERS`."""
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    if rank < 0:
        raise AssertionError(f"module {module!r} is in no layer: add it to LAYERS")
    return rank


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of a project module in ``path`` (relative imports resolved)."""
    return imports_in(path.read_text(), module_name(path), path.name == "__init__.py")


def imports_in(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of a project module in ``source``, the text of ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # "from package import submodule" imports the submodule
            names = [f"{target}.{a.name}" if is_module(f"{target}.{a.name}") else target for a in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in PACKAGES + ("train",)]
    return found


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def project_files() -> list[Path]:
    files = [ROOT / "train.py"]
    for package in PACKAGES:
        files += sorted((ROOT / package).rglob("*.py"))
    return files


@pytest.mark.parametrize("path", project_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_one_way(path):
    importer = module_name(path)
    rank = layer_of(importer)
    upward = [f"line {line}: {importer} (layer {rank}) imports {target} (layer {layer_of(target)})"
              for line, target in project_imports(path) if layer_of(target) > rank]
    assert not upward, "\n".join(upward)


def test_lower_layers_do_not_import_the_facade():
    """Below the environments, modules import the subpackage that defines a name, never ``placement_env``
    itself (whose facade re-exports every layer)."""
    facade = layer_of("placement_env")
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in project_files()
                 if layer_of(module_name(path)) < facade
                 for line, target in project_imports(path) if target == "placement_env"]
    assert not offenders


def upward_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    return [target for _, target in imports_in(source, module, is_package) if layer_of(target) > layer_of(module)]


def test_the_walk_catches_upward_imports_however_written():
    inside_a_function = "def f():\n    from baselines import PLACERS\n    return PLACERS\n"
    assert upward_imports(inside_a_function, "placement_env.graph.model") == ["baselines"]
    relative = "from ..envs.task import PlacementTask\n"
    assert upward_imports(relative, "placement_env.sim.simulator") == ["placement_env.envs.task"]
    submodule = "from placement_env import envs\n"
    assert upward_imports(submodule, "placement_env.zoo.registry") == ["placement_env.envs"]
    assert upward_imports("import train\n", "agents.experiments") == ["train"]
    downward = "from placement_env.graph.model import ComputationGraph\nimport numpy\n"
    assert upward_imports(downward, "baselines.heft") == []


def test_the_layer_table_knows_every_module():
    for path in project_files():
        layer_of(module_name(path))  # raises for a module in no layer
    assert layer_of("placement_env.sim.kernel") < layer_of("baselines.heft") < layer_of("placement_env.envs.task")
    assert layer_of("agents.training.run") > layer_of("agents.reinforce")
    assert layer_of("placement_env.sim") < layer_of("placement_env.zoo.suites.build")
