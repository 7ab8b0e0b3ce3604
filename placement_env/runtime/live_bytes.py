"""The bytes of tensor storages allocated and not yet freed, and their high-water mark: :class:`LiveBytes`, what
the measured step and the pipeline runner report as a device's peak memory on local workers (a CPU has no
``max_memory_allocated``)."""

from __future__ import annotations

import weakref

import torch
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary


class LiveBytes:
    """Bytes of the storages allocated under ``with tracker.mode:`` and not yet freed (``live``), and their
    high-water mark (``peak``); each storage counted once, whatever views of it are made."""

    def __init__(self) -> None:
        tracker = self
        self.live = self.peak = 0
        seen = WeakIdKeyDictionary()

        def free(nbytes: int) -> None:
            tracker.live -= nbytes

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in pytree.tree_leaves(out):
                    if isinstance(t, torch.Tensor):
                        storage = t.untyped_storage()
                        if storage not in seen:
                            seen[storage] = True
                            nbytes = storage.nbytes()
                            tracker.live += nbytes
                            tracker.peak = max(tracker.peak, tracker.live)
                            weakref.finalize(storage, free, nbytes)
                return out

        self.mode = Mode()


__all__ = ["LiveBytes"]
