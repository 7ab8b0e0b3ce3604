"""What the pipeline runner needs of ``torch.distributed.pipelining`` beyond its API: :func:`contiguous_messages`
(gloo sends only contiguous tensors) and :func:`skipped_chunk` (its multi-chunk schedules send only between
neighbouring chunks)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.utils._pytree as pytree


def skipped_chunk(pipe: Any) -> tuple[int, int] | None:
    """``(chunk, source)`` of the first chunk of a traced pipeline that takes an input from a chunk other than the
    one before it (or from the model's inputs, beyond chunk 0); None when every chunk reads only its neighbour."""
    calls = [n for n in pipe.split_gm.graph.nodes if n.op == "call_module"]
    index = {n: k for k, n in enumerate(calls)}
    for k, node in enumerate(calls):
        for arg in pytree.tree_leaves((node.args, node.kwargs)):
            source = arg
            while getattr(source, "op", None) == "call_function" and source.args:  # getitem of a chunk's outputs
                source = source.args[0]
            if getattr(source, "op", None) == "placeholder" and k > 0:
                return k, 0
            if source in index and index[source] != k - 1:
                return k, index[source]
    return None


class _ContiguousSends:
    """``torch.distributed`` as the pipeline stages see it, but every tensor they send made contiguous first."""

    def __getattr__(self, name: str) -> Any:
        return getattr(dist, name)

    @staticmethod
    def P2POp(op: Any, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - dist's name
        return dist.P2POp(op, tensor.contiguous() if op is dist.isend else tensor, *args, **kwargs)


def contiguous_messages() -> None:
    """Make ``torch.distributed.pipelining``'s messages contiguous, in this process: torch 2.13's stages send a
    stage's outputs and gradients with the strides they were traced with and receive into buffers of those
    strides, and gloo refuses a tensor that is not contiguous (BERT's and ViT's attention outputs are transposed
    views). A stage's ops take a contiguous input as well as a strided one."""
    import torch.distributed.pipelining.stage as stage_module

    stage_module._make_tensor_from_meta = lambda meta, device: torch.empty(meta.shape, dtype=meta.dtype,
                                                                           device=device)
    stage_module.dist = _ContiguousSends()  # type: ignore[assignment]


__all__ = ["contiguous_messages", "skipped_chunk"]
