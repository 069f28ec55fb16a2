"""``run_bandit_trials``: ``R`` trials of Thompson sampling in lock step, one trial-batched posterior.

Each trial has its own environment (seeded by its own seed), its own history and its own
posterior — the ``r``-th of a trial-batched posterior (:mod:`uncertain_agents.posteriors.trials`).
The trials take their decisions in lock step, so their histories always have the same length
and every refit trains all ``R`` posteriors in one batched step on their own rows (on a GPU,
one step — and one CUDA graph — for the ten trials of the paper's table instead of ten).

The agent is :class:`~.thompson.ThompsonSampling`'s, decision for decision: ``initial_pulls``
round-robin pulls of every arm, a warm-started refit every ``train_every`` decisions on the
whole history (the played arm observed, the others masked), ``train_every`` functions drawn per
trial after each refit, one fresh function per decision. What differs from ``R`` separate agents
is only where the random numbers come from (one generator for all trials, see
:mod:`~uncertain_agents.posteriors.trials`), so a trial here is a run of the agent but not the
run that trial seed gives one by one.
"""
from __future__ import annotations

import numbers
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from ..posteriors.trials import TrialBatched
from ..validation import check_positive_float, check_positive_int
from .history import History
from .host_functions import HostFunctions
from .neural import BANDIT_PRIOR_STD
from .protocols import DEFAULT_INITIAL_PULLS
from .run import COLUMNS
from .schedule import TrainSteps, check_train_steps, steps_for_refit


class _DeviceRows:
    """The trials' masked training rows on the posterior's device, ``[R, capacity, ...]``,
    growing by doubling: a refit copies only the rows that arrived since the last one."""

    def __init__(self, trials: int, context_dim: int, n_actions: int, device: torch.device):
        self.trials, self.d, self.a, self.device = trials, context_dim, n_actions, device
        self.n = 0
        self._alloc(1024)

    def _alloc(self, capacity: int) -> None:
        old = getattr(self, "x", None)
        x = torch.zeros(self.trials, capacity, self.d, device=self.device)
        y = torch.zeros(self.trials, capacity, self.a, device=self.device)
        mask = torch.zeros(self.trials, capacity, self.a, dtype=torch.bool, device=self.device)
        if old is not None:
            x[:, :self.n], y[:, :self.n], mask[:, :self.n] = self.x[:, :self.n], self.y[:, :self.n], self.mask[:, :self.n]
        self.x, self.y, self.mask = x, y, mask

    def extend(self, histories: Sequence[History]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Copy the histories' new rows in; returns views ``x[R, N, d]``, ``y[R, N, A]``, ``mask[R, N, A]``."""
        n = histories[0].n
        if n > self.x.shape[1]:
            self._alloc(max(n, 2 * self.x.shape[1]))
        if n > self.n:
            new = slice(self.n, n)
            x = np.stack([h.contexts[new] for h in histories])
            actions = np.stack([h.actions[new] for h in histories])
            rewards = np.stack([h.rewards[new] for h in histories]).astype(np.float32)
            y = np.zeros((self.trials, n - self.n, self.a), dtype=np.float32)
            np.put_along_axis(y, actions[..., None], rewards[..., None], axis=2)
            mask = np.zeros((self.trials, n - self.n, self.a), dtype=bool)
            np.put_along_axis(mask, actions[..., None], True, axis=2)
            self.x[:, new] = torch.from_numpy(x).to(self.device)
            self.y[:, new] = torch.from_numpy(y).to(self.device)
            self.mask[:, new] = torch.from_numpy(mask).to(self.device)
            self.n = n
        return self.x[:, :n], self.y[:, :n], self.mask[:, :n]


def run_bandit_trials(envs: Sequence, posterior: TrialBatched, *, steps: int, seeds: Sequence[int | None],
                      train_every: int = 50, train_steps: TrainSteps = 100, batch_size: int = 512,
                      initial_pulls: int = DEFAULT_INITIAL_PULLS, lr: float | None = None,
                      reward_scale: float = 1.0, prior_std: float | None = None, seed: int | None = None,
                      progress: Callable[[int], None] | None = None, progress_every: int = 100,
                      checkpoint: Callable[[int, np.ndarray], None] | None = None) -> list[pd.DataFrame]:
    """Thompson sampling on ``R = len(envs)`` environments in lock step, trial ``r`` acting with
    posterior ``r`` of the trial-batched ``posterior``.

    Args:
        envs: ``R`` bandit environments (same arms and context size), reset with ``seeds[r]``.
        posterior: a trial-batched posterior with ``n_trials == R`` and ``out_dim`` = arms
            (:func:`~uncertain_agents.posteriors.trials.make_trial_posterior`).
        steps: decisions per trial.
        train_every, train_steps, batch_size, initial_pulls, lr, reward_scale, prior_std: as
            :class:`~.neural.PosteriorAgent` (the same unit and prior handling before the first fit).
        seed: seeds the generator the decisions' functions are drawn from (``None``: the
            posterior's own).
        progress: called with the number of decisions just completed, summed over trials.
        checkpoint: called with the decisions done so far and every trial's cumulative regret
            (``[R]``) at the same points as ``progress`` (partial results of a long run).

    Returns:
        One frame per trial in :func:`~.run.run_bandit`'s format.
    """
    if not isinstance(posterior, TrialBatched):
        raise TypeError(f"posterior must be trial-batched (make_trial_posterior), got {type(posterior).__name__}")
    R = posterior.n_trials
    if len(envs) != R or len(seeds) != R:
        raise ValueError(f"need one environment and one seed per trial ({R}), got {len(envs)} and {len(seeds)}")
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps <= 0:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    arms = {int(env.action_space.n) for env in envs}
    if arms != {posterior.spec.out_dim}:
        raise ValueError(f"every environment must have out_dim = {posterior.spec.out_dim} arms, got {sorted(arms)}")
    n_actions, d = posterior.spec.out_dim, posterior.spec.in_dim
    train_every = check_positive_int(train_every, "train_every")
    train_steps = check_train_steps(train_steps)
    batch_size = check_positive_int(batch_size, "batch_size")
    if isinstance(initial_pulls, bool) or not isinstance(initial_pulls, (int, np.integer)) or initial_pulls < 0:
        raise ValueError(f"initial_pulls must be a non-negative integer, got {initial_pulls!r}")
    warmup = int(initial_pulls) * n_actions
    if not posterior.units_are_fixed:  # as PosteriorAgent: the bandit prior, the method's bandit options, raw units
        if posterior.has_default_prior:
            posterior.set_prior_std(check_positive_float(BANDIT_PRIOR_STD if prior_std is None else prior_std,
                                                         "prior_std"))
        posterior.use_bandit_defaults()
        posterior.set_units(x_loc=0.0, x_scale=1.0, y_loc=0.0,
                            y_scale=check_positive_float(reward_scale, "reward_scale"))
    generator = (posterior.generator() if seed is None
                 else torch.Generator(device=posterior.device).manual_seed(int(seed)))
    histories = [History(d) for _ in range(R)]
    rows = _DeviceRows(R, d, n_actions, posterior.device)
    actions = np.empty((R, steps), dtype=np.int64)
    rewards = np.empty((R, steps))
    optimal = np.empty((R, steps))
    expected = np.full((R, steps), np.nan)
    obs = [np.asarray(env.reset(seed=None if s is None else int(s))[0], dtype=np.float32)
           for env, s in zip(envs, seeds)]
    functions: list[HostFunctions] | None = None
    cursor, n_fits = 0, 0
    for t in range(steps):
        if t < warmup:
            chosen = [t % n_actions] * R
        else:
            if functions is None or cursor >= functions[0].n:
                functions = [HostFunctions(fs) for fs in posterior.sample_trials(train_every, generator=generator)]
                cursor = 0
            chosen = [functions[r].greedy(cursor, obs[r]) for r in range(R)]
            cursor += 1
        for r, env in enumerate(envs):
            next_obs, reward, terminated, truncated, info = env.step(chosen[r])
            histories[r].append(obs[r], chosen[r], float(reward))
            actions[r, t], rewards[r, t] = chosen[r], reward
            optimal[r, t] = info["optimal_expected_reward"]
            expected[r, t] = info.get("expected_reward", np.nan)
            if terminated or truncated:
                next_obs, _ = env.reset()
            obs[r] = np.asarray(next_obs, dtype=np.float32)
        n = t + 1
        if n >= warmup and (n % train_every == 0 or n_fits == 0):
            x, y, mask = rows.extend(histories)
            posterior.fit(x, y, mask, steps=steps_for_refit(train_steps, n_fits), batch_size=batch_size, lr=lr)
            n_fits += 1
            functions = None
        if n % progress_every == 0 or n == steps:
            if progress is not None:
                progress(R * (n - (n - 1) // progress_every * progress_every if n == steps else progress_every))
            if checkpoint is not None:
                checkpoint(n, (optimal[:, :n] - rewards[:, :n]).sum(1))
    frames = []
    for r in range(R):
        regret = optimal[r] - rewards[r]
        frame = pd.DataFrame({"step": np.arange(1, steps + 1), "action": actions[r], "reward": rewards[r],
                              "optimal_expected_reward": optimal[r], "regret": regret,
                              "cumulative_regret": np.cumsum(regret)})
        if not np.isnan(expected[r]).any():
            frame["expected_reward"] = expected[r]
            frame["expected_regret"] = optimal[r] - expected[r]
        frames.append(frame[COLUMNS + [c for c in frame.columns if c not in COLUMNS]])
    return frames
