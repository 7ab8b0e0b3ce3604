"""Which parameters each traced op reads, and the ``parameter`` ops of parameters several ops read (what
:func:`~placement_env.importers.pytorch.from_torch` charges as ``param_bytes``)."""

from __future__ import annotations

import torch

from placement_env.graph.model import Node


def canonical_names(gm: torch.nn.Module) -> dict[str, str]:
    """Every name of a parameter -> its first name (tied weights, as GPT-2's embedding and output layer, are one
    parameter under two names; ``named_parameters()`` lists it under the first)."""
    first: dict[int, str] = {}
    names = {}
    for name, p in gm.named_parameters(remove_duplicate=False):
        names[name] = first.setdefault(id(p), name)
    return names


def tie_parameter_reads(gm: torch.fx.GraphModule) -> None:
    """Make every ``get_attr`` of a tied parameter read it under its first name (in place).

    ``torch.export`` reads GPT-2's tied weight as ``transformer.wte.weight`` in the embedding and as
    ``lm_head.weight`` in the output layer; after this both read ``transformer.wte.weight``, so that whatever runs
    the program per op (the measured step's workers, the placed module) sees one tensor with one holder, as the
    graph's ``parameter`` op does, and sums its gradients from every reader.
    """
    canonical = canonical_names(gm)
    changed = False
    for n in gm.graph.nodes:
        if n.op == "get_attr" and canonical.get(str(n.target), str(n.target)) != str(n.target):
            n.target = canonical[str(n.target)]
            changed = True
    if changed:
        gm.recompile()


def owned_parameters(gm: torch.fx.GraphModule, n: torch.fx.Node, canonical: dict[str, str]) -> list[str]:
    """The parameters an fx node reads, by their first names: its module's parameters, or the attributes it
    takes as inputs."""
    owned = []
    if n.op == "call_module":
        owned = [f"{n.target}.{k}" for k, _ in gm.get_submodule(str(n.target)).named_parameters()]
    return [canonical.get(k, k) for k in owned + [str(a.target) for a in n.all_input_nodes if a.op == "get_attr"]]


def parameter_readers(gm: torch.fx.GraphModule, records: dict[str, dict], canonical: dict[str, str]
                       ) -> dict[str, int]:
    """How many recorded ops read each parameter."""
    count: dict[str, int] = {}
    for n in gm.graph.nodes:
        if n.name in records:
            for key in set(owned_parameters(gm, n, canonical)):
                count[key] = count.get(key, 0) + 1
    return count


def parameter_op(key: str, size: int, nodes: list[Node], producers: dict[str, str],
                  out_bytes: dict[str, int], module: str) -> str:
    """The id of the ``parameter`` op of shared parameter ``key`` (owned by ``module``), added before its first
    reader."""
    op_id = f"param:{key}"
    if op_id not in producers:
        nodes.append(Node(op_id, "parameter", 0.0, size, size, flops=0.0, module=module))
        producers[op_id] = op_id
        out_bytes[op_id] = size
    return op_id
