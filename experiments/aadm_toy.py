"""AADM's toy problems (Rodríguez Santana & Hernández-Lobato, Table 1): α ≈ 0 against α = 1.

Data (PROTOCOLS.md §1.1), N = 1,000 training and 1,000 test points per seed:

* bimodal: x ~ U[−2, 2], y = 10 sin x + ε or 10 cos x + ε with probability ½ each, ε ~ N(0, 1);
* heteroscedastic: x ~ U[−4, 4], y = 7 sin x + 3|cos(x/2)| ε.

Model: ``aadm`` on the paper's main network (2 × 50, leaky ReLU), K = 10, its library
defaults otherwise. Schedule: the paper trains 3,000 epochs at batch 10 (300,000 steps)
with a 500-epoch warm-up; here ``--steps`` (default 20,000) at batch 32 with the warm-up
over the first ``--warmup`` (default 1/6, as 500 of 3,000 epochs) of them — about 3 min a
fit on one CPU thread. Reports test NLL (per point, original units, 100 functions) and the
RMSE of the predictive mean, mean ± s.e. over seeds, beside the published values, and
draws the predictive (density and sample functions) of α ≈ 0 and α = 1.

    OMP_NUM_THREADS=1 python experiments/aadm_toy.py --out experiments/results/aadm_toy

Each finished (problem, α, seed) is a row of ``<out>/runs.csv`` (rewritten atomically; a
rerun skips it) and its trained posterior is saved for the plots.
"""
from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import uncertain_agents as ua
from uncertain_agents.runs import atomic_save_figure, atomic_write_csv, atomic_write_text, record_run
from uncertain_agents.toys import TOYS, toy_split

PUBLISHED = {  # Table 1: (test NLL, test RMSE); the printed "log-likelihood" is the NLL
    ("bimodal", 1e-4): (3.05, 5.10), ("bimodal", 1.0): (2.17, 5.18),
    ("heteroscedastic", 1e-4): (2.08, 1.91), ("heteroscedastic", 1.0): (1.91, 1.94),
}
PROBLEMS = TOYS


def data_for(problem: str, seed: int):
    return toy_split(problem, seed)


def run(problem: str, alpha: float, seed: int, args) -> tuple[dict, ua.Posterior]:
    (x, y), (xt, yt) = data_for(problem, seed)
    post = ua.make_posterior("aadm", in_dim=1, out_dim=1, hidden=(50, 50), activation="leaky_relu",
                             seed=seed, alpha=alpha, warmup=args.warmup)
    t0 = time.perf_counter()
    post.fit(x, y, steps=args.steps, batch_size=args.batch_size)
    seconds = time.perf_counter() - t0
    pred = post.predict(xt, n_samples=100, generator=torch.Generator().manual_seed(seed))
    return {"problem": problem, "alpha": alpha, "seed": seed, "test_nll": float(-pred.log_prob(yt).mean()),
            "test_rmse": float((pred.mean - yt).square().mean().sqrt()), "fit_seconds": seconds,
            "steps": args.steps}, post


def table(df: pd.DataFrame) -> str:
    lines = ["| problem | α | seeds | test NLL (ours) | published | test RMSE (ours) | published |",
             "|---|---|---|---|---|---|---|"]
    for (problem, alpha), g in df.groupby(["problem", "alpha"]):
        n = len(g)
        se = (lambda c: g[c].std(ddof=1) / math.sqrt(n) if n > 1 else float("nan"))
        pub = PUBLISHED.get((problem, alpha), (float("nan"),) * 2)
        fmt = (lambda v: "—" if math.isnan(v) else f"{v:.2f}")
        lines.append(f"| {problem} | {alpha:g} | {n} | {g.test_nll.mean():.2f} ± {se('test_nll'):.2f} | "
                     f"{fmt(pub[0])} | {g.test_rmse.mean():.2f} ± {se('test_rmse'):.2f} | {fmt(pub[1])} |")
    return "\n".join(lines) + "\n"


def plot(out: Path, seed: int, alphas=(1e-4, 1.0)) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(PROBLEMS), len(alphas), figsize=(5 * len(alphas), 3.6 * len(PROBLEMS)),
                             squeeze=False)
    for i, problem in enumerate(PROBLEMS):
        (x, y), _ = data_for(problem, seed)
        lo, hi = float(x.min()), float(x.max())
        grid = torch.linspace(lo - 0.5, hi + 0.5, 200).unsqueeze(1)
        ys = torch.linspace(float(y.min()) - 4, float(y.max()) + 4, 200)
        for j, alpha in enumerate(alphas):
            ax = axes[i][j]
            path = out / "posteriors" / f"{problem}_alpha{alpha:g}_seed{seed}.pt"
            if not path.exists():
                ax.set_title(f"{problem}, α = {alpha:g}: not run")
                continue
            post = ua.load_posterior(path)
            fs = post.sample(200, generator=torch.Generator().manual_seed(0))
            f = fs(grid)[..., 0]  # [S, G]
            sd = fs.noise_std[:, 0].unsqueeze(1)  # [S, 1]
            z = (ys.view(-1, 1, 1) - f.unsqueeze(0)) / sd.unsqueeze(0)  # [Y, S, G]
            dens = (torch.exp(-0.5 * z.square()) / (sd.unsqueeze(0) * math.sqrt(2 * math.pi))).mean(1)
            ax.imshow(dens.numpy(), origin="lower", aspect="auto", cmap="Blues",
                      extent=(float(grid[0]), float(grid[-1]), float(ys[0]), float(ys[-1])))
            ax.scatter(x[:, 0], y[:, 0], s=2, c="k", alpha=0.3)
            for k in range(8):
                ax.plot(grid[:, 0], f[k], lw=0.8, c="tab:red", alpha=0.7)
            ax.set_title(f"{problem}, α = {alpha:g} (seed {seed})")
    fig.suptitle("AADM predictive density (blue), 8 sample functions (red), training data (black)")
    fig.tight_layout()
    path = out / "predictive.png"
    atomic_save_figure(path, fig, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    parser.add_argument("--alphas", type=float, nargs="+", default=[1e-4, 0.5, 1.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=1 / 6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/aadm_toy"))
    args = parser.parse_args(argv)
    record_run(args.out)  # appends commit, command line and versions to {out}/manifest.json
    torch.set_num_threads(args.threads)
    (args.out / "posteriors").mkdir(parents=True, exist_ok=True)
    path = args.out / "runs.csv"
    rows = pd.read_csv(path).to_dict("records") if path.exists() else []
    have = {(r["problem"], float(r["alpha"]), int(r["seed"])) for r in rows}
    for seed in args.seeds:
        for problem in args.problems:
            for alpha in args.alphas:
                if (problem, alpha, seed) in have:
                    continue
                row, post = run(problem, alpha, seed, args)
                post.save(args.out / "posteriors" / f"{problem}_alpha{alpha:g}_seed{seed}.pt")
                rows.append(row)
                tmp = path.with_suffix(".csv.tmp")
                atomic_write_csv(tmp, pd.DataFrame(rows))
                os.replace(tmp, path)
                print(f"{problem:16s} α={alpha:<6g} seed {seed}  nll {row['test_nll']:.3f}  "
                      f"rmse {row['test_rmse']:.3f}  ({row['fit_seconds']:.0f}s)", flush=True)
    text = table(pd.DataFrame(rows))
    atomic_write_text(args.out / "table.md", text)
    print(text)
    print("plot:", plot(args.out, args.seeds[0]))


if __name__ == "__main__":
    main()
