"""Thompson sampling with ``avb`` on one long mushroom trial, with posterior options given on the
command line: the cumulative regret at 2,000 … 10,000 decisions and the learned noise std per arm
at the end (docs/bandits.md, "The library's defaults at 10,000 steps").

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/avb_mushroom_long.py "{}" 4 8000
    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/avb_mushroom_long.py "{'noise_floor': None}" 4 8000
    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/avb_mushroom_long.py "{'noise_floor': 0.01}" 0 8500 500

Arguments: posterior options (a Python dict literal), trial (environment seed; posterior seed =
trial, agent seed = trial, as the bandit tables), decisions, and optionally ``every``: print
a trace line every ``every`` decisions — cumulative regret, the learned noise std per arm, the
learned prior scale, how often Thompson sampling would eat edible and poisonous mushrooms (over
all 8,124, 100 sampled functions), the mean of "eat − don't eat" on each kind and its spread
over the sampled functions, the mushrooms eaten since the last line (and how many paid −35),
and the last refit's discriminator loss and KL estimate (means of its last 20 steps); the
lines are printed when the run ends.
``{}`` is the library's default, which in a bandit agent includes ``avb``'s bandit value
``noise_floor=0.1``; ``{'noise_floor': None}`` turns the floor off. About 130 s for 8,000
decisions (a trace adds a few seconds per line).
"""
from __future__ import annotations

import argparse
import ast
import time

import numpy as np
import torch

import uncertain_agents as ua
from uncertain_agents.agents import ThompsonSampling, run_bandit
from uncertain_agents.agents.experiment import make_env
from uncertain_agents.datasets.mushroom import load_mushroom

CHECKPOINTS = (2000, 4000, 6000, 7000, 8000, 9000, 10000)


def snapshot(agent: ThompsonSampling, x_all: torch.Tensor, edible: np.ndarray) -> str:
    """The posterior's state now: noise, prior scale, how Thompson sampling would act, last refit."""
    post = agent.posterior
    f = post.predict(x_all, n_samples=100, generator=torch.Generator().manual_seed(0)).samples
    diff = (f[..., 1] - f[..., 0]).numpy()
    eats = (diff > 0).mean(0)
    traces = agent.last_fit.traces if agent.last_fit is not None else {}
    fit = {k: float(np.mean(traces[k][-20:])) for k in ("discriminator", "kl") if k in traces}
    noise = post.likelihood.noise_std.detach().numpy()
    return (f"noise std (don't eat, eat) {noise[0]:.3f}, {noise[1]:.3f}; "
            f"prior scale {float(post.log_prior_scale.detach().exp()):.2f}; P(eat) edible {eats[edible].mean():.2f}, "
            f"poisonous {eats[~edible].mean():.2f}; mean eat − not: edible {diff.mean(0)[edible].mean():.1f}, "
            f"poisonous {diff.mean(0)[~edible].mean():.1f}; sd {diff.std(0).mean():.2f}; "
            f"discriminator loss {fit.get('discriminator', float('nan')):.4f}, KL {fit.get('kl', float('nan')):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("options", type=ast.literal_eval, help="avb's options, a Python dict literal ('{}': defaults)")
    parser.add_argument("trial", type=int, help="environment, posterior and agent seed")
    parser.add_argument("steps", type=int, help="decisions")
    parser.add_argument("every", type=int, nargs="?", default=0, help="print a trace line every EVERY decisions")
    args = parser.parse_args()
    if not isinstance(args.options, dict):
        parser.error(f"options must be a dict literal, not {args.options!r}")
    options, trial, steps, every = args.options, args.trial, args.steps, args.every
    torch.set_num_threads(1)
    env = make_env("mushroom", steps=steps)
    post = ua.make_posterior("avb", in_dim=int(env.observation_space.shape[0]), out_dim=2, seed=trial, **options)
    agent = ThompsonSampling(post, 2, seed=trial)
    snapshots: list[str] = []
    progress = None
    if every:
        data = load_mushroom()
        x_all, edible = torch.as_tensor(data.contexts), np.asarray(data.edible)
        progress = lambda k: snapshots.append(snapshot(agent, x_all, edible))  # noqa: E731
    start = time.perf_counter()
    frame = run_bandit(env, agent, steps=steps, seed=trial, progress=progress, progress_every=every or 100)
    regret = frame["cumulative_regret"].to_numpy()
    for i, line in enumerate(snapshots[:steps // every] if every else []):
        window = frame.iloc[i * every:(i + 1) * every]
        eaten = window["action"] == 1
        print(f"{(i + 1) * every}: regret {regret[(i + 1) * every - 1]:.0f}; {line}; eaten {int(eaten.sum())} "
              f"({int((eaten & (window['reward'] < 0)).sum())} paid -35)")
    at = {s: int(regret[s - 1]) for s in CHECKPOINTS if s <= steps}
    noise = post.likelihood.noise_std.detach().tolist()
    print(f"avb {options} (noise floor {post.noise_floor}) trial {trial}: cumulative regret {at}; "
          f"learned/fixed noise std per arm "
          f"(don't eat, eat) {[round(v, 4) for v in noise]} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
