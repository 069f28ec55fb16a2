"""``refined-vi``: refined variational inference (Havasi, Snoek, Tran, Gordon, Hernández-Lobato).

Phase ``"vi"`` trains mean-field Gaussian VI (``mfvi``: local reparameterisation, analytic
KL) for ``fit``'s ``steps``. Phase ``"refine"`` then refines ``n_members`` copies of it at
once, as one batched tensor ``[M, D]``: for ``k = 1..K`` (``variance_ratios``), every
member draws its auxiliary variable ``a_k ~ q(a_k)`` in closed form
(:mod:`~uncertain_agents.posteriors.refinement`), moves to ``q(w | a_{1:k})`` in closed
form and maximises the conditional ELBO ``E_q[log p(y | w)] − KL(q(w) ‖ N(s_k, R_k))`` with
a fresh Adam for ``refine_iters`` steps at ``lr_k = 1e-3 · 0.3^{k/2}``; whichever of the
initial and the optimised member has the higher conditional ELBO (estimated on the same
draws, on up to ``eval_rows`` training rows) is kept, so the bound never decreases.
A sample is one refined member's Gaussian, drawn uniformly.

``fit`` reports ``diagnostics["elbo_init"]`` (the VI ELBO, per data point) and
``diagnostics["elbo_aux"]`` ``[M, K + 1]``, the paper's "staircase": per member, the
auxiliary bound after each step, column 0 = ELBO_init. It is estimated as ELBO_init plus
the member's gains ``Δ_k = L_k(kept) − L_k(closed-form init) ≥ 0``. At its closed-form
initialisation a step leaves the bound unchanged in expectation over ``a_k``
(``E[L_k(init) − log q(a_k)/p(a_k)] = L_{k−1}``), so this estimate has the expectation
of the single-path estimate of the paper's Figure 2 (``diagnostics["elbo_aux_path"]``,
``L_K − Σ_k log q(a_k)/p(a_k)`` along the member's draws) with the zero-mean terms removed:
it can never fall below ELBO_init for any member. ``elbo_aux_final`` is its mean over
members. For a linear Gaussian model the conditional ELBOs are exact (no Monte Carlo).
A warm-started refit continues the VI phase from its
current state and then refines afresh (``on_refit="restart"``).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..network import MLPSpec
from ..registry import register
from ..validation import check_positive_float, check_positive_int
from .base import Batch, OptimizerGroup, Phase, TrainingContext
from .mfvi import MeanFieldVI
from .refinement import (DEFAULT_VARIANCE_RATIOS, RefinementSchedule, auxiliary_marginal,
                         conditional_posterior, gaussian_kl)

LOG_2PI = math.log(2.0 * math.pi)


@register("refined-vi", "refined_vi", "refinedvi")
class RefinedVI(MeanFieldVI):
    """Mean-field VI refined through auxiliary variables into a mixture of ``n_members`` Gaussians.

    Method options:
        n_members: M, refined members (default 10).
        variance_ratios: ``σ²_{a_k}/σ_w²`` per refinement step (default 0.7, 0.21, 0.063,
            0.0189; the rest, 0.0081, is the final conditional prior variance).
        refine_iters: Adam steps per refinement step (default 200, the paper's; at most
            ``steps // K`` of the fit being refined, see :meth:`refinement_steps`).
        refine_samples: Monte-Carlo weight samples per member and step (default 1).
        refine_lr: base of the refinement learning rates ``lr_k = refine_lr · 0.3^{k/2}``
            (default 1e-3, the paper's). With ``lr_decay > 0`` the decay scales them like any
            other rate: a refinement step uses ``lr_k / (1 + lr_decay · t)``, ``t`` the steps
            trained so far (``fit``'s ``lr`` does not apply to the members).
        eval_rows: training rows (at most) on which the keep-the-better rule and the
            reported bounds are estimated (default 2,048).
        refine_noise: with a learned Gaussian noise, give every member its own noise std,
            started at the VI value and refined with the member's weights (a hyperparameter
            of the member's conditional ELBO, kept or reverted with them; default False:
            the VI noise is shared and held).
        train_samples, init_std (of the VI phase), prior_std, noise_std: as ``mfvi``.
    """

    name = "refined-vi"

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, n_members: int = 10,
                 variance_ratios=DEFAULT_VARIANCE_RATIOS, refine_iters: int = 200, refine_samples: int = 1,
                 refine_lr: float = 1e-3, eval_rows: int = 2048, refine_noise: bool = False, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self.n_members = check_positive_int(n_members, "n_members")
        try:
            ratios = tuple(variance_ratios)
        except TypeError:
            raise ValueError(f"variance_ratios must be a sequence of numbers, got {variance_ratios!r}") from None
        self.schedule = RefinementSchedule(ratios)
        self.refine_iters = check_positive_int(refine_iters, "refine_iters")
        self.refine_samples = check_positive_int(refine_samples, "refine_samples")
        self.eval_rows = check_positive_int(eval_rows, "eval_rows")
        self.refine_lr = check_positive_float(refine_lr, "refine_lr")
        if not isinstance(refine_noise, bool):
            raise TypeError(f"refine_noise must be True or False, got {refine_noise!r}")
        self.refine_noise = refine_noise
        D = spec.num_params
        self.member_mean = nn.Parameter(torch.zeros(self.n_members, D))
        self.member_log_std = nn.Parameter(torch.zeros(self.n_members, D))
        self.member_log_noise = nn.Parameter(torch.zeros(self.n_members, spec.out_dim),
                                             requires_grad=self.refines_noise)
        self.register_buffer("member_offset", torch.zeros(self.n_members, D))
        self.register_buffer("refined", torch.tensor(False))
        self.phases = (Phase("vi"), Phase("refine", steps=self.refinement_steps, on_refit="restart",
                                          graph_safe=False))
        self._refine_state: dict = {}

    # ------------------------------------------------------------ protocol
    def refinement_steps(self, fit_steps: int) -> int:
        """Steps of the refinement phase after a VI phase of ``fit_steps``: ``K`` refinement
        steps of ``min(refine_iters, max(1, fit_steps // K))`` Adam iterations each — the
        paper's 200 after a full VI fit, fewer after a short warm-started refit (a bandit's
        100-step refit refines 25 iterations per step), so refining never costs much more
        than the fit it refines."""
        K = self.schedule.steps
        return K * min(self.refine_iters, max(1, fit_steps // K))

    def optimizer_groups(self) -> dict[str, OptimizerGroup]:
        """``"main"``: the VI parameters (and a learned noise); ``"members"``: the refined members."""
        members = (self.member_mean, self.member_log_std) + ((self.member_log_noise,) if self.refines_noise else ())
        ids = {id(p) for p in members}
        main = tuple(p for p in self.parameters()
                     if p.requires_grad and id(p) not in ids and p is not self.member_log_noise)
        return {"main": OptimizerGroup(main), "members": OptimizerGroup(members)}

    def start_phase(self, phase: Phase, ctx: TrainingContext) -> None:
        if phase.name == "refine":
            self.refined.fill_(False)

    def training_step(self, batch: Batch, ctx: TrainingContext) -> dict[str, Tensor]:
        if ctx.phase.name == "vi":
            return {"loss": ctx.minimize(self.loss(batch, ctx.generator), "main")}
        iters = ctx.phase_steps // self.schedule.steps
        k, i = divmod(ctx.phase_step, iters)
        if i == 0:
            self._begin_refinement_step(k + 1, batch, ctx)
        loss = -self.conditional_elbo(self.member_mean, self.member_log_std, self.member_offset,
                                      self._refine_state["r"], batch.x, batch.y, batch.mask, batch.n_data,
                                      ctx.generator, log_noise=self._member_noise()).sum()
        ctx.minimize(loss, "members")
        if i == iters - 1:
            self._end_refinement_step(k + 1, batch, ctx)
        return {"loss": loss.detach() / self.n_members}

    # --------------------------------------------------------- refinement
    def conditional_elbo(self, mean: Tensor, log_std: Tensor, prior_mean: Tensor, prior_var: Tensor,
                         x: Tensor, y: Tensor, mask: Tensor | None, n_data: int,
                         generator: torch.Generator | None = None, eps: Tensor | None = None,
                         log_noise: Tensor | None = None) -> Tensor:
        """``[M]`` conditional ELBO per data point of members ``mean, log_std [M, D]`` against
        the conditional prior ``N(prior_mean [M, D], prior_var [D])`` on the rows ``x``
        (scaled to ``n_data``); ``eps [S, M, D]`` fixes the weight draws; ``log_noise [M, out]``
        gives each member its own Gaussian noise (default: the VI noise, held).

        For a linear Gaussian model (no hidden layer, Gaussian likelihood) the expected
        log-likelihood is exact (``eps`` unused): ``f`` is Gaussian with mean
        ``x·μ_W + μ_b`` and variance ``x²·σ²_W + σ²_b``.
        """
        kl = gaussian_kl(mean, torch.exp(2.0 * log_std), prior_mean, prior_var).sum(-1)
        if self.exact_expectation:
            log_noise = (self.log_noise_std_train().detach() if log_noise is None
                         else log_noise.unsqueeze(1))  # [out] or [M, 1, out]
            f_mean = self.spec.forward(mean, x)  # [M, B, out]
            f_var = self.spec.forward(torch.exp(2.0 * log_std), x.square())  # linear: Σ x²σ² + σ²_b
            penalty = 0.5 * f_var * torch.exp(-2.0 * log_noise)
            if mask is not None:
                penalty = penalty * mask
            loglik = (self.likelihood.log_prob(f_mean, y, mask, log_noise_std=log_noise)
                      - penalty.sum(-1)).mean(-1)
            return loglik - kl / n_data
        if eps is None:
            eps = torch.randn(self.refine_samples, *mean.shape, generator=generator, device=mean.device)
        S, M, D = eps.shape
        w = (mean + log_std.exp() * eps).reshape(S * M, D)
        f = self.spec.forward(w, x)  # [S*M, B, out]
        kw = {}
        if self.kind == "gaussian":
            kw["log_noise_std"] = (self.log_noise_std_train().detach() if log_noise is None
                                   else log_noise.unsqueeze(0).expand(S, -1, -1).reshape(S * M, 1, -1))
        loglik = self.likelihood.log_prob(f, y, mask, **kw).view(S, M, -1).mean(0).mean(-1)  # [M]
        return loglik - kl / n_data

    @property
    def refines_noise(self) -> bool:
        """True when members refine their own noise std (``refine_noise`` with a learned Gaussian noise)."""
        return self.refine_noise and self.kind == "gaussian" and self.fixed_noise_std is None

    def _member_noise(self) -> Tensor | None:
        """``[M, out]`` the members' log noise std in training units, or None (the shared VI noise)."""
        return self.member_log_noise if self.refines_noise else None

    @property
    def exact_expectation(self) -> bool:
        """True for a linear Gaussian model, whose conditional ELBO is computed in closed form."""
        return len(self.spec.layer_shapes) == 1 and self.kind == "gaussian"

    def _eval_set(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor | None]:
        n = batch.x_pool.shape[0]
        rows = self._refine_state["rows"]
        if rows is None or rows.numel() > n:
            g = torch.Generator(device=self.device).manual_seed(12345 + n)
            rows = torch.randperm(n, generator=g, device=self.device)[: self.eval_rows]
            self._refine_state["rows"] = rows
        mask = None if batch.mask_pool is None else batch.mask_pool[rows]
        return batch.x_pool[rows], batch.y_pool[rows], mask

    @torch.no_grad()
    def _begin_refinement_step(self, k: int, batch: Batch, ctx: TrainingContext) -> None:
        prior_var = torch.exp(2.0 * self.log_prior_std().detach())  # with learn_prior: the fitted one
        remaining = self.schedule.remaining()
        if k == 1:
            self._refine_state = {"rows": None, "log_ratio": torch.zeros(self.n_members, device=self.device)}
            self.member_mean.copy_(self.mean.detach().expand_as(self.member_mean))
            self.member_log_std.copy_(self.log_std.detach().expand_as(self.member_log_std))
            self.member_offset.zero_()
            if self.refines_noise:
                self.member_log_noise.copy_(self.log_noise_std_train().detach().expand_as(self.member_log_noise))
            x, y, mask = self._eval_set(batch)
            eps = torch.randn(4, *self.member_mean.shape, generator=ctx.generator, device=self.device)
            elbo0 = self.conditional_elbo(self.member_mean, self.member_log_std, self.member_offset,
                                          prior_var, x, y, mask, batch.n_data, eps=eps,
                                          log_noise=self._member_noise())
            elbo0 = elbo0.mean().expand_as(elbo0)  # every member starts from the same q: pool the draws
            self._refine_state["staircase"] = [elbo0]
            self._refine_state["path"] = [elbo0]
            self._refine_state["gain"] = torch.zeros_like(elbo0)
            ctx.report("elbo_init", elbo0[0])
        r_prev = prior_var * remaining[k - 1]
        var_a = prior_var * self.schedule.ratios[k - 1]
        var = torch.exp(2.0 * self.member_log_std)
        qa_mean, qa_var = auxiliary_marginal(self.member_mean, var, self.member_offset, r_prev, var_a)
        a = qa_mean + qa_var.sqrt() * torch.randn(qa_mean.shape, generator=ctx.generator, device=self.device)
        # the auxiliary bound pays log q(a_k) − log p(a_k) for every drawn a_k
        log_q = -0.5 * ((a - qa_mean).square() / qa_var + qa_var.log() + LOG_2PI)
        log_p = -0.5 * (a.square() / var_a + var_a.log() + LOG_2PI)
        self._refine_state["log_ratio"] += (log_q - log_p).sum(-1)
        mean, var = conditional_posterior(self.member_mean, var, a, self.member_offset, r_prev, var_a)
        self.member_mean.copy_(mean)
        self.member_log_std.copy_(0.5 * var.log())
        self.member_offset.add_(a)
        self._refine_state["r"] = prior_var * remaining[k]
        self._refine_state["init"] = (self.member_mean.clone(), self.member_log_std.clone(),
                                      self.member_log_noise.clone())
        ctx.reset_optimizer("members")
        ctx.set_learning_rate("members", self.schedule.learning_rate(k, self.refine_lr))

    @torch.no_grad()
    def _end_refinement_step(self, k: int, batch: Batch, ctx: TrainingContext) -> None:
        """Keep, per member, the better of the initial and optimised parameters (same draws)."""
        x, y, mask = self._eval_set(batch)
        r = self._refine_state["r"]
        eps = torch.randn(4, *self.member_mean.shape, generator=ctx.generator, device=self.device)
        init_mean, init_log_std, init_log_noise = self._refine_state["init"]
        noise = self.refines_noise
        before = self.conditional_elbo(init_mean, init_log_std, self.member_offset, r, x, y, mask,
                                       batch.n_data, eps=eps, log_noise=init_log_noise if noise else None)
        after = self.conditional_elbo(self.member_mean, self.member_log_std, self.member_offset, r, x, y, mask,
                                      batch.n_data, eps=eps, log_noise=self._member_noise())
        worse = (~(after >= before)).unsqueeze(-1)  # a non-finite optimised bound counts as worse
        self.member_mean.copy_(torch.where(worse, init_mean, self.member_mean))
        self.member_log_std.copy_(torch.where(worse, init_log_std, self.member_log_std))
        self.member_log_noise.copy_(torch.where(worse, init_log_noise, self.member_log_noise))
        best = torch.where(worse.squeeze(-1), before, after)
        state = self._refine_state
        state["gain"] += best - before  # ≥ 0: the keep-the-better rule
        state["staircase"].append(state["staircase"][0] + state["gain"])
        state["path"].append(best - state["log_ratio"] / batch.n_data)
        if k == self.schedule.steps:
            self.refined.fill_(True)
            staircase = torch.stack(state["staircase"], dim=1)  # [M, K + 1]
            ctx.report("elbo_aux", staircase)
            ctx.report("elbo_aux_path", torch.stack(state["path"], dim=1))
            ctx.report("elbo_aux_final", staircase[:, -1].mean())
            ctx.report("kept_initial", worse.squeeze(-1))

    # -------------------------------------------------------------- sample
    def _sample(self, n: int, generator: torch.Generator):
        if not bool(self.refined):
            return super()._sample(n, generator)
        # stratified over members: every draw is uniform over them, and n draws visit each
        # member ⌊n/M⌋ or ⌈n/M⌉ times (a lower-variance estimate of the mixture's predictive)
        offset = torch.randint(self.n_members, (1,), generator=generator, device=self.device)
        member = (offset + torch.arange(n, device=self.device)) % self.n_members
        eps = torch.randn(n, self.spec.num_params, generator=generator, device=self.device)
        log_noise = self.member_log_noise[member] if self.refines_noise else None
        return self.member_mean[member] + self.member_log_std[member].exp() * eps, log_noise
