"""MNIST adversarial evaluation (Li & Gal 2017 §5.3; Wang et al. 2019 §5.3 / A.3).

Protocol (CPU default; see docs/attacks.md): a 784-400-400-10 ReLU network per
posterior trained on all 60,000 training images (pixels in [0, 1], no standardisation,
batch 128, Adam with the method's default learning rate; options in ``CANDIDATES``), clean accuracy on the 10,000
test images, then on a seeded random subset of test images:

* untargeted FGSM at ε = 0, 0.02, ..., 0.5 (the attacked predictive averages
  ``--n-samples`` functions; the clean inputs and every adversarial batch are scored by one
  fresh set of functions);
* targeted I-FGSM towards class 0 with step 0.01 for 40 steps, on the inputs whose
  label is not 0, scored after every step.

Each posterior's model and results are written as soon as they exist
(``OUT/models/``, ``OUT/per_posterior/``), so an interrupted run resumes where it
stopped; ``--aggregate-only`` rebuilds the tables and plots from what is there.

    OMP_NUM_THREADS=1 UNCERTAIN_AGENTS_DATA=../shared/data \\
        python experiments/mnist_attacks.py --out experiments/results/mnist_attacks
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from attacks.evaluate import (PosteriorChoice, attack_subset, build_classifier, check_loaded, evaluate,  # noqa: E402
                              load_dataset, train_classifier, write_outputs)
from uncertain_agents.registry import available_posteriors, load_posterior  # noqa: E402
from uncertain_agents.runs import atomic_write_csv, atomic_write_text, record_run  # noqa: E402

# prior_std=1: the default 1/sqrt(fan_in) is meant for standardised inputs; on raw [0, 1]
# pixels its L2 penalty dominates the likelihood and the networks underfit (map: 90.2% vs
# 95.7% test accuracy after one epoch).
DROPOUT = {"dropout": 0.5, "input_dropout": 0.0, "train_samples": 10, "prior_std": 1.0}
CANDIDATES = [
    PosteriorChoice("map", "map", {"prior_std": 1.0}),
    PosteriorChoice("dropout α=0", "dropout-alpha", {"alpha": 0.0, **DROPOUT}),
    PosteriorChoice("dropout α=0.5", "dropout-alpha", {"alpha": 0.5, **DROPOUT}),
    PosteriorChoice("dropout α=1", "dropout-alpha", {"alpha": 1.0, **DROPOUT}),
    PosteriorChoice("fsvgd", "fsvgd", {"n_particles": 10}),
    PosteriorChoice("fsvgd (6 ep)", "fsvgd", {"n_particles": 10}),
    PosteriorChoice("mfvi", "mfvi", {}),
    PosteriorChoice("bb-alpha α=0.5", "bb-alpha", {"alpha": 0.5}),
]
TABLE_EPSILONS = (0.1, 0.2, 0.3)
TABLE_STEPS = (10, 20, 40)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="experiments/results/mnist_attacks")
    p.add_argument("--only", nargs="+", default=None, help="labels to run (default: all registered)")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--epochs-for", nargs="*", default=[], metavar="LABEL=EPOCHS",
                   help="per-posterior epochs, e.g. 'map=5' 'fsvgd=1'")
    p.add_argument("--hidden", type=int, nargs="+", default=[400, 400])
    p.add_argument("--n-attack", type=int, default=1000)
    p.add_argument("--n-samples", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--aggregate-only", action="store_true")
    return p.parse_args(argv)


def stem(label: str) -> str:
    return PosteriorChoice(label, "map").file_stem


def run_one(choice, data, args, out: Path, epochs: float) -> None:
    per = out / "per_posterior" / stem(choice.label)
    if (per / "fgsm.csv").is_file() and (per / "ifgsm.csv").is_file():
        print(f"[skip] {choice.label}: results exist", flush=True)
        return
    model_path = out / "models" / f"{stem(choice.label)}.pt"
    if model_path.is_file():  # a cached model must be the one this run would train (method, options, network)
        post, seconds = load_posterior(model_path, map_location=args.device), float("nan")
        check_loaded(post, choice, model_path, hidden=args.hidden)
    else:
        post = build_classifier(choice, data, hidden=args.hidden, seed=args.seed, device=args.device)
        seconds = train_classifier(post, data, epochs=epochs, batch_size=128)
        model_path.parent.mkdir(parents=True, exist_ok=True)
        post.save(model_path)
    print(f"[train] {choice.label}: {epochs} epochs in {seconds:.0f} s", flush=True)
    x_att, y_att = attack_subset(data, args.n_attack, seed=args.seed)
    t0 = time.perf_counter()
    results = evaluate({choice.label: post}, data.x_test, data.y_test, x_att, y_att,
                       n_samples=args.n_samples, seed=args.seed, log=print)
    results["clean"] = results["clean"].assign(train_seconds=seconds, epochs=epochs,
                                               attack_seconds=time.perf_counter() - t0)
    per.mkdir(parents=True, exist_ok=True)
    for name, frame in results.items():
        atomic_write_csv(per / f"{name}.csv", frame)


def aggregate(out: Path, labels: list[str], config: dict) -> None:
    parts = {name: [] for name in ("clean", "fgsm", "ifgsm")}
    for label in labels:
        per = out / "per_posterior" / stem(label)
        for name in parts:
            if (per / f"{name}.csv").is_file():
                parts[name].append(pd.read_csv(per / f"{name}.csv"))
    results = {k: pd.concat(v, ignore_index=True) for k, v in parts.items() if v}
    if not results:
        print("no results yet")
        return
    write_outputs(results, out, config)
    atomic_write_text(out / "table.md", markdown_tables(results))
    print(markdown_tables(results))


def markdown_tables(results: dict) -> str:
    lines = []
    clean = results["clean"]
    lines += ["### Clean test accuracy (10,000 MNIST test images)", "",
              "| posterior | epochs | clean accuracy | train s |", "|---|---|---|---|"]
    for _, r in clean.iterrows():
        lines.append(f"| {r['posterior']} | {r['epochs']:g} | {r['clean_accuracy']:.4f} | {r['train_seconds']:.0f} |")
    if "fgsm" in results:
        f = results["fgsm"]
        lines += ["", "### FGSM (accuracy / mean entropy / AUROC of entropy, clean vs adversarial)", "",
                  "| posterior | ε | accuracy | mean entropy | clean entropy | AUROC (entropy) | AUROC (MI) |",
                  "|---|---|---|---|---|---|---|"]
        for label, g in f.groupby("posterior", sort=False):
            clean_entropy = float(g.loc[g["epsilon"].sub(0).abs().idxmin(), "mean_entropy"])
            for e in TABLE_EPSILONS:
                row = g.loc[(g["epsilon"] - e).abs() < 1e-9]
                if row.empty:
                    continue
                r = row.iloc[0]
                lines.append(f"| {label} | {e:g} | {r['accuracy']:.3f} | {r['mean_entropy']:.3f} | "
                             f"{clean_entropy:.3f} | {r['auroc_entropy']:.3f} | {r['auroc_mutual_information']:.3f} |")
    if "ifgsm" in results:
        t = results["ifgsm"]
        lines += ["", "### Targeted I-FGSM towards 0 (step 0.01)", "",
                  "| posterior | step | accuracy | target success | mean entropy | AUROC (entropy) |",
                  "|---|---|---|---|---|---|"]
        for label, g in t.groupby("posterior", sort=False):
            for k in (0, *TABLE_STEPS):
                row = g.loc[g["step"] == k]
                if row.empty:
                    continue
                r = row.iloc[0]
                lines.append(f"| {label} | {k} | {r['accuracy']:.3f} | {r['target_success']:.3f} | "
                             f"{r['mean_entropy']:.3f} | {r['auroc_entropy']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    registered = set(available_posteriors())
    choices = [c for c in CANDIDATES if c.name in registered]
    skipped = [c.label for c in CANDIDATES if c.name not in registered]
    if skipped:
        print(f"not registered, skipped: {skipped}")
    if args.only:
        unknown = sorted(set(args.only) - {c.label for c in choices})
        if unknown:
            raise SystemExit(f"--only: unknown labels {unknown}; available: {[c.label for c in choices]}")
        choices = [c for c in choices if c.label in args.only]
    epochs_for = {}
    for item in args.epochs_for:
        label, _, value = item.rpartition("=")
        if label not in {c.label for c in CANDIDATES}:
            raise SystemExit(f"--epochs-for: unknown label {label!r}; labels: {[c.label for c in CANDIDATES]}")
        try:
            epochs_for[label] = float(value)
        except ValueError:
            raise SystemExit(f"--epochs-for: {item!r} must be LABEL=EPOCHS with a number of epochs") from None
    record_run(out)  # after the arguments are checked: appends commit, command line and versions to {out}/manifest.json
    config = {k: v for k, v in vars(args).items()}
    config.update(dataset="mnist", target=0, step=0.01, steps=40, batch_size=128,
                  posteriors={c.label: {"name": c.name, **c.options} for c in CANDIDATES
                              if c.name in registered},  # epochs per posterior: clean.csv
                  torch=torch.__version__)
    if not args.aggregate_only:
        data = load_dataset("mnist", args.data_dir)
        for choice in choices:
            run_one(choice, data, args, out, epochs_for.get(choice.label, args.epochs))
            aggregate(out, [c.label for c in CANDIDATES], config)
    aggregate(out, [c.label for c in CANDIDATES], config)
    atomic_write_text(out / "config.json", json.dumps(config, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
