"""The step of a tensor x pipeline x data plan of a transformer, from its shape: :func:`simulate_scale`
(``docs/spec/simulator.md`` section 3c).

Ranks form a ``data x pipeline x tensor`` grid as Megatron-LM builds it (``order="tp-dp-pp"``: a tensor group's
ranks are neighbours, then a data group's, then a pipeline's; ``"tp-pp-dp"`` swaps the last two). Per
micro-batch of ``b`` sequences, each transformer layer's pass costs (section 3c):

* its matrix products at the GPU's efficiency for their split shapes (attention heads and the FFN's columns split
  ``t`` ways), its attention core (``b a / t`` products of ``s x s``), and its element-wise kernels by the
  memory's bandwidth (norms and residual dropouts repeated on each tensor rank unless sequence parallelism splits
  them too; the softmax over ``b a s^2 / t`` scores unless flash attention fuses it away);
* two all-reduces of the layer's activations forward and two backward within the tensor group (with sequence
  parallelism, a reduce-scatter and an all-gather for each: the same bytes), run between the kernels as
  Megatron-LM runs them;
* the backward twice the forward's products and element-wise bytes; full recomputation a forward more before
  each backward, selective recomputation the attention core and its softmax more;
* each tensor-parallel collective a fixed ``collective_overhead`` besides
  (:class:`~placement_env.plan.scale.gpu_model.Efficiencies`).

The first rank also runs the embedding (a vocabulary-parallel lookup and its all-reduce), the last the output
layer and the loss (``b s V / t`` logits in fp32). Ranks run their layers (evenly split, the first ranks taking
one more where ``L`` does not divide) as the schedule orders them: with ``T_r`` a rank's forward and backward per
micro-batch and ``c`` a send between ranks, 1F1B and GPipe end at ``(m - 1)(max T_r + 2c) + sum T_r + 2 (S - 1)
c``, interleaved 1F1B at ``(m - 1)(max T_r + 2c) + max T_r + (sum T_r - max T_r + 2 (S v - 1) c) / v``, ZB-H1 with
each rank's weight gradients W filling the bubble, ``(m - 1)(max T_r + 2c) + sum T_r - 2 W (S - 1) + 2 (S - 1) c``
(section 3b's closed forms on a uniform chain). Then the data-parallel reduction of each rank's gradients (ZeRO 1: a
reduce-scatter and an all-gather, the same bytes; ZeRO 2 scatters each micro-batch's gradients, ZeRO 3 also
gathers the parameters for each micro-batch's forward and backward), of which
the part ``overlap`` does not hide behind the last micro-batch's backward (the gradients) or the first one's forward
(the parameters' gather), and the optimizer's update over the rank's (sharded) states.

Memory per rank: the model states (bf16 weights and gradients, fp32 master weights and two Adam moments: 16 bytes
a parameter, ZeRO sharding them stage by stage over the ``d`` replicas), the activations of the micro-batches in
flight (Korthikanti et al. 2022: ``s b h (10 + 24 / t) + 5 a s^2 b / t`` a layer without sequence parallelism,
``(34 s b h + 5 a s^2 b) / t`` with it, for GPT's shape; the shape's own widths otherwise), the logits on the
last rank, and the GPU's reserve.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement_env.parallelism import Parallelism

from .collectives import collective_seconds
from .gpu_model import GpuCluster, GpuModel
from .model_shape import TransformerShape

ORDERS = ("tp-dp-pp", "tp-pp-dp")
"""How ranks are numbered onto GPUs (fastest-varying first), as Megatron-core's ``initialize_model_parallel(order=)``
names them (``tp-cp-ep-dp-pp`` its default, without context and expert parallelism)."""
WEIGHT_BYTES = 2  # bf16 weights
GRADIENT_BYTES = 2  # bf16 gradients, as reduced
OPTIMIZER_BYTES = 12  # fp32 master weights and two fp32 Adam moments
UPDATE_BYTES = 28  # what Adam's update reads and writes per parameter: master, moments (each read and written),
#                    the gradient read, the bf16 weight written


@dataclass(frozen=True)
class ScaleStep:
    """A plan's simulated step at scale.

    Attributes:
        seconds: the step.
        compute: the pipeline's end (its bubble included), before the data-parallel reduction and the update.
        bubble: of ``compute``, the time the busiest rank waits.
        tensor_parallel: seconds of tensor-parallel collectives on the busiest rank (inside ``compute``).
        pipeline_sends: seconds of sends between ranks on the critical path (inside ``compute``).
        data_parallel: the exposed data-parallel reduction (and ZeRO-3's gathers).
        optimizer: the update.
        rank_seconds: per pipeline rank, its forward and backward of one micro-batch (seconds).
        peak_memory: per pipeline rank, bytes at its peak. ``memory``: a GPU's bytes.
        model_flops: the step's model FLOPs (``6 N`` a token plus attention; no recomputation), for MFU.
    """

    seconds: float
    compute: float
    bubble: float
    tensor_parallel: float
    pipeline_sends: float
    data_parallel: float
    optimizer: float
    rank_seconds: np.ndarray
    peak_memory: np.ndarray
    memory: float
    model_flops: float

    @property
    def fits(self) -> bool:
        return bool(np.all(self.peak_memory <= self.memory))

    def mfu(self, cluster: GpuCluster, gpus: int) -> float:
        """Model FLOPs utilisation over ``gpus`` GPUs of ``cluster``."""
        return self.model_flops / (self.seconds * gpus * cluster.gpu.peak_flops)


def group_per_node(size: int, stride: int, per_node: int) -> int:
    """Members of a group of ``size`` ranks ``stride`` apart that share a node of ``per_node`` GPUs;
    ``ValueError`` when the group would straddle nodes unevenly."""
    if stride >= per_node:
        if stride % per_node:
            raise ValueError(f"groups of ranks {stride} apart straddle nodes of {per_node} GPUs")
        return 1
    if per_node % stride:
        raise ValueError(f"groups of ranks {stride} apart straddle nodes of {per_node} GPUs")
    g = min(size, per_node // stride)
    if size % g:
        raise ValueError(f"a group of {size} ranks does not split evenly over nodes of {per_node // stride}")
    return g


@dataclass(frozen=True)
class LayerPass:
    """One layer's seconds for one micro-batch on one tensor rank (section 3c): ``forward``, ``backward``,
    ``recompute`` (its recomputation before the backward), ``collectives`` (the tensor-parallel collectives of one
    forward or one backward), ``weight_gradients`` (of ``backward``, the products that make the weights'
    gradients)."""

    forward: float
    backward: float
    recompute: float
    collectives: float
    weight_gradients: float

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.recompute


def layer_pass(shape: TransformerShape, p: Parallelism, b: int, gpu: GpuModel, tp_seconds: float,
               flash: bool) -> LayerPass:
    """One layer's :class:`LayerPass` for a micro-batch of ``b`` sequences (``tp_seconds``: one tensor-parallel
    all-reduce of its activations, or a reduce-scatter and an all-gather)."""
    t, s, h, a = p.tensor, shape.sequence, shape.hidden, shape.heads
    kvd, f, tokens = shape.kv * shape.head_dim, shape.inner, b * s
    experts = shape.experts_per_token
    up = f * (2 if shape.gated else 1)
    products = (gpu.matmul_seconds(tokens, (h + 2 * kvd) / t, h) + gpu.matmul_seconds(tokens, h, h / t)
                + experts * (gpu.matmul_seconds(tokens, up / t, h) + gpu.matmul_seconds(tokens, h, f / t)))
    core = (gpu.matmul_seconds(s, s, shape.head_dim, b * a / t) + gpu.matmul_seconds(s, shape.head_dim, s, b * a / t))
    repeated = 10 * h / (t if p.sequence_parallel else 1)  # norms, their inputs, the residual dropouts
    split = (2 * h + 4 * kvd + 2 * h + experts * (3 if shape.gated else 2) * f) / t  # see activation_bytes
    elementwise = gpu.memory_seconds(2 * tokens * (repeated + split))
    softmax = 0.0 if flash else gpu.memory_seconds(2 * 4.5 * b * a * s * s / t)
    comm = 2 * (tp_seconds + gpu.efficiencies.collective_overhead) if p.tensor > 1 else 0.0
    forward = products + core + elementwise + softmax + comm
    backward = 2 * (products + core + elementwise + softmax) + comm
    if p.recompute == "full":
        recompute = forward
    elif p.recompute == "selective":
        recompute = core + softmax
    else:
        recompute = 0.0
    return LayerPass(forward, backward, recompute, comm, products)


def activation_bytes(shape: TransformerShape, p: Parallelism, b: int, flash: bool = False) -> float:
    """Bytes a layer keeps of one micro-batch of ``b`` sequences for its backward, without recomputation, on one
    tensor rank (Korthikanti et al. 2022, section 4.1, with the shape's widths): repeated on each tensor rank
    ``10 s b h`` (the norms' inputs, the attention's and the FFN's inputs, two dropout masks) unless sequence
    parallelism splits them, split ``t`` ways the query, keys and values, the projection's input and the FFN's
    activations (``24 s b h`` for GPT), and the attention's scores, softmax and dropout (``5 a s^2 b``) unless flash
    attention recomputes them."""
    t, s, h = p.tensor, shape.sequence, shape.hidden
    kvd, f = shape.kv * shape.head_dim, shape.inner
    repeated = 10 * s * b * h / (t if p.sequence_parallel else 1)
    split = s * b * (2 * h + 4 * kvd + 2 * h + shape.experts_per_token * (6 if shape.gated else 4) * f) / t
    scores = 0.0 if flash else 5 * shape.heads * s * s * b / t
    if p.recompute == "selective":
        scores = 0.0
    return repeated + split + scores


def _in_flight(p: Parallelism, rank: int) -> float:
    """Micro-batches (of a whole rank's layers) whose activations rank ``rank`` holds at its peak."""
    s_, m, v = p.pipeline, p.microbatches, p.virtual_stages
    if p.schedule == "gpipe":
        return float(m)
    if p.schedule == "interleaved-1f1b":  # Megatron-LM's warm-up chunks, each 1/v of the rank's layers
        return min((s_ - rank - 1) * 2 + (v - 1) * s_ + 1, m * v) / v
    return float(min(s_ - rank, m))


def simulate_scale(shape: TransformerShape, parallelism: Parallelism, cluster: GpuCluster, global_batch: int, *,
                   order: str = "tp-dp-pp", flash_attention: bool = False, overlap: bool = False) -> ScaleStep:
    """The step of ``shape`` trained with ``parallelism`` on ``cluster`` at ``global_batch`` sequences (module
    docstring; ``docs/spec/simulator.md`` section 3c). ``flash_attention``: the attention core fused (no scores
    kept or moved through memory). ``overlap``: the data-parallel reduction overlapped with compute, as
    Megatron-LM's ``--overlap-grad-reduce`` / ``--overlap-param-gather`` and FSDP run it (else it follows the
    pipeline's end, as Megatron-LM and DeepSpeed did by default).

    Raises:
        ValueError: more ranks than GPUs, a batch that data x micro-batches do not divide, more chunks than layers,
            heads or the vocabulary not divisible by ``tensor``, groups that straddle nodes unevenly, an unknown
            ``order``.
    """
    p, gpu = parallelism, cluster.gpu
    t, s_, d, m, v = p.tensor, p.pipeline, p.data, p.microbatches, p.virtual_stages
    if p.devices > cluster.gpus:
        raise ValueError(f"{p.describe()} needs {p.devices} GPUs; the cluster has {cluster.gpus}")
    if order not in ORDERS:
        raise ValueError(f"unknown rank order {order!r}; known: {', '.join(ORDERS)}")
    b = p.check_batch(global_batch)
    if p.chunks > shape.layers:
        raise ValueError(f"{p.chunks} chunks of layers for a model of {shape.layers} layers")
    if shape.heads % t or shape.kv % t and shape.kv > 1 and t % shape.kv:
        raise ValueError(f"tensor {t} does not divide the {shape.heads} heads ({shape.kv} KV heads)")
    per_node = cluster.per_node
    g_t = group_per_node(t, 1, per_node)
    if order == "tp-dp-pp":
        g_d, g_p = group_per_node(d, t, per_node), group_per_node(s_, t * d, per_node)
    else:
        g_p, g_d = group_per_node(s_, t, per_node), group_per_node(d, t * s_, per_node)
    tokens = b * shape.sequence
    h, vocab = shape.hidden, shape.vocabulary
    activation = 2.0 * tokens * h  # one micro-batch's hidden states, bf16
    if p.sequence_parallel:  # a reduce-scatter and an all-gather in place of each all-reduce
        tp_one = (collective_seconds("reduce-scatter", activation, t, g_t, cluster)
                  + collective_seconds("all-gather", activation, t, g_t, cluster))
    else:
        tp_one = collective_seconds("all-reduce", activation, t, g_t, cluster)
    one = layer_pass(shape, p, b, gpu, tp_one, flash_attention)
    layer = one.total
    layers = np.full(p.chunks, float(shape.layers // p.chunks))  # as np.array_split cuts: the first chunks
    layers[:shape.layers % p.chunks] += 1.0  # one layer more
    per_rank_layers = np.bincount(np.arange(p.chunks) % s_, weights=layers, minlength=s_)
    rank_seconds = per_rank_layers * layer
    tp_per_rank = per_rank_layers * one.collectives * (3 if p.recompute == "full" else 2)
    # the embedding (a lookup and its all-reduce) on the first rank; the output layer and the loss on the last
    embedding = gpu.memory_seconds(2 * activation / max(1, t)) * 3 + tp_one
    logits = 3 * gpu.matmul_seconds(tokens, vocab / t, h) + gpu.memory_seconds(4 * 4.0 * tokens * vocab / t) + tp_one
    rank_seconds[0] += embedding
    rank_seconds[-1] += logits
    tp_per_rank[0] += tp_one
    tp_per_rank[-1] += tp_one
    send = collective_seconds("send", activation / t, 2, 2 if g_p >= 2 else 1, cluster) if s_ > 1 else 0.0
    weights = float(np.sum(per_rank_layers)) * one.weight_gradients / s_
    compute, sends = pipeline_seconds(rank_seconds, m, p.schedule, v, send, weights)
    bubble = compute - m * float(rank_seconds.max())
    # the data-parallel reduction of each rank's gradients, and the update of its states
    stage_parameters = np.bincount(np.arange(p.chunks) % s_, weights=layers * shape.layer_parameters, minlength=s_)
    stage_parameters[0] += shape.embedding_parameters
    stage_parameters[-1] += shape.output_parameters
    if shape.tied_embeddings and s_ > 1:
        stage_parameters[-1] += vocab * h  # the last rank's copy of the tied matrix
    rank_parameters = stage_parameters / t
    biggest = float(rank_parameters.max())
    scatter = collective_seconds("reduce-scatter", GRADIENT_BYTES * biggest, d, g_d, cluster)
    gather = collective_seconds("all-gather", WEIGHT_BYTES * biggest, d, g_d, cluster)
    busiest = float(per_rank_layers.max())
    last_backward, first_forward = busiest * (one.backward + one.recompute), busiest * one.forward
    if p.zero == 3:  # each micro-batch's gradients scattered, the parameters gathered for its forward and backward
        exposed = (m * max(0.0, scatter + 2 * gather - first_forward - last_backward) if overlap
                   else m * (scatter + 2 * gather))
    elif p.zero == 2:  # sharded gradients cannot accumulate whole: each micro-batch's are scattered
        exposed = (m * max(0.0, scatter - last_backward) + max(0.0, gather - first_forward) if overlap
                   else m * scatter + gather)
    elif overlap:  # the gradients reduced during the last backward, the parameters gathered during the next forward
        exposed = max(0.0, scatter - last_backward) + max(0.0, gather - first_forward)
    else:  # an all-reduce (ZeRO 0) or a reduce-scatter and an all-gather (ZeRO 1, 2): the same seconds
        exposed = scatter + gather
    sharded = biggest / d if p.zero >= 1 else biggest
    optimizer = gpu.memory_seconds(UPDATE_BYTES * sharded)
    seconds = compute + exposed + optimizer
    peak = _peak_memory(shape, p, b, rank_parameters, per_rank_layers, tokens, flash_attention) + gpu.reserved
    model_flops = (6.0 * shape.parameters - 6.0 * shape.embedding_parameters) * tokens * m * d \
        + 12.0 * shape.layers * h * shape.sequence * tokens * m * d
    return ScaleStep(seconds, compute, max(0.0, bubble), float(tp_per_rank.max() * m), sends, exposed, optimizer,
                     rank_seconds, peak, float(gpu.memory), model_flops)


def pipeline_seconds(rank_seconds: np.ndarray, m: int, schedule: str, v: int, send: float,
                     weights: float) -> tuple[float, float]:
    """When a pipeline of ranks taking ``rank_seconds`` (forward and backward of one micro-batch, all their chunks)
    ends ``m`` micro-batches under ``schedule`` with ``v`` chunks a rank, ``send`` seconds a message between ranks
    and ``weights`` seconds of a rank's weight gradients (``zb-h1``); and the sends on its critical path (section
    3c's closed forms)."""
    s_ = len(rank_seconds)
    slowest, total = float(rank_seconds.max()), float(rank_seconds.sum())
    if schedule == "interleaved-1f1b":
        fill = slowest + (total - slowest + 2 * (s_ * v - 1) * send) / v
        sends = 2 * (s_ * v - 1) * send / v
    elif schedule == "zb-h1":  # each rank's weight gradients fill the bubble
        fill = total - 2 * weights * (s_ - 1) + 2 * (s_ - 1) * send
        sends = 2 * (s_ - 1) * send
    else:
        fill = total + 2 * (s_ - 1) * send
        sends = 2 * (s_ - 1) * send
    return (m - 1) * (slowest + (2 * send if s_ > 1 else 0.0)) + fill, sends


def model_state_bytes(parameters: float | np.ndarray, zero: int, data: int) -> float | np.ndarray:
    """Bytes of model states a rank holds for ``parameters`` of its own under ZeRO stage ``zero`` over ``data``
    replicas: 2 (bf16 weights) + 2 (gradients) + 12 (fp32 master weights, two Adam moments) a parameter, the
    optimizer's 12 sharded from stage 1, the gradients' 2 from stage 2, the weights' 2 from stage 3."""
    weights = WEIGHT_BYTES / (data if zero >= 3 else 1)
    gradients = GRADIENT_BYTES / (data if zero >= 2 else 1)
    states = OPTIMIZER_BYTES / (data if zero >= 1 else 1)
    return parameters * (weights + gradients + states)


def _peak_memory(shape: TransformerShape, p: Parallelism, b: int, rank_parameters: np.ndarray,
                 per_rank_layers: np.ndarray, tokens: int, flash: bool) -> np.ndarray:
    """Per pipeline rank, its model states and its activations at their peak (module docstring)."""
    states = np.asarray(model_state_bytes(rank_parameters, p.zero, p.data), dtype=float)
    if p.zero == 3:  # the layer being computed, gathered whole
        states = states + WEIGHT_BYTES * shape.layer_parameters / p.tensor * 2
    per_layer = activation_bytes(shape, p, b, flash)
    peak = np.zeros(p.pipeline)
    for rank in range(p.pipeline):
        held = _in_flight(p, rank)
        if p.recompute == "full":  # each layer's input, and one layer's whole working set while it recomputes
            kept = 2.0 * tokens * shape.hidden / (p.tensor if p.sequence_parallel else 1)
            acts = held * per_rank_layers[rank] * kept + per_layer
        else:
            acts = held * per_rank_layers[rank] * per_layer
        peak[rank] = states[rank] + acts
    peak[-1] += 2 * 4.0 * tokens * shape.vocabulary / p.tensor  # the fp32 logits and their gradient
    return peak


__all__ = ["ORDERS", "LayerPass", "ScaleStep", "activation_bytes", "group_per_node", "layer_pass", "model_state_bytes",
           "pipeline_seconds", "simulate_scale"]
