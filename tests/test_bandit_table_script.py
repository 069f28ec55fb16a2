"""experiments/bandit_table.py: batched groups, their checkpoints, and the table of unfinished runs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "bandit_table.py"


def _script():
    spec = importlib.util.spec_from_file_location("bandit_table_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_batched_table_checkpoints_and_reports_unfinished_runs(tmp_path):
    table = _script()
    out = tmp_path / "table"
    args = ["--envs", "wheel", "--steps", "100", "--trials", "2", "--protocol", "showdown", "--posteriors", "mfvi",
            "--only", "thompson[mfvi],linear", "--parallel", "batched", "--log-every", "20", "--workers", "1", "--out", str(out)]
    assert table.main(args) == 0
    runs = pd.read_csv(out / "bandit_runs.csv")
    assert sorted(runs["label"].unique()) == ["linear", "thompson[mfvi]", "uniform"]
    assert (runs.loc[runs["label"] == "thompson[mfvi]", "parallel"] == "batched").all()
    assert len(runs) == 6
    progress = pd.read_csv(out / "progress.csv")
    assert sorted(progress["decisions"].unique()) == [20, 40, 60, 80, 100]
    assert set(progress["trial"]) == {0, 1}
    final = progress[progress["decisions"] == 100].set_index("trial")["cumulative_regret"]
    done = runs[runs["label"] == "thompson[mfvi]"].set_index("trial")["cumulative_regret"]
    assert (final - done.reindex(final.index)).abs().max() < 1e-2  # the checkpoint is the run's regret
    assert table.partial_table(out, runs, 100, "showdown") == ""  # everything finished
    # a table killed before its Thompson runs finished still reports where they got to, normalised
    # by Uniform's regret at the same decision (its curve has a point every 50)
    unfinished = table.partial_table(out, runs[runs["label"] != "thompson[mfvi]"], 100, "showdown")
    assert "thompson[mfvi]" in unfinished and "| 2 | 100 |" in unfinished
    uniform = runs[runs["label"] == "uniform"].set_index("trial")["cumulative_regret"]
    expected = (100 * done / uniform).mean()
    assert f"{expected:.2f} ±" in unfinished
