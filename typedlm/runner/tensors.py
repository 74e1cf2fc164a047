"""Small host lists as device tensors, without waiting for queued GPU work."""

from __future__ import annotations

import torch


def device_tensor(values: list, device: torch.device, dtype=torch.long) -> torch.Tensor:
    """A small host list on ``device`` without waiting for queued GPU work: staged in pinned memory
    and copied asynchronously (``torch.tensor(values, device=cuda)`` copies from pageable memory,
    which waits for the stream and would undo the overlap)."""
    return to_device(torch.tensor(values, dtype=dtype), device)


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device`` the same way: staged pinned, copied without waiting (as is on the CPU; a device
    tensor is left alone)."""
    if device.type != "cuda" or t.device.type != "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)
