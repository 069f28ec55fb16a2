"""The wheel bandit (Riquelme, Tucker & Snoek 2018, §"Wheel Bandit").

Contexts are uniform in the unit disc. Five arms: every arm pays ``N(mu_j, 0.05²)``
with ``mu = (1.0, 1.0, 1.0, 1.0, 1.2)`` (arm 4 is the safe arm), except that when
``‖x‖ ≥ δ`` the arm of x's quadrant pays ``N(50, 0.01²)`` instead:
(+,+) → 0, (+,−) → 1, (−,+) → 2, (−,−) → 3 (a zero coordinate counts as +).

The 0.05 of the ordinary arms is the authors' code (``example_main.py``: ``std_v = [0.05] * 5``,
``std_large = 0.01``), which produced the published tables; the paper's text states
σ = 0.01 for every arm.
"""
from __future__ import annotations

import numbers

import numpy as np

from .base import ContextualBanditEnv

MEANS = np.array([1.0, 1.0, 1.0, 1.0, 1.2])
STD = 0.05
LARGE_MEAN = 50.0
LARGE_STD = 0.01


def quadrant_arm(x: np.ndarray) -> np.ndarray:
    """``x[..., 2] -> [...]`` the arm that owns x's quadrant (0..3)."""
    return 2 * (x[..., 0] < 0) + (x[..., 1] < 0)


def wheel_expected_rewards(x: np.ndarray, delta: float) -> np.ndarray:
    """``x[m, 2] -> [m, 5]`` expected reward of every arm."""
    x = np.asarray(x, dtype=np.float64)
    expected = np.broadcast_to(MEANS, (x.shape[0], 5)).copy()
    outer = np.linalg.norm(x, axis=-1) >= delta
    expected[np.flatnonzero(outer), quadrant_arm(x[outer])] = LARGE_MEAN
    return expected


def uniform_expected_regret(delta: float) -> float:
    """Per-step expected regret of the uniform policy, in closed form.

    Inside the radius (probability δ²) the best arm is the safe one (1.2) and a uniform
    arm pays 1.04 on average; outside, the best pays 50 and a uniform arm
    (3·1.0 + 50 + 1.2)/5.
    """
    inner_mean = MEANS.mean()
    outer_mean = (MEANS[:4].sum() - 1.0 + LARGE_MEAN + MEANS[4]) / 5
    return delta ** 2 * (MEANS[4] - inner_mean) + (1 - delta ** 2) * (LARGE_MEAN - outer_mean)


class WheelBandit(ContextualBanditEnv):
    """``WheelBandit-v0``.

    Args:
        delta: exploration parameter in (0, 1); the region ``‖x‖ ≥ δ`` (probability
            ``1 − δ²``) holds the large rewards.
        horizon: episode length.
        render_mode: ``None`` (gymnasium's argument; there is nothing to render).
    """

    def __init__(self, delta: float = 0.95, horizon: int = 50_000, render_mode: str | None = None):
        if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not 0 < delta < 1:
            raise ValueError(f"delta must be a number in (0, 1), got {delta!r}")
        self.delta = float(delta)
        super().__init__(5, -np.ones(2), np.ones(2), horizon, render_mode)

    def _draw_block(self, m: int):
        rng = self.np_random
        radius = np.sqrt(rng.random(m))
        angle = 2 * np.pi * rng.random(m)
        contexts = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1).astype(np.float32)
        contexts = np.clip(contexts, -1.0, 1.0)
        expected = wheel_expected_rewards(contexts, self.delta)
        std = np.where(expected == LARGE_MEAN, LARGE_STD, STD)
        rewards = expected + std * rng.standard_normal((m, 5))
        return contexts, rewards, expected
