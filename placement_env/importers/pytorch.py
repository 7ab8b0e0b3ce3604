"""PyTorch models as computation graphs: :func:`from_torch`.

``from_torch(module, example_inputs)`` traces any ``nn.Module`` with
``torch.export`` (falling back to ``torch.fx.symbolic_trace`` when export
fails; if both fail the error names the module, the line of its source at
fault and both reasons), runs the traced graph once through a
``torch.fx.Interpreter`` on fake tensors of the example inputs' shapes (no
memory, no arithmetic; real tensors with ``profile=True``) and records, for
every operation:

* ``op``: the ATen (or module / function) name, e.g. ``conv2d``, ``linear``,
  ``relu``, ``getitem``; ``placement_env.graph.units`` maps names to op-type
  categories for the agents;
* ``flops``: what ``torch.utils.flop_counter.FlopCounterMode`` counts for it
  (convolutions, matrix products...; 0 for ops it does not count);
* ``output_bytes``: bytes of the tensors it returns; ``param_bytes``: bytes of
  the trainable parameters only it reads (buffers such as running statistics
  are not charged); a parameter read by several ops becomes a ``parameter`` op
  of its own feeding each of them (``shared_parameters``);
* ``cost`` (seconds on the reference device): a roofline estimate for the
  named device kind, ``max(flops / (peak x efficiency), bytes moved /
  (bandwidth x efficiency)) + launch overhead``, times the kind's speed (so
  that on a cluster of that kind, whose devices the simulator runs at that
  speed, an op takes its roofline time: one reference for every cost), or, with
  ``profile=True``, the median of ``repeats`` timed runs of the op on this machine.

* ``fixed_cost``: the part of ``cost`` a call takes whatever its batch, paid in full by each micro-batch of a
  pipelined step: the roofline's launch overhead, or, profiled, the median measured time of the graph's views
  (ops that compute nothing: the call alone), forward and backward apart; at most the op's cost.

Views, ``getitem`` and in-place ops (names ending in ``_``) are colocated with
the producer of their first input: they alias its memory. User inputs become
zero-cost ``input`` ops. With ``training=True`` (the default) the result is the
training graph of spec section 5 (:mod:`placement_env.graph.training`), built from the
forward graph: one backward op per forward op in its colocation group, which
keeps every op and its gradient one placement unit; the forward runs with
autograd recording, and each backward op keeps alive the outputs whose storages
autograd saved for it (``saved_activations``). (The joint forward-backward
graph of ``torch.export``/AOTAutograd has many backward ops per forward op with
no such pairing, and is not used.)
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import logging
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from placement_env.checks import first_line
from placement_env.cluster import DEVICE_KINDS
from placement_env.graph.model import ComputationGraph, Edge, Node
from placement_env.graph.training import to_training_graph

from .module_names import ModuleNames, colocate_by_module
from .op_records import ALIASING_OPS, OpRecorder, call_costs, op_name, tensor_bytes
from .parameters import canonical_names, owned_parameters, parameter_op, parameter_readers, tie_parameter_reads
from .recurrent import LayerwiseRNN, layerwise_recurrent
from .roofline import ROOFLINE_DEVICES, RooflineDevice, precision_name, roofline_seconds

__all__ = ["ALIASING_OPS", "LayerwiseRNN", "ROOFLINE_DEVICES", "RooflineDevice", "SAVED_ACTIVATIONS", "from_torch",
           "layerwise_recurrent", "trace_model"]

SAVED_ACTIVATIONS = ("autograd", "inputs")
"""What a training graph keeps for the backward (``from_torch``'s ``saved_activations``)."""


def _trace(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[torch.fx.GraphModule, str, list[Any]]:
    """A GraphModule of ``module``, the tracer that produced it, and the values of its placeholders in order
    (the leaves of ``(args, kwargs)`` for torch.export; the bound arguments of ``forward`` for torch.fx)."""
    try:
        with _quiet_torch_logs():  # a failed export logs its whole graph; the error below says what failed
            gm = torch.export.export(module, args, kwargs).module()
        import torch.utils._pytree as pytree

        return gm, "torch.export", list(pytree.tree_leaves((args, kwargs)))
    except Exception as export_error:  # noqa: BLE001 - any export failure falls back to fx
        try:
            gm = torch.fx.symbolic_trace(module)
        except Exception as fx_error:  # noqa: BLE001
            raise ValueError(f"cannot trace module {type(module).__name__}{_user_frame(module, fx_error)}: "
                             f"torch.export failed ({type(export_error).__name__}: {first_line(export_error)}); "
                             f"torch.fx failed ({type(fx_error).__name__}: {first_line(fx_error)})") from None

        try:
            bound = inspect.signature(module.forward).bind(*args, **kwargs)
        except TypeError as error:
            given = _describe_inputs(args) + "".join(f", {key}=" for key in kwargs)
            raise ValueError(f"module {type(module).__name__} does not take the example inputs ({given}): "
                             f"{error}") from None
        bound.apply_defaults()
        return gm, "torch.fx", list(bound.arguments.values())


def _describe_inputs(inputs: tuple) -> str:
    return ", ".join(f"tensor{list(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__
                     for x in inputs) or "none"


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """Silence logging below CRITICAL and prints to stderr for the duration of the block (a failed
    ``torch.export`` prints its partial graph there)."""
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(previous)


def _user_frame(module: nn.Module, error: BaseException) -> str:
    """`` at file:line (`code`)``: the innermost frame of ``error``'s traceback in the module's own source file."""

    try:
        source = inspect.getsourcefile(type(module))
    except (TypeError, OSError):  # a class defined without a source file (a REPL, python -c)
        return ""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == source]
    if not frames:
        return ""
    frame = frames[-1]
    code = (frame.line or "").strip()  # empty when the source is not on disk (standard input)
    return f" at {frame.filename}:{frame.lineno}" + (f" (`{code}`)" if code else "")


def trace_model(module: nn.Module, example_inputs: Sequence[Any] | torch.Tensor = (),
                example_kwargs: Mapping[str, Any] | None = None,
                split_recurrent: bool = True) -> tuple[torch.fx.GraphModule, list[Any], nn.Module]:
    """How :func:`from_torch` traces: ``(the GraphModule, the values of its placeholders in order, the module
    traced)``, the module being ``module`` or, with ``split_recurrent``, its copy with one module per recurrent
    layer (:func:`layerwise_recurrent`). The GraphModule's node names are the ids of the graph's ops. Raises
    ``ValueError`` for inputs that are not a tensor, a sequence or (as keywords) a mapping, or a module that
    cannot be traced."""
    if isinstance(example_inputs, Mapping):
        raise ValueError(f"example_inputs is a mapping (keys {', '.join(map(repr, list(example_inputs)[:4]))}): "
                         "pass keyword inputs as example_kwargs=..., positional ones as a tuple")
    if isinstance(example_inputs, (str, bytes)) or not isinstance(example_inputs, (torch.Tensor, Sequence)):
        raise ValueError(f"example_inputs must be a tensor or a sequence of inputs, got {example_inputs!r}")
    if example_kwargs is not None and not isinstance(example_kwargs, Mapping):
        raise ValueError(f"example_kwargs must be a mapping of keyword inputs, got {type(example_kwargs).__name__}")
    kwargs = dict(example_kwargs or {})
    if any(not isinstance(key, str) for key in kwargs):
        raise ValueError(f"example_kwargs keys must be argument names, got {list(kwargs)!r}")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    if split_recurrent:
        module = layerwise_recurrent(module)
    with warnings.catch_warnings():  # torch.export on RNNs: "_flat_weights ... were assigned during export"
        warnings.filterwarnings("ignore", message=".*were assigned during export", category=UserWarning)
        gm, _, inputs = _trace(module, args, kwargs)
    tie_parameter_reads(gm)
    return gm, inputs, module


def _batch_of(inputs: Sequence[Any]) -> int | None:
    """The leading dimension of the first input tensor with one (the batch the graph is traced with)."""
    import torch.utils._pytree as pytree

    for x in pytree.tree_leaves(list(inputs)):
        if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] >= 1:
            return int(x.shape[0])
    return None


def _cast(module: nn.Module, example_inputs: Any, example_kwargs: Mapping[str, Any] | None,
          dtype: torch.dtype) -> tuple[nn.Module, Any, Mapping[str, Any] | None]:
    """A copy of ``module`` in ``dtype`` and the inputs with their floating tensors cast to it."""

    import torch.utils._pytree as pytree

    def cast(x: Any) -> Any:
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    return (copy.deepcopy(module).to(dtype), pytree.tree_map(cast, example_inputs),
            None if example_kwargs is None else pytree.tree_map(cast, dict(example_kwargs)))


def from_torch(module: nn.Module, example_inputs: Sequence[Any] | torch.Tensor = (), *, name: str | None = None,
               device_kind: str = "p100", profile: bool = False, repeats: int = 5,
               training: bool = True, shared_parameters: bool = True,
               split_recurrent: bool = True, example_kwargs: Mapping[str, Any] | None = None,
               colocate_modules: bool | int = False, dtype: torch.dtype = torch.float32,
               profile_threads: int = 1, saved_activations: str = "autograd") -> ComputationGraph:
    """The computation graph of ``module`` on ``example_inputs`` (see the module docstring).

    Args:
        module: any ``torch.nn.Module`` (put in eval mode for inference statistics).
        example_inputs: a tensor or a tuple of positional inputs; their shapes fix every shape.
        example_kwargs: keyword inputs (``input_ids=..., attention_mask=...``, as Hugging Face models are
            called); a dict given as ``example_inputs`` is refused with a pointer here.
        name: the graph's name (default: the module's class name).
        device_kind: the roofline device of :data:`ROOFLINE_DEVICES` for op costs (expressed in seconds of the
            reference device: the roofline time on that kind times its speed).
        profile: measure op times on this machine instead of the roofline model: each op's forward (for the
            training graph with autograd recording, as in a training step) and, in the training graph, its
            backward (the op alone, its inputs leaves; where autograd cannot run an op
            alone, the 2x / 1x rule of :mod:`placement_env.graph.training`).
        repeats: timed runs per op with ``profile`` (the median is kept).
        profile_threads: torch's thread count while profiling (restored after): that of the devices the costs are
            for. The default, 1, is what a local worker of ``measure_step`` and ``run_pipeline`` runs with; the
            process's own count (two or more, shared with whatever else the machine runs) gave costs 50-100x
            too high on a busy machine.
        training: return the training graph (forward + backward ops), else the forward graph.
        saved_activations: what the training graph keeps of the forward for the backward (its saved-activation
            edges, :func:`~placement_env.graph.training.to_training_graph`), and so each device's activation
            memory: ``"autograd"`` (the default), what autograd saves, recorded while the forward runs (a linear
            layer keeps its input, a softmax its output, an addition or a view nothing; a view kept holds its base);
            ``"inputs"``, every input of every op, the rule the shipped benchmark graphs were made with (it
            counted 1.3-2.5x the measured peak of GPipe pipelines in ``benchmarks/pipeline_fidelity.py``).
        shared_parameters: a parameter read by more than one op (a weight shared across the time steps of an
            unrolled RNN, a submodule called twice) becomes a zero-cost ``parameter`` op holding its bytes, with
            an edge carrying the weight to every reader, as variables are nodes in a TensorFlow graph: a reader
            placed elsewhere then pays for the copy, and in the training graph the readers' gradients flow back
            to it. With ``False`` the first reader holds the parameter and the others read it for free.
        split_recurrent: trace each layer of a multi-layer ``nn.LSTM`` / ``nn.GRU`` as its own op
            (:class:`LayerwiseRNN`), so that its layers can be placed on different devices; ``False``: the whole
            recurrent module is one op. Each op records the qualified name of the module it came from (node
            field ``module``: the innermost module of its stack that owns parameters itself, else the innermost;
            ``""`` outside every submodule; ops inside a split recurrent module are named after it).
        colocate_modules: ``True``: every op of one recorded submodule in one colocation group (merged with the
            groups views already form with what they alias), so that any placement is a module placement (the
            model's own glue ops, module ``""``, stay single ops);
            an int ``d`` >= 1: the same for module names cut to their first ``d`` parts (``layers.3``);
            ``False`` (the default): ops are placed one by one.
        dtype: the precision the model trains in (``torch.float32``, ``torch.bfloat16``, ``torch.float16``): a
            copy of the model and the floating inputs are cast to it, so bytes are counted in it, and matrix
            products are costed at the kind's tensor-core peak of it (:mod:`.roofline`).

    Raises:
        ValueError: an unknown device kind, a dtype the kind has no peak for, bad ``repeats``,
            ``profile_threads`` or ``colocate_modules``, inputs that are not a tensor, a sequence or (as keywords)
            a mapping, or a module that cannot be traced or run on them.
    """
    if not isinstance(module, nn.Module):
        raise ValueError(f"module must be a torch.nn.Module, got {type(module).__name__} (wrap a function in a "
                         "module whose forward calls it)")
    if device_kind not in ROOFLINE_DEVICES:
        raise ValueError(f"unknown device kind {device_kind!r}; known: {', '.join(ROOFLINE_DEVICES)}")
    import torch.utils._pytree as pytree

    keywords = dict(example_kwargs) if isinstance(example_kwargs, Mapping) else {}  # else trace_model says why
    empty = [x for x in pytree.tree_leaves((example_inputs, keywords))
             if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == 0]
    if empty:
        raise ValueError(f"an example input has a batch of 0 (shape {list(empty[0].shape)}): a graph of no data "
                         "costs nothing; give a batch of at least 1")
    if profile and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    if isinstance(profile_threads, bool) or not isinstance(profile_threads, int) or profile_threads < 1:
        raise ValueError(f"profile_threads must be an integer >= 1, got {profile_threads!r}")
    if saved_activations not in SAVED_ACTIVATIONS:
        raise ValueError(f"saved_activations must be one of {', '.join(SAVED_ACTIVATIONS)}, got {saved_activations!r}")
    if not (isinstance(colocate_modules, bool)
            or (isinstance(colocate_modules, int) and colocate_modules >= 1)):
        raise ValueError(f"colocate_modules must be True, False or a depth >= 1, got {colocate_modules!r}")
    precision = precision_name(dtype, device_kind)
    name = name or type(module).__name__
    if dtype != torch.float32:
        module, example_inputs, example_kwargs = _cast(module, example_inputs, example_kwargs, dtype)
    gm, inputs, module = trace_model(module, example_inputs, example_kwargs, split_recurrent)
    autograd = training and saved_activations == "autograd"
    recorder = OpRecorder(gm, profile, repeats, backward=profile and training, saved=autograd)
    threads = torch.get_num_threads()
    if profile:
        torch.set_num_threads(profile_threads)
    try:
        # a training graph runs its forward recording autograd, as a training step does: what autograd saves for
        # the backward is what the training graph keeps alive, and a profile times ops as a step runs them (quiet:
        # fake-tensor tracebacks)
        with torch.set_grad_enabled(profile and training or autograd), _quiet_torch_logs():
            if profile:
                recorder.run(*inputs)
            else:  # shapes, bytes and FLOPs need no arithmetic: run on fake tensors (no memory, no compute)
                from torch._subclasses.fake_tensor import FakeTensorMode

                with FakeTensorMode(allow_non_fake_inputs=True) as mode:
                    recorder.run(*[mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs])
    except Exception as error:  # noqa: BLE001 - whatever the module raised on these inputs
        raise ValueError(f"module {type(module).__name__} does not run on example inputs "
                         f"({_describe_inputs(tuple(inputs))}): {type(error).__name__}: {first_line(error)}") from None
    finally:
        torch.set_num_threads(threads)
    roof = ROOFLINE_DEVICES[device_kind]
    reference_speed = DEVICE_KINDS[device_kind].speed
    fixed_forward, fixed_backward = call_costs(gm, recorder.records) if profile else (0.0, 0.0)

    params = {}
    for pname, p in gm.named_parameters():  # buffers (running statistics) are not trained: not charged
        params[pname] = p.numel() * p.element_size()
    producers: dict[str, str] = {}  # fx node name -> graph node id
    out_bytes: dict[str, int] = {}
    charged: set[str] = set()
    group: dict[str, str] = {}
    nodes: list[Node] = []
    edges: list[Edge] = []
    canonical = canonical_names(gm)
    readers = parameter_readers(gm, recorder.records, canonical)
    modules = ModuleNames.of(module)
    shared = {key for key, count in readers.items() if count > 1 and key in params} if shared_parameters else set()
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            value = n.meta.get("val", n.meta.get("example_value"))
            idx = len([x for x in nodes if x.op == "input"])
            size = tensor_bytes(value) if value is not None else tensor_bytes(inputs[idx]) if idx < len(inputs) else 0
            nodes.append(Node(n.name, "input", 0.0, size, 0, flops=0.0))
            producers[n.name] = n.name
            out_bytes[n.name] = size
            continue
        if n.op in ("get_attr", "output") or (n.op == "call_module" and str(n.target).startswith("_guards")):
            continue
        record = recorder.records.get(n.name)
        if record is None:
            continue
        inputs_of = [a for a in n.all_input_nodes if a.name in producers]
        param_b = 0
        owned = owned_parameters(gm, n, canonical)
        shared_reads = []
        for key in owned:
            if key in shared:
                shared_reads.append(parameter_op(key, params[key], nodes, producers, out_bytes,
                                                  modules.of_parameter(key)))
            elif key in params and key not in charged:
                charged.add(key)
                param_b += params[key]
        moved = (record["output_bytes"] + sum(out_bytes[a.name] for a in inputs_of) + param_b
                 + sum(out_bytes[k] for k in shared_reads))
        if profile:
            cost = record["measured"]
            fixed = min(cost, fixed_forward)
        else:
            # the roofline time on a device of the kind, in seconds of the reference device (spec section 1):
            # the simulator divides by the kind's speed again, so a cluster of that kind runs it in that time
            cost = reference_speed * roofline_seconds(roof, record["flops"], moved, precision)
            fixed = min(cost, reference_speed * roof.launch_overhead)
        op = op_name(gm, n)
        aliasing = op in ALIASING_OPS or (op.endswith("_") and not op.endswith("__"))  # in-place ops too
        coloc = None
        if aliasing and inputs_of:
            source = inputs_of[0].name
            coloc = group.setdefault(source, f"{source}/alias")
            group[n.name] = coloc
        nodes.append(Node(n.name, op, float(cost), int(record["output_bytes"]), int(param_b), coloc,
                          float(record["flops"]), module=modules.of_node(n), fixed_cost=float(fixed)))
        producers[n.name] = n.name
        out_bytes[n.name] = record["output_bytes"]
        seen = set()
        for source in [a.name for a in inputs_of] + shared_reads:
            if source not in seen:
                seen.add(source)
                edges.append(Edge(source, n.name))
    # an op whose group was created after it was added (its first aliasing consumer came later) joins it
    nodes = [Node(x.id, x.op, x.cost, x.output_bytes, x.param_bytes, group.get(x.id, x.colocation), x.flops,
                  module=x.module, fixed_cost=x.fixed_cost) for x in nodes]
    if colocate_modules is not False:
        nodes = colocate_by_module(nodes, None if colocate_modules is True else colocate_modules)
    if not any(node.op != "input" for node in nodes):
        raise ValueError(f"module {type(module).__name__} computes nothing from its inputs (its forward returns "
                         "no tensor made from them): there is nothing to place")
    graph = ComputationGraph(nodes, edges, name=name or type(module).__name__, batch=_batch_of(inputs))
    if not training:
        return graph
    backward_costs = {op: record["measured_backward"] for op, record in recorder.records.items()
                      if "measured_backward" in record}
    kept = {op: [x for x in record["saved_from"] if x in producers] for op, record in recorder.records.items()
            if op in producers and "saved_from" in record}  # empty without autograd: every input kept
    trained = to_training_graph(graph, name=graph.name, backward_costs=backward_costs, saved=kept)
    if not profile:
        return trained
    return ComputationGraph([replace(n, fixed_cost=min(n.cost, fixed_backward)) if n.phase == "backward"
                             and n.fixed_cost is not None else n for n in trained.nodes], trained.edges(),
                            name=trained.name, batch=trained.batch)
