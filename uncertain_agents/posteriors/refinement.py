"""Closed forms of refined variational inference (Havasi et al., "Refining the variational
posterior through iterative optimization"), the building blocks of ``refined-vi``.

Every weight is split into independent auxiliary variables, ``w = Σ_k a_k`` with
``p(a_k) = N(0, σ²_{a_k})`` and ``Σ_k σ²_{a_k} = σ_w²`` (the model is unchanged). After
``a_1..a_{k-1}`` are fixed, ``s = Σ_{j<k} a_j`` and the remaining prior variance is
``R_{k-1} = σ_w² − Σ_{j<k} σ²_{a_j}``; the conditional prior is ``p(w | a_{<k}) = N(s, R_{k-1})``.
For a factorised Gaussian ``q(w) = N(μ, σ²)`` everything is per weight and in closed form
(``u = w − s``, ``R_k = R_{k-1} − σ²_{a_k}``):

* ``q(a_k) = ∫ p(a_k | u) q(u) du = N((σ²_{a_k}/R_{k-1})(μ − s), σ² σ⁴_{a_k}/R²_{k-1} + σ²_{a_k} R_k/R_{k-1})``;
* ``q(w | a_k) = N(s + [a_k σ² R_{k-1} + (μ − s) R_k R_{k-1}]/D, σ² R_{k-1} R_k / D)``,
  ``D = σ²_{a_k} σ² + R_{k-1} R_k``;
* afterwards the conditional prior is ``N(s + a_k, R_k)``.

These equal exact Gaussian conditioning of the joint ``(w, a_k)`` (tested), and reduce to
the paper's Appendix A at ``k = 1``. All functions broadcast over any leading shape
(members ``[M, D]``).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch
from torch import Tensor

#: The paper's UCI/LeNet schedule: σ²_{a_k}/σ_w² for K = 4 refinement steps. The paper
#: prints a fifth ratio, 0.0081, which is the variance left as the final conditional prior
#: (sampling a fifth auxiliary variable would fix w; PROTOCOLS.md §6).
DEFAULT_VARIANCE_RATIOS: tuple[float, ...] = (0.7, 0.21, 0.063, 0.0189)


@dataclass(frozen=True)
class RefinementSchedule:
    """Auxiliary-variable variances as fractions of the prior variance.

    Attributes:
        ratios: ``σ²_{a_k}/σ_w²`` for ``k = 1..K`` (positive, summing to less than 1).
    """

    ratios: tuple[float, ...] = DEFAULT_VARIANCE_RATIOS

    def __post_init__(self) -> None:
        ratios = tuple(self.ratios)
        if not ratios or any(isinstance(r, bool) or not isinstance(r, numbers.Real) or not r > 0 for r in ratios):
            raise ValueError(f"variance_ratios must be a non-empty sequence of positive numbers, got {self.ratios!r}")
        if sum(ratios) >= 1.0:
            raise ValueError(f"variance_ratios must sum to less than 1 (the rest is the final conditional "
                             f"prior variance), got sum {sum(ratios):.6g}")
        object.__setattr__(self, "ratios", tuple(float(r) for r in ratios))

    @property
    def steps(self) -> int:
        return len(self.ratios)

    def remaining(self) -> tuple[float, ...]:
        """``R_k/σ_w²`` for ``k = 0..K`` (1 before any step, then what each step leaves)."""
        out, left = [1.0], 1.0
        for r in self.ratios:
            left -= r
            out.append(left)
        return tuple(out)

    def learning_rate(self, k: int, base: float = 1e-3) -> float:
        """The paper's ``lr_k = base · 0.3^{k/2}`` for refinement step ``k = 1..K``."""
        return base * 0.3 ** (k / 2)


def auxiliary_marginal(mean: Tensor, var: Tensor, offset: Tensor, r_prev: Tensor,
                       var_a: Tensor) -> tuple[Tensor, Tensor]:
    """``q(a_k)``: mean and variance, per weight.

    Args:
        mean, var: ``q(w) = N(mean, var)`` (the current approximation).
        offset: ``s = Σ_{j<k} a_j``; r_prev: ``R_{k-1}``; var_a: ``σ²_{a_k}`` (< ``R_{k-1}``).
    """
    r_next = r_prev - var_a
    gain = var_a / r_prev
    return gain * (mean - offset), var * gain.square() + var_a * r_next / r_prev


def conditional_posterior(mean: Tensor, var: Tensor, a: Tensor, offset: Tensor, r_prev: Tensor,
                          var_a: Tensor) -> tuple[Tensor, Tensor]:
    """``q(w | a_k)``: mean and variance, per weight, for a drawn ``a = a_k`` (same arguments
    as :func:`auxiliary_marginal`)."""
    r_next = r_prev - var_a
    denom = var_a * var + r_prev * r_next
    new_mean = offset + (a * var * r_prev + (mean - offset) * r_next * r_prev) / denom
    return new_mean, var * r_prev * r_next / denom


def gaussian_kl(mean_q: Tensor, var_q: Tensor, mean_p: Tensor, var_p: Tensor) -> Tensor:
    """``KL(N(mean_q, var_q) ‖ N(mean_p, var_p))`` per element."""
    return 0.5 * (torch.log(var_p / var_q) + (var_q + (mean_q - mean_p).square()) / var_p - 1.0)
