"""A graph cut into chunks of layers, and what each chunk costs: :func:`placement_of_modules`,
:func:`chunk_costs`.

A pipeline runtime runs a model as a list of layers (:func:`~placement_env.plan.module_tree.layer_sequence`),
cut into contiguous *chunks*: a stage's layers, or, with virtual stages, each of a rank's pieces. The step of a
plan (``docs/spec/simulator.md`` section 3b) is simulated on the chunks, not on the ops: each chunk is summed
into its forward and backward seconds, its parameters and its activations (:class:`ChunkCosts`), as the
runtimes run a chunk whole, one micro-batch at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement_env.graph.model import ComputationGraph

WEIGHT_GRADIENT_SHARE = 0.5
"""Of the backward of an op that reads a parameter, the part that computes the weight's gradient (W; the rest, the
input's gradient, is B): the training graphs give such a backward twice its forward's cost, one forward's worth
for each (docs/spec/simulator.md section 5)."""


def placement_of_modules(graph: ComputationGraph, index_of: dict[str, int]) -> np.ndarray:
    """An index per op of ``graph`` (int64): each placement unit gets the index of the module of its first op in
    program order (or of that module's nearest ancestor listed in ``index_of``); a unit under no listed module (an
    input, the model's glue) gets the index of the unit before it, the first of all 0."""
    units = np.zeros(graph.num_units, dtype=np.int64)
    decided = np.zeros(graph.num_units, dtype=bool)
    current = 0
    for i, node in enumerate(graph.nodes):  # program order
        unit = int(graph.unit_of[i])
        if node.module and node.phase != "backward":
            parts = node.module.split(".")
            listed = next((".".join(parts[:k]) for k in range(len(parts), 0, -1)
                           if ".".join(parts[:k]) in index_of), None)
            if listed is not None:
                current = index_of[listed]
            elif "" in index_of:
                current = index_of[""]
        if not decided[unit]:
            units[unit], decided[unit] = current, True
    return graph.expand_unit_placement(units)


def placement_of_layers(graph: ComputationGraph, layers: Sequence[str], parts: Sequence[int]) -> np.ndarray:
    """The chunk of each op when ``layers[parts[c]:parts[c + 1]]`` form chunk ``c`` (:func:`placement_of_modules`)."""
    return placement_of_modules(graph, {layer: c for c in range(len(parts) - 1)
                                        for layer in layers[parts[c]:parts[c + 1]]})


@dataclass(frozen=True)
class ChunkCosts:
    """What each of a graph's chunks costs, for the whole batch on a device of speed 1 (arrays, one entry a chunk).

    Attributes:
        forward, forward_fixed: the forward ops' seconds, and the part of them each micro-batch pays whole
            (``Node.fixed_cost``); a micro-batch of a fraction ``q`` of the batch takes
            ``forward_fixed + q * (forward - forward_fixed)``.
        backward_input, backward_input_fixed: the backward ops' seconds that compute the inputs' gradients (B).
        backward_weight, backward_weight_fixed: those that compute the weights' gradients (W:
            :data:`WEIGHT_GRADIENT_SHARE` of the backward of each op reading a parameter).
        update: the optimizer's update ops' seconds (once per step).
        parameter_bytes: the parameters the chunk's ops read (a parameter read by several chunks in each).
        saved_bytes: the forward outputs a backward op reads (kept from a micro-batch's forward to its backward).
        boundary_bytes: the tensors produced in chunks ``0..c`` and read by the forward of chunks after ``c``
            (what chunk ``c`` sends to chunk ``c + 1``, and the gradient sent back); the last entry is 0.
        input_bytes: what a chunk receives, the boundary before it (the first chunk: the model's inputs): what
            a recomputing chunk keeps of a micro-batch.
        batch: the graph's batch (None when it records none).
    """

    forward: np.ndarray
    forward_fixed: np.ndarray
    backward_input: np.ndarray
    backward_input_fixed: np.ndarray
    backward_weight: np.ndarray
    backward_weight_fixed: np.ndarray
    update: np.ndarray
    parameter_bytes: np.ndarray
    saved_bytes: np.ndarray
    boundary_bytes: np.ndarray
    input_bytes: np.ndarray
    batch: int | None

    @property
    def num_chunks(self) -> int:
        return int(self.forward.shape[0])

    def with_batch(self, batch: int) -> ChunkCosts:
        """These costs for a step of ``batch`` samples instead of the graph's: the parts that grow with the batch
        (compute beyond the fixed parts, activations, messages) scaled by ``batch / self.batch``; parameters,
        updates and fixed parts as they are. ``ValueError`` when the graph records no batch."""
        if self.batch is None:
            raise ValueError("the graph records no batch (import it with from_torch or from_huggingface): its costs "
                             "cannot be scaled to another batch")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
        k = batch / self.batch

        def grown(total: np.ndarray, fixed: np.ndarray) -> np.ndarray:
            return fixed + k * (total - fixed)

        return ChunkCosts(grown(self.forward, self.forward_fixed), self.forward_fixed,
                          grown(self.backward_input, self.backward_input_fixed), self.backward_input_fixed,
                          grown(self.backward_weight, self.backward_weight_fixed), self.backward_weight_fixed,
                          self.update, self.parameter_bytes, k * self.saved_bytes, k * self.boundary_bytes,
                          k * self.input_bytes, batch)


def chunk_costs(graph: ComputationGraph, chunk_of: np.ndarray) -> ChunkCosts:
    """The :class:`ChunkCosts` of ``graph`` with op ``i`` in chunk ``chunk_of[i]`` (0..K-1, chunks in program
    order, each op of a placement unit in one chunk)."""
    chunk_of = np.asarray(chunk_of, dtype=np.int64)
    k = int(chunk_of.max()) + 1 if chunk_of.size else 0
    phase = np.array([node.phase or "forward" for node in graph.nodes])
    fixed = np.array([node.fixed_cost or 0.0 for node in graph.nodes])
    is_parameter = np.array([node.op == "parameter" for node in graph.nodes])
    forward, backward, update = phase == "forward", phase == "backward", phase == "update"
    src, dst = graph.edge_src, graph.edge_dst
    # a forward op reads a parameter when it holds one or a parameter op feeds it; its backward (colocated, the
    # id with "_grad") then computes a weight gradient too
    reads_parameter = (graph.param_bytes > 0) & forward & ~is_parameter
    reads_parameter[dst[is_parameter[src] & forward[dst]]] = True
    index = {node.id: i for i, node in enumerate(graph.nodes)}
    weight_share = np.zeros(graph.num_nodes)
    for i in np.flatnonzero(backward):
        origin = index.get(graph.nodes[i].id.removesuffix("_grad"))
        if origin is not None and reads_parameter[origin]:
            weight_share[i] = WEIGHT_GRADIENT_SHARE

    def by_chunk(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return np.bincount(chunk_of[mask], weights=values[mask], minlength=k)

    cost = graph.cost
    # parameters: each chunk whose forward ops read a parameter op counts it; other ops' own parameters once
    parameter_bytes = by_chunk(graph.param_bytes, forward & ~is_parameter)
    readers = sorted({(int(s), int(chunk_of[d])) for s, d in zip(src.tolist(), dst.tolist())
                      if is_parameter[s] and forward[d]})
    for s, c in readers:
        parameter_bytes[c] += graph.param_bytes[s]
    read = {s for s, _ in readers}
    for unread in np.flatnonzero(is_parameter & (graph.param_bytes > 0)):  # a parameter no forward op reads
        if int(unread) not in read:
            parameter_bytes[chunk_of[unread]] += graph.param_bytes[unread]
    saved = np.zeros(graph.num_nodes, dtype=bool)
    saved[src[forward[src] & backward[dst] & ~is_parameter[src]]] = True
    # activations crossing chunk boundaries: a tensor of chunk a read by the forward of chunk b > a crosses the
    # boundaries a .. b-1, once whatever its readers
    last_reader = np.full(graph.num_nodes, -1, dtype=np.int64)
    crossing = forward[src] & forward[dst] & ~is_parameter[src]
    np.maximum.at(last_reader, src[crossing], chunk_of[dst[crossing]])
    boundary_delta = np.zeros(k + 1)
    for u in np.flatnonzero(last_reader > chunk_of):
        a, b = int(chunk_of[u]), int(last_reader[u])
        boundary_delta[a] += graph.output_bytes[u]
        boundary_delta[b] -= graph.output_bytes[u]
    boundary = np.cumsum(boundary_delta)[:k]
    inputs = np.array([node.op == "input" for node in graph.nodes])
    input_bytes = np.concatenate([[graph.output_bytes[inputs & (chunk_of == 0)].sum()], boundary[:-1]])[:k]
    return ChunkCosts(
        forward=by_chunk(cost, forward), forward_fixed=by_chunk(fixed, forward),
        backward_input=by_chunk(cost * (1 - weight_share), backward),
        backward_input_fixed=by_chunk(fixed * (1 - weight_share), backward),
        backward_weight=by_chunk(cost * weight_share, backward),
        backward_weight_fixed=by_chunk(fixed * weight_share, backward),
        update=by_chunk(cost, update), parameter_bytes=parameter_bytes,
        saved_bytes=by_chunk(graph.output_bytes, saved), boundary_bytes=boundary, input_bytes=input_bytes,
        batch=graph.batch)


class LayerTable:
    """A graph's layers and what any run of them costs: :meth:`chunks` gives the :class:`ChunkCosts` of any cut
    into chunks from per-layer sums (a parameter read by several layers of a chunk counted once), equal to
    :func:`chunk_costs` of that cut (``tests/test_plan_step.py``), in microseconds rather than a pass over the
    graph's ops. Built by :func:`layer_table`, kept with the graph."""

    def __init__(self, graph: ComputationGraph, layers: Sequence[str], batch: int | None = None,
                 blocks: Sequence[str] = ()) -> None:
        self.graph, self.layers, self.batch = graph, list(layers), batch
        # where a chunk may end: before the first block, between blocks, after the last block (the layers before
        # and after the blocks stay together, as Megatron-LM keeps its embedding and its loss); anywhere without
        # blocks
        at = [i for i, layer in enumerate(self.layers) if layer in set(blocks)]
        self.allowed = np.ones(len(self.layers) + 1, dtype=bool)
        self.first_block, self.blocks = (at[0], len(at)) if at else (0, len(self.layers))
        if at:
            self.allowed[:] = False
            self.allowed[[*at, at[-1] + 1, len(self.layers)]] = True
        self.allowed[0] = False
        self.max_chunks = int(self.allowed.sum())
        self.layer_of = placement_of_layers(graph, self.layers, list(range(len(self.layers) + 1)))
        self.costs = self.exact(self.layer_of)
        c = self.costs
        self.prefix = {name: np.concatenate([[0.0], np.cumsum(getattr(c, name))]) for name in
                       ("forward", "forward_fixed", "backward_input", "backward_input_fixed", "backward_weight",
                        "backward_weight_fixed", "update", "parameter_bytes", "saved_bytes")}
        # parameters read by several layers: counted once in a run holding several of their readers
        self.cuts: dict[tuple, tuple[int, ...] | None] = {}  # the cuts found, by what they depend on
        self.shared: list[tuple[float, np.ndarray]] = []
        readers: dict[int, set[int]] = {}
        forward = np.array([node.phase in (None, "forward") for node in graph.nodes])
        for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist()):
            if graph.nodes[s].op == "parameter" and forward[d]:
                readers.setdefault(s, set()).add(int(self.layer_of[d]))
        for s, chunks in readers.items():
            if len(chunks) > 1:
                self.shared.append((float(graph.param_bytes[s]), np.array(sorted(chunks))))

    def __len__(self) -> int:
        return len(self.layers)

    def uniform_cut(self, k: int) -> tuple[int, ...] | None:
        """Megatron-LM's default split: the blocks as evenly as can be (the first ``blocks % k`` chunks one more),
        the layers before them in the first chunk and those after in the last (without blocks: all layers so);
        None for more chunks than blocks."""
        if k > self.blocks:
            return None
        size, extra = divmod(self.blocks, k)
        cuts = [self.first_block + c * size + min(c, extra) for c in range(1, k)]
        return (0, *cuts, len(self.layers))

    def exact(self, chunk_of: np.ndarray) -> ChunkCosts:
        """:func:`chunk_costs` of the graph cut so, for the table's batch."""
        costs = chunk_costs(self.graph, chunk_of)
        return costs if self.batch is None or self.batch == costs.batch else costs.with_batch(self.batch)

    def run(self, name: str, a: int, b: int) -> float:
        """The sum of ``name`` over layers ``a .. b-1``."""
        return float(self.prefix[name][b] - self.prefix[name][a])

    def parameters(self, a: int, b: int) -> float:
        total = self.run("parameter_bytes", a, b)
        for nbytes, chunks in self.shared:
            inside = int(((chunks >= a) & (chunks < b)).sum())
            if inside > 1:
                total -= nbytes * (inside - 1)
        return total

    def chunks(self, parts: Sequence[int]) -> ChunkCosts:
        """The :class:`ChunkCosts` of the chunks ``layers[parts[c]:parts[c + 1]]``."""
        at = np.asarray(parts, dtype=np.int64)
        starts, ends = at[:-1], at[1:]
        column = {name: prefix[ends] - prefix[starts] for name, prefix in self.prefix.items()}
        for nbytes, chunks in self.shared:  # a parameter read by several layers of one chunk counts once there
            inside = ((chunks[None, :] >= starts[:, None]) & (chunks[None, :] < ends[:, None])).sum(axis=1)
            column["parameter_bytes"] = column["parameter_bytes"] - nbytes * np.maximum(inside - 1, 0)
        boundary = self.costs.boundary_bytes
        crossing = np.where(ends < len(self), boundary[np.minimum(ends, len(self)) - 1], 0.0)
        inputs = np.where(starts == 0, self.costs.input_bytes[0], boundary[np.maximum(starts, 1) - 1])
        return ChunkCosts(column["forward"], column["forward_fixed"], column["backward_input"],
                          column["backward_input_fixed"], column["backward_weight"], column["backward_weight_fixed"],
                          column["update"], column["parameter_bytes"], column["saved_bytes"], crossing, inputs,
                          self.costs.batch)


def layer_table(graph: ComputationGraph, layers: Sequence[str], batch: int | None = None,
                blocks: Sequence[str] = ()) -> LayerTable:
    """The :class:`LayerTable` of ``graph`` cut into ``layers`` for ``batch``, kept with the graph (the plans of
    one graph share it)."""
    key = f"layer_table:{batch}:{hash((tuple(layers), tuple(blocks)))}"
    if key not in graph.derived:
        graph.derived[key] = LayerTable(graph, layers, batch, blocks)
    table: LayerTable = graph.derived[key]
    return table


__all__ = ["WEIGHT_GRADIENT_SHARE", "ChunkCosts", "LayerTable", "chunk_costs", "layer_table", "placement_of_layers",
           "placement_of_modules"]
