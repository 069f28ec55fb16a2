"""Which of the authors' f-SVGD bandit settings matter: Thompson[fsvgd] under the ``fsvgd-paper``
protocol with parts of Wang et al.'s own settings (thu-ml/fpovi, ``dcb/``) switched on.

Settings (each through the public API: ``make_agent(..., posterior_options=..., lr=...)``):

* ``library`` — the preset before 2026-11-26: 20 particles, the bandit prior ``N(0, 1)``, He
  initialisation, function prior weight 1, 32 extra points, eigenvalue floor 1e-3, Adam 4e-3;
* ``lr`` — ``library`` with the authors' Adam learning rate 1e-3;
* ``prior`` — the authors' prior, initialisation, prior weight, extra points and floor, at 4e-3;
* ``authors`` — all of them (the preset now: ``uncertain_agents.agents.protocols``).

Each run prints its normalised regret (Uniform = 100, same trial) at a few points and appends a
JSON line to ``--out``.

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/fsvgd_bandit_settings.py \\
        --settings library,lr,prior,authors --envs wheel,mushroom --trials 0 --steps 3000 --workers 2

One run of 3,000 decisions takes 8–11 minutes on one core of this machine (its first 1,000
decisions hold 21,000 of its 25,000 training steps).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import as_completed
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import torch

from uncertain_agents.agents import make_agent, run_bandit
from uncertain_agents.agents.experiment import make_env
from uncertain_agents.datasets.mushroom import load_mushroom
from uncertain_agents.runs import append_record, record_run
from uncertain_agents.workers import spawn_pool

#: Posterior options that undo the authors' settings of the protocol (their values before 2026-11-26:
#: the agents' bandit prior N(0, 1), He initialisation, the method's defaults otherwise).
LIBRARY = {"prior_std": 1.0, "init_scale": None, "prior_scale": 1.0, "n_extra": None, "prior_eig_floor": None}
#: setting -> (posterior options over the protocol's, learning rate); ``None``: the protocol's (1e-3)
SETTINGS: dict[str, tuple[dict, float | None]] = {
    "library": (LIBRARY, 4e-3),
    "lr": (LIBRARY, None),
    "prior": ({}, 4e-3),
    "authors": ({}, None),
}
MARKS = (500, 1000, 2000, 3000, 5000, 10000)


def run(setting: str, env_name: str, trial: int, steps: int) -> dict:
    """One trial of Thompson[fsvgd] under ``fsvgd-paper`` with ``setting``, and Uniform on the same rounds."""
    torch.set_num_threads(1)
    options, lr = SETTINGS[setting]
    data = load_mushroom() if env_name == "mushroom" else None
    env = make_env(env_name, steps=steps, delta=0.95, mushroom_data=data)
    dims = dict(n_actions=int(env.action_space.n), context_dim=env.observation_space.shape[0])
    agent = make_agent("thompson", posterior="fsvgd", posterior_options=options, protocol="fsvgd-paper",
                       seed=trial, lr=lr, **dims)
    t0 = time.perf_counter()
    frame = run_bandit(env, agent, steps=steps, seed=trial)
    seconds = time.perf_counter() - t0
    uniform = run_bandit(make_env(env_name, steps=steps, delta=0.95, mushroom_data=data),
                         make_agent("uniform", seed=trial, **dims), steps=steps, seed=trial)
    cr, cu = frame["cumulative_regret"].to_numpy(), uniform["cumulative_regret"].to_numpy()
    marks = [m for m in MARKS if m <= steps] + ([steps] if steps not in MARKS else [])
    return {"setting": setting, "env": env_name, "trial": trial, "steps": steps, "seconds": round(seconds, 1),
            "normalised": {m: round(float(100 * cr[m - 1] / cu[m - 1]), 2) for m in marks}}


def _run_job(job: tuple[str, str, int, int]) -> dict:
    return run(*job)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", default="library,lr,prior,authors")
    p.add_argument("--envs", default="wheel,mushroom")
    p.add_argument("--trials", default="0", help="comma-separated trial indices (seeds)")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("experiments/results/fsvgd_bandit_settings"))
    args = p.parse_args(argv)
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        p.error(f"unknown --settings {unknown}; choose from {list(SETTINGS)}")
    if args.steps <= 0 or args.workers <= 0:
        p.error("--steps and --workers must be positive")
    jobs = [(s, e.strip(), int(t), args.steps) for s in settings for e in args.envs.split(",")
            for t in args.trials.split(",")]
    record_run(args.out, sys.argv if argv is None else ["fsvgd_bandit_settings.py", *argv])
    lines = args.out / "runs.jsonl"
    with spawn_pool(args.workers) as pool:  # spawned workers that stop if this script is killed
        finished = (f.result() for f in as_completed([pool.submit(_run_job, job) for job in jobs])) \
            if args.workers > 1 else map(_run_job, jobs)
        for result in finished:  # each run is written as soon as it ends
            print(json.dumps(result), flush=True)
            append_record(lines, result)  # one complete line per finished run
    return 0


if __name__ == "__main__":
    sys.exit(main())
