"""The predictive distribution: a mixture over sampled functions plus likelihood noise."""
from __future__ import annotations

import math

import torch
from torch import Tensor
import torch.nn.functional as F

from .validation import as_tensor, check_finite

LOG_2PI = math.log(2.0 * math.pi)


class Predictive:
    """Monte-Carlo predictive ``p(y|x) ≈ (1/S) Σ_s p(y | f_s(x))`` in original units.

    Args:
        f: ``[S, B, out]`` sampled function values (regression: original units of y;
            classification: logits).
        kind: ``"gaussian"`` or ``"categorical"``.
        noise_var: regression noise variance in original units, broadcastable to
            ``[S, B, out]`` (e.g. ``[out]`` or per-sample ``[S, 1, out]``).
    """

    def __init__(self, f: Tensor, kind: str, noise_var: Tensor | None = None):
        if not isinstance(f, Tensor):
            raise TypeError(f"f must be a torch.Tensor [S, B, out], got {type(f).__name__}")
        if f.dim() != 3 or f.shape[0] < 1:
            raise ValueError(f"f must have shape [S, B, out] with S >= 1 sampled functions, got {tuple(f.shape)}")
        if kind not in ("gaussian", "categorical"):
            raise ValueError(f"kind must be 'gaussian' or 'categorical', got {kind!r}")
        if kind == "gaussian" and noise_var is None:
            raise ValueError("a gaussian Predictive needs noise_var")
        self.samples = f
        self.kind = kind
        if noise_var is not None:
            try:
                noise_var = torch.as_tensor(noise_var, dtype=f.dtype, device=f.device)
            except (TypeError, ValueError, RuntimeError):
                raise TypeError(f"noise_var must be a positive number or tensor, got {noise_var!r}") from None
            if not bool(torch.isfinite(noise_var).all()) or not bool((noise_var > 0).all()):
                raise ValueError("noise_var must be finite and positive (a variance), got values in "
                                 f"[{float(noise_var.min()):.3g}, {float(noise_var.max()):.3g}]")
            try:
                noise_var = torch.broadcast_to(noise_var, f.shape)
            except RuntimeError:
                raise ValueError(f"noise_var must broadcast to f's shape {tuple(f.shape)} (e.g. [out] or "
                                 f"[S, 1, out]), got {tuple(noise_var.shape)}") from None
        self.noise_var = noise_var

    @property
    def n_samples(self) -> int:
        """``S``, the number of sampled functions."""
        return self.samples.shape[0]

    # ------------------------------------------------------------ moments
    @property
    def mean(self) -> Tensor:
        """``[B, out]``: predictive mean (classification: mean probabilities)."""
        if self.kind == "categorical":
            return self.probs
        return self.samples.mean(0)

    @property
    def epistemic_variance(self) -> Tensor:
        """``[B, out]``: variance of the sampled means across functions."""
        vals = self.samples if self.kind == "gaussian" else self.sample_probs
        return vals.var(0, unbiased=False)

    @property
    def aleatoric_variance(self) -> Tensor:
        """``[B, out]``: expected noise variance (classification: mean of p(1-p))."""
        if self.kind == "gaussian":
            return self.noise_var.mean(0)
        p = self.sample_probs
        return (p * (1 - p)).mean(0)

    @property
    def variance(self) -> Tensor:
        """``[B, out]``: total predictive variance = epistemic + aleatoric."""
        return self.epistemic_variance + self.aleatoric_variance

    @property
    def stddev(self) -> Tensor:
        """``[B, out]``: square root of :attr:`variance`."""
        return self.variance.sqrt()

    # ------------------------------------------------------- classification
    @property
    def sample_probs(self) -> Tensor:
        """``[S, B, C]`` softmax of every sampled function."""
        self._require("categorical", "sample_probs")
        return F.softmax(self.samples, dim=-1)

    @property
    def log_probs(self) -> Tensor:
        """``[B, C]``: log of the Monte-Carlo mean softmax (log-sum-exp, stable)."""
        self._require("categorical", "log_probs")
        return torch.logsumexp(F.log_softmax(self.samples, -1), dim=0) - math.log(self.n_samples)

    @property
    def probs(self) -> Tensor:
        """``[B, C]``: Monte-Carlo mean class probabilities."""
        self._require("categorical", "probs")
        return self.log_probs.exp()

    # ------------------------------------------------------------ scores
    def log_prob(self, y: Tensor) -> Tensor:
        """``[B]``: log of the Monte-Carlo mean likelihood of ``y``.

        Regression ``y`` is ``[B, out]`` or ``[B]`` in original units (summed over
        outputs); classification ``y`` is ``[B]`` integer labels.
        """
        if self.kind == "categorical":
            logp = F.log_softmax(self.samples, -1)
            idx = self.labels(y).view(1, -1, 1).expand(self.n_samples, -1, 1)
            lp = logp.gather(-1, idx).squeeze(-1)
        else:
            y = self.targets(y)
            lp = (-0.5 * (y - self.samples).square() / self.noise_var
                  - 0.5 * torch.log(self.noise_var) - 0.5 * LOG_2PI).sum(-1)
        return torch.logsumexp(lp, dim=0) - math.log(self.n_samples)

    def labels(self, y) -> Tensor:
        """``y`` as ``[B]`` long class labels, checked: one per input, finite whole numbers in ``[0, C)``."""
        self._require("categorical", "labels")
        B, C = self.samples.shape[1], self.samples.shape[2]
        y = as_tensor(y, "y", device=self.samples.device, dtype=None)
        if y.numel() != B or (y.dim() > 1 and y.shape != (B, 1)):
            raise ValueError(f"y must hold one class label per input ([{B}]), got shape {tuple(y.shape)}")
        y = y.reshape(B)
        check_finite(y, "y")
        if y.is_floating_point() and not bool(torch.equal(y, y.round())):
            raise ValueError("y must hold whole-number class labels, got fractional values")
        if B and (int(y.min()) < 0 or int(y.max()) >= C):
            raise ValueError(f"y must hold class labels in [0, {C - 1}], got values in "
                             f"[{int(y.min())}, {int(y.max())}]")
        return y.long()

    def targets(self, y) -> Tensor:
        """Regression ``y`` as ``[B, out]`` in the samples' dtype (``[B]`` accepted for one output), checked
        (the shape; finite values: a NaN or infinite target is a ``ValueError`` naming ``y``)."""
        self._require("gaussian", "targets")
        y = as_tensor(y, "y", device=self.samples.device, dtype=self.samples.dtype)
        if y.dim() == 1:
            y = y.unsqueeze(-1)
        if y.shape != self.samples.shape[1:]:
            raise ValueError(f"y must have shape {tuple(self.samples.shape[1:])}, got {tuple(y.shape)}")
        check_finite(y, "y")  # a NaN target would score NaN, not fail (fit refuses it too)
        return y

    def entropy(self) -> Tensor:
        """``[B]`` predictive entropy.

        Classification: exact entropy of the mean probabilities. Regression: entropy of
        the moment-matched Gaussian, summed over outputs.
        """
        if self.kind == "categorical":
            lp = self.log_probs
            return -(lp.exp() * lp).sum(-1)
        return 0.5 * (torch.log(2 * math.pi * math.e * self.variance)).sum(-1)

    def expected_entropy(self) -> Tensor:
        """``[B]`` mean entropy of the individual sampled predictives (aleatoric part)."""
        if self.kind == "categorical":
            logp = F.log_softmax(self.samples, -1)
            return -(logp.exp() * logp).sum(-1).mean(0)
        return 0.5 * torch.log(2 * math.pi * math.e * self.noise_var).sum(-1).mean(0)

    def mutual_information(self) -> Tensor:
        """``[B]`` mutual information between y and the function (BALD): entropy minus
        expected entropy; clamped at 0 against round-off, and exactly 0 at an input where every
        sampled function gives the same output (a deterministic network's draws): there the
        difference of two rounded entropies would otherwise leave a round-off residue that
        grows with the entropy and ranks inputs by it."""
        mi = (self.entropy() - self.expected_entropy()).clamp_min(0.0)
        agree = (self.samples == self.samples[:1]).all(-1).all(0)
        return mi.masked_fill(agree, 0.0)

    def _require(self, kind: str, what: str) -> None:
        if self.kind != kind:
            raise AttributeError(f"{what} is only defined for a {kind} predictive, this one is {self.kind}")

    def __repr__(self) -> str:
        S, B, out = self.samples.shape
        return f"Predictive(kind={self.kind!r}, n_samples={S}, batch={B}, out={out})"
