"""Does an additive linear path remove Thompson[``mfvi``]'s late trap on mushroom?

Hypothesis (docs/plug_in.md, "Mushroom best ≤ 8"): LinFullPost, a posterior over functions
*additive* in the one-hot mushroom features, keeps unseen feature combinations uncertain enough
to try them, while every neural posterior rates some odourless edible mushrooms confidently as
bad and never tries them. If the cause is the network's function prior, a network with a
linear path from the features to the arms beside its hidden layer ("wide and deep") should
fall into the trap less.

The path is emulated exactly, without changing the library's network: mushroom contexts are
0/1, so a hidden ReLU unit whose input weights are the unit vector ``e_j`` (bias 0) outputs
``relu(x_j) = x_j``. The network is ``d -> (50 + d) -> 2`` with the last ``d`` hidden units
held at the identity (their means fixed, their stds at 1e-4, their gradients zeroed); the
output weights of those units are then a linear model in ``x`` with the same ``N(0, 1)`` prior,
mean-field posterior and training as every other weight. Everything else is the plug-in
protocol (3,000 decisions, ``ThompsonSampling`` defaults; trial t: environment and posterior
seed t, agent seed t), paired with the library's ``mfvi`` on the same trials.

    UNCERTAIN_AGENTS_DATA=../shared/data OMP_NUM_THREADS=1 \\
        python experiments/mushroom_linear_path.py --first-trial 5 --trials 20

About 35 s (linear path) and 20 s (default) per trial on one CPU thread.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

import uncertain_agents as ua
from uncertain_agents.agents import ThompsonSampling, Uniform, run_bandit
from uncertain_agents.agents.experiment import make_env
from uncertain_agents.network import MLPSpec
from uncertain_agents.posteriors.mfvi import MeanFieldVI

STEPS = 3000
HIDDEN = 50
FIXED_LOG_STD = math.log(1e-4)


class MeanFieldVIWithLinearPath(MeanFieldVI):
    """``mfvi`` on ``d -> (HIDDEN + d) -> out`` whose last ``d`` hidden units are held at the
    identity, so that (for inputs ≥ 0) their output weights form a linear path ``x -> out``."""

    def __init__(self, in_dim: int, out_dim: int, **kwargs):
        super().__init__(MLPSpec(in_dim, out_dim, (HIDDEN + in_dim,)), **kwargs)
        width = HIDDEN + in_dim
        held = torch.zeros(self.spec.num_params, dtype=torch.bool)
        value = torch.zeros(self.spec.num_params)
        block = torch.zeros(in_dim, width, dtype=torch.bool)
        block[:, HIDDEN:] = True
        identity = torch.zeros(in_dim, width)
        identity[:, HIDDEN:] = torch.eye(in_dim)
        held[: in_dim * width] = block.flatten()
        value[: in_dim * width] = identity.flatten()
        held[in_dim * width + HIDDEN: in_dim * width + width] = True  # their biases stay 0
        self.register_buffer("held", held)
        self.register_buffer("held_value", value)
        self.mean.register_hook(lambda g: g.masked_fill(self.held, 0.0))
        self.log_std.register_hook(lambda g: g.masked_fill(self.held, 0.0))
        self.hold()

    def hold(self) -> None:
        with torch.no_grad():
            self.mean[self.held] = self.held_value[self.held]
            self.log_std[self.held] = FIXED_LOG_STD

    def fit(self, *args, **kwargs):
        self.hold()  # the agent's bandit prior (set_prior_std) resets every std before the first fit
        return super().fit(*args, **kwargs)


def normalised_regret(trial: int, linear_path: bool) -> float:
    env = make_env("mushroom", steps=STEPS)
    d = int(env.observation_space.shape[0])
    post = (MeanFieldVIWithLinearPath(d, 2, seed=trial) if linear_path
            else ua.make_posterior("mfvi", in_dim=d, out_dim=2, seed=trial))
    agent = ThompsonSampling(post, 2, seed=trial)
    regret = run_bandit(env, agent, steps=STEPS, seed=trial)["cumulative_regret"].iloc[-1]
    if linear_path:  # the held block never moved
        assert torch.equal(post.mean.detach()[post.held], post.held_value[post.held])
    uniform = run_bandit(make_env("mushroom", steps=STEPS), Uniform(2, seed=trial), steps=STEPS,
                         seed=trial)["cumulative_regret"].iloc[-1]
    return 100.0 * float(regret) / float(uniform)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--first-trial", type=int, default=5, help="first trial (default 5: held out)")
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    trials = range(args.first_trial, args.first_trial + args.trials)
    for linear_path in (True, False):
        start = time.perf_counter()
        values = np.array([normalised_regret(t, linear_path) for t in trials])
        label = "mfvi with a linear path" if linear_path else "mfvi (library default)"
        print(f"{label}: trials {np.round(values, 2).tolist()} -> {values.mean():.2f} ± "
              f"{values.std(ddof=1) / np.sqrt(len(values)):.2f} ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
