"""A bandit from any labelled data set: one arm per class, reward 1 for the right class.

Each round shows a row drawn uniformly with replacement; the reward is 1 if the arm is
the row's label and 0 otherwise (deterministic, so the expected rewards are the one-hot
label).
"""
from __future__ import annotations

import numpy as np

from .base import ContextualBanditEnv


class ClassificationBandit(ContextualBanditEnv):
    """``ClassificationBandit-v0``.

    Args:
        x: ``[N, d]`` features.
        y: ``[N]`` integer labels in ``[0, n_classes)``.
        n_classes: number of arms (default ``max(y) + 1``).
        horizon: episode length.
        render_mode: ``None`` (gymnasium's argument; there is nothing to render).
    """

    def __init__(self, x, y, *, n_classes: int | None = None, horizon: int = 50_000,
                 render_mode: str | None = None):
        x = np.asarray(x)
        y = np.asarray(y)
        if x.ndim != 2 or x.shape[0] == 0 or not np.issubdtype(x.dtype, np.number):
            raise ValueError(f"x must be a numeric array [N, d] with N > 0, got shape {x.shape}, dtype {x.dtype}")
        x = x.astype(np.float32)
        if not np.isfinite(x).all():
            raise ValueError("x contains NaN or infinite values")
        if y.shape != (x.shape[0],) or not (np.issubdtype(y.dtype, np.integer)
                                            or (np.issubdtype(y.dtype, np.floating) and np.all(y == np.round(y)))):
            raise ValueError(f"y must be integer labels [N] = [{x.shape[0]}], got shape {y.shape}, dtype {y.dtype}")
        y = y.astype(np.int64)
        if y.min() < 0:
            raise ValueError(f"y labels must be class indices >= 0, got a minimum of {y.min()}")
        if n_classes is None and y.max() < 1:
            raise ValueError(f"y holds a single class ({y.max()}); a classification bandit needs at least 2 "
                             f"arms: pass n_classes or labels of two or more classes")
        n_classes = int(y.max()) + 1 if n_classes is None else n_classes
        if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)) or n_classes < 2:
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
        if y.min() < 0 or y.max() >= n_classes:
            raise ValueError(f"y labels must lie in [0, {n_classes - 1}], got [{y.min()}, {y.max()}]")
        self.x, self.y = x, y
        self._eye = np.eye(n_classes)
        super().__init__(n_classes, x.min(0), x.max(0), horizon, render_mode)

    def _draw_block(self, m: int):
        idx = self.np_random.integers(self.x.shape[0], size=m)
        expected = self._eye[self.y[idx]]
        return self.x[idx], expected, expected
