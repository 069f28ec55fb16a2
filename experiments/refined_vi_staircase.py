"""The refined-VI "staircase" on Boston: the auxiliary bound of every member after each
refinement step (paper, Figure 2), as a PNG.

    UNCERTAIN_AGENTS_DATA=../shared/data OMP_NUM_THREADS=1 python experiments/refined_vi_staircase.py \\
        --out experiments/results/refined_vi_staircase.png

One split (default 0), 1 × 50 ReLU, batch 32, 500 epochs of VI, then the default refinement
(M = 10, K = 4 × 200 steps). The bound is per data point; step 0 is ELBO_init. Lines: each
member's staircase (ELBO_init plus its kept gains); dots: the mean of the paper's single-path
estimate ``L_k − Σ log q(a_j)/p(a_j)``, which has the same expectation.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

import uncertain_agents as ua
from uncertain_agents.datasets.uci import UCIDataset
from uncertain_agents.runs import atomic_save_figure


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/refined_vi_staircase.png"))
    args = parser.parse_args(argv)
    split = UCIDataset("bostonHousing").split(args.split)
    n_train, in_dim = split.x_train.shape
    post = ua.make_posterior("refined-vi", in_dim=in_dim, out_dim=1, hidden=(50,), seed=args.split)
    result = post.fit(split.x_train, split.y_train, steps=args.epochs * math.ceil(n_train / 32), batch_size=32)
    staircase = result.diagnostics["elbo_aux"]  # [M, K + 1]

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    steps = range(staircase.shape[1])
    for m, row in enumerate(staircase):
        ax.step(steps, row, where="post", lw=1, alpha=0.7, label="members" if m == 0 else None)
    ax.step(steps, staircase.mean(0), where="post", lw=2.5, c="k", label="mean over members")
    path = result.diagnostics["elbo_aux_path"]  # the paper's single-path estimate, per member
    se = path.std(0, ddof=1) / math.sqrt(len(path))
    ax.errorbar(list(steps), path.mean(0), yerr=se, fmt="o", c="tab:red", ms=4, capsize=3,
                label="single-path estimate, mean ± s.e.")
    ax.axhline(float(result.diagnostics["elbo_init"]), ls="--", c="grey", label="ELBO_init (VI)")
    ax.set_xlabel("refinement step k")
    ax.set_ylabel("ELBO_aux per data point (nats)")
    ax.set_title(f"refined VI on Boston, split {args.split}: the bound after each step")
    ax.legend()
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_save_figure(args.out, fig, dpi=110)
    print("ELBO_init", float(result.diagnostics["elbo_init"]), "mean staircase", staircase.mean(0).round(4),
          "single-path mean", path.mean(0).round(4), "members ending above ELBO_init:", int((staircase[:, -1] > staircase[:, 0]).sum()), "of", len(staircase))
    print("plot:", args.out)


if __name__ == "__main__":
    main()
