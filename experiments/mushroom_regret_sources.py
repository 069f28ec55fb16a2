"""Where Thompson sampling's mushroom regret comes from: when, and on which mushrooms.

Runs the plug-in matrix's mushroom protocol (3,000 decisions, trials 0–4 unless ``--first-trial``
says otherwise: environment seed t,
posterior seed t, agent seed t; reference agents ``make_agent(name, ..., seed=t)``) and
prints, per agent, the mean over trials of the regret in windows of 250 decisions, split into
edible mushrooms left uneaten and poisonous ones eaten. For Thompson sampling it then scores
the final posterior on all 8,124 mushrooms of the data set (200 sampled functions): how many
edible ones its *mean* rates as not worth eating, their odour, how often such a mushroom was
shown and eaten during the run, and the predictive spread of "eat − don't eat" against its
mean — what tells an exploitation trap (never tried, confidently rated bad) from slow learning —
and, for the other mistake, the poisonous mushrooms that at least 5% of sampled functions would
still eat (how many, how tempting, how often such mushrooms were eaten, their odour).

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/mushroom_regret_sources.py \\
        --agents mfvi,agent:linear

About 20–40 s per Thompson-sampling trial on one CPU thread; LinFullPost takes 1–2 s.

``--protocol fsvgd-paper --steps 10000`` asks the same of a paper preset instead: every agent is
then built by ``make_agent(..., protocol=..., seed=t)`` and run with environment seed ``t``,
exactly as ``experiments/bandit_table.py`` runs trial ``t`` (so its normalised regrets are that
table's), e.g. the preset's bootstrap (about 10 minutes a trial at 10,000 decisions):

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/mushroom_regret_sources.py \\
        --protocol fsvgd-paper --steps 10000 --window 1000 --agents bootstrap,agent:linear --trials 2
"""
from __future__ import annotations

import argparse
from collections import Counter

import numpy as np
import pandas as pd
import torch

import uncertain_agents as ua
from uncertain_agents.agents import ThompsonSampling, Uniform, make_agent, run_bandit
from uncertain_agents.agents.experiment import make_env
from uncertain_agents.datasets.mushroom import load_mushroom

STEPS = 3000
TRIALS = 5
WINDOW = 250
REFERENCE_PREFIX = "agent:"
#: A poisonous mushroom counts as still tempting when at least this share of sampled functions eats it.
TEMPTING = 0.05


def build_agent(name: str, trial: int, env, protocol: str = "default"):
    """Thompson sampling over posterior ``name``, or the reference agent ``agent:<name>``, sized from ``env``.

    Under ``protocol="default"`` the plug-in matrix's construction (posterior seed t, agent seed
    t, its own stream); under a paper preset ``experiments/bandit_table.py``'s (``make_agent`` with seed t)."""
    n_arms, dim = int(env.action_space.n), int(env.observation_space.shape[0])
    if protocol != "default":
        if name.startswith(REFERENCE_PREFIX):
            return make_agent(name[len(REFERENCE_PREFIX):], n_actions=n_arms, context_dim=dim, protocol=protocol,
                              seed=trial)
        return make_agent("thompson", n_actions=n_arms, context_dim=dim, posterior=name, protocol=protocol,
                          seed=trial)
    if name.startswith(REFERENCE_PREFIX):
        return make_agent(name[len(REFERENCE_PREFIX):], n_actions=n_arms, context_dim=dim, seed=trial)
    post = ua.make_posterior(name, in_dim=dim, out_dim=n_arms, seed=trial)
    return ThompsonSampling(post, n_arms, seed=trial)


def windows(frame: pd.DataFrame, size: int = WINDOW) -> pd.DataFrame:
    """Per window of ``size`` decisions: regret, expected regret and the two kinds of error."""
    window = (frame["step"].to_numpy() - 1) // size
    edible = frame["optimal_expected_reward"].to_numpy() > 0
    eat = frame["action"].to_numpy() == 1
    parts = pd.DataFrame({"window": window, "regret": frame["regret"], "expected_regret": frame["expected_regret"],
                          "edible_uneaten": edible & ~eat, "poisonous_eaten": ~edible & eat})
    return parts.groupby("window").sum()


def misrated_edible(agent: ThompsonSampling, data) -> dict:
    """Score the agent's final posterior on every mushroom of the data set."""
    x = torch.as_tensor(data.contexts)
    f = agent.posterior.predict(x, n_samples=200, generator=torch.Generator().manual_seed(0)).samples
    diff = (f[..., 1] - f[..., 0]).numpy()  # [S, N]: eat minus don't eat
    edible = np.asarray(data.edible)
    bad = np.flatnonzero((diff.mean(0) <= 0) & edible)
    history = agent.history
    key = [row.tobytes() for row in history.contexts]
    shown = Counter(key)
    eaten = Counter(k for k, a in zip(key, history.actions) if a == 1)
    odour_cols = [j for j, n in enumerate(data.feature_names) if n.startswith("odor=")]
    def odour_of(i: int) -> str:
        return data.feature_names[odour_cols[int(np.argmax(data.contexts[i, odour_cols]))]]

    odour = Counter(odour_of(i) for i in bad)
    rows = [data.contexts[i].tobytes() for i in bad]
    # the other mistake: poisonous mushrooms that some sampled functions would still eat
    p_eat = (diff > 0).mean(0)
    tempting = np.flatnonzero((p_eat >= TEMPTING) & ~edible)
    tempting_rows = [data.contexts[i].tobytes() for i in tempting]
    tempting_odour = Counter(odour_of(i) for i in tempting)
    return {"edible rated bad": len(bad), "of edible": int(edible.sum()),
            "ever shown": sum(shown[k] > 0 for k in rows), "ever eaten": sum(eaten[k] > 0 for k in rows),
            "odours": dict(odour.most_common(3)),
            "median sd(eat − not)": float(np.median(diff[:, bad].std(0))) if len(bad) else float("nan"),
            "median |mean|": float(np.median(np.abs(diff[:, bad].mean(0)))) if len(bad) else float("nan"),
            f"poisonous eaten by >= {TEMPTING:.0%} of functions": len(tempting), "of poisonous": int((~edible).sum()),
            "their mean P(eat)": float(p_eat[tempting].mean()) if len(tempting) else float("nan"),
            "their times eaten during the run": sum(eaten[k] for k in set(tempting_rows)),
            "their odours": dict(tempting_odour.most_common(3))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="mfvi,agent:linear",
                        help="comma-separated posterior names (Thompson sampling) and agent:<name> references")
    parser.add_argument("--trials", type=int, default=TRIALS)
    parser.add_argument("--first-trial", type=int, default=0,
                        help="first trial index (default 0: the plug-in matrix's trials 0-4; 5 and up are held out)")
    parser.add_argument("--protocol", default="default",
                        help="bandit protocol: 'default' (the plug-in matrix's) or a paper preset such as 'fsvgd-paper'")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"decisions per trial (default {STEPS})")
    parser.add_argument("--window", type=int, default=WINDOW, help=f"decisions per table column (default {WINDOW})")
    args = parser.parse_args()
    if args.steps < 1 or args.window < 1:
        parser.error("--steps and --window must be positive")
    torch.set_num_threads(1)
    data = load_mushroom()
    for name in args.agents.split(","):
        tables, scores, normalised = [], [], []
        trials = range(args.first_trial, args.first_trial + args.trials)
        for trial in trials:
            env = make_env("mushroom", steps=args.steps)
            agent = build_agent(name, trial, env, args.protocol)
            frame = run_bandit(env, agent, steps=args.steps, seed=trial)
            tables.append(windows(frame, args.window))
            uniform = run_bandit(make_env("mushroom", steps=args.steps), Uniform(2, seed=trial), steps=args.steps,
                                 seed=trial)
            normalised.append(100.0 * frame["cumulative_regret"].iloc[-1] / uniform["cumulative_regret"].iloc[-1])
            if isinstance(agent, ThompsonSampling):
                scores.append(misrated_edible(agent, data))
        mean = sum(tables) / len(tables)
        mean.index = [f"{w * args.window}-{(w + 1) * args.window}" for w in mean.index]
        print(f"\n{name}: mean over {args.trials} trials, per {args.window} decisions")
        print(mean.T.round(1).to_string())
        values = np.array(normalised)
        spread = f" ± {values.std(ddof=1) / np.sqrt(len(values)):.2f}" if len(values) > 1 else ""
        print(f"  normalised regret, trials {list(trials)}: {np.round(values, 2).tolist()} -> {values.mean():.2f}{spread}")
        for trial, score in zip(trials, scores):
            print(f"  trial {trial}, final posterior: {score}")


if __name__ == "__main__":
    main()
