"""Boston housing, 20 standard splits: ``fsvgd`` against weight-space ``svgd``.

Protocol (Wang et al. 2019, §5.2; Hernández-Lobato & Adams 2015): one hidden layer of 50
ReLU units, 20 particles, batch 100, 500 epochs (``steps = epochs * ceil(N_train / 100)``),
the posteriors' user defaults otherwise. The test NLL is ``-Predictive.log_prob(y_test).mean()``
(original units) of the exact equal-weight mixture over the 20 particles
(``post.particle_predictive``), the RMSE that of its mean. The fit is continued in stages
so that the same run also reports the checkpoints in ``--checkpoints`` (the over-confidence
pitfall shows as an NLL that rises with the epochs).

    UNCERTAIN_AGENTS_DATA=/work/shared/data OMP_NUM_THREADS=1 \\
        python experiments/boston_fsvgd.py --out experiments/results/boston_fsvgd.csv

A method is ``name`` or ``name:key=value,...`` (values are Python literals), e.g.
``fsvgd:noise_holdout=0.0`` (the paper's noise step, no hold-out).
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import uncertain_agents as ua
from uncertain_agents.datasets.uci import UCIDataset
from uncertain_agents.options import parse_posterior_spec as parse_method
from uncertain_agents.runs import atomic_write_csv

DEFAULT_METHODS = ("fsvgd", "svgd", "fsvgd:noise_holdout=0.0", "svgd:noise_holdout=0.0")
PUBLISHED = {"fsvgd": (2.47, 2.61), "svgd": (2.50, 2.96)}  # Wang et al. 2019 (NLL, RMSE)


def run_split(method: str, data: UCIDataset, k: int, *, checkpoints: list[int], batch_size: int,
              n_particles: int, seed: int) -> list[dict]:
    name, opts = parse_method(method)
    split = data.split(k)
    n_train, in_dim = split.x_train.shape
    per_epoch = math.ceil(n_train / batch_size)
    post = ua.make_posterior(name, in_dim=in_dim, out_dim=1, hidden=(50,), seed=seed + k,
                             n_particles=n_particles, **opts)
    y = torch.as_tensor(split.y_test)
    rows, done, seconds = [], 0, 0.0
    for epoch in checkpoints:
        t0 = time.perf_counter()
        post.fit(split.x_train, split.y_train, steps=(epoch - done) * per_epoch, batch_size=batch_size)
        seconds += time.perf_counter() - t0
        done = epoch
        pred = post.particle_predictive(split.x_test)
        rows.append({"method": method, "split": k, "epoch": epoch,
                     "test_nll": float(-pred.log_prob(y).mean()),
                     "test_rmse": float((pred.mean - y).square().mean().sqrt()),
                     "mean_noise_std": float(pred.aleatoric_variance.sqrt().mean()),
                     "fit_seconds": seconds, "steps": epoch * per_epoch})
    return rows


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    g = df.groupby(["method", "epoch"], sort=False)
    n = g.size()
    out = pd.DataFrame({
        "splits": n,
        "nll_mean": g.test_nll.mean(), "nll_se": g.test_nll.std(ddof=1) / np.sqrt(n),
        "rmse_mean": g.test_rmse.mean(), "rmse_se": g.test_rmse.std(ddof=1) / np.sqrt(n),
        "noise_std_mean": g.mean_noise_std.mean(),
    })
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS))
    parser.add_argument("--splits", type=int, default=20, help="the first K standard splits")
    parser.add_argument("--epochs", type=int, default=500)
    parser.add_argument("--checkpoints", type=int, nargs="*", default=[50, 100, 200],
                        help="extra epochs (< --epochs) at which to evaluate")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--particles", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/boston_fsvgd.csv"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    checkpoints = sorted({c for c in args.checkpoints if 0 < c < args.epochs} | {args.epochs})
    data = UCIDataset("bostonHousing")
    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for method in args.methods:
        for k in range(min(args.splits, data.n_splits)):
            new = run_split(method, data, k, checkpoints=checkpoints, batch_size=args.batch_size,
                            n_particles=args.particles, seed=args.seed)
            rows += new
            last = new[-1]
            print(f"{method:28s} split {k:2d}  NLL {last['test_nll']:.3f}  RMSE {last['test_rmse']:.2f}  "
                  f"noise {last['mean_noise_std']:.2f}  ({last['fit_seconds']:.0f}s)", flush=True)
            atomic_write_csv(args.out, pd.DataFrame(rows))
    df = pd.DataFrame(rows)
    summary = summarise(df)
    atomic_write_csv(args.out.with_name(args.out.stem + "_summary.csv"), summary, index=True)
    with pd.option_context("display.width", 160, "display.precision", 3):
        print(summary)
    final = summary.xs(args.epochs, level="epoch")
    for method, (nll, rmse) in PUBLISHED.items():
        if method in final.index:
            print(f"{method}: NLL {final.loc[method, 'nll_mean']:.2f} ± {final.loc[method, 'nll_se']:.2f} "
                  f"(published {nll}), RMSE {final.loc[method, 'rmse_mean']:.2f} ± "
                  f"{final.loc[method, 'rmse_se']:.2f} (published {rmse})")


if __name__ == "__main__":
    main()
