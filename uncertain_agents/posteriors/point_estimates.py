"""Point-estimate baselines: ``map`` and ``ensemble`` (and the base of ``bootstrap``).

The members are the rows of one parameter tensor ``members[M, D]`` trained as a single
batched model through :meth:`MLPSpec.forward` (one ``[M, B, out]`` pass per step, no
loop over members). Each member minimises its own per-data-point objective

    -(1/B) Σ_n w_mn log p(y_n | x_n, θ_m) + (1/N) Σ_j θ_mj² / (2 prior_std_j²)

(``w_mn = 1`` except for ``bootstrap``); the loss reported is the mean over members, so
members do not interact. A learned regression noise is per member (``[M, out]``), like
the independently trained networks of Lakshminarayanan et al. (2017).
``sample(n)`` draws members uniformly with replacement.

``objective="squared-error"`` trains every member as Riquelme, Tucker & Snoek's (2018) bandit
networks are trained: member ``m`` minimises ``(1/B) Σ_n w_mn Σ_o mask_no (y_no − f_mo(x_n))²``
(plus ``2σ²`` × the prior penalty when ``use_prior``), i.e. ``2σ²`` × its negative log-likelihood
under the fixed noise ``σ``, and the step minimises the *sum* of the members' objectives, so each
member's gradient is exactly what its own network alone would get. With ``clip_norm`` each
member's gradient (the row of ``members`` that is one network) is rescaled to norm at most
``clip_norm`` (TensorFlow's ``clip_by_global_norm`` per network). Both matter only with an
optimiser that is not scale-free at the start (their RMSProp, ``optimizer="rmsprop"``).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from ..network import MLPSpec
from ..registry import register
from ..validation import check_positive_float, check_positive_int
from .base import Batch, Posterior, TrainingContext
from .training import MAIN_LOSS

OBJECTIVES = ("nll", "squared-error")


class PointEstimates(Posterior):
    """``M`` point estimates of the weights, trained jointly but independently.

    Method options:
        n_members: M (``map`` fixes it to 1).
        use_prior: add the Gaussian-prior (L2) penalty ``θ²/(2 prior_std² N)`` per data
            point (default True: every member is a MAP estimate); False gives maximum
            likelihood.
        prior_std: the prior std of the penalty (default ``1/sqrt(fan_in)``).
        init_uniform: ``None`` (default) initialises like every method (He-style normal
            weights, zero biases); a number ``a`` draws weights from ``U(−a, a)`` with zero
            biases (Riquelme et al.'s ``init_scale``, 0.3).
        objective: ``"nll"`` (default) or ``"squared-error"`` (module docstring; needs a
            fixed ``noise_std``).
        clip_norm: ``None`` (default) or the largest norm of one member's gradient.
    """

    name = "point-estimates"
    graph_safe_step = True  # fit on CUDA replays its step from a graph (posteriors/cuda_graphs.py)
    default_members: int = 5

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, n_members: int | None = None,
                 use_prior: bool = True, init_uniform: float | None = None, objective: str = "nll",
                 clip_norm: float | None = None, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        if not isinstance(use_prior, bool):
            raise TypeError(f"use_prior must be True or False, got {use_prior!r}")
        self.n_members = check_positive_int(self.default_members if n_members is None else n_members,
                                            "n_members")
        self.use_prior = use_prior
        self.init_uniform = check_positive_float(init_uniform, "init_uniform", allow_none=True)
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {objective!r}")
        if objective == "squared-error" and (self.kind != "gaussian" or self.fixed_noise_std is None):
            raise ValueError("objective='squared-error' needs likelihood='gaussian' and a fixed noise_std "
                             "(it is 2·noise_std² × the negative log-likelihood; a learned noise would not train)")
        self.objective = objective
        self.clip_norm = check_positive_float(clip_norm, "clip_norm", allow_none=True)
        self.members = nn.Parameter(self.initial_params(self.n_members, generator=self._init_generator))
        if self.kind == "gaussian" and self.fixed_noise_std is None:
            start = self.likelihood.log_noise_std.detach().clone()
            self.member_log_noise_std = nn.Parameter(start.expand(self.n_members, -1).clone())
        else:
            self.member_log_noise_std = None

    def initial_params(self, n: int, *, generator: torch.Generator) -> Tensor:
        """``[n, D]`` fresh members under this posterior's initialisation (``init_uniform``)."""
        if self.init_uniform is None:
            return self.spec.init_params(n, generator=generator)
        return self.spec.uniform_params(n, self.init_uniform, generator=generator)

    # ------------------------------------------------------------ objective
    def member_log_noise(self) -> Tensor:
        """``[M, out]`` log noise std of every member in training units."""
        if self.member_log_noise_std is not None:
            return self.member_log_noise_std
        return self.log_noise_std_train().expand(self.n_members, -1)

    def member_outputs(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor | None]:
        """``(f[M, B, out], y, mask)``: every member's outputs on the batch, with the targets
        and mask they are scored against."""
        return self.spec.forward(self.members, batch.x), batch.y, batch.mask

    def member_loglik(self, batch: Batch) -> Tensor:
        """``[M, B]`` log-likelihood of the batch under every member."""
        f, y, mask = self.member_outputs(batch)
        kw = {"log_noise_std": self.member_log_noise().unsqueeze(1)} if self.kind == "gaussian" else {}
        return self.likelihood.log_prob(f, y, mask, **kw)

    def row_weights(self, batch: Batch) -> Tensor | None:
        """``[M, B]`` per-member data weights of the batch rows (``None`` = all 1)."""
        return None

    def penalty(self, n_data: int) -> Tensor:
        """``[rows]`` Gaussian-prior penalty ``Σ_j θ_mj²/(2 prior_std_j² N)`` of every member (every
        row of ``members``: ``M``, or ``R·M`` in the trial-batched form)."""
        if not self.use_prior:
            return self.members.new_zeros(self.members.shape[0])
        return (self.members.square() / (2.0 * self.prior_std.square())).sum(-1) / n_data

    def member_objectives(self, batch: Batch) -> Tensor:
        """``[rows]`` every member's own objective on the batch (one row of ``members`` each):
        its weighted negative log-likelihood per data point plus the penalty; for
        ``objective="squared-error"`` its weighted squared error per data point plus ``2σ²`` ×
        the penalty."""
        if self.objective == "squared-error":
            f, y, mask = self.member_outputs(batch)
            err = (y - f).square()
            fit = -(err if mask is None else err * mask).sum(-1)  # [rows, B]
            scale = 2.0 * self.member_log_noise().mul(2.0).exp().mean(-1)  # [rows] 2σ²
        else:
            fit, scale = self.member_loglik(batch), None
        weights = self.row_weights(batch)
        if weights is not None:
            fit = fit * weights
        penalty = self.penalty(batch.n_data)
        return -fit.mean(-1) + (penalty if scale is None else penalty * scale)

    def loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        return self.member_objectives(batch).mean()

    def training_step(self, batch: Batch, ctx: TrainingContext) -> dict[str, Tensor]:
        """One optimiser step: the default step on :meth:`loss` for ``objective="nll"`` without
        ``clip_norm``, else :meth:`member_step`."""
        if self.objective == "nll" and self.clip_norm is None:
            return super().training_step(batch, ctx)
        return self.member_step(batch, ctx)

    def member_step(self, batch: Batch, ctx: TrainingContext) -> dict[str, Tensor]:
        """One step in which every member's gradient is a known share of its own objective's —
        all of it for ``"squared-error"`` (the members' objectives are summed), ``1/M`` for
        ``"nll"`` (their mean) — so that ``clip_norm`` can bound each member's own gradient norm;
        the trace is the members' mean objective."""
        objectives = self.member_objectives(batch)  # [rows]: M, or R·M for trial-batched members
        share = 1.0 if self.objective == "squared-error" else 1.0 / self.n_members
        params = ctx.group_params("main")
        grads = dict(zip(params, torch.autograd.grad(objectives.sum() * share, params, allow_unused=True)))
        if self.clip_norm is not None:
            grads = self._clip_members(grads, objectives.numel(), share)
        ctx.apply_gradients(grads, "main")
        return {MAIN_LOSS: objectives.detach().mean()}

    def _clip_members(self, grads: dict, rows: int, share: float) -> dict:
        """``grads`` with each member's part (its row of every ``[rows, ...]`` gradient) rescaled so
        that the gradient of its own objective (the part ÷ ``share``) has norm ≤ ``clip_norm``."""
        per_row = [g.reshape(rows, -1) for g in grads.values() if g is not None and g.dim() >= 1 and g.shape[0] == rows]
        norms = torch.linalg.vector_norm(torch.cat(per_row, dim=1), dim=1) / share  # [rows]
        factor = self.clip_norm / norms.clamp_min(self.clip_norm)
        return {p: (g * factor.view(rows, *([1] * (g.dim() - 1)))
                    if g is not None and g.dim() >= 1 and g.shape[0] == rows else g)
                for p, g in grads.items()}

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
    fixed_options = ("n_members",)

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

