"""Aggregating a grid folder: one row per configuration, mean ± s.e. over the replicate key."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd


def method_label(method: dict) -> str:
    """``label`` if the spec gave one, else ``agent[posterior]`` / ``posterior`` with options."""
    if method.get("label"):
        return str(method["label"])
    name = method.get("posterior") or ""
    if method.get("agent") and method["agent"] not in ("thompson",):
        name = f"{method['agent']}[{name}]" if name else method["agent"]
    if method.get("options"):
        name += "(" + ", ".join(f"{k}={v}" for k, v in sorted(method["options"].items())) + ")"
    return name


def cells_frame(records: list[dict]) -> pd.DataFrame:
    """One row per finished cell: ``method``, the configuration's varying keys, the metrics."""
    rows = []
    for r in records:
        config = {k: v for k, v in r["config"].items() if k not in ("kind", "method")}
        config = {k: (tuple(v) if isinstance(v, list) else v) for k, v in config.items()}
        rows.append({"method": method_label(r["config"]["method"]), **config, **r["metrics"]})
    return pd.DataFrame(rows)


def aggregate(frame: pd.DataFrame, replicate: str, metric_names: list[str]) -> pd.DataFrame:
    """Mean, standard error and count of every metric over ``replicate`` for each configuration.

    Keys that take one value in the whole grid are dropped from the row labels.
    """
    if frame.empty:
        return frame
    keys = [c for c in frame.columns if c not in metric_names and c != replicate]
    varying = [k for k in keys if k == "method" or frame[k].astype(str).nunique() > 1]
    rows = []
    for group_key, group in frame.groupby(varying, sort=False, dropna=False):
        group_key = group_key if isinstance(group_key, tuple) else (group_key,)
        row = dict(zip(varying, group_key))
        row["n"] = len(group)
        for m in metric_names:
            values = group[m].to_numpy(dtype=float)
            values = values[np.isfinite(values)]
            row[m] = float(values.mean()) if len(values) else float("nan")
            row[f"{m}_se"] = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def format_pm(mean: float, se: float) -> str:
    if not np.isfinite(mean):
        return "—"
    digits = 3 if abs(mean) < 100 else 1
    return f"{mean:.{digits}f}" if not np.isfinite(se) else f"{mean:.{digits}f} ± {se:.{digits}f}"


def display_frame(table: pd.DataFrame, metric_names: list[str]) -> pd.DataFrame:
    """``table`` with each metric as one "mean ± s.e." text column."""
    out = table[[c for c in table.columns if c not in metric_names and not c.endswith("_se")]].copy()
    for m in metric_names:
        out[m] = [format_pm(a, b) for a, b in zip(table[m], table[f"{m}_se"])]
    return out


def to_markdown(frame: pd.DataFrame) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(str(v) for v in row) + " |")
    return "\n".join(lines) + "\n"
