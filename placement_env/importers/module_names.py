"""The module each traced op came from, and placement units of whole modules (for
:func:`~placement_env.importers.pytorch.from_torch`; the names are what :mod:`placement_env.runtime` exports)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from placement_env.graph.model import Node

from .recurrent import LayerwiseRNN


@dataclass(frozen=True)
class ModuleNames:
    """What names an op's module: the modules owning parameters themselves, and the :class:`LayerwiseRNN` paths
    (an op inside one is named after it, the recurrent module of the user's model)."""

    owners: frozenset[str]
    collapsed: tuple[str, ...]

    @classmethod
    def of(cls, module: nn.Module) -> ModuleNames:
        owners = frozenset(name for name, m in module.named_modules()
                           if next(m.parameters(recurse=False), None) is not None)
        return cls(owners, tuple(name for name, m in module.named_modules() if isinstance(m, LayerwiseRNN)))

    def collapse(self, name: str) -> str:
        for path in self.collapsed:
            if name == path or name.startswith(f"{path}.") or path == "":
                return path
        return name

    def of_node(self, n: torch.fx.Node) -> str:
        """The innermost module of ``n``'s module stack that owns parameters itself, else the innermost module
        (``""``, the model itself, for an op outside every submodule)."""
        names = [str(value[0]) for value in (n.meta.get("nn_module_stack") or {}).values()]
        if n.op == "call_module" and (not names or names[-1] != str(n.target)):
            names.append(str(n.target))
        names = [self.collapse(name) for name in names if name != ""]
        owning = [name for name in names if name in self.owners]
        return owning[-1] if owning else names[-1] if names else ""

    def of_parameter(self, key: str) -> str:
        """The module owning parameter ``key`` (``layers.0.weight`` -> ``layers.0``)."""
        return self.collapse(key.rpartition(".")[0])


def colocate_by_module(nodes: list[Node], depth: int | None) -> list[Node]:
    """``nodes`` with every op of one submodule (its name cut to ``depth`` parts; None: whole) in one colocation
    group, ``module:<name>``. A module whose own ops come after one of its grouped submodules (GPT-2's
    ``transformer``: the sum of the two embeddings after ``wpe``, a view after ``ln_f``) keeps only the own ops
    before its first submodule in its group; each later one joins the group of the submodule op just before it,
    so that a pipeline stage may begin at any of its submodules and at nothing else, as
    ``torch.distributed.pipelining`` splits it (``SplitPoint.BEGINNING`` of a module). A view's group (views are
    colocated with the op whose output they alias) holds only within its module: a view in another module than
    the tensor it aliases goes with its own module, as a runtime moves the tensor at the module's entry and views
    the copy. The model's own glue ops (module ``""``) and inputs stay units of their own, or with the view group
    of a glue op or input they alias."""

    def key(module: str | None) -> str | None:
        if not module:
            return None
        return module if depth is None else ".".join(module.split(".")[:depth])

    producer_key: dict[str, str | None] = {}  # view group -> the module key of its first op, the producer
    for node in nodes:
        if node.colocation is not None:
            producer_key.setdefault(node.colocation, key(node.module))
    last_below: dict[str, str] = {}  # module key -> the group of the last op seen of a module below it
    out = []
    for node in nodes:
        mine = key(node.module)
        if mine is not None:
            own = last_below.get(mine, f"module:{mine}")
            parts = mine.split(".")
            for k in range(1, len(parts)):  # this op is below each of its proper ancestors
                last_below[".".join(parts[:k])] = own
            group: str | None = own
        elif node.colocation is not None and producer_key[node.colocation] is None:
            group = node.colocation  # a view among glue ops or inputs
        else:
            group = None
        out.append(Node(node.id, node.op, node.cost, node.output_bytes, node.param_bytes, group, node.flops,
                        node.phase, node.module, node.fixed_cost))
    return out
