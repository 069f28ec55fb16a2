"""``BayesianLinearArms``: one Bayesian linear regression per arm, normal-inverse-gamma prior.

Per arm ``a``: ``r = z·β_a + ε``, ``ε ~ N(0, σ_a²)``, with prior ``σ_a² ~ IG(a0, b0)``
and ``β_a | σ_a² ~ N(0, σ_a²/λ · I)``. The conjugate posterior after rows ``Z, r`` is

    Λ = λI + ZᵀZ,   μ = Λ⁻¹ Zᵀr,   a = a0 + n/2,   b = b0 + (rᵀr − μᵀΛμ)/2,

``σ² ~ IG(a, b)``, ``β | σ² ~ N(μ, σ² Λ⁻¹)`` (Riquelme et al. 2018, "LinFullPost").
All arms are stored as stacked arrays ``[A, p, p]`` and updated without loops over arms.
"""
from __future__ import annotations

import numpy as np

from ..validation import check_positive_float, check_positive_int


class BayesianLinearArms:
    """Sufficient statistics and posterior of ``A`` independent linear regressions.

    Args:
        n_actions: number of arms ``A``.
        dim: feature width; ``p = dim + 1`` with the intercept.
        a0, b0: inverse-gamma prior of the noise variance.
        lambda_prior: prior precision scale λ of the coefficients.
        intercept: append a constant 1 to every feature vector.

    Attributes:
        precision: ``[A, p, p]`` Λ;  cov: ``[A, p, p]`` Λ⁻¹;  mean: ``[A, p]`` μ;
        a, b: ``[A]`` inverse-gamma posterior parameters;  count: ``[A]`` rows per arm.
    """

    def __init__(self, n_actions: int, dim: int, *, a0: float = 6.0, b0: float = 6.0,
                 lambda_prior: float = 0.25, intercept: bool = True):
        for name, value in (("a0", a0), ("b0", b0), ("lambda_prior", lambda_prior)):
            check_positive_float(value, name)
        self.n_actions, self.dim = check_positive_int(n_actions, "n_actions"), check_positive_int(dim, "dim")
        self.intercept = bool(intercept)
        self.a0, self.b0, self.lambda_prior = float(a0), float(b0), float(lambda_prior)
        self.p = self.dim + int(self.intercept)
        self.reset()

    def reset(self) -> None:
        """Back to the prior."""
        A, p = self.n_actions, self.p
        self.precision = np.tile(self.lambda_prior * np.eye(p), (A, 1, 1))
        self.zty = np.zeros((A, p))
        self.yty = np.zeros(A)
        self.count = np.zeros(A)
        self._refresh(np.arange(A))

    def _augment(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=np.float64)
        if self.intercept:
            z = np.concatenate([z, np.ones((*z.shape[:-1], 1))], axis=-1)
        return z

    def add(self, z: np.ndarray, action: int, reward: float) -> None:
        """Add one row ``z[dim]`` observed on ``action``."""
        z = self._augment(z)
        self.precision[action] += np.outer(z, z)
        self.zty[action] += reward * z
        self.yty[action] += reward * reward
        self.count[action] += 1
        self._refresh(np.array([action]))

    def rebuild(self, z: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        """Recompute every arm's posterior from all rows ``z[n, dim]`` (after features change)."""
        z = self._augment(z)
        onehot = np.eye(self.n_actions)[actions]                            # [n, A]
        self.precision = self.lambda_prior * np.eye(self.p) + np.einsum("na,ni,nj->aij", onehot, z, z)
        self.zty = np.einsum("na,n,ni->ai", onehot, rewards, z)
        self.yty = onehot.T @ np.square(rewards)
        self.count = onehot.sum(0)
        self._refresh(np.arange(self.n_actions))

    def _refresh(self, arms: np.ndarray) -> None:
        cov = np.linalg.inv(self.precision[arms])
        cov = 0.5 * (cov + np.swapaxes(cov, -1, -2))
        if not hasattr(self, "cov"):
            self.cov = np.empty_like(self.precision)
            self.mean = np.empty((self.n_actions, self.p))
            self.a = np.empty(self.n_actions)
            self.b = np.empty(self.n_actions)
        self.cov[arms] = cov
        mean = np.einsum("aij,aj->ai", cov, self.zty[arms])
        self.mean[arms] = mean
        self.a[arms] = self.a0 + 0.5 * self.count[arms]
        quad = np.einsum("ai,aij,aj->a", mean, self.precision[arms], mean)
        self.b[arms] = self.b0 + 0.5 * np.maximum(self.yty[arms] - quad, 0.0)

    def sample_coefficients(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One posterior draw per arm: ``β[A, p]`` and ``σ²[A]``."""
        sigma2 = self.b / rng.gamma(self.a)
        chol = np.linalg.cholesky(self.cov)
        beta = self.mean + np.sqrt(sigma2)[:, None] * np.einsum("aij,aj->ai", chol,
                                                                 rng.standard_normal((self.n_actions, self.p)))
        return beta, sigma2

    def sample_values(self, z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``z[dim] -> [A]``: ``z·β_a`` for one posterior draw ``(σ_a², β_a)`` per arm.

        Only the values at this one ``z`` are needed, so they are drawn directly from
        their exact distribution ``N(z·μ_a, σ_a² zᵀΛ_a⁻¹z)`` given ``σ_a² ~ IG(a_a, b_a)``,
        which equals drawing ``β_a`` and taking ``z·β_a``, at O(p²) instead of O(p³).
        """
        z = self._augment(z)
        sigma2 = self.b / rng.gamma(self.a)
        quad = np.einsum("aij,i,j->a", self.cov, z, z)
        return self.mean @ z + np.sqrt(sigma2 * np.maximum(quad, 0.0)) * rng.standard_normal(self.n_actions)
