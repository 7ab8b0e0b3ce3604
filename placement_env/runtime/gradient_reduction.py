"""Gradients reduced over ranks as the runtimes reduce them: :func:`average_gradients` (plain replicas' gradients
averaged in buckets, as DDP packs them) and :func:`local_grad` (this rank's part of a parameter's gradient, laid out
as the parameter)."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


def local_part(value: Any) -> Any:
    """A DTensor's local part (this rank's shard, sharing its storage); any other value as it is."""
    return value.to_local() if isinstance(value, DTensor) else value


BUCKET_BYTES = 25 * 2**20
"""Bytes of gradients the data ranks average in one all-reduce (DDP's default bucket, ``bucket_cap_mb=25``)."""


def average_gradients(grads: list[torch.Tensor], group: Any, ranks: int) -> None:
    """Average ``grads`` in place over the ``ranks`` processes of ``group``: consecutive gradients of one dtype and
    device packed into buckets of up to :data:`BUCKET_BYTES`, one all-reduce a bucket (a collective a tensor pays
    its latency tens of times over on a model's many small norms and biases)."""
    buckets: list[list[torch.Tensor]] = []
    held = 0
    for grad in grads:
        size = grad.numel() * grad.element_size()
        if not buckets or held + size > BUCKET_BYTES or (grad.dtype, grad.device) != (buckets[-1][0].dtype,
                                                                                      buckets[-1][0].device):
            buckets.append([])
            held = 0
        buckets[-1].append(grad)
        held += size
    for bucket in buckets:
        flat = torch.cat([g.reshape(-1) for g in bucket])
        dist.all_reduce(flat, group=group)
        flat.div_(ranks)
        offset = 0
        for g in bucket:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def local_grad(q: torch.Tensor) -> torch.Tensor:
    """This rank's part of ``q``'s gradient, laid out as ``q`` is: a DTensor gradient that autograd left in another
    layout (a sequence-parallel embedding's, pending a sum over the tensor ranks) is made ``q``'s first, in place of
    the old, so that reductions and a sharded optimizer see each rank's shard of the whole gradient."""
    grad = q.grad
    if isinstance(grad, DTensor) and isinstance(q, DTensor) and tuple(grad.placements) != tuple(q.placements):
        grad = grad.redistribute(q.device_mesh, q.placements)
        q.grad = grad
    return local_part(grad)


__all__ = ["BUCKET_BYTES", "average_gradients", "local_grad", "local_part"]
