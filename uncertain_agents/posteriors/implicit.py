"""Building blocks of implicit posteriors (``aadm``, ``avb``): a weight generator, a
density-ratio discriminator and the adaptive-contrast KL estimate.

An implicit q draws ``ε ~ N(μ, diag σ²)`` (learnable μ, σ) and maps it through a
generator MLP to the weight matrices of the main network; q has no tractable density,
so ``KL(q‖p)`` is estimated with a discriminator (Mescheder et al. 2017, "adversarial
variational Bayes", with adaptive contrast): samples are standardised with their own
(stop-gradient) mean and std, ``w̃ = (w − μ̂)/σ̂``, and a classifier ``T`` learns to tell
``w̃`` from ``N(0, I)``; at its optimum ``T(w̃) = log q̃(w̃) − log N(w̃; 0, I)``, which
equals ``log q(w) − log r(w)`` for the factorised Gaussian ``r = N(μ̂, diag σ̂²)`` (the
Jacobians of the standardisation cancel). Then

    KL(q‖p) = E_q[log q − log r] + E_q[log r − log p] ≈ E_q[T(w̃) + log r(w) − log p(w)].
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEAKY_SLOPE = 0.2
LOG_2PI = math.log(2.0 * math.pi)


def leaky_mlp(widths: tuple[int, ...], generator: torch.Generator) -> nn.Sequential:
    """``widths[0] -> ... -> widths[-1]``: linear layers with leaky ReLU (slope 0.2) between
    them and a linear output; PyTorch's default initialisation drawn from ``generator``."""
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
        if i > 0:
            layers.append(nn.LeakyReLU(LEAKY_SLOPE))
        # skip_init: no default draw from torch's global generator (the user's stream is left alone)
        linear = nn.utils.skip_init(nn.Linear, fan_in, fan_out)
        bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default range, drawn reproducibly
        with torch.no_grad():
            linear.weight.uniform_(-bound, bound, generator=generator)
            linear.bias.uniform_(-bound, bound, generator=generator)
        layers.append(linear)
    return nn.Sequential(*layers)


class WeightGenerator(nn.Module):
    """``ε ~ N(μ, diag σ²)`` (``[noise_dim]`` learnable) through an MLP to ``[n, n_out]``.

    Args:
        noise_dim: width of ε (AADM: 100).
        hidden: hidden widths of the generator (AADM: (50, 50)); ``()`` is a linear
            generator, whose q is Gaussian.
        n_out: number of generated weights.
        generator: draws the initialisation.
    """

    def __init__(self, noise_dim: int, hidden: tuple[int, ...], n_out: int, generator: torch.Generator):
        super().__init__()
        self.noise_mean = nn.Parameter(0.1 * torch.randn(noise_dim, generator=generator))
        self.noise_log_std = nn.Parameter(torch.zeros(noise_dim))
        self.net = leaky_mlp((noise_dim, *hidden, n_out), generator)

    @property
    def noise_dim(self) -> int:
        return self.noise_mean.shape[0]

    def forward(self, n: int | tuple[int, ...], generator: torch.Generator) -> Tensor:
        """``n`` (or a shape) draws -> ``[*shape, n_out]``."""
        shape = (n,) if isinstance(n, int) else tuple(n)
        eps = torch.randn(*shape, self.noise_dim, generator=generator, device=self.noise_mean.device)
        return self.net(self.noise_mean + self.noise_log_std.exp() * eps)

    @torch.no_grad()
    def scale_output(self, target_std: Tensor, center: Tensor, generator: torch.Generator,
                     n_probe: int = 256) -> None:
        """Set the output layer so that the generated weights start centred on ``center[n_out]``
        with spread about ``target_std[n_out]`` (the rest of the network is left as drawn)."""
        last = self.net[-1]
        eps = torch.randn(n_probe, self.noise_dim, generator=generator, device=self.noise_mean.device)
        h = self.net[:-1](self.noise_mean + self.noise_log_std.exp() * eps)
        out = h @ last.weight.T
        spread = out.std(0).clamp_min(1e-12)
        last.weight.mul_((target_std / spread).unsqueeze(1))
        last.bias.copy_(center - (h.mean(0) @ last.weight.T))


class RatioDiscriminator(nn.Module):
    """``T(w̃)``: ``[..., n_in] -> [...]`` logits, an MLP with leaky ReLU (AADM: 2 × 50)."""

    def __init__(self, n_in: int, hidden: tuple[int, ...], generator: torch.Generator):
        super().__init__()
        self.net = leaky_mlp((n_in, *hidden, 1), generator)

    def forward(self, w_std: Tensor) -> Tensor:
        return self.net(w_std).squeeze(-1)


@dataclass
class Contrast:
    """The adaptive contrast of a set of samples ``w[S, n]``.

    Attributes:
        standardized: ``[S, n]`` ``(w − μ̂)/σ̂`` with stop-gradient ``μ̂, σ̂`` (over the S samples).
        log_r: ``[S]`` ``log r(w)``, ``r = N(μ̂, diag σ̂²)`` (differentiable in w), or None.
    """

    standardized: Tensor
    log_r: Tensor | None


def adaptive_contrast(w: Tensor, *, with_log_r: bool = True) -> Contrast:
    """Standardise ``w[S, n]`` by its own stop-gradient moments (needs ``S ≥ 2``);
    ``with_log_r=False`` skips ``log r`` (``Contrast.log_r`` is then None)."""
    detached = w.detach()
    mean = detached.mean(0)
    # (a plain mean of squares: torch.std over a short leading dim is ~50× slower on CPU)
    std = (detached - mean).square().mean(0).sqrt().clamp_min(1e-8)
    z = (w - mean) / std
    if not with_log_r:
        return Contrast(z, None)
    log_r = -(0.5 * z.square() + std.log() + 0.5 * LOG_2PI).sum(-1)
    return Contrast(z, log_r)


def discriminator_loss(discriminator: RatioDiscriminator, w_std: Tensor, generator: torch.Generator) -> Tensor:
    """Logistic loss of ``T`` on standardised q-samples ``w_std[S, n]`` (label 1) against as
    many ``N(0, I)`` draws (label 0): ``mean softplus(−T(w̃)) + mean softplus(T(z))``,
    with both sets through ``T`` in one batched pass."""
    z = torch.randn(w_std.shape, generator=generator, device=w_std.device, dtype=w_std.dtype)
    logits = discriminator(torch.cat([w_std, z]))
    s = w_std.shape[0]
    return F.softplus(-logits[:s]).mean() + F.softplus(logits[s:]).mean()


def gaussian_log_prior(w: Tensor, prior_std: Tensor) -> Tensor:
    """``w[S, n]`` -> ``[S]`` ``Σ_j log N(w_j; 0, prior_std_j²)``."""
    return -(0.5 * (w / prior_std).square() + prior_std.log() + 0.5 * LOG_2PI).sum(-1)
