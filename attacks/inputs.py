"""Argument checks shared by the attacks: images in ``[0, 1]`` and class labels."""
from __future__ import annotations

import math
import numbers

import numpy as np
from torch import Tensor

from uncertain_agents.validation import as_tensor, check_finite


def check_images(x, posterior) -> Tensor:
    """``x`` as float ``[N, in_dim]`` on the posterior's device (images are flattened).

    Raises:
        TypeError: not a tensor / array of numbers.
        ValueError: wrong number of pixels, NaN, or values outside ``[0, 1]``.
    """
    in_dim = posterior.spec.in_dim
    t = as_tensor(x, "x", device=posterior.device)
    if t.dim() < 2 or math.prod(t.shape[1:]) != in_dim:
        raise ValueError(f"x must be [N, {in_dim}] (or images with {in_dim} pixels), got {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError("x must have at least one row")
    t = t.reshape(t.shape[0], in_dim)
    check_finite(t, "x")
    if bool((t < 0).any()) or bool((t > 1).any()):
        raise ValueError(f"x must lie in [0, 1] (attacks clip to these bounds), "
                         f"got range [{float(t.min()):.4g}, {float(t.max()):.4g}]")
    return t.detach()


def check_labels(y, n: int, n_classes: int, device, name: str = "y") -> Tensor:
    """``y`` as long ``[n]`` labels in ``[0, n_classes)`` on ``device``."""
    t = as_tensor(y, name, device=device, dtype=None)
    if t.is_floating_point():
        check_finite(t, name)
        if not bool((t == t.round()).all()):
            raise ValueError(f"{name} must hold integer class labels")
    t = t.reshape(-1).long() if t.dim() == 2 and t.shape[1] == 1 else t.long()
    if t.dim() != 1 or t.shape[0] != n:
        raise ValueError(f"{name} must be a vector of {n} class labels (one per row of x), got shape {tuple(t.shape)}")
    if int(t.min()) < 0 or int(t.max()) >= n_classes:
        raise ValueError(f"{name} labels must lie in [0, {n_classes - 1}], got range [{int(t.min())}, {int(t.max())}]")
    return t


def check_epsilons(epsilons) -> list[float]:
    """A non-empty list of finite, non-negative perturbation sizes."""
    if isinstance(epsilons, numbers.Real) and not isinstance(epsilons, (bool, np.bool_)):
        epsilons = [epsilons]
    if isinstance(epsilons, Tensor):
        epsilons = epsilons.detach().cpu().reshape(-1).tolist()
    try:  # bools and text are not sizes, though numpy would read True as 1.0 and "0.1" as 0.1
        raw = [] if isinstance(epsilons, (str, bytes)) else list(np.asarray(epsilons, dtype=object).reshape(-1))
    except (TypeError, ValueError):
        raw = []
    # 0-d tensors (list(torch.linspace(...))) are numbers too; a bool tensor becomes a bool, refused below
    raw = [e.item() if isinstance(e, Tensor) and e.numel() == 1 else e for e in raw]
    if (epsilons is None or isinstance(epsilons, (str, bytes))
            or not all(isinstance(e, numbers.Real) and not isinstance(e, (bool, np.bool_)) for e in raw)):
        raise TypeError(f"epsilons must be a number or a sequence of numbers (not bools or text), got {epsilons!r}")
    values = [float(e) for e in raw]
    if not values:
        raise ValueError("epsilons must not be empty")
    if any(not math.isfinite(e) or e < 0 for e in values):
        raise ValueError(f"epsilons must be finite and >= 0, got {values}")
    return values


def check_positive_number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def chunks(n: int, size: int):
    """Row slices of length ``size`` covering ``range(n)``."""
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]

