"""Thompson sampling on mushroom with an ensemble of randomised prior functions (tried, not adopted).

Osband, Aslanides & Cassirer (2018): member ``m`` is ``g_m(x) + β p_m(x)``, where ``p_m`` is a
fixed network drawn from the posterior's weight prior (the bandit agents' ``N(0, 1)``) and only
``g_m`` is trained (the ``ensemble``'s MAP objective). The sum of two MLPs is one MLP of twice
the width (first layers side by side, hidden layers block-diagonal, the last layers stacked
with ``β`` on the prior's), so ``ThompsonSampling`` acts on it unchanged. Runs the plug-in
matrix's mushroom protocol (3,000 decisions, trials 0–4) and prints the normalised regret
(docs/plug_in.md, "Mushroom best ≤ 8").

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/mushroom_randomised_priors.py --beta 0.1

About 70–90 s per setting on one CPU thread.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from uncertain_agents.agents import ThompsonSampling, Uniform, run_bandit
from uncertain_agents.agents.experiment import make_env
from uncertain_agents.network import MLPSpec
from uncertain_agents.posteriors.point_estimates import Ensemble

STEPS = 3000
TRIALS = 5


class RandomisedPriorEnsemble(Ensemble):
    """``ensemble`` whose members act as ``g_m + β p_m`` with fixed prior networks ``p_m``."""

    name = "randomised-prior-ensemble"

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, beta: float = 1.0, **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self.member_spec = spec
        self.beta = beta
        self.spec = MLPSpec(spec.in_dim, spec.out_dim, hidden=tuple(2 * h for h in spec.hidden),
                            activation=spec.activation)
        gen = torch.Generator().manual_seed((self.seed or 0) + 7919)
        self.register_buffer("prior_eps", torch.randn(self.n_members, spec.num_params, generator=gen))

    def prior_members(self) -> torch.Tensor:
        """``[M, D]`` prior networks: standard normals times the (current) prior std."""
        return self.prior_eps * self.prior_std

    def member_loglik(self, batch):
        f = self.member_spec.forward(self.members, batch.x)
        with torch.no_grad():
            f_prior = self.member_spec.forward(self.prior_members(), batch.x)
        kw = {"log_noise_std": self.member_log_noise().unsqueeze(1)} if self.kind == "gaussian" else {}
        return self.likelihood.log_prob(f + self.beta * f_prior, batch.y, batch.mask, **kw)

    def combined(self) -> torch.Tensor:
        """``[M, D₂]`` weights of the doubled network computing ``g_m + β p_m``."""
        trained = self.member_spec.unflatten(self.members)
        prior = self.member_spec.unflatten(self.prior_members())
        m, last, layers = self.n_members, len(trained) - 1, []
        for i, ((wg, bg), (wp, bp)) in enumerate(zip(trained, prior)):
            if i == last:
                w, b = torch.cat([wg, self.beta * wp], dim=1), bg + self.beta * bp
            elif i == 0:
                w, b = torch.cat([wg, wp], dim=2), torch.cat([bg, bp], dim=1)
            else:
                top = torch.cat([wg, wg.new_zeros(m, wg.shape[1], wp.shape[2])], dim=2)
                bottom = torch.cat([wp.new_zeros(m, wp.shape[1], wg.shape[2]), wp], dim=2)
                w, b = torch.cat([top, bottom], dim=1), torch.cat([bg, bp], dim=1)
            layers.append((w, b))
        return self.spec.flatten(layers)

    def _sample_indexed(self, n: int, generator: torch.Generator):
        index = torch.randint(self.n_members, (n,), generator=generator, device=self.device)
        return self.combined(), (self.member_log_noise() if self.kind == "gaussian" else None), index


def normalised_regret(beta: float, members: int, trial: int) -> float:
    env = make_env("mushroom", steps=STEPS)
    spec = MLPSpec(int(env.observation_space.shape[0]), 2, hidden=(50,))
    post = RandomisedPriorEnsemble(spec, "gaussian", beta=beta, n_members=members, seed=trial)
    regret = run_bandit(env, ThompsonSampling(post, 2, seed=trial), steps=STEPS,
                        seed=trial)["cumulative_regret"].iloc[-1]
    uniform = run_bandit(make_env("mushroom", steps=STEPS), Uniform(2, seed=trial), steps=STEPS,
                         seed=trial)["cumulative_regret"].iloc[-1]
    return 100.0 * float(regret) / float(uniform)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beta", type=float, nargs="+", default=[0.03, 0.1, 0.3, 1.0])
    parser.add_argument("--members", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for beta in args.beta:
        start = time.perf_counter()
        values = np.array([normalised_regret(beta, args.members, t) for t in range(TRIALS)])
        print(f"beta={beta} members={args.members}: trials {np.round(values, 2).tolist()} -> "
              f"{values.mean():.2f} ± {values.std(ddof=1) / np.sqrt(TRIALS):.2f} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
