"""``ContextualBanditEnv``: the gymnasium skeleton shared by every bandit environment.

An episode is a stream of ``horizon`` contexts. The observation is the current context;
``step(a)`` pays the reward of arm ``a`` for that context, returns the next context, and
an ``info`` describing the decision just made. Contexts *and the rewards of every arm*
are drawn from ``np_random`` in blocks, independently of the actions, so two agents run
with the same ``reset(seed=...)`` see the same contexts and the same reward table
(the protocol of Riquelme et al. 2018), which makes regrets directly comparable.
"""
from __future__ import annotations

import numbers

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

BLOCK = 256


class ContextualBanditEnv(gym.Env):
    """Base class: subclasses implement :meth:`_draw_block`.

    Args:
        n_actions: number of arms.
        low, high: ``[d]`` bounds of the context space.
        horizon: episode length; ``terminated`` is True after ``horizon`` decisions, and
            (as in gymnasium) a further ``step`` without ``reset`` raises
            :class:`gymnasium.error.ResetNeeded`.

    Raises:
        ValueError: ``n_actions`` is not an integer >= 2, or ``horizon`` not a positive integer.
    """

    metadata = {"render_modes": []}

    def __init__(self, n_actions: int, low: np.ndarray, high: np.ndarray, horizon: int):
        if isinstance(horizon, bool) or not isinstance(horizon, numbers.Integral) or horizon <= 0:
            raise ValueError(f"horizon must be a positive integer, got {horizon!r}")
        self.horizon = int(horizon)
        self.n_actions = _check_n_actions(n_actions)
        self.action_space = spaces.Discrete(self.n_actions)
        self.observation_space = spaces.Box(np.asarray(low, np.float32), np.asarray(high, np.float32),
                                            dtype=np.float32)
        self._t = 0
        self._block: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._pos = 0
        self._episode_over = False

    # ------------------------------------------------------------- subclass API
    def _draw_block(self, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw ``m`` rounds from ``self.np_random``.

        Returns:
            contexts ``[m, d]`` float32, rewards ``[m, A]`` (the reward every arm would pay)
            and expected rewards ``[m, A]``.
        """
        raise NotImplementedError

    # --------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._block = self._draw_block(BLOCK)
        self._pos = 0
        self._episode_over = False
        return self._block[0][0].copy(), {}

    def step(self, action):
        if self._block is None:
            raise ResetNeeded("call reset() before step()")
        if self._episode_over:
            raise ResetNeeded(f"the episode is over: it terminated after horizon={self.horizon} decisions; "
                              f"call reset() before step()")
        a = self._check_action(action)
        contexts, rewards, expected = self._block
        i = self._pos
        exp_i = expected[i]
        opt = int(np.argmax(exp_i))
        reward = float(rewards[i, a])
        opt_reward = float(exp_i[opt])
        info = {
            "context": contexts[i].copy(),
            "action": a,
            "expected_rewards": exp_i.copy(),
            "expected_reward": float(exp_i[a]),
            "optimal_action": opt,
            "optimal_expected_reward": opt_reward,
            "regret": opt_reward - reward,
            "expected_regret": opt_reward - float(exp_i[a]),
        }
        self._t += 1
        terminated = self._t >= self.horizon
        self._episode_over = terminated
        if not terminated:
            self._pos += 1
            if self._pos == contexts.shape[0]:
                self._block = self._draw_block(BLOCK)
                self._pos = 0
        obs = self._block[0][self._pos].copy()
        return obs, reward, terminated, False, info

    def _check_action(self, action) -> int:
        if isinstance(action, np.ndarray) and action.ndim == 0:
            action = action.item()
        if isinstance(action, bool) or not isinstance(action, numbers.Integral):
            raise TypeError(f"action must be an integer arm index in [0, {self.n_actions - 1}], "
                            f"got {action!r} ({type(action).__name__})")
        if not 0 <= action < self.n_actions:
            raise ValueError(f"action must lie in the action space [0, {self.n_actions - 1}], got {action}")
        return int(action)

    @property
    def episode_over(self) -> bool:
        """True once the episode has terminated (``step`` then needs a ``reset``)."""
        return self._episode_over

    @property
    def t(self) -> int:
        """Number of decisions taken since the last reset."""
        return self._t


def _check_n_actions(n_actions) -> int:
    """``n_actions`` as an int >= 2; a float (even 2.0), a bool or a string is refused."""
    if isinstance(n_actions, np.ndarray) and n_actions.ndim == 0:
        n_actions = n_actions.item()
    if isinstance(n_actions, bool) or not isinstance(n_actions, numbers.Integral) or n_actions < 2:
        raise ValueError(f"n_actions must be an integer >= 2 (the number of arms), got {n_actions!r}")
    return int(n_actions)
