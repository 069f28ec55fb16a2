"""``run_bandit``: play an agent against a bandit environment and log every step."""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # pragma: no cover
    import gymnasium as gym

    from .base import Agent

COLUMNS = ["step", "action", "reward", "optimal_expected_reward", "regret", "cumulative_regret"]


def run_bandit(env: "gym.Env", agent: "Agent", *, steps: int, seed: int | None,
               progress: Callable[[int], None] | None = None, progress_every: int = 100) -> pd.DataFrame:
    """Run ``agent`` on ``env`` for ``steps`` decisions.

    The environment is reset with ``seed`` (the contexts and reward table depend only
    on it, so agents run with the same seed face the same rounds); the agent keeps its
    own seed. An environment that terminates before ``steps`` is reset (unseeded,
    continuing its random stream).

    Args:
        env: a bandit environment whose ``info`` has ``optimal_expected_reward``.
        agent: anything with ``act(context) -> int`` and ``update(context, action, reward)``.
        steps: number of decisions.
        seed: seed of ``env.reset``.
        progress: optional callback called with the number of steps just completed.

    Returns:
        One row per step with columns ``step, action, reward, optimal_expected_reward,
        regret, cumulative_regret`` (regret = optimal expected reward − reward received),
        plus ``expected_reward`` and ``expected_regret`` when the environment reports them.
    """
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps <= 0:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    if isinstance(progress_every, bool) or not isinstance(progress_every, numbers.Integral) or progress_every <= 0:
        raise ValueError(f"progress_every must be a positive integer, got {progress_every!r}")
    for method in ("act", "update"):
        if not callable(getattr(agent, method, None)):
            raise TypeError(f"agent must have an {method}() method, got {type(agent).__name__}")
    _check_arms(env, agent)
    actions = np.empty(steps, dtype=np.int64)
    rewards = np.empty(steps)
    optimal = np.empty(steps)
    expected = np.full(steps, np.nan)
    obs, _ = env.reset(seed=None if seed is None else int(seed))
    for t in range(steps):
        action = agent.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(action)
        agent.update(obs, action, reward)
        if t == 0 and "optimal_expected_reward" not in info:
            raise ValueError("env must report info['optimal_expected_reward'] (a bandit environment)")
        actions[t], rewards[t] = action, reward
        optimal[t] = info["optimal_expected_reward"]
        expected[t] = info.get("expected_reward", np.nan)
        obs = next_obs
        if terminated or truncated:
            obs, _ = env.reset()
        if progress is not None and ((t + 1) % progress_every == 0 or t + 1 == steps):
            progress((t + 1) - (t // progress_every) * progress_every if t + 1 == steps else progress_every)
    regret = optimal - rewards
    frame = pd.DataFrame({"step": np.arange(1, steps + 1), "action": actions, "reward": rewards,
                          "optimal_expected_reward": optimal, "regret": regret,
                          "cumulative_regret": np.cumsum(regret)})
    if not np.isnan(expected).any():
        frame["expected_reward"] = expected
        frame["expected_regret"] = optimal - expected
    return frame


def _check_arms(env, agent) -> None:
    """An agent with ``n_actions`` must have as many arms as the env's discrete action space."""
    env_arms = getattr(getattr(env, "action_space", None), "n", None)
    agent_arms = getattr(agent, "n_actions", None)
    if env_arms is not None and agent_arms is not None and int(env_arms) != int(agent_arms):
        raise ValueError(f"agent has n_actions={agent_arms} arms but the environment has {int(env_arms)}; "
                         f"build the agent with n_actions={int(env_arms)}")
