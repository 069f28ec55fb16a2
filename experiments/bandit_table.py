"""Normalised cumulative regret on the wheel (δ = 0.95) and mushroom bandits.

Every agent and every registered posterior (Thompson sampling), ``--trials`` trials of
``--steps`` decisions; trial i uses seed ``seed + i`` for the environment and the agent,
so all agents of a trial face the same contexts and reward table. Normalised regret =
100 × cumulative regret / Uniform's cumulative regret in the same trial; the table
shows mean ± standard error over trials.

Agents are built by ``make_agent(..., protocol=--protocol)`` (``default``, ``showdown``,
``fsvgd-paper``: see ``uncertain_agents.agents.protocols``). Runs are appended to
``<out>/bandit_runs.csv`` as they finish (``--workers`` runs them in parallel) and
skipped when the script is started again, so an interrupted table can be resumed. A long
table can be spread over runs or machines: each runs its own trials into its own folder
(``--first-trial 5 --trials 5``: trials 5–9), and ``--merge FOLDER`` adds a folder's runs
that ``--out`` lacks (curves, checkpoints and manifest entries with them) and rebuilds the table.

    OMP_NUM_THREADS=1 UNCERTAIN_AGENTS_DATA=/path/to/data \
        python experiments/bandit_table.py --steps 5000 --trials 5
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import numpy as np
import pandas as pd
import torch

import uncertain_agents as ua
from uncertain_agents.runs import atomic_write_csv, atomic_write_text, record_run
from uncertain_agents.validation import check_device
from uncertain_agents.seeding import SEEDING_SCHEME, recorded_scheme
from uncertain_agents.workers import spawn_pool
from uncertain_agents.agents import get_protocol, make_agent, run_bandit
from uncertain_agents.agents.experiment import (PARALLEL_MODES, AgentSpec, StreamSlots, make_env, parallel_mode,
                                                plot_regret, resolve_env, run_thompson_trials, trials_batchable)
from uncertain_agents.datasets.mushroom import load_mushroom

PUBLISHED = {  # 50,000 steps, Uniform = 100 (Wang et al. 2019 Table 3; Riquelme et al. 2018)
    ("wheel", "thompson[fsvgd]"): "7.54 ± 0.41", ("wheel", "thompson[bootstrap]"): "42.16",
    ("wheel", "thompson[mfvi]"): "55.77", ("wheel", "linear"): "42.94",
    ("mushroom", "thompson[fsvgd]"): "4.39 ± 0.39", ("mushroom", "thompson[bootstrap]"): "2.71",
    ("mushroom", "thompson[mfvi]"): "19.15",
}



#: Points stored per run in ``curves.csv`` (every ``max(50, steps // CURVE_POINTS)`` decisions), so
#: that a table of many 10,000- or 50,000-step runs keeps its curve file small.
CURVE_POINTS = 100

def specs(posteriors: list[str]) -> list[tuple[str, str, str | None, dict]]:
    """``(label, agent, posterior, options)`` for Uniform, the baselines and every posterior."""
    greedy_post = "map" if "map" in ua.available_posteriors() else "mfvi"
    out = [("uniform", "uniform", None, {}), (f"greedy[{greedy_post}]", "greedy", greedy_post, {}),
           ("linear", "linear", None, {}), ("neural-linear", "neural-linear", None, {})]
    out += [(f"thompson[{p}]", "thompson", p, {}) for p in posteriors]
    return out


def run_one(env_name: str, label: str, agent_name: str, post: str | None, options: dict, trial: int,
            seed: int, steps: int, delta: float, protocol: str, device: str = "cpu",
            log_every: int = 0) -> tuple[dict, pd.DataFrame] | str:
    """One trial of one agent (in a worker process or thread): its CSV row and its regret curve;
    ``log_every > 0`` prints the decisions done and the seconds taken every that many decisions."""
    torch.set_num_threads(1)
    data = load_mushroom() if env_name == "mushroom" else None
    env = make_env(env_name, steps=steps, delta=delta, mushroom_data=data)
    agent = make_agent(agent_name, n_actions=int(env.action_space.n), context_dim=env.observation_space.shape[0],
                       posterior=post, posterior_options=options, protocol=protocol, seed=seed, device=device)
    t0 = time.perf_counter()
    done = [0]

    def log(k: int) -> None:
        done[0] += k
        print(f"  {env_name} {label} trial {trial}: {done[0]} decisions, {time.perf_counter() - t0:.1f} s",
              flush=True)

    try:
        frame = run_bandit(env, agent, steps=steps, seed=seed, progress=log if log_every > 0 else None,
                           progress_every=max(1, log_every))
    except Exception as err:  # a diverging method must not stop the table
        return f"{env_name} {label} trial {trial}: FAILED {type(err).__name__}: {err}"
    return row_and_curve(frame, env_name, protocol, label, trial, seed, steps, delta, time.perf_counter() - t0)


def first_fit(protocol: str) -> str:
    """When ``protocol`` first fits: ``"warmup"`` (right after the round robin; every run before session 39)
    or ``"train_every"`` (the paper presets since session 39, ``BanditProtocol.fit_after_warmup=False``)."""
    return "warmup" if get_protocol(protocol).fit_after_warmup else "train_every"


def row_and_curve(frame: pd.DataFrame, env_name: str, protocol: str, label: str, trial: int, seed: int, steps: int,
                  delta: float, seconds: float, parallel: str = "") -> tuple[dict, pd.DataFrame]:
    """A run's CSV row and its regret curve (at most CURVE_POINTS points)."""
    row = {"env": env_name, "protocol": protocol, "label": label, "trial": trial, "seed": seed, "steps": steps,
           "delta": delta if env_name == "wheel" else np.nan,
           "cumulative_regret": frame["cumulative_regret"].iloc[-1],
           "expected_cumulative_regret": frame["expected_regret"].sum(), "seconds": seconds,
           "parallel": parallel, "seeding": SEEDING_SCHEME, "first_fit": first_fit(protocol)}
    every = max(50, steps // CURVE_POINTS)  # a curve of at most CURVE_POINTS points per run
    curve = frame.loc[frame["step"] % every == 0, ["step", "cumulative_regret"]].round({"cumulative_regret": 3})
    return row, curve.assign(env=env_name, protocol=protocol, label=label, trial=trial)


PROGRESS_COLUMNS = ["env", "protocol", "label", "trial", "steps", "decisions", "cumulative_regret", "seconds"]


def append_progress(path: Path, rows: list[list]) -> None:
    """Append checkpoint rows to ``progress.csv`` in one ``write`` (O_APPEND: whole lines even when
    several processes write; a killed table keeps them)."""
    text = "".join(",".join(str(v) for v in row) + "\n" for row in rows)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def run_batched(env_name: str, label: str, post: str, options: dict, trials: list[int], seeds: list[int],
                steps: int, delta: float, protocol: str, device: str = "cpu", log_every: int = 0,
                progress_path: str | None = None) -> list[tuple[dict, pd.DataFrame]] | str:
    """The trials of one Thompson agent as one trial-batched model in lock step (``--parallel batched``):
    a CSV row and a curve per trial; ``seconds`` is the group's wall time divided by its trials (as
    ``run_experiment`` reports it), and ``parallel`` says ``batched``."""
    torch.set_num_threads(1)
    data = load_mushroom() if env_name == "mushroom" else None
    t0 = time.perf_counter()
    done = [0]

    def log(k: int) -> None:
        done[0] += k
        print(f"  {env_name} {label} trials {trials[0]}-{trials[-1]} (batched): {done[0] // len(trials)} decisions, "
              f"{time.perf_counter() - t0:.1f} s", flush=True)

    def checkpoint(decisions: int, cumulative_regret) -> None:
        seconds = round(time.perf_counter() - t0, 2)
        append_progress(Path(progress_path), [[env_name, protocol, label, t, steps, decisions, round(float(c), 3),
                                               seconds] for t, c in zip(trials, cumulative_regret)])

    try:
        frames = run_thompson_trials(post, options, seeds, env_name=env_name, steps=steps, delta=delta,
                                     mushroom_data=data, protocol=protocol, device=device,
                                     progress=log if log_every > 0 else None, progress_every=max(1, log_every),
                                     checkpoint=checkpoint if progress_path and log_every > 0 else None)
    except Exception as err:  # a diverging method must not stop the table
        return f"{env_name} {label} trials {trials}: FAILED {type(err).__name__}: {err}"
    seconds = (time.perf_counter() - t0) / len(trials)
    return [row_and_curve(f, env_name, protocol, label, t, s, steps, delta, seconds, "batched")
            for f, t, s in zip(frames, trials, seeds)]


def write_run(out: Path, runs_path: Path, row: dict, curve: pd.DataFrame) -> None:
    """Add a finished run to ``curves.csv`` and then ``bandit_runs.csv``, each rewritten atomically (a
    killed table leaves either file whole; the run row, which marks the run done for a resume, is written
    last, and a curve written twice — killed between the two writes, then re-run with the same seed — is
    kept once). A column that an older ``bandit_runs.csv`` lacks, such as ``parallel``, is added to it."""
    curves_path = out / "curves.csv"
    if curves_path.is_file():
        curve = pd.concat([pd.read_csv(curves_path), curve], ignore_index=True).drop_duplicates()
    atomic_write_csv(curves_path, curve)
    new = pd.DataFrame([row])
    if runs_path.is_file():
        runs = pd.read_csv(runs_path)
        for key in row:
            if key not in runs:
                runs[key] = "" if key == "parallel" else np.nan
        new = pd.concat([runs, new.reindex(columns=runs.columns)], ignore_index=True)
    atomic_write_csv(runs_path, new)


RUN_KEY = ["env", "protocol", "label", "trial", "steps"]


def uses_posterior_streams(label: str) -> bool:
    """Whether the agent labelled ``label`` draws from a posterior's streams (``thompson[...]``,
    ``greedy[...]``), which the seeding schemes changed; Uniform, LinFullPost and NeuralLinear did not."""
    return "[" in str(label)


def recorded_schemes(runs: pd.DataFrame) -> list[int]:
    """The seeding scheme of every row of a ``bandit_runs.csv`` (rows without the column: scheme 1)."""
    if "seeding" not in runs:
        return [1] * len(runs)
    return [recorded_scheme(value) for value in runs["seeding"]]


def schemes_of_posterior_runs(runs: pd.DataFrame) -> dict[tuple[str, str], set[int]]:
    """``{(env, label): {seeding schemes}}`` of the posterior agents' runs in a ``bandit_runs.csv``."""
    out: dict[tuple[str, str], set[int]] = {}
    for env, label, scheme in zip(runs["env"], runs["label"], recorded_schemes(runs)):
        if uses_posterior_streams(label):
            out.setdefault((env, label), set()).add(scheme)
    return out


def merge_folder(source: Path, out: Path, replace: tuple[str, ...] = (), allow_mixed_seeding: bool = False) -> int:
    """Add the finished runs of another table folder (``--merge``) to ``out``: the runs of ``source``
    whose (env, protocol, agent, trial, horizon) ``out`` lacks, with their curves and checkpoints, and
    the source's manifest entries (marked ``merged_from``). Runs that both hold are kept as ``out`` has
    them; where their regrets differ (other code, other device) the difference is printed — except the
    runs of the agents labelled in ``replace`` (``--replace``), which ``source``'s runs replace, with their
    curves and progress rows (e.g. after a fix changed those agents' results). Every file is rewritten
    atomically. Returns the number of runs added.

    Posterior agents' runs of another seeding scheme than those ``out`` holds of the same agent
    (uncertain_agents.seeding; no ``seeding`` value: scheme 1) are refused unless ``allow_mixed_seeding``."""
    import json

    source_runs_path = source / "bandit_runs.csv"
    if not source_runs_path.is_file():
        raise FileNotFoundError(f"--merge: {source} holds no bandit_runs.csv (expected a bandit table folder)")
    source_runs = pd.read_csv(source_runs_path)
    runs_path = out / "bandit_runs.csv"
    runs = pd.read_csv(runs_path) if runs_path.is_file() else source_runs.iloc[:0]
    for frame in (source_runs, runs):
        if "protocol" not in frame:
            frame["protocol"] = "default"
    if replace:
        replaced = source_runs[source_runs["label"].isin(replace)][RUN_KEY].drop_duplicates()
        if replaced.empty:
            raise ValueError(f"--replace: {source} holds no run of {', '.join(replace)}")
        runs = _without(runs, replaced, RUN_KEY)
        for name in ("curves.csv", "progress.csv"):
            if (out / name).is_file():
                rows = pd.read_csv(out / name)
                if "protocol" not in rows:
                    rows["protocol"] = "default"
                key = RUN_KEY if "steps" in rows else ["env", "protocol", "label", "trial"]
                atomic_write_text(out / name, _without(rows, replaced[key].drop_duplicates(), key).to_csv(index=False))
        print(f"--replace: {len(replaced)} runs of {', '.join(replace)} to be replaced from {source}", flush=True)
    if not allow_mixed_seeding:
        ours, theirs = schemes_of_posterior_runs(runs), schemes_of_posterior_runs(source_runs)
        clash = [f"{env} {label} (here {sorted(ours[env, label])}, there {sorted(theirs[env, label])})"
                 for env, label in sorted(ours.keys() & theirs.keys())
                 if len(ours[env, label] | theirs[env, label]) > 1]
        if clash:
            raise ValueError(f"--merge: {source} and {out} hold runs of the same posterior agents made under other "
                             f"seeding schemes (uncertain_agents.seeding): {'; '.join(clash)}; the table would mix "
                             "two realisations of them. Pass --allow-mixed-seeding to merge anyway")
    kept = runs[RUN_KEY + ["cumulative_regret"]].drop_duplicates(RUN_KEY, keep="last")
    both = source_runs.merge(kept, on=RUN_KEY, how="left",
                             suffixes=("", "_kept"), indicator=True)
    shared = both[both["_merge"] == "both"]
    differing = shared[(shared["cumulative_regret"] - shared["cumulative_regret_kept"]).abs()
                       > 1e-6 * shared["cumulative_regret_kept"].abs().clip(lower=1.0)]
    for _, row in differing.iterrows():
        print(f"  kept {row['env']} {row['label']} trial {row['trial']}: regret {row['cumulative_regret_kept']:.3f} "
              f"here, {row['cumulative_regret']:.3f} in {source}", flush=True)
    new = source_runs[(both["_merge"] == "left_only").to_numpy()]
    if new.empty:
        print(f"--merge: nothing new in {source}", flush=True)
        return 0
    merged = pd.concat([runs, new], ignore_index=True)
    atomic_write_text(runs_path, merged.reindex(columns=list(dict.fromkeys([*runs.columns, *new.columns])))
                      .to_csv(index=False))
    curve_key = ["env", "protocol", "label", "trial"]
    added = new[curve_key].drop_duplicates()
    for name in ("curves.csv", "progress.csv"):
        if not (source / name).is_file():
            continue
        extra = pd.read_csv(source / name)
        if "protocol" not in extra:
            extra["protocol"] = "default"
        extra = extra.merge(added, on=curve_key)
        if "steps" in extra:  # progress rows: only those of the horizons merged
            extra = extra.merge(new[RUN_KEY].drop_duplicates(), on=RUN_KEY)
        if extra.empty:
            continue
        target = pd.read_csv(out / name) if (out / name).is_file() else extra.iloc[:0]
        combined = pd.concat([target, extra], ignore_index=True)
        atomic_write_text(out / name, combined.reindex(columns=list(dict.fromkeys([*target.columns, *extra.columns])))
                          .to_csv(index=False))
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"runs": []}
    if (source / "manifest.json").is_file():
        for entry in json.loads((source / "manifest.json").read_text()).get("runs", []):
            tagged = {**entry, "merged_from": str(source)}
            if entry not in manifest["runs"] and tagged not in manifest["runs"]:
                manifest["runs"].append(tagged)
    atomic_write_text(manifest_path, json.dumps(manifest, indent=1) + "\n")
    print(f"--merge: {len(new)} runs added from {source}", flush=True)
    return len(new)


def runs_of_other_seeding(done: pd.DataFrame, todo: list[tuple]) -> str:
    """The finished runs of posterior agents (Thompson sampling, Greedy) that ``todo`` would add trials to
    (same environment, protocol, agent label and horizon) but that were made under another seeding scheme,
    described for an error message ("" when there are none). Rows without a ``seeding`` value predate the
    column: scheme 1. Reference agents (Uniform, LinFullPost, NeuralLinear) draw from streams the schemes
    did not change, so their runs never count."""
    if done.empty or not todo:
        return ""
    wanted = {(env, protocol, label, steps) for env, label, _, post, _, _, _, steps, _, protocol, *_ in todo
              if post is not None}
    other = done[[(env, protocol, label, steps) in wanted and scheme != SEEDING_SCHEME
                  for env, protocol, label, steps, scheme in zip(done["env"], done["protocol"], done["label"],
                                                                 done["steps"], recorded_schemes(done))]]
    if other.empty:
        return ""
    groups = other.groupby(["env", "label"]).size()
    return "; ".join(f"{n} {env} {label} run{'s' * (n > 1)}" for (env, label), n in groups.items())


def _without(rows: pd.DataFrame, drop: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """``rows`` less those whose ``key`` columns match a row of ``drop``."""
    marked = rows.merge(drop.assign(_drop=True), on=key, how="left")
    return rows[marked["_drop"].isna().to_numpy()]


def main(argv=None) -> int:
    from concurrent.futures import ThreadPoolExecutor, as_completed

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default="wheel,mushroom")
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--first-trial", type=int, default=0,
                   help="run trials first-trial … first-trial + trials - 1 (default 0), so that a table's trials can "
                        "be spread over several runs or machines and merged")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--delta", type=float, default=0.95)
    p.add_argument("--protocol", default="default", help="bandit protocol: default, showdown, fsvgd-paper")
    p.add_argument("--posteriors", default="all", help="comma-separated, or 'all' registered ones")
    p.add_argument("--only", default="", help="comma-separated labels to run (default: all)")
    p.add_argument("--workers", type=int, default=1, help="runs in parallel")
    p.add_argument("--parallel", default="auto", choices=PARALLEL_MODES,
                   help="how --workers runs side by side: processes (one torch thread each), threads (one "
                        "process; on CUDA each run on its own stream), auto (threads on CUDA, else processes)")
    p.add_argument("--device", default="cpu", help="device of the posterior agents: cpu or cuda (default cpu)")
    p.add_argument("--log-every", type=int, default=0,
                   help="print every run's decisions done and seconds taken every N decisions (default: off)")
    p.add_argument("--out", type=Path, default=Path("experiments/results/bandit_table"))
    p.add_argument("--report-only", action="store_true", help="only rebuild the table and plots from the CSVs")
    p.add_argument("--merge", type=Path, action="append", default=[], metavar="FOLDER",
                   help="add the runs of another table folder (trials run elsewhere, e.g. with --first-trial) "
                        "that --out lacks, then rebuild the table; repeatable")
    p.add_argument("--replace", default="", metavar="LABELS",
                   help="with --merge: comma-separated agent labels (e.g. uniform,linear) whose runs the merged "
                        "folder's replace, curves and progress with them (after a fix changed those agents)")
    p.add_argument("--allow-mixed-seeding", action="store_true",
                   help="add posterior agents' runs to a folder whose runs of the same agents were made under an "
                        "earlier seeding scheme (uncertain_agents.seeding; the rows' seeding column says which)")
    p.add_argument("--page", type=Path, default=None,
                   help="also write a results page (Markdown: protocol, scale, command, ours beside the "
                        "published figures, regret plots), e.g. docs/results/fsvgd_bandits.md")
    args = p.parse_args(argv)
    if args.first_trial < 0 or args.trials < 1:
        p.error(f"--first-trial must be >= 0 and --trials >= 1, got {args.first_trial} and {args.trials}")
    command = None if argv is None else ["experiments/bandit_table.py", *argv]
    runs_path = args.out / "bandit_runs.csv"
    try:  # every name is checked before anything is written: one error line, not a traceback
        protocol = get_protocol(args.protocol).name
        for env_name in args.envs.split(","):
            resolve_env(env_name)
        if args.posteriors != "all":
            for name in args.posteriors.split(","):
                ua.registry.resolve_name(name)
        check_device(args.device, "--device")
    except ValueError as err:
        p.error(str(err))
    replace = tuple(label for label in args.replace.split(",") if label)
    if replace and not args.merge:
        p.error("--replace goes with --merge FOLDER (the folder whose runs replace those of --out)")
    if args.report_only or args.merge:
        record_run(args.out, command)  # appends commit, command line and versions to {out}/manifest.json
    for source in args.merge:
        try:
            merge_folder(source, args.out, replace, allow_mixed_seeding=args.allow_mixed_seeding)
        except ValueError as err:
            p.error(str(err))
    if args.report_only or args.merge:
        return report(args.out, args.steps, protocol, page=args.page)
    posteriors = ua.available_posteriors() if args.posteriors == "all" else args.posteriors.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    done = pd.read_csv(runs_path) if runs_path.is_file() else pd.DataFrame()
    if not done.empty and "protocol" not in done:
        done["protocol"] = "default"
    if not done.empty:  # rows without the column predate session 39: their first fit followed the round robin
        done["first_fit"] = done["first_fit"].fillna("warmup") if "first_fit" in done else "warmup"
        stale = done[(done["protocol"] == protocol) & (done["first_fit"] != first_fit(protocol))
                     & ~done["label"].isin(["uniform", "linear"])]  # the agents that never fit are unchanged
        if not stale.empty:
            p.error(f"{args.out} holds {len(stale)} {protocol} run(s) made with a first fit right after the round "
                    f"robin (before session 39); new trials would mix two protocols in one table. Use a new --out")
    only = set(filter(None, args.only.split(",")))
    unknown = sorted(only - {"uniform"} - {label for label, *_ in specs(posteriors)})
    if unknown:
        p.error(f"--only: unknown labels {unknown}; with --posteriors {args.posteriors}: "
                f"{[label for label, *_ in specs(posteriors)]}")
    todo = []
    for env_name in args.envs.split(","):
        for trial in range(args.first_trial, args.first_trial + args.trials):
            for label, agent_name, post, options in specs(posteriors):
                if only and label not in only and label != "uniform":
                    continue
                if not done.empty and ((done["env"] == env_name) & (done["label"] == label)
                                       & (done["trial"] == trial) & (done["steps"] == args.steps)
                                       & (done["protocol"] == protocol)).any():
                    continue
                todo.append((env_name, label, agent_name, post, options, trial, args.seed + trial, args.steps,
                             args.delta, protocol, args.device, args.log_every))
    try:
        mixed = runs_of_other_seeding(done, todo)
    except ValueError as err:  # a malformed seeding cell
        p.error(f"{runs_path}: {err}")
    if mixed and not args.allow_mixed_seeding:
        p.error(f"{args.out} holds {mixed} made under an earlier seeding scheme (uncertain_agents.seeding; today's is "
                f"{SEEDING_SCHEME}): new trials of those agents would draw other random numbers, so the table would "
                "mix two realisations of them. Use a new --out, or pass --allow-mixed-seeding to add them anyway "
                "(bandit_runs.csv's seeding column records which scheme made each run)")
    record_run(args.out, command)  # appends commit, command line and versions to {out}/manifest.json
    mode = parallel_mode(args.parallel, args.device)
    if args.log_every > 0 and not (args.out / "progress.csv").is_file():
        append_progress(args.out / "progress.csv", [PROGRESS_COLUMNS])
    tasks = [(run_one, task) for task in todo]
    if mode == "batched":  # a Thompson agent's pending trials of one environment as one lock-step model
        groups: dict[tuple[str, str], list[tuple]] = {}
        singles = []
        for task in todo:
            env_name, label, agent_name, post, options, *_ = task
            if trials_batchable(AgentSpec(agent_name, post, options), protocol):
                groups.setdefault((env_name, label), []).append(task)
            else:
                singles.append(task)
        tasks = [(run_one, task) for task in singles]
        for (env_name, label), group in groups.items():
            _, _, _, post, options = group[0][:5]
            tasks.append((run_batched, (env_name, label, post, options, [t[5] for t in group], [t[6] for t in group],
                                        args.steps, args.delta, protocol, args.device, args.log_every,
                                        str(args.out / "progress.csv"))))
        mode = parallel_mode("auto", args.device)
    if args.workers == 1:
        mode = "threads"  # one run at a time: in this process (a single worker thread), no spawned process
    if mode == "threads":
        # one process: every run on its own CUDA stream (docs/speed.md, "GPU": streams of one
        # context overlap on the device, processes time-slice it)
        slots = StreamSlots(args.device, max(1, min(args.workers, len(tasks))))
        pool = ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="table-run")
        futures = {pool.submit(slots.run, fn, *task): task for fn, task in tasks}
    else:
        # spawned workers (a forked child cannot initialise CUDA) that stop if the table is killed
        pool = spawn_pool(args.workers)
        futures = {pool.submit(fn, *task): task for fn, task in tasks}
    t_start = time.perf_counter()
    with pool:
        for fut in as_completed(futures):
            result = fut.result()
            if isinstance(result, str):
                print(result, flush=True)
                continue
            for row, curve in (result if isinstance(result, list) else [result]):
                write_run(args.out, runs_path, row, curve)
                print(f"{row['env']} {row['label']} trial {row['trial']}: regret {row['cumulative_regret']:.1f} "
                      f"({row['seconds']:.1f} s; {time.perf_counter() - t_start:.1f} s since the start)", flush=True)
    if todo:
        print(f"{len(todo)} runs in {time.perf_counter() - t_start:.1f} s wall time "
              f"({args.workers} at a time, --parallel {args.parallel}, device {args.device})", flush=True)
    return report(args.out, args.steps, protocol, page=args.page)


def report(out: Path, steps: int, protocol: str = "default", page: Path | None = None) -> int:
    """Write ``bandit_table.md``, one regret-curve PNG per environment and, if asked, a results page."""
    runs = pd.read_csv(out / "bandit_runs.csv")
    if "protocol" not in runs:
        runs["protocol"] = "default"
    text = table(runs[runs["protocol"] == protocol], steps)
    mixed = {key: schemes for key, schemes in schemes_of_posterior_runs(runs[runs["protocol"] == protocol]).items()
             if len(schemes) > 1}
    if mixed:  # a folder filled with --allow-mixed-seeding says so beside its table
        text += "\n\nRuns made under more than one seeding scheme (uncertain_agents.seeding; the seeding column of " \
                "bandit_runs.csv): " + "; ".join(f"{env} {label}: schemes {sorted(schemes)}"
                                                  for (env, label), schemes in sorted(mixed.items()))
    text += "\n\n" + per_trial_table(runs[runs["protocol"] == protocol], steps)
    unfinished = partial_table(out, runs, steps, protocol)
    if unfinished:
        text += "\n\n" + unfinished
    print(text)
    atomic_write_text(out / "bandit_table.md", text + "\n")
    curves = pd.read_csv(out / "curves.csv")
    if "protocol" in curves:
        curves = curves[curves["protocol"] == protocol]
    # a folder may hold runs of several horizons (an earlier --steps): keep this horizon's points,
    # and where two runs of one (env, agent, trial) share a step, the later-appended one
    key = [c for c in ("env", "protocol", "label", "trial", "step") if c in curves]
    curves = curves[curves["step"] <= steps].drop_duplicates(key, keep="last")
    for env_name, g in curves.groupby("env", sort=False):
        plot_regret(g, out / f"regret_{env_name}.png", title=f"{env_name}: mean ± s.e. over trials")
    if page is not None:
        write_page(page, out, runs[runs["protocol"] == protocol], text, steps, protocol)
    return 0


def partial_table(out: Path, runs: pd.DataFrame, steps: int, protocol: str) -> str:
    """Runs of this horizon that checkpointed (``progress.csv``, batched groups with ``--log-every``)
    but did not finish: the decisions reached and the normalised regret there (100 × cumulative
    regret / Uniform's at the same decision, from ``curves.csv``), mean ± s.e. over trials."""
    path = out / "progress.csv"
    if not path.is_file() or not (out / "curves.csv").is_file():
        return ""
    progress = pd.read_csv(path)
    progress = progress[(progress["protocol"] == protocol) & (progress["steps"] == steps)]
    done = set(zip(runs["env"], runs["label"], runs["trial"])) if not runs.empty else set()
    progress = progress[[key not in done for key in zip(progress["env"], progress["label"], progress["trial"])]]
    if progress.empty:
        return ""
    curves = pd.read_csv(out / "curves.csv")
    uniform = curves[(curves["label"] == "uniform") & (curves.get("protocol", protocol) == protocol)]
    uniform = uniform.drop_duplicates(["env", "trial", "step"], keep="last").set_index(["env", "trial", "step"])
    last = progress.sort_values("decisions").groupby(["env", "label", "trial"]).tail(1)
    lines = [f"Unfinished runs at {steps:,} steps (last checkpoint in progress.csv):", "",
             "| env | agent | trials | decisions reached | normalised regret there | seconds |", "|---|---|---|---|---|---|"]
    for (env, label), g in last.groupby(["env", "label"], sort=False):
        keys = list(zip(g["env"], g["trial"], g["decisions"]))
        base = uniform["cumulative_regret"].reindex(keys).to_numpy()
        norm = 100.0 * g["cumulative_regret"].to_numpy() / base
        norm = norm[np.isfinite(norm)]
        if len(norm) == 0:
            mean = "n/a (no Uniform curve point there)"
        else:
            mean = f"{norm.mean():.2f}" + (f" ± {norm.std(ddof=1) / np.sqrt(len(norm)):.2f}" if len(norm) > 1 else "")
        lines.append(f"| {env} | {label} | {len(g)} | {int(g['decisions'].min()):,} | {mean} | "
                     f"{g['seconds'].max():.0f} |")
    return "\n".join(lines)


def write_page(page: Path, out: Path, runs: pd.DataFrame, text: str, steps: int, protocol: str) -> None:
    """A results page for docs/results: what was run, at which scale, by which command, the
    table with the published figures beside ours, and the regret plots."""
    from uncertain_agents.runs import git_commit

    page.parent.mkdir(parents=True, exist_ok=True)
    plots = os.path.relpath(out, page.parent)
    reference = os.path.relpath(Path(__file__).resolve().parent / "reference" / "fsvgd_bandit_regret_table3.csv",
                                page.resolve().parent)
    runs = runs[runs["steps"] == steps]
    trials = runs.groupby(["env", "label"]).size()
    counts = f"{trials.min()}" if trials.min() == trials.max() else f"{trials.min()}–{trials.max()}"
    labels = list(dict.fromkeys(runs["label"]))
    spec = Path(__file__).resolve().parent / "specs" / "fsvgd_bandits.toml"
    if protocol == "fsvgd-paper" and spec.is_file():  # the rows of the paper's table, as the grid spec lists them
        from uncertain_agents.grid import load_spec
        from uncertain_agents.grid.table import method_label

        labels = [method_label(m) for m in load_spec(spec).methods]
    missing = {env: [lab for lab in labels if lab not in set(g["label"])] for env, g in runs.groupby("env", sort=False)}
    missing_text = "; ".join(f"{env}: {', '.join(f'`{lab}`' for lab in labs)}" for env, labs in missing.items() if labs)
    lines = [
        f"# Contextual bandits, `{protocol}` protocol: normalised regret at {steps:,} steps", "",
        "Thompson sampling with each posterior beside Uniform, LinFullPost (`linear`) and "
        "NeuralLinear on the wheel bandit (δ = 0.95) and the mushroom bandit. Normalised regret = "
        "100 × cumulative regret / Uniform's in the same trial (mean ± s.e. over trials); trial i "
        "uses seed i for the environment and the agent.", "",
        "Published numbers: Wang, Ren, Zhu & Zhang (ICLR 2019), Table 3 "
        f"(`{reference}`), 50,000 rounds and 10 trials, "
        "and Riquelme et al. (2018) for LinFullPost on the wheel; they are shown only beside δ = 0.95.", "",
        f"Scale: {steps:,} steps and {counts} trials per row (the count is in the table) on a 2-core "
        "CPU, against the paper's 50,000 steps and 10 trials. A learner's regret grows more slowly "
        "than Uniform's, so normalised figures over fewer rounds sit above the paper's and only the "
        "ranking compares directly." + (f" Not run yet at this scale: {missing_text}." if missing_text else ""), "",
        "Produced by (resumable; labels were run one group at a time, docs/bandits.md):", "",
        f"    UNCERTAIN_AGENTS_DATA=../shared/data python experiments/bandit_table.py --envs wheel,mushroom "
        f"--steps {steps} --trials 5 --protocol {protocol} --only LABELS --out {out}",
        f"    python experiments/bandit_table.py --report-only --steps {steps} --protocol {protocol} "
        f"--out {out} --page {page}    # commit {git_commit() or 'unknown'}", "",
        text.strip(), "",
        f"![wheel]({plots}/regret_wheel.png)", "", f"![mushroom]({plots}/regret_mushroom.png)", "",
    ]
    atomic_write_text(page, "\n".join(lines))


def table(runs: pd.DataFrame, steps: int) -> str:
    """Markdown table: normalised regret per env and label — mean ± s.e. and median over trials,
    and, where LinFullPost (``linear``) ran the same trials, the paired difference to it
    (mean ± s.e. of the per-trial differences) and in how many trials the agent is below it."""
    runs = runs[runs["steps"] == steps]
    lines = []
    for env_name, g in runs.groupby("env", sort=False):
        uniform, normalised = _normalised(g)
        linear = normalised.get("linear")
        lines += [f"\n{env_name}, {steps} steps (Uniform = 100)\n",
                  "| agent | trials | cumulative regret | normalised regret | median | − LinFullPost (paired) "
                  "| below LinFullPost | published (50k steps) | s / run |",
                  "|---|---|---|---|---|---|---|---|---|"]
        # the published wheel figures are for δ = 0.95 only
        comparable = env_name != "wheel" or ("delta" in g and set(g["delta"].round(6)) == {0.95})
        for label, h in g.groupby("label", sort=False):
            h = h[h["trial"].isin(uniform.index)].drop_duplicates("trial", keep="last")
            norm = normalised[label]
            paired, below = "", ""
            if linear is not None and label not in ("linear", "uniform"):
                common = norm.index.intersection(linear.index)
                if len(common):
                    diff = (norm.loc[common] - linear.loc[common]).to_numpy()
                    paired = f"{diff.mean():+.2f} ± {_se(diff):.2f}"
                    below = f"{int((diff < 0).sum())} of {len(diff)}"
            lines.append(f"| {label} | {len(h)} | {h['cumulative_regret'].mean():.1f} ± "
                         f"{_se(h['cumulative_regret'].to_numpy()):.1f} | {norm.mean():.2f} ± {_se(norm.to_numpy()):.2f} "
                         f"| {norm.median():.2f} | {paired} | {below} "
                         f"| {PUBLISHED.get((env_name, label), '') if comparable else ''} | {h['seconds'].mean():.1f} |")
    return "\n".join(lines)


def per_trial_table(runs: pd.DataFrame, steps: int) -> str:
    """Markdown tables, one per env: each agent's normalised regret in every trial (columns), so
    that a mean carried by one trial (a run that never eats) shows as such."""
    runs = runs[runs["steps"] == steps]
    lines = []
    for env_name, g in runs.groupby("env", sort=False):
        uniform, normalised = _normalised(g)
        trials = sorted(uniform.index)
        if not trials:
            continue
        lines += [f"\n{env_name}, {steps} steps, normalised regret per trial\n",
                  "| agent | " + " | ".join(str(t) for t in trials) + " |",
                  "|---|" + "---:|" * len(trials)]
        for label, norm in normalised.items():
            if label == "uniform":
                continue
            cells = [f"{norm[t]:.2f}" if t in norm.index else "" for t in trials]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _normalised(runs: pd.DataFrame) -> tuple[pd.Series, dict[str, pd.Series]]:
    """One environment's runs -> (Uniform's cumulative regret by trial, per label the normalised
    regret by trial on the trials Uniform ran); a trial run twice counts as its last run."""
    runs = runs.drop_duplicates(["label", "trial"], keep="last")
    uniform = runs[runs["label"] == "uniform"].set_index("trial")["cumulative_regret"]
    normalised = {}
    for label, h in runs.groupby("label", sort=False):
        h = h[h["trial"].isin(uniform.index)]
        normalised[label] = pd.Series(100 * h["cumulative_regret"].to_numpy()
                                      / uniform.loc[h["trial"]].to_numpy(), index=h["trial"].to_numpy())
    return uniform, normalised


def _se(values: np.ndarray) -> float:
    """Standard error of the mean (NaN for fewer than two values)."""
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else float("nan")


if __name__ == "__main__":
    sys.exit(main())
