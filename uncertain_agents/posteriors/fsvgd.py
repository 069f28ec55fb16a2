"""``fsvgd``: function-space particle optimisation (Wang, Ren, Zhu & Zhang, ICLR 2019).

Algorithm 1 of the paper, one step:

1. take the minibatch ``x[B]`` plus ``B'`` extra points — random training inputs with
   small Gaussian noise (a kernel density estimate of the input distribution);
2. evaluate all particles in one batched forward: ``f[n, B+B', out]`` (classification
   uses the log-softmax outputs as function values);
3. target gradient ``g = ∇_f [(N/B) log p(y_B | f_B) + s · log q_prior(f_P)]`` where
   ``q_prior`` is a Gaussian moment-matched to ``prior_draws`` fresh prior networks at a
   few points ``P`` (half from the batch, half from the extra points; float64,
   eigenvalues clipped from below, redrawn every step, no gradient);
4. the particle rule's direction ``phi`` (SVGD by default: RBF kernel on the flattened
   function values, median-heuristic bandwidth);
5. pushed back to the weights with one vector-Jacobian product
   ``torch.autograd.grad(f, params, grad_outputs=phi)``, then an Adam step.

Regression noise is per particle: a separate MAP step under InvGamma(a, b) on the
noise std, or fixed with ``noise_std`` (see :class:`ParticlePosterior`).

Defaults, chosen for robustness over long runs (``docs/fsvgd.md`` has the evidence):
``n_extra = min(B, 32)`` extra points, perturbed by ``N(0, 1/N)`` in training units (under
the default √d input scale that is √d times the authors' KDE width, ``1/sqrt(N·d)`` on their
√d-scaled inputs; the authors' width was no better on validation rows, docs/fsvgd.md); four prior points and 40 prior draws, sampled layer by layer
with an exact QR trick (``prior_function_draws``); eigenvalue floor 1e-3 (10 for
classification); prior weight ``prior_scale = 1``; inputs standardised and divided by √d
(``input_scale="sqrt_dim"``, the authors' scaling); and ``noise_holdout = 0.1`` — the
per-particle noise is fitted on 10% of the training rows that the particles never train on,
which stops the noise from shrinking to the (over-fitted) training residual.
``noise_holdout=0`` is the paper's step.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
import torch.nn.functional as F

from ..likelihoods import LOG_2PI
from ..network import MLPSpec
from ..registry import register
from ..validation import check_positive_float, check_positive_int
from .base import Batch
from .cuda_graphs import run_stages_eagerly
from .function_prior import (GaussianFunctionPrior, check_step_clip, clipped_precision, layer_prior_stds,
                             moment_match, prior_function_draws, step_precision)
from .particle_rules import particle_direction
from .particles import ParticlePosterior


@register("fsvgd", "f-svgd", "fpovi")
class FunctionSpaceSVGD(ParticlePosterior):
    """Function-space particle optimisation.

    Method options (beyond :class:`ParticlePosterior`'s):
        n_extra: extra points per step ``B'`` (``None`` = ``min(B, 32)``; 0 = none).
        extra_noise: std of the Gaussian perturbation of the extra points in training
            units (``None`` = ``1/sqrt(N)``).
        prior_points: number of points the function prior is fitted on (default 4).
        prior_draws: prior networks drawn per step for the moment matching (default 40).
        prior_eig_floor: lower clip of the prior covariance eigenvalues (``None`` = the
            likelihood's entry of :attr:`default_prior_eig_floor`: 1e-3 for regression, 10 for
            classification).
        prior_scale: weight of the log function prior (default 1, as the paper).
        input_scale: default ``"sqrt_dim"`` — standardised inputs are further divided by
            √d, as in the authors' code (chosen on validation rows, see docs/fsvgd.md);
            ``svgd`` keeps 1.
    """

    name = "fsvgd"
    default_input_scale = "sqrt_dim"
    #: Classification keeps the ``1/sqrt(fan_in)`` prior: with N(0, 1) weights the prior
    #: logits on raw pixels are so large that the moment-matched Gaussian over log-softmax
    #: values is degenerate and training collapses to chance (digits, 2×100: clean
    #: accuracy 0.10 on 3 seeds; 0.967 with the fan-in prior, 0.942 with N(0, 0.3²)).
    default_prior_std = {"gaussian": None, "categorical": None}
    #: Eigenvalue floor of the moment-matched function prior, per likelihood. Regression keeps
    #: 1e-3 (the authors' UCI setting). Classification uses 10, the floor of the authors' clean
    #: MNIST run (thu-ml/fpovi, ``exps/mnist-clean.sh``): prior networks with the fan-in prior
    #: give log-softmax values close to uniform with a tiny spread, so a 1e-3 floor makes a
    #: precision of up to 1000 that holds every particle's predictive near uniform (digits,
    #: 2×100, 3 seeds: clean entropy 2.24 of the maximal 2.30 nats at 97% accuracy); with 10 the
    #: prior is a weak pull and the same runs give 0.17–0.19 nats at 99.1–99.6% (docs/fsvgd.md).
    default_prior_eig_floor = {"gaussian": 1e-3, "categorical": 10.0}

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, n_extra: int | None = None,
                 extra_noise: float | None = None, prior_points: int = 4, prior_draws: int = 40,
                 prior_eig_floor: float | None = None, prior_scale: float = 1.0,
                 input_scale: str | float = "sqrt_dim", **kwargs):
        check_step_clip()
        super().__init__(spec, likelihood, input_scale=input_scale, **kwargs)
        if n_extra is not None and (isinstance(n_extra, bool) or not isinstance(n_extra, int) or n_extra < 0):
            raise ValueError(f"n_extra must be a non-negative integer or None, got {n_extra!r}")
        self.n_extra = n_extra
        self.extra_noise = check_positive_float(extra_noise, "extra_noise", allow_none=True)
        self.prior_points = check_positive_int(prior_points, "prior_points")
        self.prior_draws = check_positive_int(prior_draws, "prior_draws")
        if self.prior_draws < 2:
            raise ValueError(f"prior_draws must be at least 2 (a covariance is estimated), got {prior_draws}")
        if prior_eig_floor is None:
            prior_eig_floor = self.default_prior_eig_floor[self.kind]
        self.prior_eig_floor = check_positive_float(prior_eig_floor, "prior_eig_floor")
        self.prior_scale = check_positive_float(prior_scale, "prior_scale")
        self._layer_stds = layer_prior_stds(spec, self.prior_std)

    def _on_prior_change(self) -> None:
        self._layer_stds = layer_prior_stds(self.spec, self.prior_std)

    # ------------------------------------------------------------ pieces
    def function_values(self, params: Tensor, x: Tensor) -> Tensor:
        """``params[n, D]``, ``x[B, d]`` -> ``[n, B, out]`` (log-softmax for classification)."""
        f = self.spec.forward(params, x)
        return F.log_softmax(f, dim=-1) if self.kind == "categorical" else f

    def function_prior(self, x: Tensor, generator: torch.Generator) -> GaussianFunctionPrior:
        """Moment-matched Gaussian of fresh prior functions at ``x[P, d]`` over ``[P·out]`` values."""
        mean, cov = self.function_prior_moments(x, generator)
        return GaussianFunctionPrior(mean, clipped_precision(cov, self.prior_eig_floor))

    def function_prior_moments(self, x: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Float64 ``mean[P·out]`` and covariance ``[P·out, P·out]`` of fresh prior functions at
        ``x[P, d]`` (:func:`~.function_prior.moment_match`; the precision is the caller's)."""
        with torch.no_grad():
            draws = prior_function_draws(self.spec, self.prior_std, x, self.prior_draws, generator,
                                         self._layer_stds)
            if self.kind == "categorical":
                draws = F.log_softmax(draws, dim=-1)
            return moment_match(draws.reshape(self.prior_draws, -1))

    def extra_points(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """``[B', d]`` random training inputs plus Gaussian noise (training units)."""
        n_extra = min(batch.x.shape[0], 32) if self.n_extra is None else self.n_extra
        if n_extra == 0:
            return batch.x[:0]
        pool = batch.x_pool if batch.x_pool is not None else batch.x
        idx = torch.randint(pool.shape[0], (n_extra,), generator=generator, device=batch.x.device)
        scale = self.extra_noise if self.extra_noise is not None else 1.0 / math.sqrt(batch.n_data)
        noise = torch.randn(n_extra, batch.x.shape[1], generator=generator, device=batch.x.device,
                            dtype=batch.x.dtype)
        return pool.index_select(0, idx) + scale * noise

    def prior_index(self, n_batch: int, n_extra: int) -> Tensor:
        """Indices into ``[batch; extra]`` of the prior points: half batch, half extra.

        Cached per ``(n_batch, n_extra, device)``: built from a Python list, the tensor is a
        host-to-device copy, which on CUDA waits for the device's queue (a sync per step)."""
        key = (n_batch, n_extra, str(self.device))
        cache = self.__dict__.setdefault("_prior_index_cache", {})
        if key not in cache:
            cache[key] = self._build_prior_index(n_batch, n_extra)
        return cache[key]

    def _build_prior_index(self, n_batch: int, n_extra: int) -> Tensor:
        total = n_batch + n_extra
        p = min(self.prior_points, total)
        from_extra = min(n_extra, p // 2) if n_extra else 0
        from_batch = min(n_batch, p - from_extra)
        from_extra = p - from_batch
        idx = list(range(from_batch)) + list(range(total - from_extra, total))
        return torch.tensor(idx, dtype=torch.long, device=self.device)

    def log_target(self, f: Tensor, batch: Batch, log_noise: Tensor | None,
                   prior: GaussianFunctionPrior, prior_idx: Tensor) -> Tensor:
        """``[n]`` per-particle log target ``(N/B)·loglik + s·log q_prior(f_P)``.

        Args:
            f: ``[n, B+B', out]`` function values; the first ``B`` rows are the batch.
        """
        n, B = f.shape[0], batch.x.shape[0]
        loglik = self.scaled_log_likelihood(f[:, :B], batch, log_noise)
        log_prior = prior.log_prob(f[:, prior_idx].reshape(n, -1))
        return loglik + self.prior_scale * log_prior

    @torch.no_grad()
    def log_target_and_grad(self, f: Tensor, batch: Batch, log_noise: Tensor, prior: GaussianFunctionPrior,
                            prior_idx: Tensor) -> tuple[Tensor, Tensor]:
        """Gaussian likelihood: :meth:`log_target` ``[n]`` and its gradient ``[n, B+B', out]`` in ``f``.

        The gradient is written in closed form with the operations autograd runs on :meth:`log_target`,
        in its order (so the same bits; ``tests/test_svgd.py`` compares the two): for the likelihood
        ``w·z·e`` with ``z = (y − f)e``, ``e = exp(−log σ)`` and ``w`` the row scale times the mask; for the
        function prior ``(−½s)·diff·Pᵀ + (−½s)·(diff·P)``, ``diff = f_P − mean`` in float64; the two
        placed in zero tensors of ``f``'s shape and added. About a dozen operations instead of autograd's
        forty on small tensors (docs/speed.md, session 29).
        """
        n, B = f.shape[0], batch.x.shape[0]
        fb = f[:, :B]
        log_s = log_noise.unsqueeze(1)
        e = torch.exp(-log_s)
        z = (batch.y - fb) * e
        lp = -0.5 * z.square() - log_s - 0.5 * LOG_2PI
        mask = batch.mask
        if mask is not None:
            lp = lp * mask
        rows = lp.sum(-1)  # [n, B]
        keep, scale = self.row_scale(batch, rows.dtype)
        loglik = (rows.sum(1) if keep is None else (rows * keep).sum(1)) * scale
        row_weight = torch.full((), scale, dtype=rows.dtype, device=rows.device)
        if keep is not None:
            row_weight = row_weight * keep.unsqueeze(-1)
        w = row_weight if mask is None else row_weight * mask
        g_lik = torch.zeros_like(f)
        g_lik[:, :B] = (w * z) * e
        zp = f[:, prior_idx].reshape(n, -1)
        diff = zp.double() - prior.mean
        a = diff @ prior.precision
        log_prior = (-0.5 * (a * diff).sum(-1)).to(f.dtype)
        target = loglik + self.prior_scale * log_prior
        u = torch.full((), self.prior_scale, dtype=f.dtype, device=f.device).double() * -0.5
        g_diff = (u * diff).mm(prior.precision.t()) + u * a
        g_prior = torch.zeros_like(f)
        g_prior[:, prior_idx] += g_diff.to(f.dtype).view(n, -1, f.shape[-1])
        return target, g_lik + g_prior

    # ------------------------------------------------------------- update
    def _direction(self, batch: Batch, generator: torch.Generator):
        return run_stages_eagerly(self._direction_stages(batch, generator))

    def _direction_stages(self, batch: Batch, generator: torch.Generator):
        """The direction, with the prior's eigen-clipped precision computed by
        :func:`~.function_prior.step_precision`: by default an eager stage (``torch.linalg.eigh``
        reads its error flag on the host, so it cannot be captured in a CUDA graph,
        :mod:`.cuda_graphs`; the rest of the step can), or matrix products inside the step."""
        x_extra = self.extra_points(batch, generator)
        x_all = torch.cat([batch.x, x_extra])
        prior_idx = self.prior_index(batch.x.shape[0], x_extra.shape[0])
        mean, cov = self.function_prior_moments(x_all[prior_idx], generator)
        precision = yield from step_precision(cov, self.prior_eig_floor)
        prior = GaussianFunctionPrior(mean, precision)
        with torch.enable_grad():
            f = self.function_values(self.particles, x_all)
            log_noise = self.particle_log_noise()
            log_noise = None if log_noise is None else log_noise.detach()
            values = f.detach()
            if self.kind == "gaussian":
                target, g = self.log_target_and_grad(values, batch, log_noise, prior, prior_idx)
            else:
                f_leaf = values.requires_grad_(True)
                target = self.log_target(f_leaf, batch, log_noise, prior, prior_idx)
                (g,) = torch.autograd.grad(target.sum(), f_leaf)
                values = f_leaf.detach()
            n = f.shape[0]
            phi = particle_direction(values.reshape(n, -1), g.reshape(n, -1), self.rule).reshape(f.shape)
            (direction,) = torch.autograd.grad(f, self.particles, grad_outputs=phi)
        return direction, target.detach()
