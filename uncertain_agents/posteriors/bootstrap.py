"""``bootstrap``: an ensemble in which every member weights the data by its own bootstrap.

Member ``m`` minimises ``-(1/B) Σ_n w_mn log p(y_n | x_n, θ_m) + penalty`` where ``w_mn``
is the bootstrap count of row ``n`` for member ``m`` (Osband et al. 2016's bootstrapped
networks, trained as one batched model). The counts live in a buffer ``weights[M, N]``
that grows with the data: row ``i`` of the data passed to ``fit`` keeps its counts across
warm-started refits, and rows new to a refit get fresh counts (the ``prepare_data`` hook),
so online refits (bandits) keep per-member resampling.

Schemes:
    ``"poisson"`` (default): ``w_mn ~ Poisson(1)`` independently — the online bootstrap,
        exact for a data set that grows row by row.
    ``"multinomial"``: the classical bootstrap — each block of new rows (the whole data at
        the first fit) is resampled with replacement to its own size.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..network import MLPSpec
from ..registry import register
from .base import Batch
from .point_estimates import PointEstimates

SCHEMES = ("poisson", "multinomial")


@register("bootstrap", "bootstrapped-ensemble")
class Bootstrap(PointEstimates):
    """``n_members`` (default 5) networks, each trained on its own bootstrap weights.

    Method options:
        scheme: ``"poisson"`` or ``"multinomial"`` bootstrap counts (see module docstring).
        n_members, use_prior, prior_std: as for ``ensemble``.
    """

    name = "bootstrap"

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, scheme: str = "poisson", **kwargs):
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {list(SCHEMES)}, got {scheme!r}")
        super().__init__(spec, likelihood, **kwargs)
        self.scheme = scheme
        self.register_buffer("weights", torch.zeros(self.n_members, 0))

    def prepare_data(self, n_data: int) -> None:
        """Extend the per-row counts ``weights[M, N]`` to ``n_data`` rows (never redraws old rows)."""
        have = self.weights.shape[1]
        if n_data <= have:
            return
        new = n_data - have
        gen = self.generator()
        if self.scheme == "poisson":
            rate = torch.ones(self.n_members, new, device=self.device)
            counts = torch.poisson(rate, generator=gen)
        else:
            picks = torch.multinomial(torch.ones(self.n_members, new, device=self.device), new,
                                      replacement=True, generator=gen)
            counts = torch.zeros(self.n_members, new, device=self.device)
            counts.scatter_add_(1, picks, torch.ones_like(picks, dtype=counts.dtype))
        self.weights = torch.cat([self.weights, counts.to(self.weights.dtype)], dim=1)

    def row_weights(self, batch: Batch) -> Tensor:
        """``[M, B]`` bootstrap counts of the batch rows for every member."""
        return self.weights[:, batch.index]
