"""``aadm``: adversarial α-divergence minimisation (Rodríguez Santana & Hernández-Lobato).

q is implicit: ``ε ~ N(μ, diag σ²)`` (100-d, learnable) through a generator MLP
(100 → 50 → 50 → |W|, leaky ReLU 0.2, linear output) gives the weight matrices of the
main network; its biases are point estimates (as the authors' code), so every sample is
still one flat weight vector of the one batched network. The objective, per data point
and minimised, is

    L = −(1/B) Σ_n (1/α)[logsumexp_k α log p(y_n | x_n, w_k) − log K] + β·KL̂/N,

with ``KL̂ = E_q[T(w̃) + log r(w) − log p(w)]`` from a discriminator ``T`` trained by
the logistic loss on adaptive-contrast-standardised samples
(:mod:`~uncertain_agents.posteriors.implicit`), and ``β`` the KL warm-up. ``α → 0`` is
AVB's ELBO (the ``α = 0`` branch is the plain mean of the log-likelihoods, never a
division by a tiny α; ``avb`` is that branch); ``α = 1`` is EP-like. The prior
``N(0, (s·prior_std)²)`` has a learned scale ``s`` and a learned regression noise, both
trained by the same objective.

Each training step is one discriminator step (optimizer group ``"discriminator"``, lr
``fit``'s ``lr × discriminator_lr_scale``) then one generator step (group
``"generator"``: noise distribution, generator, biases, prior scale and noise std).
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor, nn

from ..network import MLPSpec
from ..objectives import alpha_dropout_loss
from ..registry import register
from ..validation import check_positive_float, check_positive_int
from .base import Batch, OptimizerGroup, Phase, Posterior, TrainingContext
from .implicit import (RatioDiscriminator, WeightGenerator, adaptive_contrast, discriminator_loss,
                       gaussian_log_prior)

SAMPLE_MODES = ("shared", "per_point")


def _widths(value, name: str) -> tuple[int, ...]:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value,)
    try:
        widths = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of layer widths, got {value!r}") from None
    return tuple(check_positive_int(w, name) for w in widths)


@register("aadm")
class AADM(Posterior):
    """Implicit posterior trained by adversarial α-divergence minimisation.

    Method options:
        alpha: α of the divergence. Default 0, AVB's ELBO (``aadm`` then trains exactly
            as ``avb``), chosen by measurement across the library's jobs: α = 1 gives the
            paper's gain on multimodal and heteroscedastic noise (toy test NLL 2.36 against
            3.05), but with K = 10 samples any α > 0 lets the sampled functions spread to
            cover misfit, and Thompson sampling then over-explores (wheel δ = 0.5, 3,000
            steps: normalised regret 32 at α = 1, 36 at 0.5, 27 at 0.1, 4.7 at 0); on
            Boston α = 0.5 was no better than α ≈ 0. Set α for calibrated regression;
            see docs/aadm.md.
        train_samples: K, weight samples per step (default 10).
        sample_mode: ``"shared"`` (default: K samples shared by the minibatch, like
            ``bb-alpha``) or ``"per_point"`` (every data point its own K samples, as the
            authors' code; ``B·K`` generator draws per step). See docs/aadm.md for the
            measurement behind the default.
        n_disc_steps: discriminator steps before each generator step (default 1).
        warmup: fraction of the *first* fit's steps over which β rises linearly from 0
            to 1 (default 0.1); later warm-started fits keep β = 1.
        noise_dim: width of ε (default 100).
        generator_hidden, discriminator_hidden: hidden widths (default (50, 50) each;
            ``generator_hidden=()`` gives a linear generator and a Gaussian q).
        discriminator_lr_scale: the discriminator's learning rate as a multiple of the
            generator's (default 1: both 1e-3. The paper has 1e-3 and 1e-4 over ~90,000
            steps; the library's shorter default schedules train the generator at 1e-3,
            and on Boston splits 0–2 a 10× faster discriminator was worse, see docs/aadm.md).
        learn_prior: learn the prior's scale by the same objective (default True).
        init_std: initial spread of the generated weights as a fraction of the prior std
            (default 0.1), around a He-initialised network.
        noise_floor: lower bound on a *learned* regression noise std, in original units
            of y (default ``None``: no bound; ignored when ``noise_std`` fixes the noise).
            The bandit agents set it to 0.1 reward units (:attr:`bandit_defaults`): on
            mushroom the "don't eat" arm always pays exactly 0 and its learned noise std
            shrinks without bound (0.0025 after 8,000 decisions); once it is far below the
            "eat" arm's (which grows to 3–12), the "don't eat" rows dominate the shared
            network's training and the sampled functions collapse to one that ignores the
            context (then every mushroom is eaten, or none). A floor of 0.01 delayed this
            past 6,000 decisions in some trials only; 0.1 held in all five trials of
            docs/bandits.md's 10,000-step table. The wheel's learned noise stays above 0.1
            within 3,000 decisions, so its results there are the same. Regression keeps no
            floor because standardised UCI noise can be far below
            any fixed value (naval). See docs/bandits.md.
    """

    name = "aadm"
    default_lr = 1e-3
    bandit_defaults = {"noise_floor": 0.1}

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, alpha: float = 0.0,
                 train_samples: int = 10, sample_mode: str = "shared", n_disc_steps: int = 1,
                 warmup: float = 0.1, noise_dim: int = 100, generator_hidden=(50, 50),
                 discriminator_hidden=(50, 50), discriminator_lr_scale: float = 1.0,
                 learn_prior: bool = True, init_std: float = 0.1, noise_floor: float | None = None,
                 **kwargs):
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not abs(float(alpha)) < float("inf"):
            raise ValueError(f"alpha must be a finite real number, got {alpha!r}")
        if sample_mode not in SAMPLE_MODES:
            raise ValueError(f"sample_mode must be one of {list(SAMPLE_MODES)}, got {sample_mode!r}")
        if isinstance(warmup, bool) or not isinstance(warmup, numbers.Real) or not 0.0 <= warmup <= 1.0:
            raise ValueError(f"warmup must be a fraction in [0, 1], got {warmup!r}")
        if not isinstance(learn_prior, bool):
            raise TypeError(f"learn_prior must be True or False, got {learn_prior!r}")
        super().__init__(spec, likelihood, **kwargs)
        self.alpha = float(alpha)
        self.train_samples = check_positive_int(train_samples, "train_samples")
        self.sample_mode = sample_mode
        self.n_disc_steps = check_positive_int(n_disc_steps, "n_disc_steps")
        self.warmup = float(warmup)
        self.discriminator_lr_scale = check_positive_float(discriminator_lr_scale, "discriminator_lr_scale")
        self.init_std = check_positive_float(init_std, "init_std")
        self.noise_floor = check_positive_float(noise_floor, "noise_floor", allow_none=True)
        noise_dim = check_positive_int(noise_dim, "noise_dim")
        generator_hidden = _widths(generator_hidden, "generator_hidden")
        discriminator_hidden = _widths(discriminator_hidden, "discriminator_hidden")

        is_weight = spec.weight_mask()
        weight_pos = is_weight.nonzero().squeeze(1)
        bias_pos = (~is_weight).nonzero().squeeze(1)
        self.register_buffer("weight_positions", weight_pos, persistent=False)
        self.n_weights = int(weight_pos.numel())
        # generated weights and point-estimate biases, layer by layer: (w_start, w_end, b_start, b_end)
        self._layer_slices, w0, b0 = [], 0, 0
        for fan_in, fan_out in spec.layer_shapes:
            self._layer_slices.append((w0, w0 + fan_in * fan_out, b0, b0 + fan_out))
            w0, b0 = w0 + fan_in * fan_out, b0 + fan_out

        init = spec.init_params(1, generator=self._init_generator)[0]
        self.q = WeightGenerator(noise_dim, generator_hidden, self.n_weights, self._init_generator)
        self.biases = nn.Parameter(init[bias_pos].clone())
        self.discriminator = RatioDiscriminator(self.n_weights, discriminator_hidden, self._init_generator)
        scale = torch.zeros(())
        if learn_prior:
            self.log_prior_scale = nn.Parameter(scale)
        else:
            self.register_buffer("log_prior_scale", scale)
        self.register_buffer("warmup_steps", torch.tensor(0, dtype=torch.long))
        self.q.scale_output(self.init_std * self.prior_std[weight_pos], init[weight_pos], self._init_generator)

    def _on_prior_change(self) -> None:
        g = torch.Generator(device=self.device).manual_seed(0)
        with torch.no_grad():
            center = self.q(256, g).mean(0)
        self.q.scale_output(self.init_std * self.prior_std[self.weight_positions], center, g)

    def _set_option(self, key: str, value) -> None:
        if key != "noise_floor":
            super()._set_option(key, value)
        self.noise_floor = check_positive_float(value, "noise_floor", allow_none=True)

    @torch.no_grad()
    def hold_noise_floor(self) -> None:
        """Project a learned log noise std (training units) onto ``≥ log(noise_floor / y_scale)``.

        Called at the start of every phase and after every generator step, so the objective
        and the samples never see a noise below the floor while the gradient can still
        raise it again (projected gradient descent; a clamp inside the loss would freeze it).
        """
        if self.noise_floor is None or self.fixed_noise_std is not None or self.kind != "gaussian":
            return
        log_std = self.likelihood.log_noise_std
        log_std.copy_(torch.maximum(log_std, math.log(self.noise_floor) - self.y_scale.log()))

    # ------------------------------------------------------------ pieces
    @property
    def weight_prior_std(self) -> Tensor:
        """``[|W|]`` the (learned-scale) prior std of every generated weight."""
        return self.prior_std[self.weight_positions] * self.log_prior_scale.exp()

    def assemble(self, weights: Tensor) -> Tensor:
        """``weights[..., |W|]`` + the point-estimate biases -> flat ``params[..., D]``."""
        lead = weights.shape[:-1]
        parts = []
        for w_start, w_end, b_start, b_end in self._layer_slices:
            parts += [weights[..., w_start:w_end], self.biases[b_start:b_end].expand(*lead, -1)]
        return torch.cat(parts, dim=-1)

    def kl_estimate(self, weights: Tensor) -> tuple[Tensor, Tensor]:
        """``KL̂`` (scalar) from samples ``weights[S, |W|]`` and their standardised form ``[S, |W|]``.

        ``KL̂ = mean_s [T(w̃_s) + log r(w_s) − log p(w_s)]``; differentiable in the samples
        and the prior scale (``T``'s parameters belong to the discriminator's optimiser).
        """
        contrast = adaptive_contrast(weights)
        t = self.discriminator(contrast.standardized)
        log_p = gaussian_log_prior(weights, self.weight_prior_std)
        return (t + contrast.log_r - log_p).mean(), contrast.standardized

    def discriminator_loss(self, generator: torch.Generator, n_samples: int | None = None) -> Tensor:
        """The logistic loss of ``T`` on fresh standardised q-samples against ``N(0, I)``
        (``n_samples`` draws; default the number one training step uses)."""
        n = n_samples or self._kl_sample_count()
        with torch.no_grad():
            w = self.q(n, generator)
        return discriminator_loss(self.discriminator, adaptive_contrast(w, with_log_r=False).standardized, generator)

    def _kl_sample_count(self, batch_size: int | None = None) -> int:
        if self.sample_mode == "per_point" and batch_size is not None:
            return max(batch_size * self.train_samples, 2)
        return max(self.train_samples, 2)

    def data_loglik(self, batch: Batch, weights: Tensor) -> Tensor:
        """``[K, B]`` log-likelihoods; ``weights`` is ``[K, |W|]`` (shared) or ``[B, K, |W|]``."""
        params = self.assemble(weights)
        if weights.dim() == 2:
            f = self.spec.forward(params, batch.x)  # [K, B, out]
        else:
            B, K = weights.shape[:2]
            x = batch.x.unsqueeze(1).expand(B, K, -1).reshape(B * K, 1, -1)
            f = self.spec.forward(params.reshape(B * K, -1), x).view(B, K, -1).transpose(0, 1)
        kw = {"log_noise_std": self.log_noise_std_train()} if self.kind == "gaussian" else {}
        return self.likelihood.log_prob(f, batch.y, batch.mask, **kw)

    def objective_terms(self, batch: Batch, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """The data term ``−(1/B) Σ_n (1/α)[lse_k α ℓ_nk − log K]`` and ``KL̂``, from one
        draw of weights (``K`` shared, or ``K`` per data point)."""
        K, B = self.train_samples, batch.x.shape[0]
        shape = (K,) if self.sample_mode == "shared" else (B, K)
        weights = self.q(shape, generator)
        loglik = self.data_loglik(batch, weights)
        flat = weights.reshape(-1, self.n_weights)
        if flat.shape[0] < 2:  # adaptive contrast needs two samples: add one for the KL only
            flat = torch.cat([flat, self.q(1, generator)])
        kl, _ = self.kl_estimate(flat)
        return alpha_dropout_loss(loglik, self.alpha), kl

    def loss(self, batch: Batch, generator: torch.Generator, beta: float = 1.0) -> Tensor:
        """The objective per data point: data term ``+ β·KL̂/N`` (scalar)."""
        data, kl = self.objective_terms(batch, generator)
        return data + beta * kl / batch.n_data

    def kl_weight(self, steps_done: int) -> float:
        """β after ``steps_done`` training steps: linear from 0 to 1 over the warm-up."""
        warm = int(self.warmup_steps)
        return 1.0 if warm == 0 else min(1.0, steps_done / warm)

    # --------------------------------------------------------- protocol
    def optimizer_groups(self) -> dict[str, OptimizerGroup]:
        """``"discriminator"``: T; ``"generator"``: everything else that is trained."""
        disc = tuple(self.discriminator.parameters())
        ids = {id(p) for p in disc}
        rest = tuple(p for p in self.parameters() if p.requires_grad and id(p) not in ids)
        return {"generator": OptimizerGroup(rest),
                "discriminator": OptimizerGroup(disc, lr_scale=self.discriminator_lr_scale)}

    def start_phase(self, phase: Phase, ctx: TrainingContext) -> None:
        if not ctx.refit:  # the warm-up spans the first fit; refits keep β = 1 after it
            self.warmup_steps.fill_(int(round(self.warmup * ctx.steps)))
        self.hold_noise_floor()

    def training_step(self, batch: Batch, ctx: TrainingContext) -> dict[str, Tensor]:
        """``n_disc_steps`` discriminator steps, then one generator step (fresh draws each).

        Named losses: ``loss`` (the objective per data point), ``discriminator`` (its
        logistic loss), ``kl`` (``KL̂`` in nats) and ``beta``.
        """
        n_kl = self._kl_sample_count(batch.x.shape[0])
        for _ in range(self.n_disc_steps):
            d_loss = ctx.minimize(self.discriminator_loss(ctx.generator, n_kl), "discriminator")
        beta = self.kl_weight(ctx.steps_before + ctx.step)
        data, kl = self.objective_terms(batch, ctx.generator)
        loss = ctx.minimize(data + beta * kl / batch.n_data, "generator")
        self.hold_noise_floor()
        return {"loss": loss, "discriminator": d_loss, "kl": kl.detach(),
                "beta": torch.tensor(beta, device=loss.device)}

    def _sample(self, n: int, generator: torch.Generator):
        return self.assemble(self.q(n, generator)), None
