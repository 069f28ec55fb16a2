"""Checks of the data passed to ``Posterior.fit``, with errors that name the argument."""
from __future__ import annotations

import torch
from torch import Tensor

from ..network import MLPSpec
from ..validation import as_tensor, check_finite, check_inputs


def check_training_data(x, y, mask, *, spec: MLPSpec, kind: str,
                        device: torch.device) -> tuple[Tensor, Tensor, Tensor | None]:
    """Validate and convert ``fit``'s data.

    Returns:
        ``x[N, in_dim]`` float; ``y[N, out]`` float (regression, unobserved entries zeroed)
        or ``[N]`` long labels (classification); ``mask`` ``[N, out]`` / ``[N]`` bool or None.
    """
    x = check_inputs(x, spec.in_dim, device=device)
    n = x.shape[0]
    if kind == "categorical":
        y = as_tensor(y, "y", device=device, dtype=None)
        if y.is_floating_point():
            check_finite(y, "y")
            if not bool((y == y.round()).all()):
                raise ValueError("y must hold integer class labels for likelihood='categorical'")
        y = y.reshape(-1) if y.dim() == 2 and y.shape[1] == 1 else y
        if y.dim() != 1:
            raise ValueError(f"y must be a vector of class labels [N], got shape {tuple(y.shape)}")
        # the range is checked before the cast: a float label beyond int64 (1e20) would wrap around
        if y.numel() and (float(y.min()) < 0 or float(y.max()) >= spec.out_dim):
            lo, hi = (f"{float(v):.10g}" if y.is_floating_point() else str(int(v)) for v in (y.min(), y.max()))
            raise ValueError(f"y labels must lie in [0, {spec.out_dim - 1}], got range [{lo}, {hi}]")
        y = y.long()
    else:
        y = as_tensor(y, "y", device=device)
        if y.dim() == 1 and spec.out_dim == 1:
            y = y.unsqueeze(-1)
        if y.dim() != 2 or y.shape[1] != spec.out_dim:
            raise ValueError(f"y must have shape [N, {spec.out_dim}] (out_dim), got {tuple(y.shape)}")
    if y.shape[0] != n:
        raise ValueError(f"x and y must have the same number of rows, got {n} and {y.shape[0]}")
    if mask is not None:
        mask = as_tensor(mask, "mask", device=device, dtype=None)
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor, got dtype {mask.dtype}")
        if kind == "categorical" and mask.dim() == 2 and mask.shape[1] == 1:
            mask = mask[:, 0]
        expected = (n,) if kind == "categorical" else (n, spec.out_dim)
        if tuple(mask.shape) != expected:
            raise ValueError(f"mask must have shape {list(expected)}, got {tuple(mask.shape)}")
        if not bool(mask.any()):
            raise ValueError("mask has no observed entry: at least one must be True")
        if kind != "categorical":
            y = torch.where(mask, y, torch.zeros_like(y))  # unobserved targets may be NaN
    if kind != "categorical":
        check_finite(y, "y")
    return x, y, mask
