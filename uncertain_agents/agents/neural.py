"""``PosteriorAgent``: the training schedule shared by agents built on a posterior.

The posterior's network has one output per arm. Every ``train_every`` observations the
posterior is refitted, warm-started, on the whole history with all but the played arm
masked out; after each refit the agent draws the functions it will act with until the
next refit in one batch (``posterior.sample(k)``) and keeps them as host arrays.
"""
from __future__ import annotations

import numpy as np
import torch

from ..posteriors.base import FitResult, Posterior
from ..seeding import AGENT_DRAWS_KEY, stream_generator
from ..validation import check_positive_float, check_positive_int, check_seed
from .base import Agent
from .history import History
from .protocols import DEFAULT_INITIAL_PULLS
from .host_functions import HostFunctions
from .schedule import TrainSteps, check_train_steps, steps_for_refit

#: Weight prior std the bandit agents give posteriors with the default prior (raw reward
#: units; N(0, 1) as in Riquelme et al. 2018's BBB). See :class:`PosteriorAgent`.
BANDIT_PRIOR_STD: float = 1.0


class PosteriorAgent(Agent):
    """Base class of :class:`ThompsonSampling` and :class:`Greedy`.

    Args:
        posterior: a regression (``likelihood="gaussian"``) posterior with
            ``out_dim == n_actions``.
        n_actions: number of arms.
        train_every: refit after every ``train_every`` observations.
        train_steps: optimiser steps per refit: an int, or a schedule ``k -> steps`` of
            the refit index ``k`` (e.g. :class:`~uncertain_agents.agents.LinearDecay`).
        batch_size: minibatch size of the refits.
        initial_pulls: every arm is played this many times, round robin, before the
            posterior is first fitted (default
            :data:`~uncertain_agents.agents.protocols.DEFAULT_INITIAL_PULLS`, 5; the papers'
            protocols use 2).
        lr: learning rate of the refits (``None``: the method's default).
        reward_scale: rewards are divided by this constant (shared by every arm, never
            re-estimated) before training; default 1 (raw rewards).
        prior_std: weight prior the agent gives a posterior that still has the regression
            default (``1/sqrt(fan_in)`` in standardised units); default
            :data:`BANDIT_PRIOR_STD`. A prior chosen by the user is kept.
        seed: seeds the agent's draws from the posterior: a stream of its own,
            ``seeding.stream_seed(seed, AGENT_DRAWS_KEY)``, apart from the posterior's streams even when
            both get the same seed (``None``: the posterior's own generator).

    Before the first fit the agent fixes the posterior's training units (unless they are
    already fixed): ``posterior.set_prior_std(prior_std)`` when its prior is the default,
    ``posterior.use_bandit_defaults()`` (the method's documented bandit values of options the
    user left at their defaults, e.g. no input dropout for ``dropout-alpha``), then
    ``posterior.set_units(x_loc=0, x_scale=1, y_loc=0, y_scale=reward_scale)``. Contexts are
    used as they come and rewards are never standardised per arm, because an arm that has
    only paid ≈1 would get a reward scale of ≈0.05 and its posterior could never reach the
    50 it may pay (see docs/bandits.md, "Units and prior"). Python and the CLI get the same
    behaviour because this happens here, in the agent.
    """

    def __init__(self, posterior: Posterior, n_actions: int, *, train_every: int = 50,
                 train_steps: TrainSteps = 100, batch_size: int = 512, initial_pulls: int = DEFAULT_INITIAL_PULLS,
                 lr: float | None = None, reward_scale: float = 1.0, prior_std: float | None = None,
                 seed: int | None = None, fit_after_warmup: bool = True):
        if not isinstance(posterior, Posterior):
            raise TypeError(f"posterior must be a uncertain_agents Posterior (see make_posterior), "
                            f"got {type(posterior).__name__}")
        if posterior.kind != "gaussian":
            raise ValueError(f"posterior must have likelihood='gaussian' (rewards are regressed), "
                             f"got {posterior.kind!r}")
        super().__init__(n_actions, posterior.spec.in_dim)
        if posterior.spec.out_dim != self.n_actions:
            raise ValueError(f"posterior must have out_dim = n_actions = {self.n_actions} (one output per arm), "
                             f"got out_dim={posterior.spec.out_dim}")
        self.posterior = posterior
        self.train_every = check_positive_int(train_every, "train_every")
        self.train_steps = check_train_steps(train_steps)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        if isinstance(initial_pulls, bool) or not isinstance(initial_pulls, (int, np.integer)) or initial_pulls < 0:
            raise ValueError(f"initial_pulls must be a non-negative integer, got {initial_pulls!r}")
        self.initial_pulls = int(initial_pulls)
        self.fit_after_warmup = bool(fit_after_warmup)
        self.lr = check_positive_float(lr, "lr", allow_none=True)
        self.reward_scale = check_positive_float(reward_scale, "reward_scale")
        self.prior_std = check_positive_float(BANDIT_PRIOR_STD if prior_std is None else prior_std, "prior_std")
        if not posterior.units_are_fixed:
            if posterior.has_default_prior:
                posterior.set_prior_std(self.prior_std)
            posterior.use_bandit_defaults()
            posterior.set_units(x_loc=0.0, x_scale=1.0, y_loc=0.0, y_scale=self.reward_scale)
        seed = check_seed(seed)
        self.generator = (posterior.generator() if seed is None
                          else stream_generator(seed, AGENT_DRAWS_KEY, posterior.device))
        self.history = History(self.context_dim)
        self.functions: HostFunctions | None = None
        self.n_fits = 0
        self.last_fit: FitResult | None = None
        self._cursor = 0

    @property
    def warmup(self) -> int:
        """Number of round-robin decisions before the first fit."""
        return self.initial_pulls * self.n_actions

    def _round_robin(self) -> int | None:
        n = self.history.n
        return n % self.n_actions if n < self.warmup else None

    def _draw(self, k: int) -> None:
        """Draw ``k`` functions in one batch and keep them as host arrays."""
        self.functions = HostFunctions(self.posterior.sample(k, generator=self.generator))
        self._cursor = 0

    def update(self, context, action: int, reward: float) -> None:
        x = self._context(context)
        self.history.append(x, self._action(action), self._reward(reward))
        n = self.history.n
        if n >= self.warmup and (n % self.train_every == 0 or (self.fit_after_warmup and self.n_fits == 0)):
            self.refit()

    def refit(self) -> FitResult:
        """Warm-started fit on the whole history; invalidates the drawn functions."""
        y, mask = self.history.masked_targets(self.n_actions)
        device = self.posterior.device
        x = torch.from_numpy(self.history.contexts).to(device)
        self.last_fit = self.posterior.fit(x, torch.from_numpy(y).to(device), torch.from_numpy(mask).to(device),
                                           steps=steps_for_refit(self.train_steps, self.n_fits),
                                           batch_size=self.batch_size, lr=self.lr)
        self.n_fits += 1
        self.functions = None
        return self.last_fit
