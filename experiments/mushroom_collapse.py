"""Why narrow posteriors stopped eating on the mushroom bandit, and what the bandit prior changes.

Thompson sampling with ``mfvi`` on the mushroom bandit (3,000 decisions, seed 0), twice:

* ``regression prior`` — raw rewards with the regression default prior ``N(0, 1/fan_in)``
  (what the agents did before the bandit prior: the posterior's units are fixed by hand
  with ``post.set_units()`` so the agent leaves them and the prior alone);
* ``bandit prior``     — ``make_posterior`` defaults handed to ``ThompsonSampling``, which
  gives a posterior with the default prior ``N(0, 1)`` in raw reward units.

Every 300 decisions it prints, on the last 300 contexts: the fraction of Thompson draws
that eat, the eat arm's predictive mean on edible and on poisonous mushrooms, its
epistemic std (spread of the sampled functions) and the learned noise std of each arm.

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/mushroom_collapse.py
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import uncertain_agents as ua
from uncertain_agents.agents import ThompsonSampling
from uncertain_agents.agents.experiment import make_env


def trace(label: str, fix_units_by_hand: bool, steps: int, seed: int) -> None:
    env = make_env("mushroom", steps=steps)
    post = ua.make_posterior("mfvi", in_dim=117, out_dim=2, seed=seed)
    if fix_units_by_hand:
        post.set_units()                       # raw units, regression prior kept
    agent = ThompsonSampling(post, 2, seed=seed)
    obs, _ = env.reset(seed=seed)
    regret, eats, poisoned = 0.0, 0, 0
    edible = []
    print(f"\n{label}: prior std of the last layer {float(post.prior_std[-1]):.3f}")
    print("step  regret  eats  poisonous-eaten  P(eat)  mean(eat|edible)  mean(eat|poisonous)  epistemic-sd  noise-sd")
    for t in range(steps):
        a = agent.act(obs)
        nxt, r, _, _, info = env.step(a)
        agent.update(obs, a, r)
        regret += info["optimal_expected_reward"] - r
        eats += a
        poisoned += int(a == 1 and info["optimal_action"] == 0)
        edible.append(info["optimal_action"] == 1)
        obs = nxt
        if (t + 1) % 300 == 0:
            x = torch.from_numpy(agent.history.contexts[-300:])
            is_edible = np.array(edible[-300:])
            f = post.sample(200, generator=torch.Generator().manual_seed(t))(x)      # [200, 300, 2]
            p_eat = float((f[..., 1] > f[..., 0]).float().mean())
            eat_mean = f[..., 1].mean(0).numpy()
            noise = (post.likelihood.log_noise_std.exp() * post.y_scale).tolist()
            print(f"{t + 1:5d} {regret:7.0f} {eats:5d} {poisoned:16d} {p_eat:7.3f} "
                  f"{eat_mean[is_edible].mean():17.2f} {eat_mean[~is_edible].mean():20.2f} "
                  f"{float(f[..., 1].std(0).mean()):13.3f}  {', '.join(f'{v:.2f}' for v in noise)}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    trace("regression prior N(0, 1/fan_in), raw rewards", True, args.steps, args.seed)
    trace("bandit prior N(0, 1) (ThompsonSampling's default)", False, args.steps, args.seed)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
