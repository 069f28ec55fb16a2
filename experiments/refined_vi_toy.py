"""Refined VI on one weight with a four-mode posterior (in the spirit of the paper's Figure 3).

    OMP_NUM_THREADS=1 python experiments/refined_vi_toy.py --out experiments/results/refined_vi_toy.png

The model: one weight ``w ~ N(0, 1)`` and ``n = 5`` observations ``y = 0`` of
``g(w) = (w² − 0.25)(w² − 1.5)`` with Gaussian noise 0.5, so the posterior has four modes
(``w = ±0.5, ±1.22``). The paper's data are not given; this is a stand-in of the same shape,
so its ELBO values are not the paper's (−1.79 for VI, ≥ −1.45 refined).

Every expectation over a Gaussian is computed by Gauss–Hermite quadrature (exact to plotting
precision), so the numbers carry no Monte-Carlo error except the draws of ``a_1``:

1. Gaussian VI: maximise ``ELBO = E_q[log p(y | w)] − KL(q ‖ p)`` over ``q = N(μ, s²)``.
2. One refinement step with ``w = a_1 + a_2``, ``p(a_1) = N(0, 0.8)``, ``p(a_2) = N(0, 0.2)``
   (``variance_ratios=(0.8,)``): ``M`` chains draw ``a_1 ~ q(a_1)`` and start from
   ``q(w | a_1)`` (the library's closed forms, :mod:`uncertain_agents.posteriors.refinement`),
   maximise ``E_q[log p(y | w)] − KL(q ‖ N(a_1, 0.2))`` with Adam, and keep the better of the
   start and the optimum. ``ELBO_aux`` is the mean over chains of
   ``L(a_1) − log q(a_1)/p(a_1)``; the refined mixture's own ELBO is computed on a grid.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

from uncertain_agents.posteriors.refinement import (RefinementSchedule, auxiliary_marginal,
                                                    conditional_posterior, gaussian_kl)
from uncertain_agents.runs import atomic_save_figure, atomic_write_text

N_OBS, NOISE_STD = 5, 0.5
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(80)  # ∫ f(x) N(x; 0, 1) dx ≈ Σ w_i f(x_i) / √(2π)
NODES = torch.tensor(NODES, dtype=torch.float64)
WEIGHTS = torch.tensor(WEIGHTS / math.sqrt(2 * math.pi), dtype=torch.float64)


def log_likelihood(w: torch.Tensor) -> torch.Tensor:
    """``log p(y | w)`` of the five zero observations of ``g(w)``."""
    g = (w.square() - 0.25) * (w.square() - 1.5)
    return N_OBS * (-0.5 * (g / NOISE_STD) ** 2 - math.log(NOISE_STD) - 0.5 * math.log(2 * math.pi))


def expected_log_likelihood(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``E_{N(mean, std²)}[log p(y | w)]`` by quadrature, elementwise in ``mean, std``."""
    w = mean.unsqueeze(-1) + std.unsqueeze(-1) * NODES
    return (log_likelihood(w) * WEIGHTS).sum(-1)


def elbo(mean, log_std, prior_mean, prior_var):
    return expected_log_likelihood(mean, log_std.exp()) - gaussian_kl(mean, torch.exp(2 * log_std),
                                                                      prior_mean, prior_var)


def maximise(mean, log_std, prior_mean, prior_var, steps: int, lr: float):
    """Adam on ``elbo`` for every entry of ``mean, log_std`` at once (they are independent)."""
    mean, log_std = mean.clone().requires_grad_(True), log_std.clone().requires_grad_(True)
    opt = torch.optim.Adam([mean, log_std], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        (-elbo(mean, log_std, prior_mean, prior_var).sum()).backward()
        opt.step()
    return mean.detach(), log_std.detach()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=2000, help="M, refinement chains (mixture members)")
    parser.add_argument("--steps", type=int, default=500, help="Adam steps of the refinement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/refined_vi_toy.png"))
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    one, prior_var = torch.ones((), dtype=torch.float64), torch.tensor(1.0, dtype=torch.float64)

    # 1. Gaussian VI, from a few starts (the ELBO is multimodal in μ)
    starts = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64)
    means, log_stds = maximise(starts, torch.full_like(starts, -1.0), 0 * one, prior_var, 3000, 1e-2)
    values = elbo(means, log_stds, 0 * one, prior_var)
    best = int(values.argmax())
    vi_mean, vi_log_std, vi_elbo = means[best], log_stds[best], float(values[best])

    # 2. one refinement step, M chains as one batch
    schedule = RefinementSchedule((0.8,))
    var_a, r_next = prior_var * schedule.ratios[0], prior_var * schedule.remaining()[1]
    M = args.chains
    mean0, var0 = vi_mean.expand(M), torch.exp(2 * vi_log_std).expand(M)
    qa_mean, qa_var = auxiliary_marginal(mean0, var0, torch.zeros(M, dtype=torch.float64), prior_var, var_a)
    a1 = qa_mean + qa_var.sqrt() * torch.randn(M, dtype=torch.float64)
    init_mean, init_var = conditional_posterior(mean0, var0, a1, torch.zeros(M, dtype=torch.float64),
                                                prior_var, var_a)
    init_log_std = 0.5 * init_var.log()
    opt_mean, opt_log_std = maximise(init_mean, init_log_std, a1, r_next, args.steps,
                                     schedule.learning_rate(1, 1e-2))
    before, after = elbo(init_mean, init_log_std, a1, r_next), elbo(opt_mean, opt_log_std, a1, r_next)
    keep_opt = after >= before
    ref_mean = torch.where(keep_opt, opt_mean, init_mean)
    ref_std = torch.where(keep_opt, opt_log_std, init_log_std).exp()
    log_ratio = (torch.distributions.Normal(qa_mean, qa_var.sqrt()).log_prob(a1)
                 - torch.distributions.Normal(0.0, var_a.sqrt()).log_prob(a1))
    path = torch.maximum(before, after) - log_ratio
    elbo_aux, elbo_aux_se = float(path.mean()), float(path.std() / math.sqrt(M))
    elbo_aux_cv = vi_elbo + float((torch.maximum(before, after) - before).mean())

    # exact quantities on a grid
    grid = torch.linspace(-3.0, 3.0, 6001, dtype=torch.float64)
    dx = float(grid[1] - grid[0])
    log_joint = log_likelihood(grid) + torch.distributions.Normal(0.0, 1.0).log_prob(grid)
    log_evidence = float(torch.logsumexp(log_joint, 0) + math.log(dx))
    posterior = torch.exp(log_joint - log_evidence)
    vi_density = torch.distributions.Normal(vi_mean, vi_log_std.exp()).log_prob(grid).exp()
    components = torch.distributions.Normal(ref_mean.unsqueeze(1), ref_std.unsqueeze(1)).log_prob(grid)
    refined_density = components.exp().mean(0)
    safe = refined_density > 0
    elbo_ref = float(((log_joint - refined_density.log()) * refined_density)[safe].sum() * dx)

    figures = {"log_evidence": log_evidence, "elbo_vi": vi_elbo, "elbo_aux": elbo_aux,
               "elbo_aux_se": elbo_aux_se, "elbo_aux_staircase": elbo_aux_cv, "elbo_refined_mixture": elbo_ref,
               "chains": M, "kept_optimised": float(keep_opt.double().mean()),
               "paper": {"elbo_vi": -1.79, "elbo_aux_lower_bound": -1.45, "note": "different (unpublished) data"}}
    print(json.dumps(figures, indent=2))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.fill_between(grid, posterior, color="0.85", label=f"exact posterior (log p(y) = {log_evidence:.2f})")
    ax.plot(grid, vi_density, color="tab:blue", label=f"Gaussian VI (ELBO = {vi_elbo:.2f})")
    ax.plot(grid, refined_density, color="tab:red",
            label=f"refined VI, {M} chains (ELBO_aux = {elbo_aux:.2f} ± {elbo_aux_se:.2f}; "
                  f"mixture ELBO = {elbo_ref:.2f})")
    ax.set_xlabel("w")
    ax.set_ylabel("density")
    ax.set_title("One weight, four modes: w = a1 + a2, p(a1) = N(0, 0.8), p(a2) = N(0, 0.2)")
    ax.legend(fontsize=8, loc="upper right")
    ax.set_xlim(-2.5, 2.5)
    ax.set_ylim(0, 1.3 * float(posterior.max()))
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_save_figure(args.out, fig, dpi=120)
    atomic_write_text(args.out.with_suffix(".json"), json.dumps(figures, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
