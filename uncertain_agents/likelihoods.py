"""Observation models ``p(y | f)`` with observation masks.

Both return per-sample, per-row log-likelihoods ``[n, B]``; a row's log-likelihood is
the sum over its *observed* outputs (a bandit observes one arm per row).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn
import torch.nn.functional as F

from .validation import check_positive_float, check_positive_int

LOG_2PI = math.log(2.0 * math.pi)


class Gaussian(nn.Module):
    """Independent Gaussian noise per output, ``y = f + N(0, sigma^2)``.

    Works in the (standardised) units the network is trained in. The noise is either
    learned (``noise_std=None``; parameterised by its log) or fixed.

    Args:
        out_dim: number of outputs.
        noise_std: fixed noise standard deviation in *training units*, or ``None`` to learn it.
        init_noise_std: starting value of a learned noise.
    """

    kind = "gaussian"

    def __init__(self, out_dim: int, noise_std: float | None = None, init_noise_std: float = 0.5):
        super().__init__()
        check_positive_int(out_dim, "out_dim")
        check_positive_float(noise_std, "noise_std", allow_none=True)
        check_positive_float(init_noise_std, "init_noise_std")
        self.learned = noise_std is None
        value = torch.full((out_dim,), math.log(init_noise_std if noise_std is None else noise_std))
        if self.learned:
            self.log_noise_std = nn.Parameter(value)
        else:
            self.register_buffer("log_noise_std", value)

    @property
    def noise_std(self) -> Tensor:
        """``[out]`` noise standard deviation (training units)."""
        return self.log_noise_std.exp()

    def log_prob(self, f: Tensor, y: Tensor, mask: Tensor | None = None,
                 log_noise_std: Tensor | None = None) -> Tensor:
        """Log-likelihood of targets.

        Args:
            f: ``[n, B, out]`` function values.
            y: ``[B, out]`` targets.
            mask: ``[B, out]`` bool, True where observed (``None`` = all observed).
            log_noise_std: optional override, broadcastable to ``[n, 1, out]``.

        Returns:
            ``[n, B]`` summed over observed outputs.
        """
        log_s = self.log_noise_std if log_noise_std is None else log_noise_std
        z = (y - f) * torch.exp(-log_s)
        lp = -0.5 * z.square() - log_s - 0.5 * LOG_2PI
        if mask is not None:
            lp = lp * mask
        return lp.sum(-1)


class Categorical(nn.Module):
    """Softmax likelihood over ``out_dim`` classes; ``f`` are logits."""

    kind = "categorical"
    learned = False

    def __init__(self, out_dim: int):
        super().__init__()
        if isinstance(out_dim, bool) or not isinstance(out_dim, int) or out_dim < 2:
            raise ValueError(f"out_dim must be an integer >= 2 (the number of classes), got {out_dim!r}")
        self.out_dim = out_dim

    def log_prob(self, f: Tensor, y: Tensor, mask: Tensor | None = None) -> Tensor:
        """Args: ``f[n, B, C]`` logits, ``y[B]`` long labels, ``mask[B]`` bool rows.

        Returns ``[n, B]``.
        """
        logp = F.log_softmax(f, dim=-1)
        idx = y.view(1, -1, 1).expand(f.shape[0], -1, 1)
        lp = logp.gather(-1, idx).squeeze(-1)
        if mask is not None:
            lp = lp * mask.reshape(1, -1)
        return lp


def make_likelihood(name: str, out_dim: int, noise_std: float | None = None,
                    init_noise_std: float = 0.5) -> nn.Module:
    """The likelihood ``name`` (``"gaussian"`` or ``"categorical"``) for ``out_dim`` outputs (classes):
    :class:`Gaussian` with a fixed ``noise_std`` or a learned noise started at ``init_noise_std``
    (training units), or :class:`Categorical` (``out_dim >= 2``, no ``noise_std``)."""
    if name == "gaussian":
        return Gaussian(out_dim, noise_std=noise_std, init_noise_std=init_noise_std)
    if name == "categorical":
        if noise_std is not None:
            raise ValueError("noise_std only applies to likelihood='gaussian'")
        if out_dim < 2:
            raise ValueError(f"likelihood='categorical' needs out_dim >= 2 classes, got {out_dim}")
        return Categorical(out_dim)
    raise ValueError(f"likelihood must be 'gaussian' or 'categorical', got {name!r}")
