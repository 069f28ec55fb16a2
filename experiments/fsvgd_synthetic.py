"""The synthetic 1-D problem of Wang et al. (2019), Figure 1: f-SVGD against weight-space SVGD.

Data: 12 inputs from U(0, 0.6) and 8 from U(0.8, 1); ``y = x + ε + sin(4(x+ε)) + sin(13(x+ε))``
with ε ~ N(0, 0.0009). Network: 2×50 ReLU; 50 particles; full batch; 5000 steps at lr 1e-3;
the noise fixed at 0.2 standard deviations of y (as the authors' script fixes it in
standardised units); 400 prior draws for the moment-matched function prior.

Writes a PNG of both methods' predictive bands (mean ± 2 epistemic std and ± 2 total std)
and a CSV with the mean epistemic standard deviation in the gap (0.6, 0.8) and beyond the
data (1.0, 1.2), one row per (method, seed).

    OMP_NUM_THREADS=1 python experiments/fsvgd_synthetic.py --out experiments/results/fsvgd_synthetic
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import uncertain_agents as ua
from uncertain_agents.runs import atomic_save_figure, atomic_write_csv, record_run

LR = 1e-3
REGIONS = {"gap (0.6, 0.8)": (0.6, 0.8), "beyond (1.0, 1.2)": (1.0, 1.2)}


def make_data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([0.6 * torch.rand(12, generator=g), 0.8 + 0.2 * torch.rand(8, generator=g)])
    xe = x + 0.03 * torch.randn(20, generator=g)
    y = xe + torch.sin(4 * xe) + torch.sin(13 * xe)
    return x.unsqueeze(1), y.unsqueeze(1)


def fit(method: str, x, y, seed: int, steps: int, particles: int):
    opts = {"prior_draws": 400} if method == "fsvgd" else {}
    post = ua.make_posterior(method, in_dim=1, out_dim=1, hidden=(50, 50), seed=seed, n_particles=particles,
                             noise_std=0.2 * float(y.std()), **opts)
    t0 = time.perf_counter()
    post.fit(x, y, steps=steps, batch_size=x.shape[0], lr=LR)
    return post, time.perf_counter() - t0


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--particles", type=int, default=50)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/fsvgd_synthetic"))
    args = parser.parse_args(argv)
    record_run(args.out)  # appends commit, command line and versions to {out}/manifest.json
    torch.set_num_threads(args.threads)
    global LR
    LR = args.lr
    args.out.mkdir(parents=True, exist_ok=True)
    grid = torch.linspace(-0.2, 1.2, 281).unsqueeze(1)
    rows, bands = [], {}
    for seed in args.seeds:
        x, y = make_data(seed)
        for method in ("fsvgd", "svgd"):
            post, seconds = fit(method, x, y, seed, args.steps, args.particles)
            pred = post.particle_predictive(grid)
            epi = pred.epistemic_variance.sqrt()[:, 0]
            row = {"method": method, "seed": seed, "fit_seconds": seconds}
            for label, (lo, hi) in REGIONS.items():
                inside = (grid[:, 0] > lo) & (grid[:, 0] < hi)
                row[f"epistemic_std {label}"] = float(epi[inside].mean())
            inside_data = ((grid[:, 0] > 0) & (grid[:, 0] < 0.6)) | ((grid[:, 0] > 0.8) & (grid[:, 0] < 1.0))
            row["epistemic_std data (0,0.6)+(0.8,1)"] = float(epi[inside_data].mean())
            rows.append(row)
            print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
            if seed == args.seeds[0]:
                bands[method] = (x, y, pred)
    df = pd.DataFrame(rows)
    atomic_write_csv(args.out / "epistemic_std.csv", df)
    summary = df.drop(columns=["seed"]).groupby("method").agg(["mean", "std"])
    atomic_write_csv(args.out / "epistemic_std_summary.csv", summary, index=True)
    with pd.option_context("display.width", 200, "display.precision", 4):
        print(summary)
    plot(bands, grid, args.out / "fsvgd_vs_svgd.png")


def plot(bands: dict, grid: torch.Tensor, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    g = grid[:, 0].numpy()
    truth = g + np.sin(4 * g) + np.sin(13 * g)
    titles = {"fsvgd": "f-SVGD (function space)", "svgd": "SVGD (weight space)"}
    for ax, method in zip(axes, ("fsvgd", "svgd")):
        x, y, pred = bands[method]
        mean = pred.mean[:, 0].numpy()
        epi = pred.epistemic_variance.sqrt()[:, 0].numpy()
        tot = pred.stddev[:, 0].numpy()
        ax.fill_between(g, mean - 2 * tot, mean + 2 * tot, color="tab:blue", alpha=0.15, label="±2 total std")
        ax.fill_between(g, mean - 2 * epi, mean + 2 * epi, color="tab:blue", alpha=0.35, label="±2 epistemic std")
        for f in pred.samples[:10, :, 0].numpy():
            ax.plot(g, f, color="tab:blue", lw=0.5, alpha=0.5)
        ax.plot(g, mean, color="navy", lw=1.5, label="predictive mean")
        ax.plot(g, truth, "k--", lw=1, label="noise-free function")
        ax.scatter(x[:, 0].numpy(), y[:, 0].numpy(), color="crimson", s=14, zorder=5, label="data")
        for lo, hi in REGIONS.values():
            ax.axvspan(lo, hi, color="grey", alpha=0.08)
        ax.set_title(titles[method])
        ax.set_xlabel("x")
        ax.set_ylim(-3, 4)
    axes[0].set_ylabel("y")
    axes[0].legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    atomic_save_figure(path, fig, dpi=130)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
