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
    ``"bernoulli"``: ``w_mn ~ Bernoulli(inclusion)`` — each row enters each member's data with
        probability ``inclusion`` (default 0.95), the first row in every member's: the replicas
        of Riquelme, Tucker & Snoek's (2018) ``BootRMS`` agent (their ``p``). A member then
        fits the included rows of each shared minibatch (their code draws each replica's
        minibatch from its own rows: the same in expectation, about 5% fewer rows a step).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..network import MLPSpec
from ..registry import register
from .base import Batch
from .point_estimates import PointEstimates

SCHEMES = ("poisson", "multinomial", "bernoulli")


def draw_counts(scheme: str, rows: int, new: int, *, first: bool, inclusion: float,
                generator: torch.Generator, device) -> Tensor:
    """``[rows, new]`` bootstrap counts of ``new`` rows for ``rows`` members under ``scheme``
    (module docstring); ``first``: these rows start the data (row 0 is the data's first)."""
    if scheme == "poisson":
        return torch.poisson(torch.ones(rows, new, device=device), generator=generator)
    if scheme == "bernoulli":
        counts = torch.bernoulli(torch.full((rows, new), inclusion, device=device), generator=generator)
        if first:
            counts[:, 0] = 1.0
        return counts
    picks = torch.multinomial(torch.ones(rows, new, device=device), new, replacement=True, generator=generator)
    counts = torch.zeros(rows, new, device=device)
    counts.scatter_add_(1, picks, torch.ones_like(picks, dtype=counts.dtype))
    return counts


@register("bootstrap", "bootstrapped-ensemble")
class Bootstrap(PointEstimates):
    """``n_members`` (default 5) networks, each trained on its own bootstrap weights.

    Method options:
        scheme: ``"poisson"``, ``"multinomial"`` or ``"bernoulli"`` bootstrap counts (see module
            docstring).
        inclusion: the probability that a row enters a member's data (``"bernoulli"`` only).
        n_members, use_prior, prior_std: as for ``ensemble``.
    """

    name = "bootstrap"
    growing_state = frozenset({"weights"})

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, scheme: str = "poisson",
                 inclusion: float = 0.95, **kwargs):
        if scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {list(SCHEMES)}, got {scheme!r}")
        if isinstance(inclusion, bool) or not isinstance(inclusion, (int, float)) or not 0.0 < inclusion <= 1.0:
            raise ValueError(f"inclusion must be a probability in (0, 1], got {inclusion!r}")
        super().__init__(spec, likelihood, **kwargs)
        self.scheme = scheme
        self.inclusion = float(inclusion)
        self.register_buffer("weights", torch.zeros(self.n_members, 0))

    def prepare_data(self, n_data: int) -> None:
        """Extend the per-row counts ``weights[M, N]`` to ``n_data`` rows (never redraws old rows)."""
        have = self.weights.shape[1]
        if n_data <= have:
            return
        counts = draw_counts(self.scheme, self.n_members, n_data - have, first=have == 0, inclusion=self.inclusion,
                             generator=self.generator(), device=self.device)
        self.weights = torch.cat([self.weights, counts.to(self.weights.dtype)], dim=1)

    def row_weights(self, batch: Batch) -> Tensor:
        """``[M, B]`` bootstrap counts of the batch rows for every member."""
        return self.weights[:, batch.index]
