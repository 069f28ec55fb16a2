"""``svgd``: weight-space Stein variational gradient descent (Liu & Wang, NeurIPS 2016).

The particles are weight vectors ``w[n, D]``; the log target of each is
``(N/B) log p(y_B | w) + log N(w; 0, prior_std²)`` (the prior's gradient in closed form,
:func:`add_gaussian_log_prior`) and the RBF kernel (median-heuristic bandwidth) acts on the
weights themselves. Same storage, noise model and rules as
``fsvgd`` (:class:`~uncertain_agents.posteriors.particles.ParticlePosterior`).
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..registry import register
from .base import Batch
from .particle_rules import particle_direction
from .particles import ParticlePosterior


@register("svgd")
class WeightSpaceSVGD(ParticlePosterior):
    name = "svgd"

    def _direction(self, batch: Batch, generator: torch.Generator):
        with torch.enable_grad():
            w = self.particles.detach().requires_grad_(True)
            f = self.spec.forward(w, batch.x)
            log_noise = self.particle_log_noise()
            log_noise = None if log_noise is None else log_noise.detach()
            loglik = self.scaled_log_likelihood(f, batch, log_noise)
            (g,) = torch.autograd.grad(loglik.sum(), w)
        w = w.detach()
        target = add_gaussian_log_prior(loglik.detach(), g, w, self.prior_std)
        return particle_direction(w, g, self.rule), target


def add_gaussian_log_prior(loglik: Tensor, g: Tensor, w: Tensor, prior_std: Tensor) -> Tensor:
    """``loglik[n] + log N(w; 0, prior_std²)`` (up to its constant), and ``g[n, D] += ∇_w`` of the prior.

    The gradient ``-(w/s)/s`` is written in closed form, with the very operations autograd runs on
    ``-0.5 (w/s)².sum()`` (so the same bits), in three passes over ``[n, D]`` instead of eight.
    ``g`` is updated in place; returns the ``[n]`` log target.
    """
    scaled = w / prior_std
    target = loglik + -0.5 * scaled.square().sum(1)
    g.sub_(scaled.div_(prior_std))
    return target
