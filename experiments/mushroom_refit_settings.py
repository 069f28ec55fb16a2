"""Thompson sampling on the mushroom bandit under other refit settings than the agent's defaults.

Each setting is one ``(posterior options, agent options)`` pair; every setting runs the
plug-in matrix's mushroom protocol (3,000 decisions, trials 0–4 unless ``--first-trial``/``--trials`` say otherwise: environment seed t,
posterior seed t, agent seed t) and prints the per-trial normalised regret
(100 × regret / Uniform's on the same rounds) with its mean ± s.e. The ``default`` setting
reproduces the plug-in matrix's cell exactly (docs/plug_in.md).

    UNCERTAIN_AGENTS_DATA=../shared/data OMP_NUM_THREADS=1 \\
        python experiments/mushroom_refit_settings.py --posterior mfvi --settings default,batch128

About 20–70 s per setting and trial on one CPU thread.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import uncertain_agents as ua
from uncertain_agents.agents import ThompsonSampling, Uniform, run_bandit
from uncertain_agents.agents.experiment import make_env
from uncertain_agents.agents.schedule import LinearDecay

STEPS = 3000
TRIALS = 5

#: name -> (options for make_posterior, options for ThompsonSampling)
SETTINGS: dict[str, tuple[dict, dict]] = {
    "default": ({}, {}),
    "steps50": ({}, {"train_steps": 50}),
    "steps200": ({}, {"train_steps": 200}),
    "decay1000": ({}, {"train_steps": LinearDecay(1000, 100, 20)}),
    "batch64": ({}, {"batch_size": 64}),
    "batch128": ({}, {"batch_size": 128}),
    "batch128_steps50": ({}, {"batch_size": 128, "train_steps": 50}),
    "lr5e-4": ({}, {"lr": 5e-4}),
    "hidden100": ({"hidden": (100,)}, {}),
    "hidden50x2": ({"hidden": (50, 50)}, {}),
    "hidden20": ({"hidden": (20,)}, {}),
    "hidden10": ({"hidden": (10,)}, {}),
    "tanh": ({"activation": "tanh"}, {}),
    "gelu": ({"activation": "gelu"}, {}),
    "reward_scale5": ({}, {"reward_scale": 5.0}),
    "reward_scale15": ({}, {"reward_scale": 15.0}),
    "reward_scale0.5": ({}, {"reward_scale": 0.5}),
    "learn_prior": ({"learn_prior": True}, {}),
    "init_std0.01": ({"init_std": 0.01}, {}),
    "init_std0.03": ({"init_std": 0.03}, {}),
    "init_std0.05": ({"init_std": 0.05}, {}),
    "init_std0.3": ({"init_std": 0.3}, {}),
    "init_std0.5": ({"init_std": 0.5}, {}),
    "init_std1": ({"init_std": 1.0}, {}),
    "initial_pulls5": ({}, {"initial_pulls": 5}),
    "initial_pulls10": ({}, {"initial_pulls": 10}),
    "init_noise0.1": ({"init_noise_std": 0.1}, {}),
    "init_noise0.25": ({"init_noise_std": 0.25}, {}),
    "every25_steps50": ({}, {"train_every": 25, "train_steps": 50}),
    # bootstrap as Riquelme et al.'s BootRMS (the fsvgd-paper preset's, docs/bandits.md) on the
    # default protocol's network and members; "riquelme20" with their 20 replicas
    "riquelme": ({"scheme": "bernoulli", "inclusion": 0.95, "init_uniform": 0.3, "use_prior": False,
                  "objective": "squared-error", "clip_norm": 5.0, "optimizer": "rmsprop", "lr_decay": 0.5,
                  "noise_std": 0.1}, {"lr": 0.1}),
    "riquelme20": ({"n_members": 20, "scheme": "bernoulli", "inclusion": 0.95, "init_uniform": 0.3,
                    "use_prior": False, "objective": "squared-error", "clip_norm": 5.0, "optimizer": "rmsprop",
                    "lr_decay": 0.5, "noise_std": 0.1}, {"lr": 0.1}),
}


def normalised_regret(posterior: str, post_options: dict, agent_options: dict, trial: int) -> float:
    env = make_env("mushroom", steps=STEPS)
    post = ua.make_posterior(posterior, in_dim=int(env.observation_space.shape[0]), out_dim=2, seed=trial,
                             **post_options)
    agent = ThompsonSampling(post, 2, seed=trial, **agent_options)
    regret = run_bandit(env, agent, steps=STEPS, seed=trial)["cumulative_regret"].iloc[-1]
    uniform = run_bandit(make_env("mushroom", steps=STEPS), Uniform(2, seed=trial), steps=STEPS,
                         seed=trial)["cumulative_regret"].iloc[-1]
    return 100.0 * float(regret) / float(uniform)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--posterior", default="mfvi")
    parser.add_argument("--settings", default="default", help=f"comma-separated, of: {', '.join(SETTINGS)}")
    parser.add_argument("--first-trial", type=int, default=0,
                        help="first trial index (default 0: the plug-in matrix's trials; 5 and up are held out)")
    parser.add_argument("--trials", type=int, default=TRIALS, help=f"number of trials (default {TRIALS})")
    args = parser.parse_args()
    trials = range(args.first_trial, args.first_trial + args.trials)
    torch.set_num_threads(1)
    unknown = [name for name in args.settings.split(",") if name not in SETTINGS]
    if unknown:  # all names checked before the first setting runs
        raise SystemExit(f"unknown setting(s) {unknown}; choose from {', '.join(SETTINGS)}")
    for name in args.settings.split(","):
        start = time.perf_counter()
        values = np.array([normalised_regret(args.posterior, *SETTINGS[name], trial) for trial in trials])
        print(f"{args.posterior} {name}: trials {np.round(values, 2).tolist()} -> "
              f"{values.mean():.2f} ± {values.std(ddof=1) / np.sqrt(len(values)):.2f} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
