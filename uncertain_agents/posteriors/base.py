"""``Posterior``: the base class every method implements.

A subclass stores its approximation (a Gaussian, particles, members, ...) as
parameters and buffers and implements two things:

* ``_loss(batch, generator) -> Tensor`` — the method's objective on a minibatch, per
  data point (the optimiser is scale-invariant, the trace is readable), or
  ``_train_step`` for methods that are not plain gradient descent on a loss;
* ``_sample(n, generator) -> (params[n, D], log_noise_std[n, out] | None)``.

Everything else — input checks, standardisation, minibatching, the optimiser that
survives warm-started refits, divergence checks, progress bars, sampling, chunked
prediction, saving — lives here once.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ..function_sample import FunctionSample
from ..likelihoods import make_likelihood
from ..network import MLPSpec
from ..predictive import Predictive
from ..validation import (as_tensor, check_finite, check_inputs, check_positive_float,
                          check_positive_int)

SAVE_FORMAT = "uncertain-agents/1"

#: Default weight prior std per likelihood (``None``: ``1/sqrt(fan_in)`` per layer).
DEFAULT_PRIOR_STD: dict[str, float | None] = {"gaussian": None, "categorical": 1.0}


class TrainingDivergedError(RuntimeError):
    """Raised when the training loss or the parameters become NaN or infinite."""


@dataclass
class FitResult:
    """What :meth:`Posterior.fit` returns.

    Attributes:
        losses: ``[steps]`` the per-data-point objective at every optimiser step.
        steps: number of optimiser steps taken.
        seconds: wall time of the fit.
    """

    losses: np.ndarray
    steps: int
    seconds: float

    @property
    def final_loss(self) -> float:
        return float(self.losses[-1])

    def __repr__(self) -> str:
        return f"FitResult(steps={self.steps}, final_loss={self.final_loss:.4g}, seconds={self.seconds:.2f})"


@dataclass
class Batch:
    """A training minibatch in training units.

    Attributes:
        x: ``[B, in_dim]`` standardised inputs.
        y: ``[B, out]`` standardised targets (regression) or ``[B]`` long labels.
        mask: ``[B, out]`` float observation mask (``[B]`` for classification) or None.
        index: ``[B]`` row indices into the data passed to ``fit``.
        n_data: ``N``, the number of rows passed to ``fit`` (minibatch scaling).
        x_pool: ``[N, in_dim]`` all standardised inputs (methods that need extra
            points, such as f-SVGD, draw from it).
        y_pool: ``[N, out]`` (or ``[N]``) all training-unit targets, and
        mask_pool: ``[N, out]`` their float mask or None (methods that score held-out rows).
    """

    x: Tensor
    y: Tensor
    mask: Tensor | None
    index: Tensor
    n_data: int
    x_pool: Tensor = field(repr=False, default=None)
    y_pool: Tensor = field(repr=False, default=None)
    mask_pool: Tensor | None = field(repr=False, default=None)


class Posterior(nn.Module):
    """An approximate posterior over the weights of one MLP.

    Args:
        spec: the network architecture.
        likelihood: ``"gaussian"`` (regression) or ``"categorical"`` (classification).
        device: where parameters live and computation runs.
        seed: seeds the initialisation and the default random generator.
        prior_std: Gaussian prior standard deviation of every weight and bias; ``None``
            (default) depends on the likelihood (:attr:`default_prior_std`, normally
            :data:`DEFAULT_PRIOR_STD`): regression uses
            ``1/sqrt(fan_in)`` per layer, which keeps the prior over functions O(1) in
            standardised units; classification uses N(0, 1), whose logits can be confident
            (with ``1/sqrt(fan_in)`` the logits stay O(1), clean digits keep ~1.5 nats of
            entropy and FGSM detection suffers; see docs/plug_in.md).
        noise_std: fixes the regression noise standard deviation (original units of y);
            ``None`` learns it.
        init_noise_std: starting value of a learned noise std (standardised units).
        standardize: standardise x (and y for regression) inside ``fit``; predictions are
            reported in original units either way.
    """

    name: ClassVar[str] = "posterior"
    default_lr: ClassVar[float] = 1e-3
    #: Default weight prior std per likelihood (``None``: ``1/sqrt(fan_in)`` per layer).
    default_prior_std: ClassVar[dict[str, float | None]] = DEFAULT_PRIOR_STD

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, device="cpu",
                 seed: int | None = None, prior_std: float | None = None,
                 noise_std: float | None = None, init_noise_std: float = 0.5,
                 standardize: bool = True):
        super().__init__()
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
        if not isinstance(standardize, bool):
            raise TypeError(f"standardize must be True or False, got {standardize!r}")
        self.spec = spec
        self.seed = None if seed is None else int(seed)
        self.standardize = standardize
        self.fixed_noise_std = check_positive_float(noise_std, "noise_std", allow_none=True)
        check_positive_float(init_noise_std, "init_noise_std")
        self.likelihood = make_likelihood(likelihood, spec.out_dim, noise_std=self.fixed_noise_std,
                                          init_noise_std=init_noise_std)
        self.kind = likelihood
        if prior_std is None:
            prior_std = self.default_prior_std.get(likelihood)
        prior = (1.0 / spec.fan_in_per_param().sqrt() if prior_std is None
                 else torch.full((spec.num_params,), check_positive_float(prior_std, "prior_std")))
        self.register_buffer("prior_std", prior)
        self.register_buffer("x_loc", torch.zeros(spec.in_dim))
        self.register_buffer("x_scale", torch.ones(spec.in_dim))
        self.register_buffer("y_loc", torch.zeros(spec.out_dim))
        self.register_buffer("y_scale", torch.ones(spec.out_dim))
        # True once the training units are fixed (by the first fit or set_units): later
        # warm-started fits keep them, so a refit never changes what was learned.
        self.register_buffer("units_fixed", torch.tensor(False))
        self.config: dict = {}
        self._generators: dict[str, torch.Generator] = {}
        self._optimizer: torch.optim.Optimizer | None = None
        self._optimizer_device: torch.device | None = None
        self._init_generator = torch.Generator().manual_seed(self.seed if self.seed is not None
                                                             else int(torch.randint(2**62, ()).item()))
        self._requested_device = torch.device(device)

    # ----------------------------------------------------------- subclass API
    def _loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        raise NotImplementedError

    def _sample(self, n: int, generator: torch.Generator) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError

    def _train_step(self, batch: Batch, optimizer: torch.optim.Optimizer,
                    generator: torch.Generator) -> Tensor:
        """One optimiser step; returns the (detached) loss. Override for non-loss updates."""
        optimizer.zero_grad(set_to_none=True)
        loss = self._loss(batch, generator)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def _make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        return torch.optim.Adam([p for p in self.parameters() if p.requires_grad], lr=lr)

    def _on_prior_change(self) -> None:
        """Hook called by :meth:`set_prior_std`: refresh anything derived from ``prior_std``."""

    def _on_data(self, n_data: int) -> None:
        """Hook called at the start of ``fit`` with the number of rows (bootstrap weights)."""

    # -------------------------------------------------------------- helpers
    @property
    def device(self) -> torch.device:
        return self.prior_std.device

    def generator(self, device=None) -> torch.Generator:
        """The posterior's own seeded generator for ``device`` (default: its device)."""
        device = torch.device(device or self.device)
        key = str(device)
        if key not in self._generators:
            g = torch.Generator(device=device)
            base = self.seed if self.seed is not None else int(torch.randint(2**62, ()).item())
            g.manual_seed(base + 1)
            self._generators[key] = g
        return self._generators[key]

    def _check_generator(self, generator) -> torch.Generator:
        if generator is None:
            return self.generator()
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        if torch.device(generator.device).type != self.device.type:
            raise ValueError(f"generator is on {generator.device} but the posterior is on {self.device}")
        return generator

    def log_noise_std_train(self) -> Tensor:
        """``[out]`` log noise std in training units (fixed noise follows the y scale)."""
        if self.fixed_noise_std is not None:
            return math.log(self.fixed_noise_std) - self.y_scale.log()
        return self.likelihood.log_noise_std

    # ------------------------------------------------------------------ data
    def _check_data(self, x, y, mask):
        x = check_inputs(x, self.spec.in_dim, device=self.device)
        n = x.shape[0]
        if self.kind == "categorical":
            y = as_tensor(y, "y", device=self.device, dtype=None)
            if y.is_floating_point():
                check_finite(y, "y")
                if not bool((y == y.round()).all()):
                    raise ValueError("y must hold integer class labels for likelihood='categorical'")
            y = y.reshape(-1).long() if y.dim() == 2 and y.shape[1] == 1 else y.long()
            if y.dim() != 1:
                raise ValueError(f"y must be a vector of class labels [N], got shape {tuple(y.shape)}")
            if y.numel() and (int(y.min()) < 0 or int(y.max()) >= self.spec.out_dim):
                raise ValueError(f"y labels must lie in [0, {self.spec.out_dim - 1}], "
                                 f"got range [{int(y.min())}, {int(y.max())}]")
        else:
            y = as_tensor(y, "y", device=self.device)
            if y.dim() == 1 and self.spec.out_dim == 1:
                y = y.unsqueeze(-1)
            if y.dim() != 2 or y.shape[1] != self.spec.out_dim:
                raise ValueError(f"y must have shape [N, {self.spec.out_dim}] (out_dim), got {tuple(y.shape)}")
        if y.shape[0] != n:
            raise ValueError(f"x and y must have the same number of rows, got {n} and {y.shape[0]}")
        if mask is not None:
            mask = as_tensor(mask, "mask", device=self.device, dtype=None)
            if mask.dtype != torch.bool:
                raise TypeError(f"mask must be a bool tensor, got dtype {mask.dtype}")
            if self.kind == "categorical" and mask.dim() == 2 and mask.shape[1] == 1:
                mask = mask[:, 0]
            expected = (n,) if self.kind == "categorical" else (n, self.spec.out_dim)
            if tuple(mask.shape) != expected:
                raise ValueError(f"mask must have shape {list(expected)}, got {tuple(mask.shape)}")
            if not bool(mask.any()):
                raise ValueError("mask has no observed entry: at least one must be True")
            if self.kind != "categorical":
                y = torch.where(mask, y, torch.zeros_like(y))  # unobserved targets may be NaN
        if self.kind != "categorical":
            check_finite(y, "y")
        return x, y, mask

    @property
    def units_are_fixed(self) -> bool:
        """Whether the training units are fixed (after the first ``fit`` or :meth:`set_units`)."""
        return bool(self.units_fixed)

    @property
    def has_default_prior(self) -> bool:
        """True when ``prior_std`` was not chosen by the user (the ``1/sqrt(fan_in)`` default)."""
        return self.config.get("prior_std") is None

    def set_prior_std(self, prior_std: float) -> None:
        """Replace the Gaussian weight prior by ``N(0, prior_std²)`` for every weight and bias.

        The prior lives in training units, so it can only change before they are fixed (before
        the first fit and before :meth:`set_units`). Anything the method derives from the prior
        (a mean-field posterior's initial std, dropout's weight decay, f-SVGD's layer scales)
        is re-derived, and the saved configuration records the new value. Jobs whose units
        need another prior than the regression default set it here (the bandit agents do).

        Raises:
            ValueError: for a non-positive or non-finite value, or once the units are fixed.
        """
        value = check_positive_float(prior_std, "prior_std")
        if self.units_are_fixed:
            raise ValueError(f"{self.name}: set_prior_std must be called before the first fit and before "
                             f"set_units (the prior is defined in the training units, which are fixed now)")
        self.prior_std.fill_(value)
        self.config["prior_std"] = value
        self._on_prior_change()

    def set_units(self, *, x_loc=0.0, x_scale=1.0, y_loc=0.0, y_scale=1.0) -> None:
        """Fix the units the network is trained in: ``(x − x_loc)/x_scale`` and ``(y − y_loc)/y_scale``.

        Every later ``fit`` keeps them (``fit`` would otherwise set them from the data of the
        first fit when ``standardize=True``). Priors and the initial noise are defined in
        these units, so ``y_scale`` is also the scale of the prior over functions. Jobs that
        know their units set them here (the bandit agents do; see docs/bandits.md).
        Scalars broadcast over the ``in_dim`` / ``out_dim`` columns.

        Raises:
            ValueError: for non-finite values or non-positive scales, and if the units are
                already fixed (changing them would change what was learned).
        """
        if self.units_are_fixed:
            raise ValueError(f"{self.name}: the training units are already fixed (by an earlier fit or "
                             f"set_units); set_units must be called once, before the first fit")
        values = {}
        for name, value, width in (("x_loc", x_loc, self.spec.in_dim), ("x_scale", x_scale, self.spec.in_dim),
                                   ("y_loc", y_loc, self.spec.out_dim), ("y_scale", y_scale, self.spec.out_dim)):
            t = as_tensor(value, name, device=self.device).reshape(-1)
            if t.numel() == 1:
                t = t.expand(width)
            if t.numel() != width:
                raise ValueError(f"{name} must be a scalar or have {width} values, got {t.numel()}")
            check_finite(t, name)
            if name.endswith("scale") and not bool((t > 0).all()):
                raise ValueError(f"{name} must be positive, got {t.tolist()}")
            values[name] = t
        for name, t in values.items():
            getattr(self, name).copy_(t)
        self.units_fixed.fill_(True)

    def _update_scaling(self, x: Tensor, y: Tensor, mask: Tensor | None) -> None:
        """Standardisation from the data of the *first* fit; later fits keep those units."""
        if not self.standardize or self.units_are_fixed:
            return
        self.units_fixed.fill_(True)
        self.x_loc.copy_(x.mean(0))
        self.x_scale.copy_(_safe_scale(x.std(0, unbiased=False)))
        if self.kind == "categorical":
            return
        w = torch.ones_like(y) if mask is None else mask.to(y.dtype)
        count = w.sum(0).clamp_min(1.0)
        loc = (w * y).sum(0) / count
        var = (w * (y - loc).square()).sum(0) / count
        scale = torch.where(count > 1, _safe_scale(var.sqrt()), torch.ones_like(var))
        self.y_loc.copy_(loc)
        self.y_scale.copy_(scale)

    def _to_train_units(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        xs = (x - self.x_loc) / self.x_scale
        ys = y if self.kind == "categorical" else (y - self.y_loc) / self.y_scale
        return xs, ys

    # ------------------------------------------------------------------- fit
    def fit(self, x, y, mask=None, *, steps: int, batch_size: int = 32, lr: float | None = None,
            progress: bool = False) -> FitResult:
        """Train (warm-started from the current state) for ``steps`` optimiser steps.

        Args:
            x: ``[N, in_dim]`` inputs.
            y: ``[N, out]`` or ``[N]`` regression targets; ``[N]`` integer labels for
                classification.
            mask: ``[N, out]`` bool, True where an output is observed (regression); ``[N]``
                rows to use (classification). ``None`` = everything observed.
            steps: number of optimiser steps.
            batch_size: minibatch size (capped at N); batches sweep shuffled epochs.
            lr: Adam learning rate; ``None`` uses the method's default.
            progress: show a rich progress bar.

        Raises:
            TrainingDivergedError: if the loss or the parameters become NaN/inf.
        """
        steps = check_positive_int(steps, "steps")
        batch_size = check_positive_int(batch_size, "batch_size")
        lr = self.default_lr if lr is None else check_positive_float(lr, "lr")
        x, y, mask = self._check_data(x, y, mask)
        self._update_scaling(x, y, mask)
        xs, ys = self._to_train_units(x, y)
        maskf = None if mask is None else mask.to(xs.dtype)
        n = xs.shape[0]
        self._on_data(n)
        bs = min(batch_size, n)
        gen = self.generator()
        opt = self._get_optimizer(lr)
        losses = torch.empty(steps, device=self.device)
        stream = _IndexStream(n, gen, self.device)
        t0 = time.perf_counter()
        self.train()
        bar = _progress_bar(progress, steps, f"fit {self.name}")
        try:
            for step in range(steps):
                idx = stream.take(bs)
                batch = Batch(xs[idx], ys[idx], None if maskf is None else maskf[idx], idx, n, xs, ys, maskf)
                losses[step] = self._train_step(batch, opt, gen)
                if step % 25 == 0 or step == steps - 1:
                    value = float(losses[step])
                    if not math.isfinite(value):
                        raise TrainingDivergedError(
                            f"{self.name}: the training loss became {value} at step {step}; "
                            f"try a smaller lr (now {lr}) or standardised data")
                    if bar is not None:
                        bar.update(step + 1, value)
        finally:
            if bar is not None:
                bar.close()
        self.eval()
        for pname, p in self.named_parameters():
            if not bool(torch.isfinite(p).all()):
                raise TrainingDivergedError(f"{self.name}: parameter {pname} became NaN/inf during fit")
        return FitResult(losses.cpu().numpy(), steps, time.perf_counter() - t0)

    def _get_optimizer(self, lr: float) -> torch.optim.Optimizer:
        if self._optimizer is None or self._optimizer_device != self.device:
            self._optimizer = self._make_optimizer(lr)
            self._optimizer_device = self.device
        for group in self._optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        return self._optimizer

    # ---------------------------------------------------------------- sample
    @torch.no_grad()
    def sample(self, n: int, *, generator: torch.Generator | None = None) -> FunctionSample:
        """Draw ``n`` fixed functions; ``sample(n)(x)`` is ``[n, B, out]``."""
        n = check_positive_int(n, "n")
        gen = self._check_generator(generator)
        params, log_noise = self._sample(n, gen)
        noise = None
        if self.kind == "gaussian":
            if log_noise is None:
                log_noise = self.log_noise_std_train().expand(n, -1)
            noise = log_noise.exp() * self.y_scale
        return FunctionSample(params.detach(), self.spec, self.x_loc, self.x_scale,
                              self.y_loc if self.kind == "gaussian" else torch.zeros_like(self.y_loc),
                              self.y_scale if self.kind == "gaussian" else torch.ones_like(self.y_scale),
                              noise)

    @torch.no_grad()
    def predict(self, x, *, n_samples: int = 100, generator: torch.Generator | None = None,
                max_elements: int = 2**24) -> Predictive:
        """Monte-Carlo predictive at ``x[B, in_dim]`` over ``n_samples`` functions.

        Inputs are processed in chunks so that no hidden activation tensor exceeds
        ``max_elements`` entries.
        """
        fs = self.sample(n_samples, generator=generator)
        x = check_inputs(x, self.spec.in_dim, device=self.device)
        width = max(self.spec.widths)
        chunk = max(1, max_elements // (n_samples * width))
        f = torch.cat([fs(x[i:i + chunk]) for i in range(0, x.shape[0], chunk)], dim=1)
        noise_var = None if fs.noise_std is None else fs.noise_std.square().unsqueeze(1)
        return Predictive(f, self.kind, noise_var)

    # ------------------------------------------------------------- save/load
    def save(self, path) -> None:
        """Write config (JSON) and tensors; restore with :func:`uncertain_agents.load_posterior`."""
        payload = {
            "format": SAVE_FORMAT,
            "config": json.dumps(self.config),
            "state": {k: v.detach().cpu() for k, v in self.state_dict().items()},
        }
        torch.save(payload, path)

    def _load_tensors(self, state: dict[str, Tensor]) -> None:
        own = self.state_dict()
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if missing or unexpected:
            raise ValueError(f"saved state does not match {self.name}: missing {missing}, unexpected {unexpected}")
        for key, value in state.items():
            target = own[key]
            if target.shape != value.shape:  # buffers that grow with the data
                module_name, _, attr = key.rpartition(".")
                module = self.get_submodule(module_name) if module_name else self
                if attr in module._buffers:
                    module._buffers[attr] = value.to(target.device, target.dtype).clone()
                    continue
                raise ValueError(f"saved tensor {key} has shape {tuple(value.shape)}, "
                                 f"expected {tuple(target.shape)}")
        self.load_state_dict({k: v for k, v in state.items()}, strict=True)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, spec={self.spec}, likelihood={self.kind!r}"


def _safe_scale(std: Tensor) -> Tensor:
    return torch.where(std > 1e-12, std, torch.ones_like(std))


class _IndexStream:
    """Minibatch indices that sweep shuffled epochs without a partial last batch."""

    def __init__(self, n: int, generator: torch.Generator, device):
        self.n, self.generator, self.device = n, generator, device
        self.buffer = torch.empty(0, dtype=torch.long, device=device)

    def take(self, b: int) -> Tensor:
        if self.buffer.numel() < b:
            fresh = torch.randperm(self.n, generator=self.generator, device=self.device)
            self.buffer = torch.cat([self.buffer, fresh])
        idx, self.buffer = self.buffer[:b], self.buffer[b:]
        return idx


class _progress_bar:
    """A thin rich progress bar that shows the running loss (no-op when disabled)."""

    def __new__(cls, enabled: bool, total: int, description: str):
        if not enabled:
            return None
        return super().__new__(cls)

    def __init__(self, enabled: bool, total: int, description: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("loss {task.fields[loss]:.4g}"), TimeRemainingColumn(),
                                 transient=False)
        self.task = self.progress.add_task(description, total=total, loss=float("nan"))
        self.progress.start()

    def update(self, completed: int, loss: float) -> None:
        self.progress.update(self.task, completed=completed, loss=loss)

    def close(self) -> None:
        self.progress.stop()
