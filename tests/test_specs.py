"""The grid specs in experiments/specs/: each parses, describes itself, and maps its cells onto
rows of its reference CSV (wrong data-set, method or metric names show as "—" in the table).

No cell runs: the table the specs' ``[reference]`` is checked against is built from
``spec.cells()`` with placeholder metric values, through the same aggregation and
``add_reference`` as ``uncertain-agents grid table``.
"""
from __future__ import annotations

import functools
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from uncertain_agents.grid import GridSpec, cell_hash, load_spec
from uncertain_agents.grid.reference import add_reference
from uncertain_agents.grid.table import aggregate, cells_frame, display_frame, method_label

SPEC_DIR = Path(__file__).resolve().parents[1] / "experiments" / "specs"
SPECS = sorted(SPEC_DIR.glob("*.toml"))
WITH_REFERENCE = [p for p in SPECS if "reference" in tomllib.loads(p.read_text())]
TWINS = [p for p in SPECS if p.stem.endswith("_rmse")]

# The specs of the published tables (the rest of the folder is checked the same way).
PAPER_SPECS = ["dropout_alpha_uci", "dropout_alpha_uci_rmse", "dropout_alpha_uci_protein",
               "dropout_alpha_uci_protein_rmse", "fsvgd_uci", "fsvgd_uci_rmse", "fsvgd_uci_small",
               "fsvgd_uci_small_rmse", "fsvgd_uci_protein", "fsvgd_uci_protein_rmse", "fsvgd_bandits",
               "dropout_alpha_mnist_attacks", "dropout_alpha_mnist_targeted", "refined_vi_uci_large",
               "refined_vi_uci_protein"]

# Metrics each job writes into a cell (a reference may only map these).
JOB_METRICS = {
    "regress": {"test_nll", "test_rmse", "train_seconds"},
    "toy": {"test_nll", "test_rmse", "fit_seconds"},
    "bandit": {"cumulative_regret", "normalised_regret", "uniform_regret", "seconds", "eat_fraction_last_1000"},
    "attack": {"clean_accuracy", "clean_entropy", "train_seconds"},
}

# Standard UCI splits per data set (the data folder's n_splits.txt): a split beyond them fails
# only when its cell runs, hours into a grid.
UCI_SPLITS = {"protein-tertiary-structure": 5}


@functools.cache
def spec_of(path: Path) -> GridSpec:
    return load_spec(path)


def ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def labels(spec: GridSpec) -> list[str]:
    return [method_label(m) for m in spec.methods]


def paper_table(spec: GridSpec) -> pd.DataFrame:
    """The grid table of ``spec`` as ``grid table`` shows it, every cell finished with a
    placeholder value, and the paper's columns beside it."""
    metrics = sorted(spec.reference.get("metrics", {}))
    records = [{"config": cell, "metrics": {m: 0.0 for m in metrics}} for cell in spec.cells()]
    table = display_frame(aggregate(cells_frame(records), spec.job.replicate, metrics), metrics)
    return add_reference(table, spec.reference, Path(spec.source).parent)


def reference_csv(spec: GridSpec) -> pd.DataFrame:
    return pd.read_csv(Path(spec.source).parent / spec.reference["csv"])


def test_the_papers_tables_have_specs():
    missing = sorted(set(PAPER_SPECS) - {p.stem for p in SPECS})
    assert not missing, f"no spec in {SPEC_DIR} for {missing}"


@pytest.mark.parametrize("path", SPECS, ids=ids(SPECS))
def test_spec_parses_and_describes_itself(path):
    spec = spec_of(path)
    assert spec.description.strip(), f"{path.name}: no description"
    assert spec.cells(), f"{path.name}: no cells"


@pytest.mark.parametrize("path", SPECS, ids=ids(SPECS))
def test_uci_splits_exist(path):
    spec = spec_of(path)
    if spec.kind != "regress":
        pytest.skip("not a UCI grid")
    beyond = sorted({(c["dataset"], c["split"]) for c in spec.cells()
                     if c["split"] >= UCI_SPLITS.get(c["dataset"], 20)})
    assert not beyond, f"{path.name}: splits the data sets do not have: {beyond}"


@pytest.mark.parametrize("path", WITH_REFERENCE, ids=ids(WITH_REFERENCE))
def test_reference_names_keys_the_grid_has(path):
    spec = spec_of(path)
    ref = spec.reference
    assert (Path(spec.source).parent / ref["csv"]).is_file(), f"{path.name}: {ref['csv']} not found"
    assert ref.get("paper") and ref.get("note"), f"{path.name}: reference needs a paper and a note"
    unknown_metrics = set(ref["metrics"]) - JOB_METRICS[spec.kind]
    assert not unknown_metrics, f"{path.name}: a {spec.kind} cell has no metric {sorted(unknown_metrics)}"
    unknown_labels = set(ref.get("methods", {})) - set(labels(spec))
    assert not unknown_labels, f"{path.name}: reference.methods names no method of the grid: {sorted(unknown_labels)}"
    match = ref.get("match")
    if match:
        # the table keeps only keys that vary; a fixed match key belongs in reference.fixed
        assert len(spec.cross.get(match, [])) > 1, f"{path.name}: match key {match!r} must vary in [cross]"
        values = {str(c[match]) for c in spec.cells()}
        unknown_values = set(ref.get("datasets", {})) - values
        assert not unknown_values, f"{path.name}: reference.datasets keys no {match} of the grid: {unknown_values}"


@pytest.mark.parametrize("path", WITH_REFERENCE, ids=ids(WITH_REFERENCE))
def test_every_mapped_cell_finds_a_published_row(path):
    spec = spec_of(path)
    csv_methods = set(reference_csv(spec)["method"].astype(str))
    mapped = set(spec.reference.get("methods", {})) | (set(labels(spec)) & csv_methods)
    assert mapped, f"{path.name}: no method of the grid is mapped to the paper"
    table = paper_table(spec)
    rows = table[table["method"].isin(mapped)]
    assert len(rows), f"{path.name}: the mapped methods have no row in the table"
    for metric in spec.reference["metrics"]:
        column = f"paper {metric}"
        missing = rows[rows[column] == "—"].drop(columns=[c for c in rows if c.startswith("paper ")])
        assert missing.empty, f"{path.name}: no published {metric} for\n{missing.to_string(index=False)}"


def test_a_published_value_carries_the_sign_and_spread():
    spec = spec_of(SPEC_DIR / "refined_vi_uci_large.toml")
    table = paper_table(spec).set_index(["method", "dataset"])
    # Table 1 prints kin8nm VI test log-likelihood 1.066 ± 0.019 (sd); we show it as an NLL
    assert table.loc[("mfvi", "kin8nm"), "paper test_nll"] == "-1.066 ± 0.019 (sd)"


@pytest.mark.parametrize("path", TWINS, ids=ids(TWINS))
def test_a_table_pair_shares_its_cells(path):
    """``X_rmse.toml`` runs into the same folder as ``X.toml`` and must find all its cells."""
    twin = path.with_name(path.stem.removesuffix("_rmse") + ".toml")
    assert twin.is_file(), f"{path.name}: no {twin.name} to share its cells with"
    ours, theirs = spec_of(path), spec_of(twin)
    assert [cell_hash(c) for c in ours.cells()] == [cell_hash(c) for c in theirs.cells()]
    assert ours.reference["csv"] != theirs.reference["csv"]


def test_the_small_dropout_grid_is_part_of_the_full_one():
    """``dropout_alpha_uci_small`` runs a subset of ``dropout_alpha_uci``'s cells: the same
    files, so the full grid run into the same folder later skips them."""
    small, full = spec_of(SPEC_DIR / "dropout_alpha_uci_small.toml"), spec_of(SPEC_DIR / "dropout_alpha_uci.toml")
    small_hashes = {cell_hash(c) for c in small.cells()}
    assert len(small_hashes) == 240
    assert small_hashes <= {cell_hash(c) for c in full.cells()}
