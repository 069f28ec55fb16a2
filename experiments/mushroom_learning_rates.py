"""Thompson[`mfvi`] on mushroom when the posterior stds or the learned noise learn faster.

Why the question: on some trials Thompson[`mfvi`] eats nothing for 600+ decisions after a
few −35 rewards (trial 7: its "eat − don't eat" is −7 ± 1.5 on every mushroom after 100
decisions). With Adam at the default ``lr = 1e-3`` and 100 steps per refit, a weight's
log-std moves by about 0.1 per refit, so weights that start at 0.1 × the prior std need
~20 refits to reach the prior's width where the data leave them free, and the learned noise
std stays near its start (0.5 reward units) while the eaten poisonous mushrooms pay ±20.
This script gives the two parameter groups their own learning-rate multiples (through the
public training hooks: ``optimizer_groups`` / ``training_step``), everything else the
defaults of the plug-in matrix's mushroom protocol (3,000 decisions; trial t: environment
seed t, posterior seed t, agent seed t), and prints per-trial normalised regret
(100 × regret / Uniform's on the same rounds). ``--trace T`` prints, every 100 decisions
of trial T, the learned noise stds, how often Thompson sampling would eat edible and
poisonous mushrooms (over all 8,124 mushrooms, 100 sampled functions), and the mean and
spread of "eat − don't eat", and how many mushrooms were eaten (and how many paid −35).

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/mushroom_learning_rates.py \\
        --std-lr 10 --first-trial 5 --trials 10

About 20 s per trial on one CPU thread. Multiples of 1 reproduce ``mfvi``'s default
cells exactly (one Adam step per group on the same gradients).
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

from uncertain_agents.agents import ThompsonSampling, Uniform, run_bandit
from uncertain_agents.agents.experiment import make_env
from uncertain_agents.datasets.mushroom import load_mushroom
from uncertain_agents.network import MLPSpec
from uncertain_agents.posteriors import OptimizerGroup
from uncertain_agents.posteriors.mfvi import MeanFieldVI

STEPS = 3000
HIDDEN = (50,)


class GroupedLearningRatesVI(MeanFieldVI):
    """``mfvi`` whose log-stds and learned noise have their own Adam learning-rate multiples."""

    def __init__(self, spec: MLPSpec, *, std_lr: float = 1.0, noise_lr: float = 1.0, **kwargs):
        super().__init__(spec, "gaussian", **kwargs)
        self.std_lr, self.noise_lr = std_lr, noise_lr

    def optimizer_groups(self) -> dict[str, OptimizerGroup]:
        noise = self.likelihood.log_noise_std
        special = {id(self.log_std), id(noise)}
        rest = tuple(p for p in self.parameters() if p.requires_grad and id(p) not in special)
        return {"main": OptimizerGroup(rest), "std": OptimizerGroup((self.log_std,), self.std_lr),
                "noise": OptimizerGroup((noise,), self.noise_lr)}

    def training_step(self, batch, ctx):
        """One step of every group on the same gradients of the negative ELBO."""
        loss = self.loss(batch, ctx.generator)
        groups = self.optimizer_groups()
        params = [p for group in groups.values() for p in group.params]
        grads = dict(zip(params, torch.autograd.grad(loss, params, allow_unused=True)))
        for name, group in groups.items():
            ctx.apply_gradients({p: grads[p] for p in group.params}, name)
        return {"loss": loss.detach()}


def build(trial: int, std_lr: float, noise_lr: float) -> ThompsonSampling:
    spec = MLPSpec(117, 2, HIDDEN, "relu")
    post = GroupedLearningRatesVI(spec, std_lr=std_lr, noise_lr=noise_lr, seed=trial)
    post.config = {"name": "mfvi", "in_dim": 117, "out_dim": 2, "hidden": list(HIDDEN), "activation": "relu",
                   "likelihood": "gaussian", "seed": trial}
    return ThompsonSampling(post, 2, seed=trial)


def normalised_regret(trial: int, std_lr: float, noise_lr: float) -> float:
    regret = run_bandit(make_env("mushroom", steps=STEPS), build(trial, std_lr, noise_lr), steps=STEPS,
                        seed=trial)["cumulative_regret"].iloc[-1]
    uniform = run_bandit(make_env("mushroom", steps=STEPS), Uniform(2, seed=trial), steps=STEPS,
                         seed=trial)["cumulative_regret"].iloc[-1]
    return 100.0 * float(regret) / float(uniform)


def trace(trial: int, std_lr: float, noise_lr: float, decisions: int = 1500) -> None:
    data = load_mushroom()
    x_all, edible = torch.as_tensor(data.contexts), np.asarray(data.edible)
    env, agent = make_env("mushroom", steps=STEPS), build(trial, std_lr, noise_lr)
    obs, _ = env.reset(seed=trial)
    eaten = bad = 0
    for step in range(1, decisions + 1):
        action = agent.act(obs)
        nxt, reward, *_ = env.step(action)
        agent.update(obs, action, reward)
        obs = nxt
        eaten += int(action == 1)
        bad += int(action == 1 and reward < 0)
        if step % 100 == 0:
            f = agent.posterior.predict(x_all, n_samples=100, generator=torch.Generator().manual_seed(0)).samples
            diff = (f[..., 1] - f[..., 0]).numpy()
            eats = (diff > 0).mean(0)
            noise = agent.posterior.likelihood.noise_std.detach().numpy()
            print(f"decision {step}: noise std (don't eat, eat) {noise[0]:.2f}, {noise[1]:.2f}; "
                  f"P(eat) edible {eats[edible].mean():.2f}, poisonous {eats[~edible].mean():.2f}; "
                  f"mean eat − not: edible {diff.mean(0)[edible].mean():.1f}, poisonous "
                  f"{diff.mean(0)[~edible].mean():.1f}; sd {diff.std(0).mean():.2f}; "
                  f"eaten in the last 100: {eaten} ({bad} paid -35)", flush=True)
            eaten = bad = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--std-lr", type=float, default=1.0, help="learning-rate multiple of the log-stds")
    parser.add_argument("--noise-lr", type=float, default=1.0, help="learning-rate multiple of the learned noise")
    parser.add_argument("--first-trial", type=int, default=0)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--trace", type=int, default=None, help="trace this trial instead of scoring trials")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.trace is not None:
        trace(args.trace, args.std_lr, args.noise_lr)
        return
    values = np.array([normalised_regret(t, args.std_lr, args.noise_lr)
                       for t in range(args.first_trial, args.first_trial + args.trials)])
    spread = f" ± {values.std(ddof=1) / np.sqrt(len(values)):.2f}" if len(values) > 1 else ""
    print(f"mfvi std_lr={args.std_lr:g} noise_lr={args.noise_lr:g}: trials {np.round(values, 2).tolist()} -> "
          f"{values.mean():.2f}{spread}")


if __name__ == "__main__":
    main()
