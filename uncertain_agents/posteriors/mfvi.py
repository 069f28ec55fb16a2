"""``mfvi`` (aliases ``vi``, ``bbb``): mean-field variational inference.

Blundell et al. 2015 ("Bayes by Backprop") with the local reparameterisation trick of
Kingma et al. 2015: in training, each layer's pre-activations are sampled per example
from their Gaussian marginal, ``N(h M + b_m, h² V + b_v)``, which has lower variance than
sampling weights. Objective: the negative ELBO with the analytic KL, scaled per data point.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..network import ACTIVATIONS
from ..objectives import negative_elbo
from ..registry import register
from .base import Batch
from .local_reparam import local_reparam_linear
from .mean_field import MeanFieldGaussian


@register("mfvi", "vi", "bbb")
class MeanFieldVI(MeanFieldGaussian):
    name = "mfvi"
    graph_safe_step = True  # fit on CUDA replays its step from a graph (posteriors/cuda_graphs.py)

    def local_reparam_forward(self, x: Tensor, k: int, generator: torch.Generator,
                              variances: Tensor | None = None) -> Tensor:
        """``x[B, d] -> f[k, B, out]`` with per-example pre-activation noise (``variances[D]``:
        the weights' ``std²`` when the caller has them already)."""
        act = ACTIVATIONS[self.spec.activation]
        means = self.spec.unflatten_one(self.mean)
        variances = self.spec.unflatten_one(torch.exp(2.0 * self.log_std) if variances is None else variances)
        h = x if k == 1 else x.unsqueeze(0).expand(k, -1, -1).reshape(k * x.shape[0], -1)
        for i, ((wm, bm), (wv, bv)) in enumerate(zip(means, variances)):
            if i > 0:
                h = act(h)
            eps = torch.randn((h.shape[0], wm.shape[1]), generator=generator, device=h.device, dtype=h.dtype)
            h = local_reparam_linear(h, wm, bm, wv, bv, eps)
        return h.view(k, x.shape[0], -1)

    def loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        variances, kl = self.variances_and_kl()
        f = self.local_reparam_forward(batch.x, self.train_samples, generator, variances)
        loglik = self.likelihood.log_prob(f, batch.y, batch.mask, **self._noise_kw())
        return negative_elbo(loglik, kl, batch.n_data)

    def _noise_kw(self) -> dict:
        return {"log_noise_std": self.log_noise_std_train()} if self.kind == "gaussian" else {}
