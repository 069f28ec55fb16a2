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

Between two refits a Thompson decision depends only on its context and the function drawn for
it, and a bandit's contexts do not depend on the actions
(:class:`envs.ContextualBanditEnv`), so the runner takes the decisions a *window* at a time:
it reads the window's contexts ahead (``peek_contexts``), evaluates the ``R × W`` drawn
functions on them in one batched forward on the posterior's device, brings the ``[R, W]``
actions to the host once and plays them (``play``), with the outcomes ``step`` would give one
by one. No per-decision Python or device round trip is left (measured: docs/speed.md).
"""
from __future__ import annotations

import numbers
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from ..posteriors.trials import TrialBatched
from ..seeding import AGENT_DRAWS_KEY, stream_generator
from ..validation import check_positive_float, check_positive_int, check_seed
from .neural import BANDIT_PRIOR_STD
from .protocols import DEFAULT_INITIAL_PULLS
from .run import COLUMNS
from .schedule import TrainSteps, check_train_steps, steps_for_refit


class _DeviceRows:
    """The trials' masked training rows on the posterior's device, ``[R, capacity, ...]``,
    growing by doubling; each window of decisions is written once, where it was decided."""

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

    def append(self, x: torch.Tensor, actions: torch.Tensor, rewards: np.ndarray) -> None:
        """Add a window: contexts ``x[R, W, d]`` and actions ``[R, W]`` (on the device), rewards ``[R, W]``."""
        w = x.shape[1]
        if self.n + w > self.x.shape[1]:
            self._alloc(max(self.n + w, 2 * self.x.shape[1]))
        new = slice(self.n, self.n + w)
        taken = actions.unsqueeze(-1)
        self.x[:, new] = x
        self.y[:, new].scatter_(2, taken, torch.from_numpy(rewards.astype(np.float32)).to(self.device).unsqueeze(-1))
        self.mask[:, new].scatter_(2, taken, True)
        self.n += w

    def view(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x[R, N, d]``, ``y[R, N, A]``, ``mask[R, N, A]`` of the ``N`` rows so far (views)."""
        return self.x[:, :self.n], self.y[:, :self.n], self.mask[:, :self.n]


class DrawnFunctions:
    """The functions drawn for every trial after a refit, on the posterior's device: decision
    ``i`` of a window acts greedily on the next unused function of its trial, and a whole
    window of every trial is one batched forward."""

    def __init__(self, posterior: TrialBatched, n: int, generator: torch.Generator):
        self.post = posterior
        self.params, self.index = posterior.sample_trial_params(n, generator=generator)  # [R, m, D], [R, n]
        self.used = 0

    def greedy(self, x: torch.Tensor) -> torch.Tensor:
        """``x[R, W, d]`` -> ``[R, W]``: ``argmax`` over arms of trial ``r``'s next ``W`` functions,
        function ``i`` at ``x[r, i]``, in original units (ties: the lowest arm, as ``np.argmax``).

        Drawn weights are evaluated one context each (``R × W`` networks); a finite set with
        fewer functions than the window (20 members, 50 decisions) evaluates each of its ``m``
        functions at the window's ``W`` contexts instead and picks the drawn ones' outputs,
        rather than copying a member's weights for every decision that drew it."""
        R, W, d = x.shape
        post, window = self.post, slice(self.used, self.used + W)
        self.used += W
        xs = (x - post.x_loc) / post.x_scale
        m = self.params.shape[1]
        if self.index is None or m >= W:
            params = self.params[:, window] if self.index is None else _take_rows(self.params, self.index[:, window])
            f = post.spec.forward_each(params.reshape(R * W, -1), xs.reshape(R * W, d)).view(R, W, -1)
        else:
            every = post.spec.forward(self.params.reshape(R * m, -1),
                                      xs.unsqueeze(1).expand(R, m, W, d).reshape(R * m, W, d))  # [R·m, W, out]
            pick = self.index[:, window].view(R, 1, W, 1).expand(R, 1, W, every.shape[-1])
            f = every.view(R, m, W, -1).gather(1, pick).squeeze(1)
        return (post.y_loc + post.y_scale * f).argmax(-1)


def _take_rows(params: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``params[R, m, D]``, ``index[R, W]`` -> ``[R, W, D]``: row ``index[r, i]`` of trial ``r``."""
    R, m, D = params.shape
    rows = index + m * torch.arange(R, device=index.device).unsqueeze(1)
    return params.reshape(R * m, D).index_select(0, rows.reshape(-1)).view(R, index.shape[1], D)


def run_bandit_trials(envs: Sequence, posterior: TrialBatched, *, steps: int, seeds: Sequence[int | None],
                      train_every: int = 50, train_steps: TrainSteps = 100, batch_size: int = 512,
                      initial_pulls: int = DEFAULT_INITIAL_PULLS, lr: float | None = None,
                      reward_scale: float = 1.0, prior_std: float | None = None, seed: int | None = None,
                      progress: Callable[[int], None] | None = None, progress_every: int = 100,
                      checkpoint: Callable[[int, np.ndarray], None] | None = None,
                      fit_after_warmup: bool = True) -> list[pd.DataFrame]:
    """Thompson sampling on ``R = len(envs)`` environments in lock step, trial ``r`` acting with
    posterior ``r`` of the trial-batched ``posterior``.

    Args:
        envs: ``R`` contextual bandits (:class:`envs.ContextualBanditEnv`, same arms and context
            size), reset with ``seeds[r]``.
        posterior: a trial-batched posterior with ``n_trials == R`` and ``out_dim`` = arms
            (:func:`~uncertain_agents.posteriors.trials.make_trial_posterior`).
        steps: decisions per trial.
        train_every, train_steps, batch_size, initial_pulls, lr, reward_scale, prior_std: as
            :class:`~.neural.PosteriorAgent` (the same unit and prior handling before the first fit).
        seed: seeds the generator the decisions' functions are drawn from, as
            :class:`~.neural.PosteriorAgent` does (``None``: the posterior's own).
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
        raise ValueError(f"envs and seeds must each have one entry per trial ({R}, the posterior's n_trials), "
                         f"got {len(envs)} and {len(seeds)}")
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps <= 0:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    envs = [getattr(env, "unwrapped", env) for env in envs]  # gymnasium.make's wrappers: the env itself
    # the core does not import the environments package: what the runner needs is their
    # window methods (envs.ContextualBanditEnv has them: contexts independent of the actions)
    if not all(callable(getattr(env, "peek_contexts", None)) and callable(getattr(env, "play", None))
               for env in envs):
        raise TypeError("envs must be contextual bandits that show their contexts ahead, with peek_contexts(k) and "
                        "play(actions) as envs.ContextualBanditEnv, got "
                        + ", ".join(sorted({type(env).__name__ for env in envs})))
    progress_every = check_positive_int(progress_every, "progress_every")
    arms = {int(env.action_space.n) for env in envs}
    if arms != {posterior.spec.out_dim}:
        raise ValueError(f"every environment must have out_dim = {posterior.spec.out_dim} arms, got {sorted(arms)}")
    widths = {tuple(env.observation_space.shape) for env in envs}
    if widths != {(posterior.spec.in_dim,)}:
        raise ValueError(f"every environment's contexts must have in_dim = {posterior.spec.in_dim} values "
                         f"(the posterior's), got observation shapes {sorted(widths)}")
    seeds = [check_seed(s, f"seeds[{r}]") for r, s in enumerate(seeds)]
    seed = check_seed(seed)
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
                 else stream_generator(seed, AGENT_DRAWS_KEY, posterior.device))
    rows = _DeviceRows(R, d, n_actions, posterior.device)
    actions = np.empty((R, steps), dtype=np.int64)
    rewards = np.empty((R, steps))
    optimal = np.empty((R, steps))
    expected = np.empty((R, steps))
    for env, s in zip(envs, seeds):
        env.reset(seed=s)
    functions: DrawnFunctions | None = None
    n_fits, reported, t = 0, 0, 0
    while t < steps:
        # a window: decisions up to the next refit, progress report, or episode end, whichever
        # comes first; within it the decisions depend only on the contexts, read ahead
        if t < warmup:
            end = warmup
        else:
            end = t + 1 if (n_fits == 0 and fit_after_warmup) else (t // train_every + 1) * train_every
        end = min(end, steps, (t // progress_every + 1) * progress_every,
                  t + min(env.horizon - env.t for env in envs))
        contexts = np.stack([env.peek_contexts(end - t) for env in envs])  # [R, W, d]
        if not np.isfinite(contexts).all():
            raise ValueError("context contains NaN or infinite values")
        x = torch.from_numpy(contexts).to(posterior.device)
        if t < warmup:  # round robin over the arms
            chosen = np.broadcast_to(np.arange(t, end) % n_actions, (R, end - t))
            chosen_on_device = torch.from_numpy(np.ascontiguousarray(chosen)).to(posterior.device)
        else:
            if functions is None:
                functions = DrawnFunctions(posterior, train_every, generator)
            chosen_on_device = functions.greedy(x)
            chosen = chosen_on_device.cpu().numpy()
        for r, env in enumerate(envs):
            played = env.play(chosen[r])
            actions[r, t:end], rewards[r, t:end] = chosen[r], played.rewards
            optimal[r, t:end], expected[r, t:end] = played.optimal_expected_rewards, played.expected_rewards
            if played.terminated:
                env.reset()
        rows.append(x, chosen_on_device, rewards[:, t:end])
        t = n = end
        if n >= warmup and (n % train_every == 0 or (fit_after_warmup and n_fits == 0)):
            x_all, y_all, mask_all = rows.view()
            posterior.fit(x_all, y_all, mask_all, steps=steps_for_refit(train_steps, n_fits), batch_size=batch_size,
                          lr=lr)
            n_fits += 1
            functions = None
        if n % progress_every == 0 or n == steps:
            if progress is not None:
                progress(R * (n - reported))
            reported = n
            if checkpoint is not None:
                checkpoint(n, (optimal[:, :n] - rewards[:, :n]).sum(1))
    frames = []
    for r in range(R):
        regret = optimal[r] - rewards[r]
        frame = pd.DataFrame({"step": np.arange(1, steps + 1), "action": actions[r], "reward": rewards[r],
                              "optimal_expected_reward": optimal[r], "regret": regret,
                              "cumulative_regret": np.cumsum(regret)})
        frame["expected_reward"] = expected[r]
        frame["expected_regret"] = optimal[r] - expected[r]
        frames.append(frame[COLUMNS + [c for c in frame.columns if c not in COLUMNS]])
    return frames
