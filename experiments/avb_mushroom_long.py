"""Thompson sampling with ``avb`` on one long mushroom trial, with posterior options given on the
command line: the cumulative regret at 2,000 … 10,000 decisions and the learned noise std per arm
at the end (docs/bandits.md, "The library's defaults at 10,000 steps").

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/avb_mushroom_long.py "{}" 4 8000
    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/avb_mushroom_long.py "{'noise_floor': None}" 4 8000
    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/avb_mushroom_long.py "{'noise_std': 0.1}" 4 8000

Arguments: posterior options (a Python dict literal), trial (environment seed; posterior seed =
trial, agent seed = trial + 1, as the bandit tables) and decisions. ``{}`` is the library's
default, which in a bandit agent includes ``avb``'s bandit value ``noise_floor=0.01``;
``{'noise_floor': None}`` turns the floor off (the behaviour before it existed).
About 130 s for 8,000 decisions.
"""
from __future__ import annotations

import ast
import sys
import time

import torch

import uncertain_agents as ua
from uncertain_agents.agents import ThompsonSampling, run_bandit
from uncertain_agents.agents.experiment import make_env

CHECKPOINTS = (2000, 4000, 6000, 7000, 8000, 9000, 10000)


def main() -> None:
    options, trial, steps = ast.literal_eval(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    env = make_env("mushroom", steps=steps)
    post = ua.make_posterior("avb", in_dim=int(env.observation_space.shape[0]), out_dim=2, seed=trial, **options)
    agent = ThompsonSampling(post, 2, seed=trial + 1)
    start = time.perf_counter()
    regret = run_bandit(env, agent, steps=steps, seed=trial)["cumulative_regret"].to_numpy()
    at = {s: int(regret[s - 1]) for s in CHECKPOINTS if s <= steps}
    noise = post.likelihood.noise_std.detach().tolist()
    print(f"avb {options} (noise floor {post.noise_floor}) trial {trial}: cumulative regret {at}; "
          f"learned/fixed noise std per arm "
          f"(don't eat, eat) {[round(v, 4) for v in noise]} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
