"""Every dotted project name a docstring quotes resolves: ``placement_env.sim.simulator``, ``agents.place``,
:func:`~baselines.anneal.anneal_units` name a module, or an attribute of one, that exists (a moved or renamed
module leaves no docstring pointing at nothing)."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from tests.test_layers import PACKAGES, ROOT, module_name, project_files

QUOTED = re.compile(r"``([A-Za-z_][\w.]*)")  # ``name`` and the name before a call: ``agents.place(graph, ...)``
ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc|obj):`~?([\w.]+)`")


def docstrings(path) -> list[tuple[int, str]]:
    """``(line, text)`` of the module's, every class's and every function's docstring in ``path``."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text:
                found.append((getattr(node, "lineno", 1), text))
    return found


def dotted_names(text: str) -> set[str]:
    """The dotted project names ``text`` quotes (``a.b`` whose first part is a project package)."""
    names = {m.rstrip(".") for m in QUOTED.findall(text)} | set(ROLE.findall(text))
    return {n for n in names if "." in n and n.split(".")[0] in PACKAGES}


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or a chain of attributes of the longest module prefix of it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                value = getattr(value, attribute)
        except AttributeError:
            return False
        return True
    return False


def quoted_in_project() -> list[tuple[str, int, str]]:
    return [(str(path.relative_to(ROOT)), line, name) for path in project_files()
            for line, text in docstrings(path) for name in sorted(dotted_names(text))]


@pytest.mark.parametrize("path", project_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_dotted_name_a_docstring_quotes_resolves(path):
    broken = [f"{path.relative_to(ROOT)}:{line}: {name}" for line, text in docstrings(path)
              for name in sorted(dotted_names(text)) if not resolves(name)]
    assert not broken, "\n".join(broken)


def test_the_check_sees_quoted_names_and_catches_stale_ones():
    text = "Uses ``placement_env.sim.simulator`` and :func:`~baselines.anneal.anneal_units`; ``agents.place(g, c)``."
    assert dotted_names(text) == {"placement_env.sim.simulator", "baselines.anneal.anneal_units", "agents.place"}
    assert all(resolves(name) for name in dotted_names(text))
    assert not resolves("placement_env.features")  # a module 0.1.x docstrings named, long gone
    assert not resolves("agents.reinforce.PlacementNetwork")  # moved to agents.policies.network
    assert len(quoted_in_project()) > 100  # the project's docstrings do quote names: the walk finds them
    assert module_name(ROOT / "agents" / "policies" / "network.py") == "agents.policies.network"
