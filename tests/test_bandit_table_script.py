"""experiments/bandit_table.py: batched groups, their checkpoints, and the table of unfinished runs."""
from __future__ import annotations

import pandas as pd
from script_helpers import load_script


def _script():
    return load_script("bandit_table")


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


def test_regret_floor_at_a_longer_horizon(tmp_path):
    """experiments/regret_bound.py: the floor 100·R(T)/U(H) of a run's normalised regret at H ≥ T."""
    table = _script()
    out = tmp_path / "table"
    assert table.main(["--envs", "wheel", "--steps", "60", "--trials", "2", "--only", "linear", "--workers", "1",
                       "--out", str(out)]) == 0
    bound = load_script("regret_bound")
    runs = pd.read_csv(out / "bandit_runs.csv")
    floors = bound.floors(runs, horizon=240)
    assert len(floors) == len(runs) == 4
    for _, row in floors.iterrows():
        run = runs[(runs["label"] == row["label"]) & (runs["trial"] == row["trial"])].iloc[0]
        u_long = bound.uniform_regret("wheel", int(run["seed"]), 240, float(run["delta"]))
        assert row["floor"] == 100 * run["cumulative_regret"] / u_long
        assert row["floor"] < row["normalised"]      # Uniform keeps paying, so the floor is lower
    # Uniform's own floor is its share of its longer run: about T/H
    assert floors.loc[floors["label"] == "uniform", "floor"].between(10, 45).all()
    assert "floor at 240" in bound.summary(floors, 240)


def test_trials_spread_over_folders_merge_into_the_table_of_one_run(tmp_path):
    table = _script()
    common = ["--envs", "wheel", "--steps", "60", "--protocol", "showdown", "--posteriors", "mfvi", "--only", "linear",
              "--workers", "1"]
    assert table.main(common + ["--trials", "3", "--out", str(tmp_path / "whole")]) == 0
    assert table.main(common + ["--trials", "1", "--out", str(tmp_path / "first")]) == 0
    assert table.main(common + ["--first-trial", "1", "--trials", "2", "--out", str(tmp_path / "rest")]) == 0
    rest = pd.read_csv(tmp_path / "rest" / "bandit_runs.csv")
    assert set(rest["trial"]) == {1, 2} and set(rest["seed"]) == {1, 2}

    assert table.main(["--steps", "60", "--protocol", "showdown", "--out", str(tmp_path / "first"),
                       "--merge", str(tmp_path / "rest")]) == 0
    key = ["env", "label", "trial"]
    merged = pd.read_csv(tmp_path / "first" / "bandit_runs.csv").sort_values(key).reset_index(drop=True)
    whole = pd.read_csv(tmp_path / "whole" / "bandit_runs.csv").sort_values(key).reset_index(drop=True)
    assert len(merged) == 6  # uniform and linear, trials 0-2
    pd.testing.assert_series_equal(merged["cumulative_regret"], whole["cumulative_regret"])
    curves = pd.read_csv(tmp_path / "first" / "curves.csv")
    assert set(curves["trial"]) == {0, 1, 2}
    assert len(curves) == len(pd.read_csv(tmp_path / "whole" / "curves.csv"))
    import json
    manifest = json.loads((tmp_path / "first" / "manifest.json").read_text())
    assert any(entry.get("merged_from") == str(tmp_path / "rest") for entry in manifest["runs"])
    # merging again adds nothing; a folder that is not a table is refused by name
    assert table.merge_folder(tmp_path / "rest", tmp_path / "first") == 0
    assert len(pd.read_csv(tmp_path / "first" / "bandit_runs.csv")) == 6
    import pytest
    with pytest.raises(FileNotFoundError, match="--merge"):
        table.merge_folder(tmp_path / "nowhere", tmp_path / "first")
    with pytest.raises(SystemExit):
        table.main(common + ["--first-trial", "-1", "--out", str(tmp_path / "bad")])


def test_merge_with_replace_swaps_the_named_agents_runs_and_curves(tmp_path):
    table = _script()
    common = ["--envs", "wheel", "--steps", "60", "--protocol", "showdown", "--posteriors", "mfvi", "--only", "linear",
              "--workers", "1", "--trials", "2"]
    assert table.main(common + ["--out", str(tmp_path / "main")]) == 0
    assert table.main(common + ["--seed", "10", "--out", str(tmp_path / "redo")]) == 0  # other results, same keys
    before = pd.read_csv(tmp_path / "main" / "bandit_runs.csv")
    redo = pd.read_csv(tmp_path / "redo" / "bandit_runs.csv")
    # without --replace the runs out holds are kept
    assert table.merge_folder(tmp_path / "redo", tmp_path / "main") == 0
    assert table.main(["--steps", "60", "--protocol", "showdown", "--out", str(tmp_path / "main"),
                       "--merge", str(tmp_path / "redo"), "--replace", "uniform"]) == 0
    after = pd.read_csv(tmp_path / "main" / "bandit_runs.csv")
    key = ["env", "label", "trial"]
    assert len(after) == len(before) == 4
    pick = lambda frame, label: frame[frame["label"] == label].sort_values(key)["cumulative_regret"].to_numpy()
    assert (pick(after, "uniform") == pick(redo, "uniform")).all()       # replaced
    assert (pick(after, "linear") == pick(before, "linear")).all()       # kept
    assert not (pick(before, "uniform") == pick(redo, "uniform")).all()
    curves = pd.read_csv(tmp_path / "main" / "curves.csv")
    redo_curves = pd.read_csv(tmp_path / "redo" / "curves.csv")
    assert len(curves) == len(pd.read_csv(tmp_path / "redo" / "curves.csv"))  # one curve per run, none twice
    last = lambda c: c[c["label"] == "uniform"].sort_values(["trial", "step"]).groupby("trial")["cumulative_regret"].last()
    assert (last(curves).to_numpy() == last(redo_curves).to_numpy()).all()
    import pytest
    with pytest.raises(ValueError, match="--replace: .* holds no run of neural-linear"):
        table.merge_folder(tmp_path / "redo", tmp_path / "main", ("neural-linear",))
    with pytest.raises(SystemExit):
        table.main(["--steps", "60", "--out", str(tmp_path / "main"), "--replace", "uniform"])


def test_table_pairs_each_agent_with_linfullpost_on_shared_trials():
    table = _script()
    rows = []
    uniform = {0: 1000.0, 1: 2000.0, 2: 1000.0}
    regrets = {"uniform": uniform, "linear": {0: 100.0, 1: 100.0, 2: 50.0},
               "thompson[mfvi]": {0: 50.0, 1: 300.0}}  # trial 2 not run: pairs on trials 0 and 1 only
    for label, per_trial in regrets.items():
        for trial, regret in per_trial.items():
            rows.append(dict(env="mushroom", protocol="default", label=label, trial=trial, seed=trial,
                             steps=100, delta=float("nan"), cumulative_regret=regret, seconds=1.0))
    text = table.table(pd.DataFrame(rows), 100)
    line = next(row for row in text.splitlines() if row.startswith("| thompson[mfvi]"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # normalised: mfvi 5.0 and 15.0, linear 10.0 and 5.0 -> differences -5 and +10
    assert cells[1] == "2" and cells[3] == "10.00 ± 5.00" and cells[4] == "10.00"
    assert cells[5] == "+2.50 ± 7.50" and cells[6] == "1 of 2"
    linear = next(row for row in text.splitlines() if row.startswith("| linear"))
    assert [c.strip() for c in linear.strip("|").split("|")][5:7] == ["", ""]


def test_per_trial_table_lists_every_trial_and_leaves_missing_ones_empty():
    table = _script()
    rows = [dict(env="wheel", protocol="default", label=label, trial=trial, seed=trial, steps=50,
                 delta=0.95, cumulative_regret=regret, seconds=1.0)
            for label, per_trial in {"uniform": {0: 200.0, 1: 400.0}, "thompson[fsvgd]": {1: 10.0}}.items()
            for trial, regret in per_trial.items()]
    text = table.per_trial_table(pd.DataFrame(rows), 50)
    lines = text.splitlines()
    assert "| agent | 0 | 1 |" in lines
    assert "| thompson[fsvgd] |  | 2.50 |" in lines
    assert not any(line.startswith("| uniform") for line in lines)


def test_a_finished_run_is_written_whole_curve_first_and_once(tmp_path):
    """``write_run`` rewrites ``curves.csv`` and then ``bandit_runs.csv`` atomically (the run row, the
    resume's "done" mark, last); earlier rows stay as they were, a run's curve written again after a kill
    between the two files is kept once, and a column an older table lacks is added."""
    bt = _script()
    runs_path = tmp_path / "bandit_runs.csv"
    runs_path.write_text("env,label,trial,cumulative_regret\nwheel,linear,0,12.25\n")  # an older table: no "parallel"
    (tmp_path / "curves.csv").write_text("step,cumulative_regret,env,label,trial\n50,1.5,wheel,linear,0\n")
    row = {"env": "wheel", "label": "thompson[mfvi]", "trial": 0, "cumulative_regret": 30.125, "parallel": "batched"}
    curve = pd.DataFrame({"step": [50, 100], "cumulative_regret": [2.0, 3.5], "env": "wheel",
                          "label": "thompson[mfvi]", "trial": 0})
    bt.write_run(tmp_path, runs_path, row, curve)
    bt.write_run(tmp_path, runs_path, {**row, "trial": 1}, curve.assign(trial=1))
    bt.write_run(tmp_path, runs_path, {**row, "trial": 1}, curve.assign(trial=1))  # the same run again
    runs = pd.read_csv(runs_path)
    assert runs.columns.tolist() == ["env", "label", "trial", "cumulative_regret", "parallel"]
    assert runs["cumulative_regret"].tolist() == [12.25, 30.125, 30.125, 30.125]
    curves = (tmp_path / "curves.csv").read_text().splitlines()
    assert curves[:2] == ["step,cumulative_regret,env,label,trial", "50,1.5,wheel,linear,0"]
    assert len(curves) == 1 + 1 + 2 + 2  # header, the old row, two runs' two points each: no duplicate
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_folder_of_an_earlier_seeding_scheme_is_not_resumed_with_posterior_runs(tmp_path):
    """Runs record their seeding scheme; more trials of a posterior agent whose earlier runs were made
    under another scheme (rows without the column: scheme 1) are refused unless asked for, since they
    would draw other random numbers; reference agents' runs never block."""
    import pytest

    from uncertain_agents.seeding import SEEDING_SCHEME

    table = _script()
    out = tmp_path / "table"
    base = ["--envs", "wheel", "--steps", "40", "--protocol", "showdown", "--posteriors", "mfvi", "--workers", "1",
            "--out", str(out)]
    assert table.main([*base, "--trials", "1", "--only", "thompson[mfvi],linear"]) == 0
    runs = pd.read_csv(out / "bandit_runs.csv")
    assert (runs["seeding"] == SEEDING_SCHEME).all()
    # the same folder as a table written before the column existed
    runs.drop(columns="seeding").to_csv(out / "bandit_runs.csv", index=False)
    entries_before = len(__import__("json").loads((out / "manifest.json").read_text())["runs"])
    with pytest.raises(SystemExit):
        table.main([*base, "--trials", "2", "--only", "thompson[mfvi]"])
    # refused before anything was written: no new run, no manifest entry
    assert len(pd.read_csv(out / "bandit_runs.csv")) == 3
    assert len(__import__("json").loads((out / "manifest.json").read_text())["runs"]) == entries_before
    assert table.runs_of_other_seeding(pd.read_csv(out / "bandit_runs.csv"),
                                       [("wheel", "thompson[mfvi]", "thompson", "mfvi", {}, 1, 1, 40, 0.95,
                                         "showdown", "cpu", 0)]) == "1 wheel thompson[mfvi] run"
    # reference agents' runs are not affected: LinFullPost's second trial runs
    assert table.main([*base, "--trials", "2", "--only", "linear"]) == 0
    # asked for, the posterior's second trial runs and records today's scheme beside the old row
    assert table.main([*base, "--trials", "2", "--only", "thompson[mfvi]", "--allow-mixed-seeding"]) == 0
    runs = pd.read_csv(out / "bandit_runs.csv")
    mfvi = runs[runs["label"] == "thompson[mfvi]"].set_index("trial")["seeding"]
    assert mfvi.isna()[0] and mfvi[1] == SEEDING_SCHEME
    assert f"wheel thompson[mfvi]: schemes [1, {SEEDING_SCHEME}]" in (out / "bandit_table.md").read_text()  # said


def test_merge_refuses_posterior_runs_of_another_seeding_scheme(tmp_path):
    """--merge of a folder whose runs of a posterior agent come from another seeding scheme than those
    --out holds of it is refused unless asked for; reference agents' runs merge either way."""
    import pytest

    table = _script()
    base = ["--envs", "wheel", "--steps", "40", "--protocol", "showdown", "--posteriors", "mfvi", "--workers", "1",
            "--only", "thompson[mfvi],linear"]
    assert table.main([*base, "--trials", "1", "--out", str(tmp_path / "old")]) == 0
    assert table.main([*base, "--trials", "1", "--first-trial", "1", "--out", str(tmp_path / "new")]) == 0
    old = pd.read_csv(tmp_path / "old" / "bandit_runs.csv")
    old.drop(columns="seeding").to_csv(tmp_path / "old" / "bandit_runs.csv", index=False)  # a pre-column folder
    with pytest.raises(ValueError, match="seeding schemes.*wheel thompson\\[mfvi\\]"):
        table.merge_folder(tmp_path / "new", tmp_path / "old")
    assert len(pd.read_csv(tmp_path / "old" / "bandit_runs.csv")) == 3  # nothing merged
    with pytest.raises(SystemExit):
        table.main(["--merge", str(tmp_path / "new"), "--steps", "40", "--protocol", "showdown",
                    "--out", str(tmp_path / "old")])
    assert table.merge_folder(tmp_path / "new", tmp_path / "old", allow_mixed_seeding=True) == 3
    runs = pd.read_csv(tmp_path / "old" / "bandit_runs.csv")
    assert len(runs) == 6 and runs["trial"].tolist().count(1) == 3
