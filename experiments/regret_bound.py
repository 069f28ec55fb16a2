"""How low can a shorter bandit table's agents still end at the papers' horizon?

Cumulative regret never decreases, so an agent's normalised regret at a longer horizon ``H``
is at least ``100 × R(T) / U(H)``: its cumulative regret after the ``T`` decisions it was run
for, over Uniform's cumulative regret after ``H`` decisions of the same trial (the same
environment seed; Uniform is played here, which takes a second or two per trial). Comparing
that floor with a published figure at ``H`` says, from a run of ``T`` decisions, whether the
figure is still reachable: a floor above it means the agent has already spent more regret
than the published agent spends in the whole run.

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/regret_bound.py \\
        --results experiments/results/bandit_protocol_fsvgd_paper_10k --horizon 50000

prints, per environment and label, the normalised regret at ``T`` (as the table reports it)
and the floor at ``H`` (mean ± s.e. over trials), beside the published figure where there is
one (Wang et al. 2019, Table 3; ``experiments/bandit_table.py``'s ``PUBLISHED``).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import numpy as np
import pandas as pd

from uncertain_agents.agents import make_agent, run_bandit
from uncertain_agents.agents.experiment import make_env
from uncertain_agents.datasets.mushroom import load_mushroom

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bandit_table import PUBLISHED  # noqa: E402  (the same published figures as the table)


def uniform_regret(env_name: str, seed: int, horizon: int, delta: float, mushroom_data=None) -> float:
    """Uniform's cumulative regret after ``horizon`` decisions of trial ``seed`` (as the table plays it)."""
    env = make_env(env_name, steps=horizon, delta=delta, mushroom_data=mushroom_data)
    agent = make_agent("uniform", n_actions=int(env.action_space.n), context_dim=env.observation_space.shape[0],
                       seed=seed)
    return float(run_bandit(env, agent, steps=horizon, seed=seed)["cumulative_regret"].iloc[-1])


def floors(runs: pd.DataFrame, horizon: int) -> pd.DataFrame:
    """One row per run of ``runs`` (a ``bandit_runs.csv``): its normalised regret at its own
    horizon and the floor of its normalised regret at ``horizon``."""
    data = load_mushroom() if (runs["env"] == "mushroom").any() else None
    rows = []
    for (env_name, seed, delta), group in runs.groupby(["env", "seed", "delta"], sort=False, dropna=False):
        uniform_now = group.loc[group["label"] == "uniform", "cumulative_regret"]
        if uniform_now.empty:
            continue
        u_long = uniform_regret(env_name, int(seed), horizon, float(delta), data if env_name == "mushroom" else None)
        for _, run in group.iterrows():
            rows.append({"env": env_name, "label": run["label"], "trial": int(run["trial"]), "steps": int(run["steps"]),
                         "normalised": 100 * run["cumulative_regret"] / float(uniform_now.iloc[0]),
                         "floor": 100 * run["cumulative_regret"] / u_long})
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame, horizon: int) -> str:
    """Markdown: mean ± s.e. of the normalised regret and of its floor at ``horizon`` per label."""
    lines = []
    for env_name, g in table.groupby("env", sort=False):
        steps = int(g["steps"].iloc[0])
        lines += [f"\n{env_name}: normalised regret at {steps:,} decisions and its floor at {horizon:,}\n",
                  f"| agent | trials | at {steps:,} | floor at {horizon:,} | published at 50,000 |", "|---|---|---|---|---|"]
        for label, h in g.groupby("label", sort=False):
            n = len(h)
            se = (lambda v: v.std(ddof=1) / np.sqrt(n)) if n > 1 else (lambda v: float("nan"))
            lines.append(f"| {label} | {n} | {h['normalised'].mean():.2f} ± {se(h['normalised']):.2f} "
                         f"| {h['floor'].mean():.2f} ± {se(h['floor']):.2f} | {PUBLISHED.get((env_name, label), '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, required=True, help="a bandit_table.py results folder")
    p.add_argument("--horizon", type=int, default=50_000, help="the longer horizon H (default 50,000)")
    p.add_argument("--labels", default="", help="comma-separated labels to keep (default all)")
    args = p.parse_args(argv)
    if args.horizon <= 0:
        p.error(f"--horizon must be positive, got {args.horizon}")
    runs = pd.read_csv(args.results / "bandit_runs.csv")
    if args.labels:
        keep = {s.strip() for s in args.labels.split(",")} | {"uniform"}
        runs = runs[runs["label"].isin(keep)]
    if (runs["steps"] > args.horizon).any():
        p.error(f"--horizon {args.horizon} is shorter than the runs ({int(runs['steps'].max())} decisions)")
    print(summary(floors(runs, args.horizon), args.horizon))
    return 0


if __name__ == "__main__":
    sys.exit(main())
