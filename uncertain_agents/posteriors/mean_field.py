"""Factorised-Gaussian storage shared by ``mfvi`` and ``bb-alpha``."""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..network import MLPSpec
from ..validation import check_positive_float, check_positive_int
from .base import Posterior


class MeanFieldGaussian(Posterior):
    """``q(w) = N(mean, diag(std²))`` over all weights and biases, Gaussian prior.

    Method options:
        train_samples: Monte-Carlo samples per step (K).
        init_std: initial posterior std as a fraction of the prior std (default 0.1 —
            small enough to start from a near-deterministic net, large enough that the
            variances converge within a few hundred epochs).
        learn_prior: empirical Bayes (default False): each layer's prior std is the given
            one times a learned factor, fitted by the same objective as ``q`` (the ELBO);
            refined VI's initial VI in Havasi et al. tunes its prior variance this way.
    """

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, train_samples: int = 1,
                 init_std: float = 0.1, learn_prior: bool = False, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self.train_samples = check_positive_int(train_samples, "train_samples")
        self.init_std = check_positive_float(init_std, "init_std")
        if not isinstance(learn_prior, bool):
            raise TypeError(f"learn_prior must be True or False, got {learn_prior!r}")
        self.learn_prior = learn_prior
        mean = spec.init_params(1, generator=self._init_generator)[0]
        self.mean = nn.Parameter(mean)
        self.log_std = nn.Parameter((self.prior_std * self.init_std).log())
        layer_of_param = torch.cat([torch.full((fi * fo + fo,), i, dtype=torch.long)
                                    for i, (fi, fo) in enumerate(spec.layer_shapes)])
        self.register_buffer("layer_of_param", layer_of_param.to(self.prior_std.device))
        scale = torch.zeros(len(spec.layer_shapes), device=self.prior_std.device)
        if learn_prior:
            self.log_prior_scale = nn.Parameter(scale)
        else:
            self.register_buffer("log_prior_scale", scale)

    def _on_prior_change(self) -> None:
        with torch.no_grad():
            self.log_std.copy_((self.prior_std * self.init_std).log())

    @property
    def std(self) -> Tensor:
        """``[D]`` posterior standard deviations."""
        return self.log_std.exp()

    def log_prior_std(self) -> Tensor:
        """``[D]`` log prior std of every weight: the configured one, times the learned
        per-layer factor under ``learn_prior`` (otherwise the factor is 1)."""
        log_std = self.prior_std.log()
        if self.learn_prior:
            log_std = log_std + self.log_prior_scale[self.layer_of_param]
        return log_std

    def variances_and_kl(self) -> tuple[Tensor, Tensor]:
        """``(std² [D], KL(q || prior))`` for a training step: with a fixed prior, one autograd
        node (:class:`_VariancesAndKL`, the same numbers as :meth:`kl_divergence` and
        ``exp(2 log_std)`` without their ~30 recorded elementwise ops); with a learned prior
        scale, the composed ops."""
        if self.learn_prior:
            return torch.exp(2.0 * self.log_std), self.kl_divergence()
        return _VariancesAndKL.apply(self.mean, self.log_std, self.prior_std)

    def kl_divergence(self) -> Tensor:
        """Analytic ``KL(q || prior)`` summed over all weights."""
        log_prior = self.log_prior_std()
        log_ratio = self.log_std - log_prior
        return 0.5 * (torch.exp(2.0 * log_ratio) + (self.mean * torch.exp(-log_prior)).square()
                      - 1.0 - 2.0 * log_ratio).sum()

    def draw(self, k: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``k`` reparameterised draws ``w[k, D]`` and their log ratios ``log q(w) - log p0(w)`` ``[k]``.

        The ratio is computed from the standard-normal noise, so it stays accurate
        even for tiny posterior variances. With a fixed prior the draw and its ratio are one
        autograd node (:class:`_DrawWithLogRatio`: the same numbers, about 15 recorded
        operations over ``[k, D]`` tensors fewer); with a learned prior scale, composed ops.
        """
        eps = torch.randn(k, self.spec.num_params, generator=generator, device=self.device)
        if not self.learn_prior:
            return _DrawWithLogRatio.apply(self.mean, self.log_std, eps, self.prior_std)
        w = self.mean + self.std * eps
        log_q = -(self.log_std + 0.5 * eps.square()).sum(-1)
        log_prior = self.log_prior_std()
        log_p = -(log_prior + 0.5 * (w * torch.exp(-log_prior)).square()).sum(-1)
        return w, log_q - log_p

    def _sample(self, n: int, generator: torch.Generator):
        eps = torch.randn(n, self.spec.num_params, generator=generator, device=self.device)
        return torch.addcmul(self.mean, self.std, eps), None  # the same draws as ``draw``


class _VariancesAndKL(torch.autograd.Function):
    """``(mean, log_std, prior_std) -> (exp(2 log_std), KL)`` for a fixed prior.

    The forward repeats :meth:`MeanFieldGaussian.kl_divergence`'s arithmetic; the backward is
    the gradient autograd forms from it, in the same order (factors ½ and 2 are powers of two,
    so folding them changes no bit)::

        ∂/∂log_std = 2 var ⊙ g_var + (g_kl r − g_kl),   r = exp(2 (log_std − log σ_p))
        ∂/∂mean    = (g_kl (mean / σ_p)) / σ_p
    """

    @staticmethod
    def forward(ctx, mean: Tensor, log_std: Tensor, prior_std: Tensor) -> tuple[Tensor, Tensor]:
        log_prior = prior_std.log()
        log_ratio = log_std - log_prior
        ratio = torch.exp(2.0 * log_ratio)
        inv_prior = torch.exp(-log_prior)
        scaled_mean = mean * inv_prior
        kl = 0.5 * (ratio + scaled_mean.square() - 1.0 - 2.0 * log_ratio).sum()
        variances = torch.exp(2.0 * log_std)
        ctx.save_for_backward(ratio, inv_prior, scaled_mean, variances)
        return variances, kl

    @staticmethod
    def backward(ctx, g_var: Tensor | None, g_kl: Tensor | None):
        ratio, inv_prior, scaled_mean, variances = ctx.saved_tensors
        grad_log_std = None
        grad_mean = None
        if g_kl is not None:
            grad_log_std = (ratio * g_kl).sub_(g_kl)
            grad_mean = (scaled_mean * g_kl).mul_(inv_prior)
        if g_var is not None:
            from_var = (g_var * variances).mul_(2.0)
            grad_log_std = from_var if grad_log_std is None else from_var.add_(grad_log_std)
        if grad_mean is None and ctx.needs_input_grad[0]:
            grad_mean = torch.zeros_like(ratio)
        return grad_mean, grad_log_std, None


class _DrawWithLogRatio(torch.autograd.Function):
    """``(mean, log_std, eps, prior_std) -> (w, log q(w) − log p0(w))`` for a fixed prior, with
    ``w = mean + exp(log_std) ε``.

    The forward repeats :meth:`MeanFieldGaussian.draw`'s composed arithmetic; the backward is
    the gradient autograd forms from it, term for term and in the same order (the factors ½
    and 2 of the square are powers of two, so folding them changes no bit)::

        ∂/∂w        = g_w + (g_r (w / σ_p)) / σ_p
        ∂/∂mean     = Σ_k ∂/∂w,   ∂/∂log_std = (Σ_k ∂/∂w ⊙ ε) ⊙ std + Σ_k (−g_r)
    """

    @staticmethod
    def forward(ctx, mean: Tensor, log_std: Tensor, eps: Tensor, prior_std: Tensor) -> tuple[Tensor, Tensor]:
        std = log_std.exp()
        w = mean + std * eps
        log_q = -(log_std + 0.5 * eps.square()).sum(-1)
        log_prior = prior_std.log()
        inv_prior = torch.exp(-log_prior)
        scaled = w * inv_prior
        log_p = -(log_prior + 0.5 * scaled.square()).sum(-1)
        ctx.save_for_backward(std, eps, inv_prior, scaled)
        return w, log_q - log_p

    @staticmethod
    def backward(ctx, g_w: Tensor | None, g_r: Tensor | None):
        std, eps, inv_prior, scaled = ctx.saved_tensors
        k, d = eps.shape
        grad_w = g_w
        from_q = None
        if g_r is not None:
            g_rows = g_r.unsqueeze(-1).expand(k, d)
            from_p = (g_rows * scaled).mul_(inv_prior)
            grad_w = from_p if grad_w is None else from_p.add_(grad_w)
            # reduced over the same stride-0 view autograd reduces (a materialised copy would be
            # summed in another order)
            from_q = g_r.neg().unsqueeze(-1).expand(k, d).sum(0, keepdim=True).view(d)
        if grad_w is None:
            grad_w = torch.zeros_like(eps)
        grad_mean = grad_w.sum(0, keepdim=True).view(d)
        grad_log_std = (grad_w * eps).sum(0, keepdim=True).view(d).mul_(std)
        if from_q is not None:
            grad_log_std = grad_log_std.add_(from_q)
        return grad_mean, grad_log_std, None, None
