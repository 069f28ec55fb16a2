"""``Agent``: the interface every bandit agent implements, and its input checks."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..seeding import AGENT_STREAM_KEY
from ..validation import ArrayLike, check_seed


def check_n_actions(n_actions) -> int:
    """The number of arms: an integer >= 2 (never truncated from a float)."""
    if isinstance(n_actions, bool) or not isinstance(n_actions, (int, np.integer)) or n_actions < 2:
        raise ValueError(f"n_actions must be an integer >= 2, got {n_actions!r}")
    return int(n_actions)


def check_context_dim(context_dim) -> int:
    """The width of a context: a positive integer."""
    if isinstance(context_dim, bool) or not isinstance(context_dim, (int, np.integer)) or context_dim <= 0:
        raise ValueError(f"context_dim must be a positive integer, got {context_dim!r}")
    return int(context_dim)


class Agent:
    """A contextual-bandit agent: ``act(context) -> int``, ``update(context, action, reward)``.

    Args:
        n_actions: number of arms.
        context_dim: width of a context (``None`` skips the width check; only agents
            that ignore the context accept that).
    """

    name = "agent"

    def __init__(self, n_actions: int, context_dim: int | None):
        self.n_actions = check_n_actions(n_actions)
        self.context_dim = None if context_dim is None else check_context_dim(context_dim)
        self._shape = (self.context_dim,)  # a context's shape, for the agents' fast paths

    def act(self, context: ArrayLike) -> int:
        """The arm to play for ``context`` (a vector ``[context_dim]``; a ``[1, context_dim]`` row is accepted)."""
        raise NotImplementedError

    def update(self, context: ArrayLike, action: int, reward: float) -> None:
        """Learn from one decision: the ``context`` seen (``[context_dim]``), the ``action`` played (in
        ``[0, n_actions)``) and the ``reward`` received (a finite number)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ checks
    def _context(self, context) -> np.ndarray:
        """``context`` as a float32 vector ``[d]`` (a ``[1, d]`` row is accepted)."""
        try:
            x = np.asarray(context, dtype=np.float32)
        except (TypeError, ValueError) as err:
            raise TypeError(f"context must be a numeric vector of {self.context_dim} values, "
                            f"got {type(context).__name__}: {err}") from None
        d = self.context_dim
        if x.ndim != 1:
            if x.ndim == 2 and x.shape[0] == 1:
                x = x[0]
            else:
                raise ValueError(f"context must be a vector [{d}], got shape {x.shape}")
        if d is not None and x.shape[0] != d:
            raise ValueError(f"context must have {d} values (context_dim), got {x.shape[0]}")
        if not np.isfinite(x).all():
            if np.isfinite(np.asarray(context, dtype=np.float64)).all():
                raise ValueError("context has values too large for float32 (|x| > 3.4e38), which the agents "
                                 "compute in; rescale the context")
            raise ValueError("context contains NaN or infinite values")
        return x

    def _action(self, action) -> int:
        if isinstance(action, np.ndarray) and action.ndim == 0:
            action = action.item()
        if isinstance(action, bool) or not isinstance(action, numbers.Integral):
            raise TypeError(f"action must be an integer in [0, {self.n_actions - 1}], got {action!r}")
        if not 0 <= action < self.n_actions:
            raise ValueError(f"action must lie in [0, {self.n_actions - 1}] (n_actions={self.n_actions}), "
                             f"got {action}")
        return int(action)

    @staticmethod
    def _reward(reward) -> float:
        if isinstance(reward, np.ndarray) and reward.size == 1:
            reward = reward.item()
        if isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(reward):
            raise ValueError(f"reward must be a finite real number, got {reward!r}")
        return float(reward)




def make_rng(seed: int | None) -> np.random.Generator:
    """numpy's generator for an agent's own draws, from a checked ``seed`` (``validation.check_seed``):
    ``SeedSequence(seed, spawn_key=(AGENT_STREAM_KEY,))``, a stream independent of an environment
    reset with the same ``seed``."""
    seed = check_seed(seed)
    return np.random.default_rng(None if seed is None else np.random.SeedSequence(seed, spawn_key=(AGENT_STREAM_KEY,)))
