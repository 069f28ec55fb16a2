"""Trial-batched posteriors: ``R`` independent runs of one method trained as one model.

The bandit table of Wang et al. (2019) is ten trials of 50,000 decisions per method; on a GPU
a trial's step is a few hundred kernels far too small to fill the device, so ten trials one
after another (or in ten processes, which time-slice the device) cost ten times one
(docs/speed.md, "GPU"). A trial-batched posterior holds the state of ``R`` trials side by side
— ``mfvi``'s / ``bb-alpha``'s means and scales and ``dropout-alpha``'s weights as ``[R, D]``,
``bootstrap``'s members and ``fsvgd``'s particles as ``[R·M, D]`` — and trains them in one step on ``R`` data sets of equal size
(``fit(x[R, N, d], y[R, N, out], mask[R, N, out])``): each trial draws its own minibatches,
sees only its own rows, and its parameters get exactly the gradient its own objective gives
(the step minimises the *sum* of the trials' objectives, and Adam is elementwise), so the
trials stay independent runs of the method. The lock-step bandit runner
(:mod:`uncertain_agents.agents.lockstep`) plays ``R`` environments with one such posterior.

What differs from ``R`` separate posteriors: the random numbers. All trials draw from one
generator, so trial ``r`` of a batched run is *a* run of the method, not the run that
``seed + r`` gives one by one (the worker-process and thread paths keep that identity).

Supported methods (:data:`TRIAL_METHODS`): ``mfvi``, ``bb-alpha``, ``dropout-alpha``,
``bootstrap``, ``ensemble``, ``fsvgd``, ``svgd`` — every method of the paper-preset bandit table.
A learned regression noise is one per trial; only the particle methods need a fixed
``noise_std`` (their learned noise is fitted on held-out rows; the bandit presets ``showdown`` and
``fsvgd-paper`` fix it). Units are never estimated from the data: call ``set_units`` before the first fit (the
bandit agents do; the runner does).
"""
from __future__ import annotations

import math
from typing import Callable, ClassVar

import torch
from torch import Tensor, nn

from ..function_sample import FunctionSample
from ..network import ACTIVATIONS, MLPSpec
from ..objectives import power_mean_log
from ..registry import method_options, resolve_name
from ..validation import check_device, check_positive_float, check_positive_int
from .base import Batch, FitResult, Posterior, TrainingContext
from .bb_alpha import BlackBoxAlpha
from .bootstrap import Bootstrap, draw_counts
from .data import check_training_data
from .dropout_alpha import DropoutAlpha, _DroppedReLU
from .fsvgd import FunctionSpaceSVGD
from .function_prior import GaussianFunctionPrior, moment_match, prior_function_draws, step_precision
from .mfvi import MeanFieldVI
from .particle_rules import particle_direction
from .point_estimates import Ensemble
from .svgd import WeightSpaceSVGD, add_gaussian_log_prior
from .training import MAIN_LOSS, run_training

__all__ = ["TRIAL_METHODS", "TrialBatched", "make_trial_posterior"]

#: Registry names of the methods with a trial-batched form, and their classes.
TRIAL_METHODS: dict[str, type] = {}


def _trial_method(name: str) -> Callable[[type], type]:
    def register(cls: type) -> type:
        TRIAL_METHODS[name] = cls
        return cls

    return register


class TrialBatched:
    """Mixin (before the method's class) that turns a posterior into ``n_trials`` of it.

    Subclasses build their stacked state in ``__init__`` (after the method's own) and implement
    :meth:`_trial_functions`; the training step is the method's, rewritten over the trial axis.
    """

    n_trials: int
    needs_fixed_noise: ClassVar[bool] = True

    def _init_trials(self, trials: int) -> None:
        self.n_trials = check_positive_int(trials, "trials")
        if self.kind != "gaussian":
            raise ValueError(f"trial-batched {self.name} supports likelihood='gaussian' only (bandit rewards)")
        if self.needs_fixed_noise and self.fixed_noise_std is None:
            raise ValueError(f"trial-batched {self.name} needs a fixed noise_std (its learned noise is fitted on "
                             f"held-out rows, one trial at a time); the bandit presets fix it, e.g. noise_std=0.1")

    def _stacked(self, first: Tensor) -> nn.Parameter:
        """Trial 0 keeps the method's own initialisation ``first[m, D]`` (so one trial starts where
        the plain posterior with the same seed does); trials 1 … R−1 get fresh networks from the
        initialisation generator: ``[R·m, D]``."""
        first = first.detach()
        if self.n_trials == 1:
            return nn.Parameter(first)
        extra = self.initial_params((self.n_trials - 1) * first.shape[0], generator=self._init_generator)
        return nn.Parameter(torch.cat([first, extra.to(first.device, first.dtype)]))

    def _learn_noise_per_trial(self) -> None:
        """A learned regression noise becomes one per trial (``trial_log_noise[R, out]``); the
        likelihood's shared one is frozen."""
        self.trial_log_noise = None
        if self.fixed_noise_std is None:
            shared = self.likelihood.log_noise_std
            shared.requires_grad_(False)
            self.trial_log_noise = nn.Parameter(shared.detach().unsqueeze(0).repeat(self.n_trials, 1))

    def trial_log_noise_std(self) -> Tensor:
        """``[R, out]`` every trial's log noise std in training units (learned or fixed)."""
        learned = getattr(self, "trial_log_noise", None)
        if learned is not None:
            return learned
        return self.log_noise_std_train().expand(self.n_trials, -1)

    def _noise_for(self, f: Tensor) -> Tensor:
        """Every trial's log noise std shaped to broadcast against ``f[R, ..., out]``."""
        noise = self.trial_log_noise_std()
        return noise.view(noise.shape[0], *([1] * (f.dim() - 2)), noise.shape[1])

    # ------------------------------------------------------------------ fit
    def fit(self, x, y, mask=None, *, steps: int, batch_size: int = 32, lr: float | None = None,
            progress: bool = False, cuda_graph: bool | None = None) -> FitResult:
        """Train all trials (warm-started) for ``steps`` steps on their own data.

        Args:
            x: ``[R, N, in_dim]`` inputs, trial ``r``'s rows in ``x[r]``.
            y: ``[R, N, out]`` targets; mask: ``[R, N, out]`` bool (True where observed) or None.
            steps, batch_size, lr, progress, cuda_graph: as :meth:`Posterior.fit`; every trial
                draws its own minibatches of ``min(batch_size, N)`` rows (shuffled epochs).
        """
        steps = check_positive_int(steps, "steps")
        batch_size = check_positive_int(batch_size, "batch_size")
        lr = self.default_lr if lr is None else check_positive_float(lr, "lr")
        if not self.units_are_fixed:
            raise ValueError(f"trial-batched {self.name}: call set_units(...) before the first fit (the trials "
                             f"share one set of units, never estimated from one trial's data)")
        R = self.n_trials
        x = torch.as_tensor(x, device=self.device) if not isinstance(x, Tensor) else x.to(self.device)
        if x.dim() != 3 or x.shape[0] != R:
            raise ValueError(f"x must be [trials={R}, N, {self.spec.in_dim}], got shape {tuple(x.shape)}")
        n = x.shape[1]
        y = torch.as_tensor(y) if not isinstance(y, Tensor) else y
        if y.dim() != 3 or y.shape[:2] != (R, n):
            raise ValueError(f"y must be [trials={R}, N={n}, {self.spec.out_dim}], got shape {tuple(y.shape)}")
        if mask is not None:
            mask = torch.as_tensor(mask) if not isinstance(mask, Tensor) else mask
            if mask.dim() != 3 or mask.shape[:2] != (R, n):
                raise ValueError(f"mask must be [trials={R}, N={n}, out] or None, got shape {tuple(mask.shape)}")
            mask = mask.reshape(R * n, -1)
        flat_x, flat_y, flat_mask = check_training_data(x.reshape(R * n, -1), y.reshape(R * n, -1), mask,
                                                        spec=self.spec, kind=self.kind, device=self.device)
        xs, ys = self.to_train_units(flat_x, flat_y)
        xs, ys = xs.view(R, n, -1), ys.view(R, n, -1)
        maskf = None if flat_mask is None else flat_mask.to(xs.dtype).view(R, n, -1)
        return run_training(self, xs, ys, maskf, steps=steps, batch_size=batch_size, lr=lr, progress=progress,
                            cuda_graph=cuda_graph)

    # ------------------------------------------------------------- sampling
    def _trial_functions(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor | None]:
        """``(params[R, n, D], log_noise_std[R, n, out] | None)``: ``n`` draws per trial."""
        raise NotImplementedError

    def _trial_sample_parts(self, n: int, generator: torch.Generator):
        """Per trial ``(distinct params [m, D], log noise [m, out] | None, index [n] | None)``."""
        params, log_noise = self._trial_functions(n, generator)
        return [(params[r], None if log_noise is None else log_noise[r], None) for r in range(self.n_trials)]

    @torch.no_grad()
    def sample_trials(self, n: int, *, generator: torch.Generator | None = None) -> list[FunctionSample]:
        """``n`` functions of every trial, one :class:`FunctionSample` per trial (``R`` of them)."""
        n = check_positive_int(n, "n")
        gen = self._check_generator(generator)
        out = []
        for r, (params, log_noise, index) in enumerate(self._trial_sample_parts(n, gen)):
            if log_noise is None:
                log_noise = self.trial_log_noise_std()[r].expand(params.shape[0], -1)
            out.append(FunctionSample(params.detach().clone(), self.spec, self.x_loc, self.x_scale, self.y_loc,
                                      self.y_scale, (log_noise.exp() * self.y_scale).detach(), index=index))
        return out

    @torch.no_grad()
    def sample_trial_params(self, n: int, *, generator: torch.Generator | None = None
                            ) -> tuple[Tensor, Tensor | None]:
        """The functions :meth:`sample_trials` draws from the same generator state, stacked:
        ``(params[R, m, D], index[R, n] | None)`` — flat weights in training units and, for a
        finite set (members, particles), which of the trial's ``m`` functions each of the ``n``
        draws is (``None``: draw ``i`` is ``params[:, i]``, ``m = n``)."""
        n = check_positive_int(n, "n")
        parts = self._trial_sample_parts(n, self._check_generator(generator))
        params = torch.stack([p for p, _, _ in parts])
        return params, (None if parts[0][2] is None else torch.stack([i for _, _, i in parts]))

    def sample(self, n: int, *, generator=None):
        raise TypeError(f"a trial-batched {self.name} holds {self.n_trials} posteriors: use sample_trials(n)")

    def predict(self, x, **kwargs):
        raise TypeError(f"a trial-batched {self.name} holds {self.n_trials} posteriors: use sample_trials(n) "
                        f"and evaluate trial r's FunctionSample")

    def save(self, path) -> None:
        raise TypeError(f"a trial-batched {self.name} is a training engine of the lock-step bandit runner and is "
                        f"not saved; train a posterior per trial to save one")


def _stack_fixed_noise(post: Posterior, m: int) -> Tensor:
    return post.log_noise_std_train().expand(m, -1)


class _SummedTrialLoss(TrialBatched):
    """Trials trained by plain gradient descent on the sum of their objectives (``trial_loss``)."""

    def trial_loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """The sum over trials of each trial's objective per data point, differentiable."""
        raise NotImplementedError

    def training_step(self, batch: Batch, ctx: TrainingContext) -> dict[str, Tensor]:
        """One Adam step on the sum of the trials' objectives (trace: their mean): each trial's
        parameters get exactly its own objective's gradient."""
        return {MAIN_LOSS: ctx.minimize(self.trial_loss(batch, ctx.generator), "main") / self.n_trials}


class _FiniteTrials(TrialBatched):
    """Trials whose posterior is a finite set of ``m`` functions (members, particles) stacked as
    ``[R·m, D]``, trial ``r`` owning rows ``r·m … r·m + m − 1``: the draws are indices into each
    trial's own set (:meth:`_trial_sample_parts`)."""

    def _function_set(self) -> tuple[Tensor, Tensor, int]:
        """``(functions[R·m, D], log noise[R·m, out], m)``."""
        raise NotImplementedError

    def _per_function(self, t: Tensor) -> Tensor:
        """``t[R, B, ...]`` -> ``[R·m, B, ...]``: each trial's rows for each of its functions."""
        R, m = self.n_trials, self._function_set()[2]
        return t.unsqueeze(1).expand(R, m, *t.shape[1:]).reshape(R * m, *t.shape[1:])

    def _trial_sample_parts(self, n: int, generator: torch.Generator):
        functions, noise, m = self._function_set()
        R = self.n_trials
        index = torch.randint(m, (R, n), generator=generator, device=self.device)
        functions, noise = functions.view(R, m, -1), noise.view(R, m, -1)
        return [(functions[r], noise[r], index[r]) for r in range(R)]

    def _trial_functions(self, n: int, generator: torch.Generator):
        parts = self._trial_sample_parts(n, generator)
        return (torch.stack([params[index] for params, _, index in parts]),
                torch.stack([noise[index] for _, noise, index in parts]))


# ----------------------------------------------------------------------- mean field
class _TrialMeanField(_SummedTrialLoss):
    """Factorised Gaussians ``mean``, ``log_std`` ``[R, D]``: trial ``r``'s in row ``r``; a learned
    noise is one per trial."""

    needs_fixed_noise = False

    def _stack_mean_field(self, trials: int) -> None:
        self._init_trials(trials)
        self._learn_noise_per_trial()
        if self.learn_prior:
            raise ValueError(f"trial-batched {self.name} does not support learn_prior (one prior scale per trial)")
        self.mean = self._stacked(self.mean.unsqueeze(0))
        self.log_std = nn.Parameter(self.log_std.detach().unsqueeze(0).repeat(self.n_trials, 1))

    def _on_prior_change(self) -> None:
        with torch.no_grad():
            self.log_std.copy_((self.prior_std * self.init_std).log().expand_as(self.log_std))

    def trial_draw(self, k: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``k`` reparameterised draws per trial ``w[R, k, D]`` and their log ratios
        ``log q(w) − log p0(w)`` ``[R, k]`` (:meth:`~.mean_field.MeanFieldGaussian.draw`'s
        arithmetic, composed over the trial axis)."""
        eps = torch.randn(self.n_trials, k, self.spec.num_params, generator=generator, device=self.device)
        std = self.log_std.exp().unsqueeze(1)
        w = self.mean.unsqueeze(1) + std * eps
        log_q = -(self.log_std.unsqueeze(1) + 0.5 * eps.square()).sum(-1)
        log_prior = self.prior_std.log()
        scaled = w * torch.exp(-log_prior)
        log_p = -(log_prior + 0.5 * scaled.square()).sum(-1)
        return w, log_q - log_p

    def _trial_functions(self, n: int, generator: torch.Generator):
        eps = torch.randn(self.n_trials, n, self.spec.num_params, generator=generator, device=self.device)
        return torch.addcmul(self.mean.unsqueeze(1), self.std.unsqueeze(1), eps), None


@_trial_method("mfvi")
class TrialMeanFieldVI(_TrialMeanField, MeanFieldVI):
    """``mfvi`` for ``R`` trials: the local reparameterisation runs over the trial axis with
    batched products (composed operations, autograd's backward)."""

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, trials: int, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self._stack_mean_field(trials)

    def trial_forward(self, x: Tensor, k: int, generator: torch.Generator, variances: Tensor) -> Tensor:
        """``x[R, B, d] -> f[R, k, B, out]`` with per-example pre-activation noise, every trial
        through its own weights (``variances[R, D]``: the weights' ``std²``)."""
        act = ACTIVATIONS[self.spec.activation]
        R, B = x.shape[0], x.shape[1]
        h = x if k == 1 else x.unsqueeze(1).expand(R, k, B, -1).reshape(R, k * B, -1)
        for i, ((wm, bm), (wv, bv)) in enumerate(zip(self.spec.unflatten(self.mean), self.spec.unflatten(variances))):
            if i > 0:
                h = act(h)
            eps = torch.randn((R, h.shape[1], wm.shape[2]), generator=generator, device=h.device, dtype=h.dtype)
            mu = torch.baddbmm(bm.unsqueeze(1), h, wm)
            sd = torch.baddbmm(bv.unsqueeze(1), h.square(), wv).sqrt()
            h = mu + sd * eps
        return h.view(R, k, B, -1)

    def trial_loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """The sum over trials of each trial's negative ELBO per data point (``mfvi``'s
        :meth:`~.mfvi.MeanFieldVI.loss` on its own batch; with one trial the same numbers)."""
        variances, kl = self.variances_and_kl()  # kl: the sum of the trials' KLs
        f = self.trial_forward(batch.x, self.train_samples, generator, variances)
        y, mask = batch.y.unsqueeze(1), None if batch.mask is None else batch.mask.unsqueeze(1)
        loglik = self.likelihood.log_prob(f, y, mask, log_noise_std=self._noise_for(f))  # [R, k, B]
        return -loglik.mean(dim=(1, 2)).sum() + kl / batch.n_data


def _sum_of_trial_alpha_losses(loglik: Tensor, alpha: float) -> Tensor:
    """``Σ_r −mean_b (1/α) log mean_k exp(α a_rkb)`` for ``a[R, k, B]`` (α = 0: ``Σ_r −mean_{k,b} a``)."""
    if alpha == 0.0:
        return -loglik.mean(dim=(1, 2)).sum()
    return -power_mean_log(loglik.transpose(0, 1), alpha).mean(-1).sum()


@_trial_method("bb-alpha")
class TrialBlackBoxAlpha(_TrialMeanField, BlackBoxAlpha):
    """``bb-alpha`` for ``R`` trials: ``K`` weight draws per trial, one forward of the ``R·K``
    sampled networks each on its trial's batch, each trial's energy."""

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, trials: int, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self._stack_mean_field(trials)

    def trial_loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """The sum over trials of each trial's BB-α energy per data point
        (:func:`~uncertain_agents.objectives.bb_alpha_energy` on its own batch)."""
        R, k = self.n_trials, self.train_samples
        w, log_ratio = self.trial_draw(k, generator)  # [R, k, D], [R, k]
        x = batch.x.unsqueeze(1).expand(R, k, *batch.x.shape[1:]).reshape(R * k, *batch.x.shape[1:])
        f = self.spec.forward(w.reshape(R * k, -1), x).view(R, k, *batch.y.shape[1:])
        y, mask = batch.y.unsqueeze(1), None if batch.mask is None else batch.mask.unsqueeze(1)
        loglik = self.likelihood.log_prob(f, y, mask, log_noise_std=self._noise_for(f))  # [R, k, B]
        if self.alpha == 0.0:
            return _sum_of_trial_alpha_losses(loglik, 0.0) + log_ratio.mean(1).sum() / batch.n_data
        return _sum_of_trial_alpha_losses(loglik - log_ratio.unsqueeze(-1) / batch.n_data, self.alpha)


@_trial_method("dropout-alpha")
class TrialDropoutAlpha(_SummedTrialLoss, DropoutAlpha):
    """``dropout-alpha`` for ``R`` trials: weights ``params[R, D]``, ``K`` masks per example per
    trial, each trial's α-objective and weight decay; a learned noise is one per trial."""

    needs_fixed_noise = False

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, trials: int, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self._init_trials(trials)
        self._learn_noise_per_trial()
        self.params = self._stacked(self.params.unsqueeze(0))

    def trial_masked_forward(self, x: Tensor, keep: list[Tensor | None]) -> Tensor:
        """``x[R, B, d]`` with keep-masks ``[R, k, B, fan_in]`` per layer -> ``f[R, k, B, out]``
        (:meth:`~.dropout_alpha.DropoutAlpha.masked_forward` per trial, its own weights)."""
        act = ACTIVATIONS[self.spec.activation]
        relu = self.spec.activation == "relu"
        R = x.shape[0]
        k = next((m.shape[1] for m in keep if m is not None), 1)
        h = x  # [R, B, d]: shared by the k mask sets until the first mask
        for i, ((w, b), m, p) in enumerate(zip(self.spec.unflatten(self.params), keep, self.rates)):
            if m is not None:
                m = m.view(torch.uint8).to(h.dtype) if m.dtype == torch.bool else m
                if h.dim() == 3:
                    h = h.unsqueeze(1)  # [R, 1, B, in], broadcast over the masks
                h = _DroppedReLU.apply(h, m) if i > 0 and relu else (act(h) if i > 0 else h) * m
                w = w * (1.0 / (1.0 - p))
            elif i > 0:
                h = act(h)
            rows = h.reshape(R, -1, h.shape[-1])
            h = torch.baddbmm(b.unsqueeze(1), rows, w).view(*h.shape[:-1], -1)
        return h.unsqueeze(1).expand(R, k, -1, -1) if h.dim() == 3 else h

    def trial_loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """The sum over trials of each trial's α-dropout loss plus weight decay (the method's
        :meth:`~.dropout_alpha.DropoutAlpha.loss` on its own batch)."""
        R, B = batch.x.shape[0], batch.x.shape[1]
        keep = self.draw_keep((R, self.train_samples, B), generator, self.params.dtype)
        f = self.trial_masked_forward(batch.x, keep)
        y, mask = batch.y.unsqueeze(1), None if batch.mask is None else batch.mask.unsqueeze(1)
        loglik = self.likelihood.log_prob(f, y, mask, log_noise_std=self._noise_for(f))  # [R, k, B]
        return _sum_of_trial_alpha_losses(loglik, self.alpha) + self.weight_decay(batch.n_data)

    def _trial_functions(self, n: int, generator: torch.Generator):
        R = self.n_trials
        masks = self.draw_masks((R, n), generator)  # per layer [R, n, fan_in] or None
        folded = []
        for (w, b), m in zip(self.spec.unflatten(self.params), masks):  # w [R, in, out], b [R, out]
            w = w.unsqueeze(1).expand(R, n, -1, -1) if m is None else m.unsqueeze(-1) * w.unsqueeze(1)
            folded.append((w.reshape(R * n, *w.shape[2:]), b.unsqueeze(1).expand(R, n, -1).reshape(R * n, -1)))
        return self.spec.flatten(folded).view(R, n, -1), None


# ------------------------------------------------------------------- point estimates
class _TrialMembers(_SummedTrialLoss, _FiniteTrials):
    """Members ``[R·M, D]``: trial ``r`` owns rows ``r·M … r·M + M − 1``."""

    needs_fixed_noise = False

    def _stack_members(self, trials: int) -> None:
        self._init_trials(trials)
        self.members = self._stacked(self.members)
        if self.member_log_noise_std is not None:
            self.member_log_noise_std = nn.Parameter(self.member_log_noise_std.detach().repeat(self.n_trials, 1))

    def member_log_noise(self) -> Tensor:
        if self.member_log_noise_std is not None:
            return self.member_log_noise_std
        return _stack_fixed_noise(self, self.members.shape[0])

    def _function_set(self) -> tuple[Tensor, Tensor, int]:
        return self.members, self.member_log_noise(), self.n_members

    def member_outputs(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor | None]:
        """``(f[R·M, B, out], y[R·M, B, out], mask)``: each member on its trial's batch."""
        f = self.spec.forward(self.members, self._per_function(batch.x))
        mask = None if batch.mask is None else self._per_function(batch.mask)
        return f, self._per_function(batch.y), mask

    def trial_loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """The sum over trials of each trial's loss (the mean over its members, as the method's
        :meth:`~.point_estimates.PointEstimates.loss` on its own batch)."""
        return self.member_objectives(batch).view(self.n_trials, self.n_members).mean(1).sum()

    def training_step(self, batch: Batch, ctx: TrainingContext) -> dict[str, Tensor]:
        """The summed trials' step, or the members' own step (``objective="squared-error"`` or
        ``clip_norm``: every row of ``[R·M, D]`` is one member)."""
        if self.objective == "nll" and self.clip_norm is None:
            return _SummedTrialLoss.training_step(self, batch, ctx)
        return self.member_step(batch, ctx)


@_trial_method("ensemble")
class TrialEnsemble(_TrialMembers, Ensemble):
    """``ensemble`` for ``R`` trials (members ``[R·M, D]``)."""

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, trials: int, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self._stack_members(trials)


@_trial_method("bootstrap")
class TrialBootstrap(_TrialMembers, Bootstrap):
    """``bootstrap`` for ``R`` trials: members ``[R·M, D]``, counts ``weights[R·M, N]``."""

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, trials: int, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self._stack_members(trials)
        self.weights = torch.zeros(self.members.shape[0], 0, device=self.weights.device)

    def prepare_data(self, n_data: int) -> None:
        """Extend every member's counts (``[R·M, N]``) to ``n_data`` rows, as :class:`Bootstrap`."""
        have = self.weights.shape[1]
        if n_data <= have:
            return
        counts = draw_counts(self.scheme, self.members.shape[0], n_data - have, first=have == 0,
                             inclusion=self.inclusion, generator=self.generator(), device=self.device)
        self.weights = torch.cat([self.weights, counts.to(self.weights.dtype)], dim=1)

    def row_weights(self, batch: Batch) -> Tensor:
        """``[R·M, B]`` each member's counts of its trial's batch rows."""
        R, M = self.n_trials, self.n_members
        index = batch.index.unsqueeze(1).expand(R, M, -1)
        return self.weights.view(R, M, -1).gather(2, index).reshape(R * M, -1)


# -------------------------------------------------------------------------- particles
class _TrialParticles(_FiniteTrials):
    """Particles ``[R·n, D]``: trial ``r`` owns rows ``r·n … r·n + n − 1``; the kernel, the
    function prior and the minibatch are the trial's own."""

    def _stack_particles(self, trials: int) -> None:
        self._init_trials(trials)
        self.particles = self._stacked(self.particles)

    def particle_log_noise(self) -> Tensor:
        return _stack_fixed_noise(self, self.particles.shape[0])

    def _function_set(self) -> tuple[Tensor, Tensor, int]:
        return self.particles, self.particle_log_noise(), self.n_particles

    def trial_log_likelihood(self, f: Tensor, batch: Batch) -> Tensor:
        """``[R·n]`` every particle's ``(N/B) log p(y_B | f_B)`` on its trial's batch (``f[R·n, B, out]``)."""
        mask = None if batch.mask is None else self._per_function(batch.mask)
        log_noise = self.particle_log_noise().detach().unsqueeze(1)
        rows = self.likelihood.log_prob(f, self._per_function(batch.y), mask, log_noise_std=log_noise)
        return rows.sum(1) * (batch.n_data / batch.x.shape[1])

    def trial_direction(self, z: Tensor, g: Tensor) -> Tensor:
        """The rule's direction ``[R·n, M]`` for the particles' values ``z[R·n, M]`` and log-target
        gradients ``g``, each trial's particles with their own kernel (batched for ``svgd``)."""
        R, n = self.n_trials, self.n_particles
        if self.rule == "svgd":
            return particle_direction(z.view(R, n, -1), g.view(R, n, -1), self.rule).reshape(R * n, -1)
        return torch.cat([particle_direction(z[r * n:(r + 1) * n], g[r * n:(r + 1) * n], self.rule)
                          for r in range(R)])


@_trial_method("svgd")
class TrialSVGD(_TrialParticles, WeightSpaceSVGD):
    """``svgd`` for ``R`` trials: weight-space kernel per trial."""

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, trials: int, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self._stack_particles(trials)

    def _direction(self, batch: Batch, generator: torch.Generator):
        with torch.enable_grad():
            w = self.particles.detach().requires_grad_(True)
            f = self.spec.forward(w, self._per_function(batch.x))  # [R·n, B, out]
            loglik = self.trial_log_likelihood(f, batch)
            (g,) = torch.autograd.grad(loglik.sum(), w)
        w = w.detach()
        target = add_gaussian_log_prior(loglik.detach(), g, w, self.prior_std)
        return self.trial_direction(w, g), target


@_trial_method("fsvgd")
class TrialFSVGD(_TrialParticles, FunctionSpaceSVGD):
    """``fsvgd`` for ``R`` trials: each trial's extra points, moment-matched function prior (from
    its own fresh prior networks) and function-space kernel, all batched over the trials — one
    forward of the ``R·n`` particles, one of the ``R·m`` prior networks, one eigen-decomposition
    of the ``R`` prior covariances."""

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, trials: int, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self._stack_particles(trials)

    def trial_extra_points(self, batch: Batch, generator: torch.Generator) -> Tensor:
        """``[R, B', d]`` each trial's random training inputs plus Gaussian noise (as
        :meth:`~.fsvgd.FunctionSpaceSVGD.extra_points`, the same draws in the same order)."""
        R, B, d = batch.x.shape
        n_extra = min(B, 32) if self.n_extra is None else self.n_extra
        if n_extra == 0:
            return batch.x[:, :0]
        idx = torch.randint(batch.x_pool.shape[1], (R, n_extra), generator=generator, device=batch.x.device)
        scale = self.extra_noise if self.extra_noise is not None else 1.0 / math.sqrt(batch.n_data)
        noise = torch.randn(R, n_extra, d, generator=generator, device=batch.x.device, dtype=batch.x.dtype)
        return batch.x_pool.gather(1, idx.unsqueeze(-1).expand(R, n_extra, d)) + scale * noise

    def _direction_stages(self, batch: Batch, generator: torch.Generator):
        R, n, B = self.n_trials, self.n_particles, batch.x.shape[1]
        x_extra = self.trial_extra_points(batch, generator)
        x_all = torch.cat([batch.x, x_extra], dim=1)  # [R, T, d]
        prior_idx = self.prior_index(B, x_extra.shape[1])
        with torch.no_grad():
            draws = prior_function_draws(self.spec, self.prior_std, x_all.index_select(1, prior_idx),
                                         self.prior_draws, generator, self._layer_stds)  # [R, m, P, out]
            mean, cov = moment_match(draws.reshape(R, self.prior_draws, -1))
        precision = yield from step_precision(cov, self.prior_eig_floor)  # [R, K, K]
        prior = GaussianFunctionPrior(mean.unsqueeze(1), precision)
        with torch.enable_grad():
            f = self.function_values(self.particles, self._per_function(x_all))  # [R·n, T, out]
            f_leaf = f.detach().requires_grad_(True)
            log_prior = prior.log_prob(f_leaf[:, prior_idx].reshape(R, n, -1)).reshape(R * n)
            target = self.trial_log_likelihood(f_leaf[:, :B], batch) + self.prior_scale * log_prior
            (g,) = torch.autograd.grad(target.sum(), f_leaf)
            phi = self.trial_direction(f_leaf.detach().reshape(R * n, -1), g.reshape(R * n, -1))
            (direction,) = torch.autograd.grad(f, self.particles, grad_outputs=phi.reshape(f.shape))
        return direction, target.detach()


# ----------------------------------------------------------------------------- factory
def make_trial_posterior(name: str, *, trials: int, in_dim: int, out_dim: int, hidden=(50,),
                         activation: str = "relu", device="cpu", seed: int | None = None,
                         **method_kwargs) -> Posterior:
    """A trial-batched posterior of method ``name`` (one of :data:`TRIAL_METHODS`) for ``trials``
    runs side by side; the other arguments are :func:`~uncertain_agents.make_posterior`'s
    (regression only)."""
    key = resolve_name(name)
    if key not in TRIAL_METHODS:
        raise ValueError(f"{key} has no trial-batched form; methods with one: {sorted(TRIAL_METHODS)}")
    allowed = method_options(key)
    unknown = sorted(set(method_kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"{key} got unknown option(s) {unknown}; it accepts {allowed}")
    hidden = (hidden,) if isinstance(hidden, int) else tuple(hidden)
    device = check_device(device)
    spec = MLPSpec(in_dim, out_dim, hidden, activation)
    post = TRIAL_METHODS[key](spec, "gaussian", trials=trials, device=device, seed=seed, **method_kwargs)
    post.config = {"name": key, "trials": int(trials), "in_dim": spec.in_dim, "out_dim": spec.out_dim,
                   "hidden": list(spec.hidden), "activation": activation, "likelihood": "gaussian",
                   "seed": post.config.get("seed"), **{k: post.config.get(k, v) for k, v in method_kwargs.items()}}
    return post.to(device)
