"""Uniform and LinFullPost with the agent stream of before session 32 and with today's.

Before session 32 an agent seeded with ``s`` drew from ``np.random.default_rng(s)``, the very
stream gymnasium gives an environment reset with ``seed=s`` (``SeedSequence(s)``), and every
trial seeds both with its own seed. Uniform's first decisions then followed the environment's
draws (on mushroom it ate exactly the mushrooms from the poisonous half of the data file), so
the Uniform regret that normalises every result was off. Today's agents draw from
``SeedSequence(s, spawn_key=(AGENT_STREAM_KEY,))`` (``uncertain_agents.agents.base.make_rng``; the key is in ``uncertain_agents.seeding``).
This script runs an agent both ways on the same trials (same environment draws) and prints the
paired difference of the cumulative regret::

    UNCERTAIN_AGENTS_DATA=../shared/data OMP_NUM_THREADS=1 python experiments/uniform_stream_check.py \\
        uniform mushroom 0 3000 50      # agent, bandit, δ (wheel), decisions, trials
"""
from __future__ import annotations

import argparse

import numpy as np

import envs
import uncertain_agents.agents.baselines as baselines
import uncertain_agents.agents.linear as linear
from uncertain_agents.agents import make_agent, run_bandit
from uncertain_agents.agents.base import make_rng
from uncertain_agents.validation import check_seed


def shared_stream(seed):
    """The agent stream of before session 32: the environment's own for the same seed."""
    return np.random.default_rng(check_seed(seed))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("agent", choices=["uniform", "linear"])
    p.add_argument("bandit", choices=["mushroom", "wheel"])
    p.add_argument("delta", type=float, help="wheel δ (ignored on mushroom)")
    p.add_argument("steps", type=int)
    p.add_argument("trials", type=int)
    p.add_argument("--first-trial", type=int, default=0, help="seeds first-trial … first-trial + trials − 1")
    args = p.parse_args(argv)
    data = None
    if args.bandit == "mushroom":
        from uncertain_agents.datasets.mushroom import load_mushroom
        data = load_mushroom()
    regrets = {}
    for label, stream in (("shared (before)", shared_stream), ("own (now)", make_rng)):
        baselines.make_rng = linear.make_rng = stream
        out = []
        for seed in range(args.first_trial, args.first_trial + args.trials):
            env = (envs.MushroomBandit(data=data, horizon=args.steps) if data is not None
                   else envs.WheelBandit(delta=args.delta, horizon=args.steps))
            agent = make_agent(args.agent, n_actions=int(env.action_space.n),
                               context_dim=int(env.observation_space.shape[0]), seed=seed)
            out.append(run_bandit(env, agent, steps=args.steps, seed=seed)["cumulative_regret"].iloc[-1])
        regrets[label] = np.array(out)
    baselines.make_rng = linear.make_rng = make_rng
    (a_label, a), (b_label, b) = regrets.items()
    se = lambda v: v.std(ddof=1) / np.sqrt(len(v))
    d = a - b
    print(f"{args.agent} on {args.bandit}{'' if data is not None else f' δ = {args.delta}'}, {args.steps} decisions, "
          f"{args.trials} trials from seed {args.first_trial}: {a_label} {a.mean():.1f} ± {se(a):.1f}, {b_label} {b.mean():.1f} ± {se(b):.1f}; "
          f"ratio {a.mean() / b.mean():.4f}; paired difference {d.mean():.1f} ± {se(d):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
