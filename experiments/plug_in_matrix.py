"""Plug-in matrix: every registered posterior × three jobs, with its defaults, through the public API.

Jobs (each cell = one posterior, one split / trial / seed; nothing but ``make_posterior``'s
defaults and the job's own documented settings):

* ``boston``   — UCI Boston housing, standard splits, 1×50 network, 500 epochs, batch 32
  (``uncertain_agents.regression.run_uci``): test NLL and RMSE.
* ``wheel``    — Thompson sampling, wheel bandit δ = 0.5, 3,000 decisions:
  ``ThompsonSampling(make_posterior(name, in_dim=2, out_dim=5, seed=t), 5, seed=t)``
  and ``run_bandit(..., seed=t)``; normalised regret = 100 × regret / Uniform's on the
  same rounds.
* ``mushroom`` — the same on the mushroom bandit (117 one-hot features, 2 arms).
  Both bandit jobs also run reference agents (``--references``, default LinFullPost and
  NeuralLinear) as ``make_agent(name, n_actions=A, context_dim=d, seed=t)`` on the same trials;
  their rows are named ``agent:<name>`` and are not checked against the targets.
* ``digits``   — scikit-learn digits (8×8), 2×100 network, 3,000 steps at batch 64
  (``attacks.evaluate.train_classifier``), untargeted FGSM at ε ∈ {0.15, 0.3} on the
  450 test images: accuracy, mean predictive entropy and AUROC(entropy) clean vs adversarial.

Every finished cell is written atomically to ``OUT/cells/<job>__<posterior>__<i>.json``;
re-running skips finished cells, so an interrupted run resumes. ``--workers`` runs cells
in a process pool (one torch thread each). The summary (``matrix.csv``, ``matrix.md``)
is rebuilt from the cell files at the end.

    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/plug_in_matrix.py \\
        --out experiments/results/plug_in_matrix --workers 2

About 75 minutes on this 2-core machine for all 8 posteriors (f-SVGD's bandit cells are
the slowest); ``--jobs`` and ``--posteriors`` run a part.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import as_completed
from pathlib import Path

import numpy as np
import pandas as pd

from uncertain_agents.runs import atomic_write_csv, atomic_write_text
from uncertain_agents.workers import spawn_pool

JOBS = ("boston", "wheel", "mushroom", "digits")
BANDIT_STEPS = 3000
DIGITS = dict(hidden=(100, 100), steps=3000, batch_size=64, epsilons=(0.0, 0.15, 0.3), n_samples=20)
#: Reference agents run on the bandit jobs beside Thompson sampling (``--references``); their
#: cells are named ``agent:<name>`` and built by ``make_agent(name, ..., seed=t)`` with its defaults.
REFERENCE_PREFIX = "agent:"
REFERENCES = ("linear", "neural-linear")
TARGETS = ("normalised regret ≤ 30 for every Bayesian posterior on wheel and mushroom, best ≤ 10 (wheel) "
           "and ≤ 8 (mushroom); digits: entropy(adversarial) > entropy(clean) at ε = 0.15 and 0.3, "
           "AUROC(entropy) at ε = 0.15 ≥ 0.75 for each, ≥ 0.85 for the best")


# ----------------------------------------------------------------------------- cells
def run_boston(name: str, split: int) -> dict:
    from uncertain_agents.regression import UCIConfig, run_uci

    frame = run_uci(UCIConfig(dataset="bostonHousing", posterior=name, splits=[split]))
    row = frame.iloc[0]
    return {"test_nll": float(row["test_nll"]), "test_rmse": float(row["test_rmse"]),
            "seconds": float(row["train_seconds"])}


def bandit_env(env_name: str):
    """The bandit of a job: wheel δ = 0.5 or mushroom, ``BANDIT_STEPS`` decisions."""
    from uncertain_agents.agents.experiment import make_env

    if env_name == "wheel":
        return make_env("wheel", steps=BANDIT_STEPS, delta=0.5)
    return make_env("mushroom", steps=BANDIT_STEPS)


def uniform_regret(env_name: str, trial: int) -> float:
    """Uniform's cumulative regret on trial ``trial`` of a bandit job (the normaliser)."""
    from uncertain_agents.agents import Uniform, run_bandit

    e = bandit_env(env_name)
    frame = run_bandit(e, Uniform(int(e.action_space.n), seed=trial), steps=BANDIT_STEPS, seed=trial)
    return float(frame["cumulative_regret"].iloc[-1])


def renormalise(out: Path) -> int:
    """Recompute every bandit cell's Uniform regret with the current code and rewrite its
    ``uniform_regret`` and ``normalised_regret`` (atomically), keeping the agent's own regret.

    For the fix of session 32: Uniform's stream was its environment's (same seed), which
    inflated the normaliser on mushroom; the posteriors' Thompson runs do not use that stream,
    so their regrets stand and only the normaliser changes. Returns the number of cells rewritten."""
    cache: dict[tuple[str, int], float] = {}
    changed = 0
    for path in sorted((out / "cells").glob("*.json")):
        record = json.loads(path.read_text())
        if record["job"] not in ("wheel", "mushroom"):
            continue
        key = (record["job"], int(record["index"]))
        if key not in cache:
            cache[key] = uniform_regret(*key)
        base = cache[key]
        if record["uniform_regret"] != base:
            record["uniform_regret_before"] = record.get("uniform_regret_before", record["uniform_regret"])
            record["uniform_regret"], record["normalised_regret"] = base, 100.0 * record["cumulative_regret"] / base
            atomic_write_text(path, json.dumps(record, indent=1))
            changed += 1
    return changed


def run_bandit_cell(env_name: str, name: str, trial: int) -> dict:
    import uncertain_agents as ua
    from uncertain_agents.agents import ThompsonSampling, run_bandit

    def env():
        return bandit_env(env_name)

    e = env()
    n_arms, dim = int(e.action_space.n), int(e.observation_space.shape[0])
    t0 = time.perf_counter()
    if name.startswith(REFERENCE_PREFIX):  # a reference agent, with make_agent's defaults
        from uncertain_agents.agents import make_agent

        agent = make_agent(name[len(REFERENCE_PREFIX):], n_actions=n_arms, context_dim=dim, seed=trial)
    else:
        post = ua.make_posterior(name, in_dim=dim, out_dim=n_arms, seed=trial)
        agent = ThompsonSampling(post, n_arms, seed=trial)
    frame = run_bandit(e, agent, steps=BANDIT_STEPS, seed=trial)
    seconds = time.perf_counter() - t0
    regret, base = float(frame["cumulative_regret"].iloc[-1]), uniform_regret(env_name, trial)
    out = {"cumulative_regret": regret, "uniform_regret": base, "normalised_regret": 100.0 * regret / base,
           "seconds": seconds}
    if env_name == "mushroom":  # "never eat" = the agent stopped eating for the last 1,000 decisions
        out["eat_fraction_last_1000"] = float((frame["action"].to_numpy()[-1000:] == 1).mean())
    return out


def run_digits(name: str, seed: int) -> dict:
    import torch

    import uncertain_agents as ua
    from attacks.evaluate import load_dataset, train_classifier
    from attacks.fgsm import fgsm

    data = load_dataset("digits")
    post = ua.make_posterior(name, in_dim=data.in_dim, out_dim=data.n_classes, hidden=DIGITS["hidden"],
                             likelihood="categorical", seed=seed)
    epochs = DIGITS["steps"] * DIGITS["batch_size"] / len(data.y_train)
    seconds = train_classifier(post, data, epochs=epochs, batch_size=DIGITS["batch_size"])
    x, y = torch.as_tensor(data.x_test), torch.as_tensor(data.y_test)
    frame = fgsm(post, x, y, epsilons=list(DIGITS["epsilons"]), n_samples=DIGITS["n_samples"], seed=seed)
    frame = frame.set_index("epsilon")
    out = {"seconds": seconds, "clean_accuracy": float(frame.loc[0.0, "accuracy"]),
           "clean_entropy": float(frame.loc[0.0, "mean_entropy"])}
    for eps in DIGITS["epsilons"][1:]:
        row = frame.loc[eps]
        out[f"accuracy@{eps}"] = float(row["accuracy"])
        out[f"entropy@{eps}"] = float(row["mean_entropy"])
        out[f"auroc_entropy@{eps}"] = float(row["auroc_entropy"])
        out[f"auroc_mi@{eps}"] = float(row["auroc_mutual_information"])
    return out


def run_cell(job: str, name: str, index: int, path: str) -> str:
    """Run one cell in a worker and write its JSON atomically (temporary file + rename)."""
    import torch

    torch.set_num_threads(1)
    if job == "boston":
        result = run_boston(name, index)
    elif job in ("wheel", "mushroom"):
        result = run_bandit_cell(job, name, index)
    else:
        result = run_digits(name, index)
    from uncertain_agents.seeding import SEEDING_SCHEME

    record = {"job": job, "posterior": name, "index": index, **result, "seeding": SEEDING_SCHEME}
    tmp = Path(path).with_suffix(".tmp")
    atomic_write_text(tmp, json.dumps(record, indent=1))
    os.replace(tmp, path)
    return path


def cells_of_other_seeding(out: Path, todo: list[tuple]) -> str:
    """The finished posterior cells of the jobs that ``todo`` adds posterior cells to, made under another
    seeding scheme (a cell without a ``seeding`` field predates it: scheme 1), counted per job for an error
    message ("" when there are none). Reference agents' cells never count: the schemes did not change
    their streams."""
    from uncertain_agents.seeding import SEEDING_SCHEME, recorded_scheme

    jobs = {job for job, name, _, _ in todo if not name.startswith(REFERENCE_PREFIX)}
    counts: dict[str, int] = {}
    for path in sorted((out / "cells").glob("*.json")) if jobs else []:
        cell = json.loads(path.read_text())
        if (cell.get("job") in jobs and not str(cell.get("posterior", "")).startswith(REFERENCE_PREFIX)
                and recorded_scheme(cell.get("seeding")) != SEEDING_SCHEME):
            counts[cell["job"]] = counts.get(cell["job"], 0) + 1
    return ", ".join(f"{n} {job}" for job, n in sorted(counts.items()))


# --------------------------------------------------------------------------- summary
def _pm(values) -> str:
    values = np.asarray(values, dtype=float)
    se = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{values.mean():.3g} ± {se:.2g}" if se == se else f"{values.mean():.3g}"


def summarize(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per posterior, one column group per job (mean ± s.e. over cells)."""
    rows = []
    for name in sorted(cells["posterior"].unique()):
        row = {"posterior": name}
        mine = cells[cells["posterior"] == name]
        for job, g in mine.groupby("job"):
            row[f"{job} n"] = len(g)
            if job == "boston":
                row["boston NLL"] = _pm(g["test_nll"])
                row["boston RMSE"] = _pm(g["test_rmse"])
            elif job in ("wheel", "mushroom"):
                row[f"{job} regret"] = _pm(g["normalised_regret"])
                if job == "mushroom":
                    row["mushroom never-eat trials"] = int((g["eat_fraction_last_1000"] == 0).sum())
            else:
                row["digits clean acc"] = _pm(g["clean_accuracy"])
                row["digits H clean"] = _pm(g["clean_entropy"])
                for eps in DIGITS["epsilons"][1:]:
                    row[f"H @{eps}"] = _pm(g[f"entropy@{eps}"])
                    row[f"AUROC(H) @{eps}"] = _pm(g[f"auroc_entropy@{eps}"])
            row[f"{job} s/cell"] = round(float(g["seconds"].mean()), 1)
        rows.append(row)
    frame = pd.DataFrame(rows)
    for col in [c for c in frame.columns if c.endswith(" n") or c.endswith("trials")]:
        frame[col] = frame[col].astype("Int64")  # counts stay integers where a job is missing
    return frame


NON_BAYESIAN = ("map",)


def check_targets(cells: pd.DataFrame) -> list[str]:
    """The issue's targets, each as a line ``PASS``/``FAIL: ...`` with the measured figures."""
    lines = []
    bayes = cells[~cells["posterior"].isin(NON_BAYESIAN) & ~cells["posterior"].str.startswith(REFERENCE_PREFIX)]
    for job, best_target in (("wheel", 10.0), ("mushroom", 8.0)):
        g = bayes[bayes["job"] == job]
        if g.empty:
            continue
        means = g.groupby("posterior")["normalised_regret"].mean().sort_values()
        worst = means[means > 30]
        lines.append(f"{job}: every Bayesian posterior ≤ 30: {'PASS' if worst.empty else 'FAIL'} "
                     f"(max {means.max():.1f}, {means.idxmax()})")
        lines.append(f"{job}: best ≤ {best_target:g}: {'PASS' if means.iloc[0] <= best_target else 'FAIL'} "
                     f"(best {means.iloc[0]:.1f}, {means.index[0]})")
        if job == "mushroom" and "eat_fraction_last_1000" in g:
            never = g[g["eat_fraction_last_1000"] == 0]
            lines.append(f"mushroom: no trial collapses to never eat: {'PASS' if never.empty else 'FAIL'} "
                         f"({len(never)} of {len(g)} trials)")
    g = bayes[bayes["job"] == "digits"]
    if not g.empty:
        by = g.groupby("posterior")
        rises = all((h[f"entropy@{e}"] > h["clean_entropy"]).all() for _, h in by for e in (0.15, 0.3))
        lines.append(f"digits: entropy(FGSM) > entropy(clean) at ε = 0.15 and 0.3 for every Bayesian posterior "
                     f"and seed: {'PASS' if rises else 'FAIL'}")
        auroc = by["auroc_entropy@0.15"].mean().sort_values()
        lines.append(f"digits: AUROC(entropy) at ε = 0.15 ≥ 0.75 for each: {'PASS' if auroc.min() >= 0.75 else 'FAIL'} "
                     f"(min {auroc.min():.3f}, {auroc.idxmin()})")
        lines.append(f"digits: best AUROC(entropy) at ε = 0.15 ≥ 0.85: {'PASS' if auroc.max() >= 0.85 else 'FAIL'} "
                     f"(best {auroc.max():.3f}, {auroc.idxmax()})")
    return lines


def markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (empty cells for missing values)."""
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def load_cells(out: Path) -> pd.DataFrame:
    records = [json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))]
    return pd.DataFrame(records)


def main(argv=None) -> int:
    import uncertain_agents as ua
    from uncertain_agents.agents import resolve_agent

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated subset of {JOBS}")
    parser.add_argument("--posteriors", default=None, help="comma-separated names (default: every registered one)")
    parser.add_argument("--trials", type=int, default=5, help="bandit trials per posterior (default 5)")
    parser.add_argument("--splits", default="0,1,2,3,4", help="Boston splits (default 0-4)")
    parser.add_argument("--seeds", type=int, default=3, help="digits seeds per posterior (default 3)")
    parser.add_argument("--references", default=",".join(REFERENCES),
                        help="comma-separated reference agents for the bandit jobs (make_agent names; "
                             f"default {','.join(REFERENCES)}; '' for none)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--allow-mixed-seeding", action="store_true",
                        help="add posterior cells to a job whose finished posterior cells were made under an earlier "
                             "seeding scheme (uncertain_agents.seeding; each cell's 'seeding' field says which)")
    parser.add_argument("--renormalise", action="store_true",
                        help="recompute every bandit cell's Uniform normaliser with the current code (keeping the "
                             "agents' regrets; see renormalise) before running the missing cells")
    args = parser.parse_args(argv)

    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    bad = sorted(set(jobs) - set(JOBS))
    if bad:
        parser.error(f"--jobs: unknown {bad}; valid: {', '.join(JOBS)}")
    names = (ua.available_posteriors() if args.posteriors is None
             else [ua.registry.resolve_name(n) for n in args.posteriors.split(",")])
    splits = [int(s) for s in args.splits.split(",")]
    (args.out / "cells").mkdir(parents=True, exist_ok=True)
    from uncertain_agents.runs import record_run

    todo = []
    for job in jobs:
        indices = splits if job == "boston" else (range(args.seeds) if job == "digits" else range(args.trials))
        for name in names:
            for i in indices:
                path = args.out / "cells" / f"{job}__{name}__{i}.json"
                if not path.exists():
                    todo.append((job, name, i, str(path)))
        if job in ("wheel", "mushroom"):
            for ref in filter(None, (r.strip() for r in args.references.split(","))):
                name = REFERENCE_PREFIX + resolve_agent(ref)
                for i in indices:
                    path = args.out / "cells" / f"{job}__{name.replace(':', '-')}__{i}.json"
                    if not path.exists():
                        todo.append((job, name, i, str(path)))
    mixed = cells_of_other_seeding(args.out, todo)
    if mixed and not args.allow_mixed_seeding:
        parser.error(f"{args.out} holds posterior cells made under an earlier seeding scheme ({mixed}; "
                     "uncertain_agents.seeding): new cells of those jobs would draw other random numbers than "
                     "theirs, so the matrix would mix two realisations. Use a new --out, delete those cells, or "
                     "pass --allow-mixed-seeding")
    record_run(args.out)  # appends commit, command line and versions to {out}/manifest.json
    if args.renormalise:
        print(f"--renormalise: {renormalise(args.out)} bandit cells given the current Uniform normaliser", flush=True)
    # the slowest cells first, so the pool stays busy to the end
    order = {"fsvgd": 0, "svgd": 1, "dropout-alpha": 2, "bb-alpha": 3}
    todo.sort(key=lambda c: (order.get(c[1], 9), c[0]))
    print(f"{len(todo)} cells to run ({args.workers} workers)", flush=True)
    t0 = time.perf_counter()
    # spawned workers (a forked child cannot initialise CUDA) that stop if this script is killed
    with spawn_pool(args.workers) as pool:
        futures = {pool.submit(run_cell, *cell): cell for cell in todo}
        for k, fut in enumerate(as_completed(futures), 1):
            job, name, i, _ = futures[fut]
            fut.result()
            print(f"[{k}/{len(todo)}] {job} {name} {i} ({time.perf_counter() - t0:.0f} s)", flush=True)
    cells = load_cells(args.out)
    atomic_write_csv(args.out / "cells.csv", cells)
    table = summarize(cells)
    atomic_write_csv(args.out / "matrix.csv", table)
    targets = check_targets(cells)
    text = markdown(table) + "\nTargets (Bayesian = every posterior but " + ", ".join(NON_BAYESIAN) \
        + f"; rows named {REFERENCE_PREFIX}<agent> are reference agents, not posteriors):\n\n" \
        + "\n".join(f"* {line}" for line in targets) + "\n"
    atomic_write_text(args.out / "matrix.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
