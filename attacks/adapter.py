"""A posterior's predictive as a torch module that foolbox can attack.

The module's "logits" are the log of the Monte-Carlo mean softmax over ``S`` sampled
functions, ``log (1/S) Σ_s softmax(f_s(x)) = logsumexp_s log_softmax(f_s(x)) - log S``.
foolbox's cross-entropy on these logits is therefore ``-log p̂(y|x)`` with ``p̂`` the
Monte-Carlo predictive, and its input gradient is the gradient of that quantity.

The posterior is *not* registered as a sub-module: ``foolbox.PyTorchModel`` calls
``model.to(device)`` and callers may call ``.eval()``/``.train()`` on the adapter; none
of that reaches the user's posterior. Samples are drawn with the adapter's own
generator, so the posterior's generator state is untouched too.
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor, nn
import torch.nn.functional as F

from uncertain_agents.posteriors.base import Posterior
from uncertain_agents.seeding import ATTACK_FUNCTIONS_KEY, stream_generator
from uncertain_agents.validation import check_positive_int, check_seed


def check_classifier(posterior) -> Posterior:
    """Raise a clear error unless ``posterior`` is a categorical :class:`Posterior`."""
    if not isinstance(posterior, Posterior):
        raise TypeError(f"posterior must be an uncertain_agents Posterior, got {type(posterior).__name__}")
    if posterior.kind != "categorical":
        raise ValueError("posterior must use likelihood='categorical' (a classifier) to be attacked, "
                         f"got likelihood={posterior.kind!r}")
    return posterior


def make_generator(seed, device, stream: int) -> torch.Generator:
    """A fresh generator on ``device`` for part ``stream`` of an attack seeded ``seed`` (an int ≥ 0):
    ``uncertain_agents.seeding.stream_seed(seed, stream)``, so the attacker's and the scorer's
    functions of one seed, and those of neighbouring seeds, never share random numbers."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = check_seed(seed)
    return stream_generator(seed, stream, device)


class PredictiveLogits(nn.Module):
    """``x[B, ...] -> log p̂(·|x)[B, C]``, the log Monte-Carlo-mean softmax of a posterior.

    Args:
        posterior: a classifier (``likelihood="categorical"``); never moved or modified.
        n_samples: ``S``, functions averaged per forward pass.
        seed: seeds the adapter's own generator (on the posterior's device; its stream
            ``ATTACK_FUNCTIONS_KEY`` of :mod:`uncertain_agents.seeding`).
        resample: draw fresh functions on every forward pass (a stochastic model, as
            the attacker of a Monte-Carlo predictive sees it); ``False`` draws them once
            at construction, making the module a fixed deterministic function.

    Inputs may be images ``[B, H, W]``/``[B, 1, H, W]``; they are flattened to
    ``[B, in_dim]``. The output is differentiable with respect to ``x``.
    """

    def __init__(self, posterior: Posterior, n_samples: int = 20, *, seed: int = 0,
                 resample: bool = True):
        super().__init__()
        check_classifier(posterior)
        if not isinstance(resample, bool):
            raise TypeError(f"resample must be True or False, got {resample!r}")
        self.n_samples = check_positive_int(n_samples, "n_samples")
        self.resample = resample
        # object.__setattr__ keeps the posterior out of nn.Module's registry of children.
        object.__setattr__(self, "_posterior", posterior)
        self.generator = make_generator(seed, posterior.device, ATTACK_FUNCTIONS_KEY)
        self._fixed = None if resample else posterior.sample(self.n_samples, generator=self.generator)
        self.eval()

    @property
    def posterior(self) -> Posterior:
        return self._posterior

    @property
    def device(self) -> torch.device:
        return self._posterior.device

    def redraw(self):
        """Draw a new set of ``S`` functions from the adapter's generator and use it for every
        forward pass until the next ``redraw`` (an adapter made with ``resample=False``; e.g. one
        I-FGSM step, shared by every chunk of rows). Returns the ``FunctionSample``."""
        if self.resample:
            raise ValueError("redraw() is for an adapter made with resample=False (resample=True draws "
                             "new functions at every forward pass already)")
        self._fixed = self._posterior.sample(self.n_samples, generator=self.generator)
        return self._fixed

    def functions(self):
        """The ``FunctionSample`` of ``S`` functions used by the next forward pass."""
        if self._fixed is not None:
            return self._fixed
        return self._posterior.sample(self.n_samples, generator=self.generator)

    def forward(self, x: Tensor) -> Tensor:
        """``x[B, in_dim]`` (or images) -> ``[B, C]`` log Monte-Carlo-mean probabilities."""
        in_dim = self._posterior.spec.in_dim
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() < 2 or math.prod(x.shape[1:]) != in_dim:
            raise ValueError(f"x must be [B, {in_dim}] or images with {in_dim} pixels, got {tuple(x.shape)}")
        f = self.functions()(x.reshape(x.shape[0], in_dim))  # [S, B, C]
        return torch.logsumexp(F.log_softmax(f, dim=-1), dim=0) - math.log(f.shape[0])

    def extra_repr(self) -> str:
        return f"posterior={self._posterior.name!r}, n_samples={self.n_samples}, resample={self.resample}"


def foolbox_model(adapter: PredictiveLogits):
    """Wrap the adapter as a ``foolbox.PyTorchModel`` on the posterior's device, bounds ``[0, 1]``."""
    import foolbox as fb

    return fb.PyTorchModel(adapter, bounds=(0.0, 1.0), device=adapter.device)
