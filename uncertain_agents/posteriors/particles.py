"""Particle storage shared by ``svgd`` and ``fsvgd``.

``n_particles`` full weight vectors live in one parameter ``particles[n, D]``, evaluated
by one batched forward. Regression noise is per particle: ``log_noise[n, out]`` (training
units), fitted by a separate MAP step under an inverse-gamma prior on the noise std, or
fixed by ``noise_std``. A posterior sample is a particle drawn uniformly with replacement.
By default the noise is fitted on a 10% hold-out of the rows (``noise_holdout``).

Subclasses implement :meth:`ParticlePosterior._direction` (or its staged form
:meth:`ParticlePosterior._direction_stages`), the ascent direction of their
particle rule; the update is then one Adam step on ``-direction / N`` (per data point,
like every other method's loss).
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor, nn

from ..function_sample import FunctionSample
from ..network import MLPSpec
from ..predictive import Predictive
from ..validation import check_positive_float, check_positive_int
from .base import Batch, OptimizerGroup, Posterior, TrainingContext
from .cuda_graphs import run_stages_eagerly
from .particle_rules import check_rule


class ParticlePosterior(Posterior):
    """Stacked particles ``[n, D]`` with per-particle regression noise.

    Method options:
        n_particles: number of particles (default 20).
        rule: particle update, one of ``svgd`` (default), ``gfsf``, ``wsgld``, ``pisgld``.
        noise_prior: ``(a, b)`` of the InvGamma(a, b) prior on each particle's noise
            std in training units (default ``(1.0, 0.1)``, as Wang et al. 2019).
        input_scale: extra divisor of the standardised inputs (``"sqrt_dim"`` = √d, as
            the authors' code scales inputs by std·√d); default 1. It applies to standardised
            inputs only: the first ``fit`` with ``standardize=True`` multiplies ``x_scale`` by it.
            Units fixed otherwise are used as they are — by :meth:`set_units` (the bandit
            agents fix raw units so, and their contexts are not scaled) or with
            ``standardize=False`` (the identity). Passing a scale other than 1 and other than
            the method's default together with ``standardize=False`` raises ``ValueError``.
        noise_holdout: fraction of the training rows (default 0.1) held out from the
            particles' likelihood and used only by the noise MAP step, so the learned
            noise follows out-of-sample residuals instead of shrinking with over-fitting;
            0 gives the paper's step (noise fitted on the minibatch). Only used when the
            noise is learned.
        init_scale: ``None`` (default) initialises the particles like every method (He-style
            normal weights, zero biases); a number ``c`` draws weights from
            ``N(0, c² / (fan_in + fan_out + 1))`` with zero biases, the initialisation of Wang et
            al.'s bandit code (``c = √10``, their prior std; the ``fsvgd-paper`` bandit protocol).
        init_noise_std (common option): initial learned noise std, training units.
    """

    #: ``input_scale``'s default in the method's signature (a scale given with ``standardize=False``
    #: other than 1 or this is refused: it would be ignored).
    default_input_scale: str | float = 1.0

    default_lr = 4e-3

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, n_particles: int = 20,
                 rule: str = "svgd", noise_prior: tuple[float, float] | list[float] = (1.0, 0.1),
                 input_scale: str | float = 1.0, noise_holdout: float = 0.1,
                 noise_objective: str = "mixture", init_scale: float | None = None, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self.n_particles = check_positive_int(n_particles, "n_particles")
        self.rule = check_rule(rule)
        if (not isinstance(noise_prior, (tuple, list)) or len(noise_prior) != 2
                or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in noise_prior)):
            raise ValueError(f"noise_prior must be a pair (a, b) of positive numbers, got {noise_prior!r}")
        self.noise_a = check_positive_float(noise_prior[0], "noise_prior[0] (a)")
        self.noise_b = check_positive_float(noise_prior[1], "noise_prior[1] (b)")
        if isinstance(input_scale, str):
            if input_scale != "sqrt_dim":
                raise ValueError(f"input_scale must be a positive number or 'sqrt_dim', got {input_scale!r}")
            self.input_scale = math.sqrt(spec.in_dim)
        else:
            self.input_scale = check_positive_float(input_scale, "input_scale")
        if not self.standardize and input_scale not in (1.0, type(self).default_input_scale):
            raise ValueError(f"{self.name}: input_scale={input_scale!r} divides standardised inputs only, and "
                             f"standardize=False trains on the inputs as given, so it would be ignored; "
                             f"use standardize=True, or scale the inputs yourself and leave input_scale "
                             f"at its default")
        if (isinstance(noise_holdout, bool) or not isinstance(noise_holdout, numbers.Real)
                or not 0.0 <= noise_holdout < 0.5):
            raise ValueError(f"noise_holdout must be a fraction in [0, 0.5), got {noise_holdout!r}")
        self.noise_holdout = float(noise_holdout)
        if noise_objective not in ("mixture", "particle"):
            raise ValueError(f"noise_objective must be 'mixture' or 'particle', got {noise_objective!r}")
        self.noise_objective = noise_objective
        self._holdout: Tensor | None = None
        # a buffer, so that it is saved: an unseeded posterior draws it, and a loaded one must hold out
        # the same rows as the one that was saved to resume its training
        self.register_buffer("holdout_seed", torch.randint(2**31, (), generator=self._init_generator))
        self._holdout_rows: Tensor | None = None
        self.init_scale = check_positive_float(init_scale, "init_scale", allow_none=True)
        self.particles = nn.Parameter(self.initial_params(self.n_particles, generator=self._init_generator))
        self.learn_noise = self.kind == "gaussian" and self.fixed_noise_std is None
        if self.learn_noise:
            # per-particle noise replaces the likelihood's single shared one
            start = self.likelihood.log_noise_std.detach().clone()
            self.likelihood.log_noise_std.requires_grad_(False)
            self.log_noise = nn.Parameter(start.expand(self.n_particles, -1).clone())
        else:
            self.log_noise = None

    def initial_params(self, n: int, *, generator: torch.Generator) -> Tensor:
        """``[n, D]`` fresh particles under this posterior's initialisation (``init_scale``)."""
        if self.init_scale is None:
            return self.spec.init_params(n, generator=generator)
        return self.spec.glorot_params(n, self.init_scale, generator=generator)

    def fix_units_from_data(self, x: Tensor, y: Tensor, mask: Tensor | None) -> bool:
        first = super().fix_units_from_data(x, y, mask)
        if first and self.input_scale != 1.0:
            self.x_scale.mul_(self.input_scale)
        return first

    def prepare_data(self, n_data: int) -> None:
        """Pick the rows whose residuals fit the learned noise (``noise_holdout``).

        The choice depends only on the seed and ``N``, so a warm-started refit on the same
        data keeps the same hold-out.
        """
        self._holdout = None
        k = int(round(self.noise_holdout * n_data))
        if self.learn_noise and k >= 1 and n_data - k >= 1:
            g = torch.Generator().manual_seed(int(self.holdout_seed) + n_data)
            rows = torch.randperm(n_data, generator=g)[:k]
            hold = torch.zeros(n_data, dtype=torch.bool)
            hold[rows] = True
            self._holdout = hold.to(self.device)
            self._holdout_rows = rows.sort().values.to(self.device)

    def scaled_log_likelihood(self, f: Tensor, batch: Batch, log_noise: Tensor | None) -> Tensor:
        """``[n]`` minibatch estimate of the log-likelihood of the rows the particles train on.

        Without a noise hold-out this is ``(N/B) Σ_b log p(y_b | f_b)``; with one, the
        held-out rows of the batch are left out and the rest are scaled to their total.
        """
        rows = self.log_likelihood(f, batch, log_noise)  # [n, B]
        keep, scale = self.row_scale(batch, rows.dtype)
        return (rows.sum(1) if keep is None else (rows * keep).sum(1)) * scale

    def row_scale(self, batch: Batch, dtype: torch.dtype) -> tuple[Tensor | None, float]:
        """The rows of ``batch`` the particles train on and the scale of their sum: ``(None, N/B)``
        without a noise hold-out, else the ``[B]`` 0/1 keep weights and ``n_fit / kept``."""
        B, N = batch.x.shape[0], batch.n_data
        if not self._holding_out(N):
            return None, N / B
        keep = (~self._holdout[batch.index]).to(dtype)  # [B]
        n_fit = N - int(self._holdout_rows.numel())
        return keep, n_fit / max(float(keep.sum()), 1.0)

    def noise_log_likelihood(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """Scalar data term of the noise step, differentiable in ``log_noise``.

        Without a hold-out (the paper's step): ``Σ_i (N/B) Σ_b log p(y_b | f_i, σ_i)`` on the
        minibatch — every particle's own MAP objective. With a hold-out: the held-out
        rows (at most ``max(B, 256)``, drawn at random), scaled to ``N`` rows, scored by
        the particle mixture, ``(N/H) Σ_h log (1/n) Σ_i p(y_h | f_i, σ_i)`` (log-sum-exp);
        the particles never train on these rows, so the noises are fitted to make the
        predictive calibrated out of sample (``noise_objective="particle"`` scores each
        particle on its own instead).
        """
        N = batch.n_data
        if not (self._holding_out(N) and batch.y_pool is not None):
            with torch.no_grad():
                f = self.spec.forward(self.particles, batch.x)
            return self.log_likelihood(f, batch, self.log_noise).sum() * (N / batch.x.shape[0])
        rows = self._holdout_rows
        cap = max(batch.x.shape[0], 256)
        if rows.numel() > cap:
            pick = torch.randperm(rows.numel(), generator=generator, device=rows.device)[:cap]
            rows = rows[pick]
        mask = None if batch.mask_pool is None else batch.mask_pool.index_select(0, rows)
        sub = Batch(batch.x_pool.index_select(0, rows), batch.y_pool.index_select(0, rows), mask, rows, N)
        with torch.no_grad():
            f = self.spec.forward(self.particles, sub.x)
        ll = self.log_likelihood(f, sub, self.log_noise)  # [n, H]
        if self.noise_objective == "particle":
            return ll.sum() * (N / rows.numel())
        mixture = torch.logsumexp(ll, dim=0) - math.log(ll.shape[0])  # [H]
        return mixture.sum() * (N / rows.numel())

    def _holding_out(self, n_data: int) -> bool:
        return self._holdout is not None and self._holdout.shape[0] == n_data

    # ------------------------------------------------------------ pieces
    def particle_log_noise(self) -> Tensor | None:
        """``[n, out]`` log noise std in training units (None for classification)."""
        if self.kind != "gaussian":
            return None
        if self.learn_noise:
            return self.log_noise
        return self.log_noise_std_train().expand(self.n_particles, -1)

    def log_likelihood(self, f: Tensor, batch: Batch, log_noise: Tensor | None) -> Tensor:
        """``f[n, B, out]`` -> ``[n, B]`` masked log-likelihood (``log_noise[n, out]``)."""
        if self.kind == "gaussian":
            return self.likelihood.log_prob(f, batch.y, batch.mask, log_noise_std=log_noise.unsqueeze(1))
        return self.likelihood.log_prob(f, batch.y, batch.mask)

    def noise_log_prior(self, log_noise: Tensor) -> Tensor:
        """``[n]`` log InvGamma(a, b) density of the noise std ``σ = exp(log_noise)``, summed over outputs."""
        return (-(self.noise_a + 1.0) * log_noise - self.noise_b * torch.exp(-log_noise)).sum(-1)

    def optimizer_groups(self) -> dict[str, OptimizerGroup]:
        """``"main"``: the particles; ``"noise"``: the per-particle noise (when learned)."""
        groups = {"main": OptimizerGroup((self.particles,))}
        if self.learn_noise:
            groups["noise"] = OptimizerGroup((self.log_noise,))
        return groups

    # ------------------------------------------------------------- update
    def _direction(self, batch: Batch, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """One step's ascent direction, computed by the subclass.

        Returns:
            ``direction[n, D]``: the particle rule's direction pushed back to the weights;
            ``log_target[n]``: the log target per particle (detached, for the trace).
        """
        raise NotImplementedError

    def _direction_stages(self, batch: Batch, generator: torch.Generator):
        """:meth:`_direction` as a staged generator (default: no eager stage)."""
        return self._direction(batch, generator)
        yield  # pragma: no cover — makes this a generator

    @property
    def graph_safe_step(self) -> bool:
        """The step can be captured (:mod:`.cuda_graphs`) unless a learned noise fits on held-out
        rows (their count in a minibatch is read on the host)."""
        return not (self.learn_noise and self.noise_holdout > 0)

    def _noise_objective_and_grad(self, batch: Batch, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """The noise MAP objective (log-likelihood + log InvGamma; detached scalar) and its
        gradient ``[n, out]`` in ``log_noise``."""
        with torch.enable_grad():
            objective = self.noise_log_likelihood(batch, generator) + self.noise_log_prior(self.log_noise).sum()
            (grad,) = torch.autograd.grad(objective.sum(), self.log_noise)
        return objective.detach(), grad

    def training_step(self, batch: Batch, ctx: TrainingContext) -> dict[str, Tensor]:
        """One Adam step of the particles along their rule's direction, then (learned
        noise) a separate MAP step of each particle's noise std, both per data point.

        Named losses: ``loss`` (minus the mean log target per data point) and, with a
        learned noise, ``noise`` (minus its MAP objective per data point).
        """
        return run_stages_eagerly(self.training_stages(batch, ctx))

    def training_stages(self, batch: Batch, ctx: TrainingContext):
        """:meth:`training_step` as a staged generator (:mod:`.cuda_graphs`): the same
        operations in the same order, with the direction's eager stages (f-SVGD's ``eigh``)
        yielded to the caller."""
        direction, log_target = yield from self._direction_stages(batch, ctx.generator)
        n_data = float(batch.n_data)
        noise_grad = noise_objective = None
        if self.learn_noise:  # both gradients are taken at the same (pre-step) state
            noise_objective, noise_grad = self._noise_objective_and_grad(batch, ctx.generator)
        # d / (-N) is -d / N to the bit (rounding is symmetric in sign), in one pass over [n, D]
        ctx.apply_gradients({self.particles: direction.detach() / -n_data}, "main")
        out = {"loss": (-log_target.mean() / n_data).detach()}
        if self.learn_noise:
            ctx.apply_gradients({self.log_noise: -noise_grad / n_data}, "noise")
            out["noise"] = -noise_objective / n_data
        return out

    @torch.no_grad()
    def particle_sample(self) -> FunctionSample:
        """Every particle exactly once, as a ``FunctionSample`` of ``n_particles`` functions."""
        noise = None
        if self.kind == "gaussian":
            noise = self.particle_log_noise().exp() * self.y_scale
        gaussian = self.kind == "gaussian"
        return FunctionSample(self.particles.detach(), self.spec, self.x_loc, self.x_scale,
                              self.y_loc if gaussian else torch.zeros_like(self.y_loc),
                              self.y_scale if gaussian else torch.ones_like(self.y_scale), noise)

    @torch.no_grad()
    def particle_predictive(self, x) -> Predictive:
        """The exact equal-weight mixture over all particles at ``x[B, in_dim]``."""
        fs = self.particle_sample()
        f = fs(x)
        noise_var = None if fs.noise_std is None else fs.noise_std.square().unsqueeze(1)
        return Predictive(f, self.kind, noise_var)

    def _sample_indexed(self, n: int, generator: torch.Generator):
        index = torch.randint(self.n_particles, (n,), generator=generator, device=self.device)
        return self.particles, self.particle_log_noise(), index

