"""Forward graph -> training graph (``docs/spec/simulator.md`` section 5).

For every forward op ``v`` a backward op ``v'`` (id ``<v>_grad``) is added in
the same colocation group as ``v``:

* cost: ``BACKWARD_COST_WITH_PARAMS`` (2.0) x the forward cost for an op with
  parameters (gradient w.r.t. the inputs and w.r.t. the weights, each about one
  forward pass), ``BACKWARD_COST_NO_PARAMS`` (1.0) x otherwise (gradient
  w.r.t. the inputs only), unless ``backward_costs`` gives the op's measured
  backward time (``from_torch(..., profile=True)`` times each op's backward);
* output bytes: the gradients of ``v``'s inputs, i.e. the sum of its
  predecessors' output bytes (weight gradients are in the static memory that
  ``param_factor`` accounts for, so ``v'`` owns no parameters);
* edges: for every forward edge ``u -> v`` a backward edge ``v' -> u'``
  carrying ``output_bytes[u]``, and a saved-activation edge ``u -> v'`` for
  each op ``u`` whose output ``v``'s backward keeps: by default every input
  of ``v``; with ``saved`` (what autograd keeps, as
  ``from_torch`` records it), the ops it names for ``v``, which may include
  ``v`` itself (an op that keeps its own output, as softmax does) and ops that
  are not its inputs (the base of a view it keeps); every forward sink ``s``
  feeds ``s'`` (the loss gradient enters there). The simulator keeps an output
  until its last reader ends, so these edges are what holds activations for
  the backward pass.

A forward op without a colocation group gets one named after it, so the unit
the agent places is "an op and its gradient".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from placement_env.checks import checked_instance
from placement_env.graph.model import ComputationGraph, Edge, Node

BACKWARD_COST_WITH_PARAMS = 2.0
BACKWARD_COST_NO_PARAMS = 1.0
GRAD_SUFFIX = "_grad"


def to_training_graph(forward: ComputationGraph, name: str | None = None,
                      backward_costs: Mapping[str, float] | None = None,
                      saved: Mapping[str, Sequence[str]] | None = None) -> ComputationGraph:
    """The training graph of a forward graph (forward ops first, then backward ops in reverse order).

    ``backward_costs``: forward op id -> the seconds of its backward on the reference device, replacing the
    factor rule for those ops (their FLOPs keep the rule's estimate). ``saved``: forward op id -> the ids of the
    forward ops whose outputs its backward keeps (module docstring); an op it does not name keeps every input.

    Raises:
        ValueError: ``saved`` names an op the graph lacks."""
    backward_costs = dict(backward_costs or {})
    checked_instance("forward", forward, ComputationGraph)
    if any(n.phase in ("backward", "update") for n in forward.nodes):
        bad = next(n for n in forward.nodes if n.phase in ("backward", "update"))
        raise ValueError(f"graph {forward.name!r} is already a training graph "
                         f"(node {bad.id!r} has phase {bad.phase!r})")
    ids = set(forward.ids)
    groups = {n.colocation for n in forward.nodes if n.colocation is not None}

    def fresh(base: str, taken: set[str]) -> str:
        name, k = base, 1
        while name in taken:
            name, k = f"{base}#{k}", k + 1
        taken.add(name)
        return name

    group_of, grad_id = [], []
    for node in forward.nodes:
        group_of.append(node.colocation if node.colocation is not None else fresh(node.id, groups))
        grad_id.append(fresh(node.id + GRAD_SUFFIX, ids))

    ptr, preds, _ = forward.predecessors
    nodes = [Node(n.id, n.op, n.cost, n.output_bytes, n.param_bytes, group_of[i], n.flops, "forward", n.module,
                  n.fixed_cost) for i, n in enumerate(forward.nodes)]
    backward = []
    for i in reversed(range(forward.num_nodes)):
        n = forward.nodes[i]
        factor = BACKWARD_COST_WITH_PARAMS if n.param_bytes > 0 else BACKWARD_COST_NO_PARAMS
        in_grad_bytes = sum(forward.nodes[int(u)].output_bytes for u in preds[ptr[i]:ptr[i + 1]])
        flops = None if n.flops is None else n.flops * factor
        cost = float(backward_costs[n.id]) if n.id in backward_costs else n.cost * factor
        fixed = None if n.fixed_cost is None else min(n.fixed_cost, cost)  # one call's fixed part, as forward
        backward.append(Node(grad_id[i], n.op + GRAD_SUFFIX, cost, in_grad_bytes, 0, group_of[i], flops,
                             "backward", n.module, fixed))
    nodes += backward

    keeps = [set(k) for k in _kept_outputs(forward, saved or {})]
    edges = list(forward.edges())
    for s, d in zip(forward.edge_src.tolist(), forward.edge_dst.tolist()):
        edges.append(Edge(grad_id[d], grad_id[s], forward.nodes[s].output_bytes))
        if s in keeps[d]:
            edges.append(Edge(forward.nodes[s].id, grad_id[d], forward.nodes[s].output_bytes))
            keeps[d].discard(s)
    for d, rest in enumerate(keeps):  # kept outputs that are no input: a sink's own, a view's base
        for s in sorted(rest):
            edges.append(Edge(forward.nodes[s].id, grad_id[d], forward.nodes[s].output_bytes))
    return ComputationGraph(nodes, edges, name=name or f"{forward.name}-train", batch=forward.batch)


def _kept_outputs(forward: ComputationGraph, saved: Mapping[str, Sequence[str]]) -> list[list[int]]:
    """For each forward op, the indices of the ops whose outputs its backward reads (distinct, in order): those
    ``saved`` names for it, else its inputs; a sink also its own output."""
    index = {node_id: i for i, node_id in enumerate(forward.ids)}
    unknown = [x for key, sources in saved.items() for x in [key, *sources] if x not in index]
    if unknown:
        raise ValueError(f"saved names op {unknown[0]!r}, which graph {forward.name!r} does not have")
    ptr, preds, _ = forward.predecessors
    keeps = []
    for d, node_id in enumerate(forward.ids):
        sources = [index[x] for x in saved[node_id]] if node_id in saved else preds[ptr[d]:ptr[d + 1]].tolist()
        if forward.out_degree[d] == 0:
            sources.append(d)
        keeps.append(list(dict.fromkeys(sources)))
    return keeps
