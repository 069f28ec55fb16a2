"""``LinearThompson`` ("LinFullPost") and ``NeuralLinear`` (Riquelme et al. 2018).

* ``LinearThompson``: Thompson sampling with a Bayesian linear regression per arm on
  the raw context (normal-inverse-gamma prior, exact posterior updated every step).
* ``NeuralLinear``: a network with one output per arm is trained (mean squared error
  on the played arm, warm-started every ``train_every`` steps on the whole history);
  the same per-arm Bayesian linear regression then runs on its last hidden layer,
  rebuilt on the new features after every network refit and updated every step.
"""
from __future__ import annotations

import numpy as np
import torch

from ..network import MLPSpec
from ..validation import check_device, check_positive_float, check_positive_int
from .base import Agent, make_rng
from .bayes_linear import BayesianLinearArms
from .history import History
from .protocols import DEFAULT_INITIAL_PULLS
from .host_functions import HostFunctions
from .schedule import TrainSteps, check_train_steps, steps_for_refit
from ..function_sample import FunctionSample


class LinearThompson(Agent):
    """Per-arm Bayesian linear regression on the context, Thompson sampling.

    Args:
        context_dim: context width.
        n_actions: number of arms.
        a0, b0, lambda_prior: the normal-inverse-gamma prior (Riquelme's defaults 6, 6, 0.25).
        initial_pulls: round-robin pulls of every arm before sampling (default 5, as every
            agent of the library; Riquelme et al.'s code, the ``showdown`` preset, uses 2).
        intercept: regress on ``[x, 1]``.
        seed: seeds the posterior draws.
    """

    name = "linear"

    def __init__(self, context_dim: int, n_actions: int, *, a0: float = 6.0, b0: float = 6.0,
                 lambda_prior: float = 0.25, initial_pulls: int = DEFAULT_INITIAL_PULLS, intercept: bool = True,
                 seed: int | None = None):
        super().__init__(n_actions, context_dim)
        self.blr = BayesianLinearArms(self.n_actions, self.context_dim, a0=a0, b0=b0,
                                      lambda_prior=lambda_prior, intercept=intercept)
        self.initial_pulls = _non_negative_int(initial_pulls, "initial_pulls")
        self.rng = make_rng(seed)
        self.t = 0

    def act(self, context) -> int:
        x = self._context(context)
        if self.t < self.initial_pulls * self.n_actions:
            return self.t % self.n_actions
        return int(np.argmax(self.blr.sample_values(x, self.rng)))

    def update(self, context, action: int, reward: float) -> None:
        x = self._context(context)
        self.blr.add(x, self._action(action), self._reward(reward))
        self.t += 1


class NeuralLinear(Agent):
    """Bayesian linear regression per arm on the last hidden layer of a trained network.

    Args:
        context_dim, n_actions: context width and number of arms.
        hidden, activation: the network (one output per arm).
        train_every, train_steps, batch_size, lr: network refit schedule (Adam, warm-started);
            ``train_steps`` may be a schedule ``k -> steps`` (see :mod:`.schedule`).
        a0, b0, lambda_prior: the normal-inverse-gamma prior of the last-layer regressions.
        initial_pulls: round-robin pulls of every arm before the first fit (default 5, as every
            agent of the library; the ``showdown`` preset uses 2).
        device: where the network trains.
        seed: seeds the initialisation, the minibatches and the posterior draws.
    """

    name = "neural-linear"

    def __init__(self, context_dim: int, n_actions: int, *, hidden=(50,), activation: str = "relu",
                 train_every: int = 50, train_steps: TrainSteps = 100, batch_size: int = 512, lr: float = 1e-2,
                 a0: float = 6.0, b0: float = 6.0, lambda_prior: float = 0.25, initial_pulls: int = DEFAULT_INITIAL_PULLS,
                 device="cpu", seed: int | None = None, fit_after_warmup: bool = True):
        super().__init__(n_actions, context_dim)
        self.fit_after_warmup = bool(fit_after_warmup)
        hidden = (hidden,) if isinstance(hidden, int) else tuple(hidden)
        if not hidden:
            raise ValueError("hidden must have at least one layer for NeuralLinear (use LinearThompson)")
        self.spec = MLPSpec(self.context_dim, self.n_actions, hidden, activation)
        self.train_every = check_positive_int(train_every, "train_every")
        self.train_steps = check_train_steps(train_steps)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.lr = check_positive_float(lr, "lr")
        self.initial_pulls = _non_negative_int(initial_pulls, "initial_pulls")
        self.rng = make_rng(seed)
        self.device = check_device(device)
        self.torch_gen = torch.Generator(device=self.device).manual_seed(int(self.rng.integers(2**62)))
        init_gen = torch.Generator().manual_seed(int(self.rng.integers(2**62)))
        self.params = torch.nn.Parameter(self.spec.init_params(1, generator=init_gen).to(self.device))
        self.optimizer = torch.optim.Adam([self.params], lr=self.lr)
        self.blr = BayesianLinearArms(self.n_actions, hidden[-1], a0=a0, b0=b0, lambda_prior=lambda_prior)
        self.history = History(self.context_dim)
        self.net = self._host_net()
        self.n_fits = 0

    def _host_net(self) -> HostFunctions:
        zeros, ones = torch.zeros(self.context_dim), torch.ones(self.context_dim)
        fs = FunctionSample(self.params.detach().cpu(), self.spec, zeros, ones,
                            torch.zeros(self.n_actions), torch.ones(self.n_actions))
        return HostFunctions(fs)

    def act(self, context) -> int:
        x = self._context(context)
        n = self.history.n
        if n < self.initial_pulls * self.n_actions:
            return n % self.n_actions
        return int(np.argmax(self.blr.sample_values(self.net.features_one(0, x), self.rng)))

    def update(self, context, action: int, reward: float) -> None:
        x = self._context(context)
        a, r = self._action(action), self._reward(reward)
        self.history.append(x, a, r)
        n = self.history.n
        if n >= self.initial_pulls * self.n_actions and (n % self.train_every == 0
                                                          or (self.fit_after_warmup and self.n_fits == 0)):
            self.refit()
        else:
            self.blr.add(self.net.features_one(0, x), a, r)

    def refit(self) -> None:
        """Train the network on the whole history, then rebuild the regressions on its features."""
        y, mask = self.history.masked_targets(self.n_actions)
        x = torch.from_numpy(self.history.contexts).to(self.device)
        y = torch.from_numpy(y).to(self.device)
        mask = torch.from_numpy(mask).to(self.device, torch.float32)
        n = x.shape[0]
        bs = min(self.batch_size, n)
        for _ in range(steps_for_refit(self.train_steps, self.n_fits)):
            idx = torch.randint(n, (bs,), generator=self.torch_gen, device=self.device)
            f = self.spec.forward(self.params, x[idx])[0]                   # [B, A]
            loss = ((f - y[idx]).square() * mask[idx]).sum() / bs
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
        if not bool(torch.isfinite(self.params).all()):
            raise FloatingPointError("NeuralLinear: the network weights became NaN/inf; lower lr")
        self.n_fits += 1
        self.net = self._host_net()
        with torch.no_grad():
            _, feats = self.spec.forward(self.params, x, return_features=True)
        self.blr.rebuild(feats[0].cpu().numpy(), self.history.actions, self.history.rewards)


def _non_negative_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)
