"""``History``: the (context, action, reward) log of a bandit agent.

Rows are written in place into pre-allocated arrays whose capacity doubles when full,
so appending is amortised O(1) and the arrays are never re-stacked.
"""
from __future__ import annotations

import numpy as np


class History:
    """Growing-by-doubling buffer of bandit observations.

    Args:
        context_dim: width ``d`` of a context.
        capacity: initial number of rows.

    Attributes:
        contexts: ``[n, d]`` float32 view of the stored contexts.
        actions: ``[n]`` int64 view of the actions.
        rewards: ``[n]`` float64 view of the rewards.
    """

    def __init__(self, context_dim: int, *, capacity: int = 1024):
        if isinstance(context_dim, bool) or not isinstance(context_dim, (int, np.integer)) or context_dim <= 0:
            raise ValueError(f"context_dim must be a positive integer, got {context_dim!r}")
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity <= 0:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        self.context_dim = int(context_dim)
        self.n = 0
        self._x = np.empty((int(capacity), self.context_dim), dtype=np.float32)
        self._a = np.empty(int(capacity), dtype=np.int64)
        self._r = np.empty(int(capacity), dtype=np.float64)

    def __len__(self) -> int:
        return self.n

    @property
    def capacity(self) -> int:
        """Rows the arrays hold before they next double."""
        return self._a.shape[0]

    def append(self, context: np.ndarray, action: int, reward: float) -> None:
        """Store one row (``context[d]``); doubles the capacity when the buffer is full."""
        if self.n == self.capacity:
            self._grow()
        self._x[self.n] = context
        self._a[self.n] = action
        self._r[self.n] = reward
        self.n += 1

    def _grow(self) -> None:
        cap = 2 * self.capacity
        for name in ("_x", "_a", "_r"):
            old = getattr(self, name)
            new = np.empty((cap, *old.shape[1:]), dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    @property
    def contexts(self) -> np.ndarray:
        """``[n, d]`` float32 contexts of the stored rows (a view)."""
        return self._x[: self.n]

    @property
    def actions(self) -> np.ndarray:
        """``[n]`` int64 actions played (a view)."""
        return self._a[: self.n]

    @property
    def rewards(self) -> np.ndarray:
        """``[n]`` float64 rewards received (a view)."""
        return self._r[: self.n]

    def masked_targets(self, n_actions: int, *, loc: float = 0.0,
                       scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Per-arm regression targets of the stored rows.

        Returns:
            ``y[n, A]`` float32 (``(reward − loc)/scale`` in the played arm's column, 0 elsewhere) and
            ``mask[n, A]`` bool (True only for the played arm).
        """
        rows = np.arange(self.n)
        y = np.zeros((self.n, n_actions), dtype=np.float32)
        mask = np.zeros((self.n, n_actions), dtype=bool)
        y[rows, self.actions] = (self.rewards - loc) / scale
        mask[rows, self.actions] = True
        return y, mask
