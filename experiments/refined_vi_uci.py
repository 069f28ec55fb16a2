"""Refined VI against mean-field VI on UCI regression, beside the paper's Table 1.

The standard splits of each data set (20; 5 for protein; the paper used random 80/20 splits),
1 × 50 ReLU, both methods' defaults (``uncertain_agents.regression.run_uci``, the same runner
as ``uncertain-agents regress``). VI training: on the five small data sets 500 epochs at batch
32 (the UCI protocol of Hernández-Lobato & Adams); on the large ones (kin8nm, naval, power,
protein) the paper's own protocol, about 30,000 iterations at batch 256. Each (data set, method) writes
``<out>/<dataset>/<method>/splits.csv`` and ``summary.json``; existing ones are skipped, so
the table grows run by run. Test NLL per point, mean ± s.e. over splits; the paper's test
log-likelihood (mean ± sd) is negated into an NLL beside it.

    UNCERTAIN_AGENTS_DATA=../shared/data OMP_NUM_THREADS=1 python experiments/refined_vi_uci.py \\
        --datasets yacht energy concrete wine-quality-red --out experiments/results/refined_vi_uci
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from uncertain_agents.regression import UCIConfig, UCIDataset, run_uci, write_run
from uncertain_agents.runs import atomic_write_text, record_run

PAPER_NAMES = {"bostonHousing": "boston_housing", "concrete": "concrete_strength", "energy": "energy_efficiency",
               "yacht": "yacht_hydrodynamics", "wine-quality-red": "wine", "kin8nm": "kin8nm",
               "naval-propulsion-plant": "naval_propulsion", "power-plant": "power_plant",
               "protein-tertiary-structure": "protein_structure"}
METHODS = ("mfvi", "refined-vi")
LARGE = {"kin8nm", "naval-propulsion-plant", "power-plant", "protein-tertiary-structure"}
N_ROWS = {"bostonHousing": 506, "concrete": 1030, "energy": 768, "yacht": 308, "wine-quality-red": 1599,
          "kin8nm": 8192, "naval-propulsion-plant": 11934, "power-plant": 9568, "protein-tertiary-structure": 45730}
PAPER_ITERATIONS, PAPER_BATCH = 30_000, 256


def protocol(dataset: str) -> dict:
    """``epochs`` and ``batch_size`` of the VI phase for ``dataset`` (see the module docstring)."""
    if dataset not in LARGE:
        return {"epochs": 500, "batch_size": 32}
    n_train = UCIDataset(dataset).split(0).x_train.shape[0]
    return {"epochs": math.ceil(PAPER_ITERATIONS / math.ceil(n_train / PAPER_BATCH)), "batch_size": PAPER_BATCH}
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "refined_vi_uci_table1.csv"


def paper_values(dataset: str) -> dict[str, tuple[float, float]]:
    """The paper's ``{(method, metric): (mean, sd)}``: test NLL (negated MLL) and ELBO per training point."""
    if not REFERENCE.exists():
        return {}
    ref = pd.read_csv(REFERENCE)
    rows = ref[ref.dataset == PAPER_NAMES.get(dataset)]
    n_train = round(0.8 * N_ROWS[dataset])
    out = {}
    for _, r in rows.iterrows():
        key = "mfvi" if r.method.startswith("VI") else ("refined-vi" if r.method.startswith("Refined") else None)
        if key is None:
            continue
        if r.metric == "test_mll":
            out[key, "nll"] = (-float(r["mean"]), float(r["sd"]))
        elif r.metric in ("elbo", "elbo_lower_bound"):
            out[key, "elbo"] = (float(r["mean"]) / n_train, float(r["sd"]) / n_train)
    return out


def _mean_se(values: pd.Series, digits: int = 3) -> str:
    se = values.std(ddof=1) / len(values) ** 0.5
    return f"{values.mean():.{digits}f} ± {se:.{digits}f}"


def table(out: Path, datasets: list[str]) -> str:
    lines = ["| data set | splits | VI test NLL | refined test NLL | refined better | paper VI / refined NLL (sd) "
             "| VI ELBO | ELBO_aux | ELBO_aux > VI ELBO | paper VI / refined ELBO | VI s | refinement s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in datasets:
        frames = {m: pd.read_csv(out / d / m / "splits.csv") for m in METHODS if (out / d / m / "splits.csv").exists()}
        if len(frames) < 2:
            continue
        a, b = frames["mfvi"].set_index("split"), frames["refined-vi"].set_index("split")
        common = a.index.intersection(b.index)
        a, b = a.loc[common], b.loc[common]
        pub = paper_values(d)
        fmt = lambda k, digits=3: f"{pub[k][0]:.{digits}f} ± {pub[k][1]:.{digits}f}" if k in pub else "—"  # noqa: E731
        row = [d, str(len(common)), _mean_se(a.test_nll), _mean_se(b.test_nll),
               f"{int((b.test_nll < a.test_nll).sum())}/{len(common)}",
               f"{fmt(('mfvi', 'nll'))} / {fmt(('refined-vi', 'nll'))}"]
        if "elbo_aux_final" in b:
            row += [_mean_se(b.elbo_init), _mean_se(b.elbo_aux_final),
                    f"{int((b.elbo_aux_final > b.elbo_init).sum())}/{len(common)}",
                    f"{fmt(('mfvi', 'elbo'))} / {fmt(('refined-vi', 'elbo'))}",
                    f"{b.seconds_vi.mean():.1f}", f"{b.seconds_refine.mean():.1f}"]
        else:
            row += ["—"] * 6
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(N_ROWS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--out", type=Path, default=Path("experiments/results/refined_vi_uci"))
    parser.add_argument("--learn-prior", action="store_true",
                        help="empirical-Bayes prior variance (learn_prior=True) for both methods, as the paper's "
                             "initial VI; default: the library's default prior")
    args = parser.parse_args(argv)
    record_run(args.out)  # appends commit, command line and versions to {out}/manifest.json
    for d in args.datasets:
        for m in args.methods:
            target = args.out / d / m
            if (target / "splits.csv").exists():
                continue
            options = {"learn_prior": True} if args.learn_prior else {}
            config = UCIConfig(dataset=d, posterior=m, hidden=(50,), options=options, **protocol(d))
            write_run(run_uci(config, progress=True), config, target)
    text = table(args.out, args.datasets)
    atomic_write_text(args.out / "table.md", text)
    print(text)


if __name__ == "__main__":
    main()
