"""Imports go one way: every project module imports only modules of its own layer or the layers below it.

The layers, bottom to top (the data path: graph -> simulator -> environments -> placers -> encoders ->
policies -> training -> the command line):

0. ``placement_env.checks``, ``placement_env.json_files``, ``placement_env.lazy_names``,
   ``placement_env.child_processes``, ``placement_env.parallelism``, ``placement_env.deprecation``: validators,
   files, names imported on first use, processes that end with their driver, the description of a parallel step
   and the schedules' table, old names kept for a release;
1. ``placement_env.cluster``;
2. ``placement_env.graph``;
3. ``placement_env.sim``;
4. ``placement_env.plan`` (a placement as the plan a runtime runs: stages, micro-batches, schedule, tied groups);
5. ``placement_env.importers`` and ``placement_env.runtime`` (a model in, placements out, plans run);
6. ``placement_env.zoo``;
7. ``placement_env.cli``;
8. ``placement_env.envs`` and the package ``placement_env`` itself (its facade re-exports every layer);
9. ``placement_env.__main__`` and ``placement_env.scale_cli``;
10. ``baselines`` (the environments below it find its placers through an entry point, never an import:
    ``placement_env/envs/starts.py``);
11. ``agents.names`` (names the command lines check early) and ``agents.jobs`` (the fan-out, which knows
    nothing of placement);
12. ``graph_encoders``;
13. ``agents.policies``;
14. ``agents.algorithms``;
15. ``agents.training``;
16. ``agents.learned``;
17. ``agents.steering`` (the steered annealing: its policy reports as the learned placer does);
18. ``agents.paper``;
19. ``agents`` itself and its commands (``agents.place``, ``agents.pretrain``, ``agents.benchmark``,
    ``agents.experiments``);
20. ``train`` (train.py).

Every import statement counts, at module level or inside a function: an import inside a function is
no way around a layer. Within a layer, no module may import itself back through others (no circles), and
imports inside functions are few, each saying why it is there. This is an AST walk, so the test itself
imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("placement_env", "baselines", "graph_encoders", "agents")
LAYERS: tuple[tuple[str, ...], ...] = (
    ("placement_env.checks", "placement_env.json_files", "placement_env.lazy_names", "placement_env.child_processes",
     "placement_env.stops", "placement_env.parallelism", "placement_env.deprecation", "placement_env.numba_cache"),
    ("placement_env.cluster",),
    ("placement_env.graph",),
    ("placement_env.sim",),
    ("placement_env.plan",),
    ("placement_env.importers", "placement_env.runtime"),
    ("placement_env.zoo",),
    ("placement_env.cli",),
    ("placement_env.envs", "placement_env"),
    ("placement_env.__main__", "placement_env.scale_cli"),
    ("baselines",),  # the environments find its placers through an entry point (placement_env/envs/starts.py)
    ("agents.names", "agents.jobs"),
    ("graph_encoders",),
    ("agents.policies",),
    ("agents.algorithms",),
    ("agents.training",),
    ("agents.learned",),
    ("agents.steering",),
    ("agents.paper",),
    ("agents",),
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
    assert upward_imports("from agents.training.run import train\n", "agents.algorithms.base") == [
        "agents.training.run"]
    downward = "from placement_env.graph.model import ComputationGraph\nimport numpy\n"
    assert upward_imports(downward, "baselines.heft") == []


def test_the_layer_table_knows_every_module():
    for path in project_files():
        layer_of(module_name(path))  # raises for a module in no layer
    assert layer_of("placement_env.sim.kernel") < layer_of("placement_env.envs.task") < layer_of("baselines.heft")
    # the whole house of placement_env sits below the placers: no arrow back up from it to baselines
    assert max(layer_of(module_name(path)) for path in project_files()
               if module_name(path).split(".")[0] == "placement_env") < layer_of("baselines")
    assert layer_of("agents.training.run") > layer_of("agents.algorithms.reinforce")
    assert layer_of("placement_env.sim") < layer_of("placement_env.zoo.suites.build")


# ------------------------------------------------------------------------------------------------ circles

def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """``{module: the project modules it imports}`` for ``sources`` (``{module: (text, is_package)}``), every
    import statement counted (inside functions too), only edges between the modules given."""
    graph: dict[str, set[str]] = {module: set() for module in sources}
    for module, (text, is_package) in sources.items():
        for _, target in imports_in(text, module, is_package):
            while target and target not in sources:  # "from a.b import name" imports a.b; a.b.c.name -> a.b.c
                target = target.rpartition(".")[0]
            if target and target != module:
                graph[module].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: each strongly connected group of more than one module, sorted."""
    import networkx as nx

    found = nx.strongly_connected_components(nx.DiGraph([(a, b) for a, targets in graph.items() for b in targets]))
    return sorted(sorted(group) for group in found if len(group) > 1)


def project_sources() -> dict[str, tuple[str, bool]]:
    return {module_name(path): (path.read_text(), path.name == "__init__.py") for path in project_files()}


def test_no_import_circles_anywhere():
    assert circles(import_graph(project_sources())) == []


def test_the_circle_check_finds_the_circle_the_agents_package_had():
    """At 1307899 five modules of ``agents`` imported each other in a circle through imports inside functions
    (algorithms -> guided -> checkpoints -> algorithms, reinforce <-> checkpoints, guided_search -> reinforce)."""
    before = {
        "agents.algorithms": ("from .reinforce import Reinforce\n"
                              "def make_model():\n    from .guided import GuidedSearch\n", False),
        "agents.guided": ("from .guided_search import guided_search\nfrom .reinforce import PlacementNetwork\n"
                          "def save():\n    from .checkpoints import save_checkpoint\n", False),
        "agents.guided_search": ("from .reinforce import PlacementNetwork\n", False),
        "agents.checkpoints": ("from .reinforce import PlacementNetwork\n"
                               "def load_model():\n    from .algorithms import make_model\n", False),
        "agents.reinforce": ("def save():\n    from .checkpoints import save_checkpoint\n", False),
    }
    found = circles(import_graph(before))
    assert len(found) == 1 and {"agents.algorithms", "agents.checkpoints", "agents.guided",
                                "agents.reinforce"} <= set(found[0])


def test_the_circle_check_finds_the_circle_in_the_tree_of_1307899():
    """The same on the real files of that commit, read from git (skipped where the history is not there)."""
    import subprocess

    commit = "1307899"
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", commit, "agents"],
                            capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip(f"commit {commit} is not in this clone's history")
    sources = {}
    for name in listed.stdout.split():
        if name.endswith(".py"):
            text = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{name}"], capture_output=True,
                                  text=True, check=True).stdout
            sources[module_name(ROOT / name)] = (text, name.endswith("__init__.py"))
    found = circles(import_graph(sources))
    assert any({"agents.algorithms", "agents.checkpoints", "agents.guided", "agents.reinforce"} <= set(group)
               for group in found), found


# ------------------------------------------------------------------------------------ imports in functions

MAX_IMPORTS_IN_FUNCTIONS = 40


def imports_in_functions(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """``(line, module)`` of each import statement of a project module inside a function of ``source``."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    lines.add(inner.lineno)
    found: dict[int, str] = {}
    for line, target in imports_in(source, module, is_package):
        if line in lines:
            found.setdefault(line, target)
    return sorted(found.items())


def test_imports_inside_functions_are_few_and_say_why():
    """At most :data:`MAX_IMPORTS_IN_FUNCTIONS` project imports inside functions, each with a reason: a comment on
    its line or on the line above (they keep torch, Ray or matplotlib off a path that must stay fast)."""
    found, silent = 0, []
    for path in project_files():
        text = path.read_text()
        lines = text.splitlines()
        for line, target in imports_in_functions(text, module_name(path), path.name == "__init__.py"):
            found += 1
            here, above = lines[line - 1], lines[line - 2].strip() if line > 1 else ""
            if "#" not in here and not above.startswith("#"):
                silent.append(f"{path.relative_to(ROOT)}:{line} imports {target} without a reason")
    assert found <= MAX_IMPORTS_IN_FUNCTIONS, f"{found} imports of project modules inside functions"
    assert not silent, "\n".join(silent)


MAX_MODULE_LINES = 450
LONG_BY_DESIGN = {"placement_env.sim.kernel"}  # the numba event loop, one compiled function and its helpers


def test_no_module_is_over_450_lines_but_the_kernel():
    files = project_files() + sorted(ROOT.glob("tests/*.py")) + sorted(ROOT.glob("benchmarks/*.py")) \
        + sorted(ROOT.glob("scripts/*.py")) + sorted(ROOT.glob("examples/*.py"))
    long = [f"{path.relative_to(ROOT)}: {n} lines" for path in files
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
            and ".".join(path.relative_to(ROOT).with_suffix("").parts) not in LONG_BY_DESIGN]
    assert not long, "\n".join(long)


def test_agents_is_a_house_of_jobs():
    """``agents/`` holds its jobs as subpackages (at least three) and few flat modules beside them (at most six:
    the facade, the early-checked names and the four commands)."""
    packages = [p.name for p in (ROOT / "agents").iterdir() if (p / "__init__.py").exists()]
    flat = [p.name for p in (ROOT / "agents").glob("*.py")]
    assert len(packages) >= 3 and len(flat) <= 6, (packages, flat)


def test_the_training_command_stays_thin():
    """train.py is a thin command line over agents.training: the house's bound is 150 lines."""
    assert len((ROOT / "train.py").read_text().splitlines()) <= 150
