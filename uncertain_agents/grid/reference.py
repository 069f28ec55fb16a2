"""Published numbers beside a grid's table.

A spec's ``[reference]`` table says where the paper's numbers are and how its rows map to
the grid's::

    [reference]
    csv = "../reference/refined_vi_uci_table1.csv"   # relative to the spec file
    paper = "Havasi et al. (2020), Table 1"
    note = "the paper used random 80/20 splits; we use the 20 standard splits"
    match = "dataset"                                 # the grid key matched to the CSV's dataset
    datasets = { bostonHousing = "boston_housing" }   # grid value -> CSV dataset
    methods = { mfvi = "VI (mean-field)" }           # grid method label -> CSV method, or
                                                      # -> { method = "AADM", setting = "alpha=1.0" }
    metrics = { test_nll = { metric = "test_mll", sign = -1 } }   # grid metric -> CSV metric

The CSVs follow ``../shared/reference/PROTOCOLS.md`` §0 (``mean``, ``se``, ``sd``,
``spread_kind`` per row).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

REFERENCE_KEYS = {"csv", "paper", "note", "match", "datasets", "methods", "metrics", "fixed"}


def check_reference(reference: dict, where: str) -> None:
    unknown = sorted(set(reference) - REFERENCE_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} in reference; valid: {sorted(REFERENCE_KEYS)}")
    if reference and not isinstance(reference.get("csv"), str):
        raise ValueError(f"{where}: reference.csv must be a path to a CSV file")
    for key in ("datasets", "methods", "metrics", "fixed"):
        if not isinstance(reference.get(key, {}), dict):
            raise ValueError(f"{where}: reference.{key} must be a table")


def reference_csv(reference: dict, base: Path, where: str = "spec") -> Path:
    """The resolved path of ``reference.csv`` (relative to ``base``, the spec file's folder);
    raises ``FileNotFoundError`` naming the key and the path when there is no such file."""
    path = (Path(base) / reference["csv"]).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{where}: reference.csv {reference['csv']!r} names no file (looked for {path})")
    return path


def published_value(row: pd.Series, sign: float) -> str:
    """``mean ± spread (kind)`` of one CSV row, with ``sign`` applied to the mean."""
    mean = sign * float(row["mean"])
    for col, kind in (("se", "s.e."), ("sd", "sd")):
        value = row.get(col)
        if value is not None and value == value and str(value) != "":
            return f"{mean:.3f} ± {float(value):.3f} ({kind})"
    return f"{mean:.3f}"


def add_reference(table: pd.DataFrame, reference: dict, base: Path) -> pd.DataFrame:
    """``table`` with one ``paper <metric>`` text column per mapped metric (— where the paper
    has no such row)."""
    if not reference:
        return table
    ref = pd.read_csv(reference_csv(reference, base))
    for key, value in reference.get("fixed", {}).items():  # e.g. setting = "alpha=0.5"
        ref = ref[ref[key].astype(str) == str(value)]
    match, datasets, methods = reference.get("match"), reference.get("datasets", {}), reference.get("methods", {})
    out = table.copy()
    for ours, spec in reference.get("metrics", {}).items():
        values = []
        for _, row in table.iterrows():
            rows = ref[ref["metric"] == spec["metric"]]
            wanted = methods.get(row["method"], row["method"])
            for column, value in (wanted.items() if isinstance(wanted, dict) else [("method", wanted)]):
                rows = rows[rows[column].astype(str) == str(value)]
            if match:
                rows = rows[rows["dataset"] == datasets.get(str(row[match]), str(row[match]))]
            values.append(published_value(rows.iloc[0], float(spec.get("sign", 1.0))) if len(rows) else "—")
        out[f"paper {ours}"] = values
    return out

