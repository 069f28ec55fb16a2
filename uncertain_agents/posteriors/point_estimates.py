"""Point-estimate baselines: ``map`` and ``ensemble`` (and the base of ``bootstrap``).

The members are the rows of one parameter tensor ``members[M, D]`` trained as a single
batched model through :meth:`MLPSpec.forward` (one ``[M, B, out]`` pass per step, no
loop over members). Each member minimises its own per-data-point objective

    -(1/B) Σ_n w_mn log p(y_n | x_n, θ_m) + (1/N) Σ_j θ_mj² / (2 prior_std_j²)

(``w_mn = 1`` except for ``bootstrap``); the loss reported is the mean over members, so
members do not interact. A learned regression noise is per member (``[M, out]``), like
the independently trained networks of Lakshminarayanan et al. (2017).
``sample(n)`` draws members uniformly with replacement.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..network import MLPSpec
from ..registry import register
from ..validation import check_positive_int
from .base import Batch, Posterior


class PointEstimates(Posterior):
    """``M`` point estimates of the weights, trained jointly but independently.

    Method options:
        n_members: M (``map`` fixes it to 1).
        use_prior: add the Gaussian-prior (L2) penalty ``θ²/(2 prior_std² N)`` per data
            point (default True: every member is a MAP estimate); False gives maximum
            likelihood.
        prior_std: the prior std of the penalty (default ``1/sqrt(fan_in)``).
    """

    name = "point-estimates"
    graph_safe_step = True  # fit on CUDA replays its step from a graph (posteriors/cuda_graphs.py)
    default_members: int = 5

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, n_members: int | None = None,
                 use_prior: bool = True, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        if not isinstance(use_prior, bool):
            raise TypeError(f"use_prior must be True or False, got {use_prior!r}")
        self.n_members = check_positive_int(self.default_members if n_members is None else n_members,
                                            "n_members")
        self.use_prior = use_prior
        self.members = nn.Parameter(spec.init_params(self.n_members, generator=self._init_generator))
        if self.kind == "gaussian" and self.fixed_noise_std is None:
            start = self.likelihood.log_noise_std.detach().clone()
            self.member_log_noise_std = nn.Parameter(start.expand(self.n_members, -1).clone())
        else:
            self.member_log_noise_std = None

    # ------------------------------------------------------------ objective
    def member_log_noise(self) -> Tensor:
        """``[M, out]`` log noise std of every member in training units."""
        if self.member_log_noise_std is not None:
            return self.member_log_noise_std
        return self.log_noise_std_train().expand(self.n_members, -1)

    def member_loglik(self, batch: Batch) -> Tensor:
        """``[M, B]`` log-likelihood of the batch under every member."""
        f = self.spec.forward(self.members, batch.x)
        kw = {"log_noise_std": self.member_log_noise().unsqueeze(1)} if self.kind == "gaussian" else {}
        return self.likelihood.log_prob(f, batch.y, batch.mask, **kw)

    def row_weights(self, batch: Batch) -> Tensor | None:
        """``[M, B]`` per-member data weights of the batch rows (``None`` = all 1)."""
        return None

    def penalty(self, n_data: int) -> Tensor:
        """``[M]`` Gaussian-prior penalty ``Σ_j θ_mj²/(2 prior_std_j² N)`` of every member."""
        if not self.use_prior:
            return self.members.new_zeros(self.n_members)
        return (self.members.square() / (2.0 * self.prior_std.square())).sum(-1) / n_data

    def loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        loglik = self.member_loglik(batch)
        weights = self.row_weights(batch)
        if weights is not None:
            loglik = loglik * weights
        per_member = -loglik.mean(-1) + self.penalty(batch.n_data)
        return per_member.mean()

    # ------------------------------------------------------------- sampling
    def _sample_indexed(self, n: int, generator: torch.Generator):
        index = torch.randint(self.n_members, (n,), generator=generator, device=self.device)
        return self.members, (self.member_log_noise() if self.kind == "gaussian" else None), index


@register("map")
class MAP(PointEstimates):
    """A single deterministic network with an L2 (Gaussian-prior) penalty; ``sample(n)``
    returns n copies of it (the predictive is the network plus the learned noise)."""

    name = "map"
    default_members = 1

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", **kwargs):
        if "n_members" in kwargs:
            raise TypeError("map has exactly one member; use 'ensemble' for n_members > 1")
        super().__init__(spec, likelihood, **kwargs)

    def _sample_indexed(self, n: int, generator: torch.Generator):
        index = torch.zeros(n, dtype=torch.long, device=self.device)  # n copies; draws nothing
        return self.members, (self.member_log_noise() if self.kind == "gaussian" else None), index


@register("ensemble", "deep-ensemble", "deep_ensemble")
class Ensemble(PointEstimates):
    """``n_members`` (default 5) independently initialised networks (Lakshminarayanan et
    al. 2017), each with its own noise, trained as one batched model on the same
    minibatches; a sample is a member drawn uniformly."""

    name = "ensemble"

