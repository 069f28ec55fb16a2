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
            values = values[~np.isnan(values)]  # missing; an infinite value (an NLL of +inf) is kept, not hidden
            row[m] = float(values.mean()) if len(values) else float("nan")
            spread = len(values) > 1 and np.isfinite(values).all()  # no s.e. around an infinite mean
            row[f"{m}_se"] = float(values.std(ddof=1) / math.sqrt(len(values))) if spread else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def format_pm(mean: float, se: float) -> str:
    if np.isnan(mean):
        return "—"
    if np.isinf(mean):
        return "inf" if mean > 0 else "-inf"
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


def split_sweeps(metric_names: list[str]) -> tuple[list[str], dict[str, list[tuple[float, str]]]]:
    """Separate plain metrics from swept ones named ``base@value`` (e.g. ``accuracy@0.1``).

    Returns ``(plain, sweeps)`` with ``sweeps[base] = [(value, metric name), ...]`` sorted by
    value. A name whose part after ``@`` is not a number stays plain.
    """
    plain, sweeps = [], {}
    for m in metric_names:
        base, sep, value = m.partition("@")
        try:  # steps stay integers (shown as 5, not 5.0)
            x = (int(value) if value.lstrip("-").isdigit() else float(value)) if sep else None
        except ValueError:
            x = None
        if x is None:
            plain.append(m)
        else:
            sweeps.setdefault(base, []).append((x, m))
    return plain, {b: sorted(v) for b, v in sweeps.items()}


def long_sweep_table(table: pd.DataFrame, sweeps: dict[str, list[tuple[float, str]]], keys: list[str],
                     axis: str = "value") -> pd.DataFrame:
    """The swept metrics of an aggregated ``table`` in long form: one row per configuration
    (its ``keys`` columns, e.g. ``method`` and ``n``) and sweep value, one ``base`` (and
    ``base_se``) column per swept metric; values a metric was not measured at are NaN.
    ``axis`` names the sweep column (e.g. ``epsilon``)."""
    values = sorted({x for pairs in sweeps.values() for x, _ in pairs})
    rows = []
    for _, row in table.iterrows():
        for x in values:
            out = {k: row[k] for k in keys}
            out[axis] = x
            for base, pairs in sweeps.items():
                name = dict((v, m) for v, m in pairs).get(x)
                out[base] = row[name] if name else float("nan")
                out[f"{base}_se"] = row[f"{name}_se"] if name else float("nan")
            rows.append(out)
    return pd.DataFrame(rows)


def shown_tables(table: pd.DataFrame, metric_names: list[str], axis_of=lambda base: "value"
                 ) -> tuple[pd.DataFrame, list[tuple[str, pd.DataFrame, list[str]]]]:
    """What a table view shows of an aggregated ``table``: the plain metrics as "mean ± s.e."
    text per configuration, and per sweep axis (``axis_of(base)``, e.g. ``epsilon``) the
    swept metrics in long form (numeric) with their base names."""
    plain, sweeps = split_sweeps(metric_names)
    keys = [c for c in table.columns if c not in metric_names and not c.endswith("_se")]
    shown = display_frame(table[keys + [c for m in plain for c in (m, f"{m}_se")]], plain)
    by_axis: dict[str, dict] = {}
    for base, pairs in sweeps.items():
        by_axis.setdefault(axis_of(base), {})[base] = pairs
    longs = [(axis, long_sweep_table(table, group, keys, axis), list(group)) for axis, group in by_axis.items()]
    return shown, longs
