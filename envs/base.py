"""``ContextualBanditEnv``: the gymnasium skeleton shared by every bandit environment.

An episode is a stream of ``horizon`` contexts. The observation is the current context;
``step(a)`` pays the reward of arm ``a`` for that context, returns the next context, and
an ``info`` describing the decision just made. Contexts *and the rewards of every arm*
are drawn from ``np_random`` in blocks, independently of the actions, so two agents run
with the same ``reset(seed=...)`` see the same contexts and the same reward table
(the protocol of Riquelme et al. 2018), which makes regrets directly comparable.

Because nothing an agent does changes the contexts to come, an agent whose decisions between
two updates depend only on the contexts (Thompson sampling with functions drawn after each
refit) may read those contexts ahead (:meth:`ContextualBanditEnv.peek_contexts`) and take the
decisions in one call (:meth:`ContextualBanditEnv.play`), with exactly the outcomes that
``step`` would give one by one (the lock-step runner, ``uncertain_agents.agents.lockstep``).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.error import ResetNeeded

BLOCK = 256


@dataclass(frozen=True)
class PlayedRounds:
    """What :meth:`ContextualBanditEnv.play` returns: per decision ``[k]`` arrays, as ``step``'s
    reward and ``info`` would give them one by one.

    Attributes:
        rewards: reward paid for each action taken.
        expected_rewards: expected reward of the arm taken.
        optimal_expected_rewards: expected reward of the best arm for that context.
        optimal_actions: the best arm for that context.
        terminated: the episode ended with the last of these decisions (``reset`` before more).
    """

    rewards: np.ndarray
    expected_rewards: np.ndarray
    optimal_expected_rewards: np.ndarray
    optimal_actions: np.ndarray
    terminated: bool


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

    def __init__(self, n_actions: int, low: np.ndarray, high: np.ndarray, horizon: int,
                 render_mode: str | None = None):
        if render_mode is not None:
            raise ValueError(f"render_mode: {type(self).__name__} has no rendering (its metadata lists no "
                             f"render modes); leave render_mode=None, got {render_mode!r}")
        self.render_mode = None
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
    def render(self) -> None:
        """Nothing to draw: these environments have no render modes (``render_mode`` is ``None``)."""
        return None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._block = self._draw_block(BLOCK)
        self._pos = 0
        self._episode_over = False
        return self._block[0][0].copy(), {}

    def step(self, action):
        self._check_can_act()
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

    def peek_contexts(self, k: int) -> np.ndarray:
        """The contexts of the next ``k`` decisions, ``[k, d]`` float32 (the current observation
        first), without taking them: the same values ``step`` will show, because contexts never
        depend on the actions (blocks drawn ahead are the blocks ``step`` would draw next).

        Raises:
            ResetNeeded: before ``reset`` or after the episode ended.
            ValueError: ``k`` is not a positive integer, or more than the decisions left in the
                episode (``horizon - t``).
        """
        self._check_can_act()
        k = self._check_count(k, "k")
        self._draw_ahead(k)
        return np.asarray(self._block[0][self._pos:self._pos + k], dtype=np.float32).copy()

    def play(self, actions) -> PlayedRounds:
        """Take ``actions[k]`` (arm indices) in order, with the outcomes ``k`` calls of
        :meth:`step` would give (the next observation is then ``peek_contexts(1)[0]``).

        Raises:
            ResetNeeded: before ``reset`` or after the episode ended.
            ValueError: ``actions`` is not a non-empty 1-D array of integer arms in the action
                space, or holds more decisions than are left in the episode.
        """
        self._check_can_act()
        a = np.asarray(actions)
        if a.ndim != 1 or a.size == 0 or a.dtype == bool or not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"actions must be a non-empty 1-D array of integer arm indices, got "
                             f"{a.dtype} of shape {a.shape}")
        if a.min() < 0 or a.max() >= self.n_actions:
            raise ValueError(f"actions must lie in the action space [0, {self.n_actions - 1}], got "
                             f"{int(a.min())}..{int(a.max())}")
        k = self._check_count(a.size, "len(actions)")
        terminated = self._t + k >= self.horizon
        self._draw_ahead(k if terminated else k + 1)  # step draws the next observation's block too
        contexts, rewards, expected = self._block
        rows = np.arange(self._pos, self._pos + k)
        exp = expected[rows]
        best = exp.argmax(1)
        taken = np.arange(k)
        played = PlayedRounds(rewards=np.asarray(rewards[rows, a], dtype=np.float64),
                              expected_rewards=np.asarray(exp[taken, a], dtype=np.float64),
                              optimal_expected_rewards=np.asarray(exp[taken, best], dtype=np.float64),
                              optimal_actions=best, terminated=terminated)
        self._t += k
        self._episode_over = terminated
        self._pos += k - 1 if terminated else k  # as step: the last context stays current at the end
        return played

    def _check_can_act(self) -> None:
        if self._block is None:
            raise ResetNeeded("call reset() before step()")
        if self._episode_over:
            raise ResetNeeded(f"the episode is over: it terminated after horizon={self.horizon} decisions; "
                              f"call reset() before step()")

    def _check_count(self, k, name: str) -> int:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k <= 0:
            raise ValueError(f"{name} must be a positive integer, got {k!r}")
        if k > self.horizon - self._t:
            raise ValueError(f"{name} = {k} is more than the {self.horizon - self._t} decisions left in the "
                             f"episode (horizon={self.horizon}, t={self._t})")
        return int(k)

    def _draw_ahead(self, k: int) -> None:
        """Make rounds ``pos .. pos + k - 1`` available, drawing whole blocks in order."""
        while self._block[0].shape[0] - self._pos < k:
            new = self._draw_block(BLOCK)
            self._block = tuple(np.concatenate([old[self._pos:], more]) for old, more in zip(self._block, new))
            self._pos = 0

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
