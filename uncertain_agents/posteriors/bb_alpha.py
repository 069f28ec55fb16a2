"""``bb-alpha``: black-box α-divergence minimisation (Hernández-Lobato et al., ICML 2016).

Factorised Gaussian q, Gaussian prior, tied sites. ``train_samples`` (K) weight draws
are shared across the minibatch, evaluated in one batched forward ``[K, B, out]``; the
energy is :func:`uncertain_agents.objectives.bb_alpha_energy` in its cancellation-free
form. ``alpha=0`` is the ELBO branch; negative α is allowed. A learned regression noise
is a point estimate that minimises the same energy.
"""
from __future__ import annotations

import numbers

import torch
from torch import Tensor

from ..objectives import bb_alpha_energy
from ..registry import register
from .base import Batch
from .mean_field import MeanFieldGaussian


@register("bb-alpha", "bbalpha", "bb_alpha")
class BlackBoxAlpha(MeanFieldGaussian):
    name = "bb-alpha"
    graph_safe_step = True  # fit on CUDA replays its step from a graph (posteriors/cuda_graphs.py)

    def __init__(self, spec, likelihood="gaussian", *, alpha: float = 0.5, train_samples: int = 10, **kwargs):
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not abs(alpha) < float("inf"):
            raise ValueError(f"alpha must be a finite real number, got {alpha!r}")
        super().__init__(spec, likelihood, train_samples=train_samples, **kwargs)
        self.alpha = float(alpha)

    def loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        w, log_ratio = self.draw(self.train_samples, generator)
        f = self.spec.forward(w, batch.x)
        kw = {"log_noise_std": self.log_noise_std_train()} if self.kind == "gaussian" else {}
        loglik = self.likelihood.log_prob(f, batch.y, batch.mask, **kw)
        return bb_alpha_energy(loglik, log_ratio, self.alpha, batch.n_data)
