"""``uncertain-agents bandit``: outputs, normalisation and clear errors."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from uncertain_agents.cli import main

from bandit_helpers import write_tiny_mushroom


def test_wheel_run_writes_csv_summary_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["bandit", "wheel", "--agent", "thompson,linear", "--posterior", "mfvi", "--delta", "0.7",
               "--steps", "120", "--trials", "2", "--seed", "3", "--train-steps", "5", "--train-every", "40",
               "--out", str(out)])
    assert rc == 0
    steps = pd.read_csv(out / "steps.csv")
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["label"]) == ["uniform", "thompson[mfvi]", "linear"]
    assert len(steps) == 3 * 2 * 120 and set(steps["seed"]) == {3, 4}
    # normalised regret = 100 * cumulative / uniform's on the same rounds, averaged over trials
    final = steps[steps["step"] == 120].set_index(["label", "trial"])["cumulative_regret"]
    ratio = 100 * final["linear"] / final["uniform"]
    row = summary.set_index("label").loc["linear"]
    assert row["normalised_regret"] == pytest.approx(ratio.mean())
    assert row["normalised_regret_se"] == pytest.approx(ratio.std(ddof=1) / 2 ** 0.5)
    assert summary.set_index("label").loc["uniform", "normalised_regret"] == pytest.approx(100)
    for label in ("uniform", "linear", "thompson[mfvi]"):           # same contexts for every agent
        assert (steps[steps["label"] == label]["optimal_expected_reward"].to_numpy()
                == steps[steps["label"] == "uniform"]["optimal_expected_reward"].to_numpy()).all()
    meta = json.loads((out / "summary.json").read_text())
    assert meta["delta"] == 0.7 and len(meta["summary"]) == 3
    assert (out / "regret.png").stat().st_size > 1000
    assert "normalised regret" in capsys.readouterr().out


def test_mushroom_run_on_a_tiny_file(tmp_path):
    data = write_tiny_mushroom(tmp_path / "data")
    out = tmp_path / "run"
    rc = main(["bandit", "mushroom", "--agent", "greedy,neural-linear", "--posterior", "bb-alpha",
               "--option", "train_samples=2", "--steps", "60", "--trials", "1", "--train-steps", "3",
               "--data-dir", str(data), "--no-download", "--out", str(out)])
    assert rc == 0
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["label"]) == ["uniform", "greedy[bb-alpha]", "neural-linear"]
    # the rounds follow the mushroom bandit's definition: not eating pays 0, eating pays 5 or -35;
    # every agent meets the same mushrooms (same optimum), and regret is optimum minus reward
    steps = pd.read_csv(out / "steps.csv")
    assert len(steps) == 3 * 60
    assert (steps.loc[steps["action"] == 0, "reward"] == 0).all()
    assert set(steps.loc[steps["action"] == 1, "reward"]) <= {5.0, -35.0}
    assert set(steps["optimal_expected_reward"]) <= {0.0, 5.0}
    assert ((steps["regret"] - (steps["optimal_expected_reward"] - steps["reward"])).abs() < 1e-9).all()
    for label, rows in steps.groupby("label"):
        assert rows["optimal_expected_reward"].tolist() == steps.loc[steps["label"] == "uniform",
                                                                     "optimal_expected_reward"].tolist(), label
        assert rows["cumulative_regret"].iloc[-1] == pytest.approx(rows["regret"].sum())
    by_label = summary.set_index("label")
    assert by_label.loc["uniform", "normalised_regret"] == pytest.approx(100)
    final = steps[steps["step"] == 60].set_index("label")["cumulative_regret"]
    assert by_label.loc["neural-linear", "normalised_regret"] == pytest.approx(
        100 * final["neural-linear"] / final["uniform"])


@pytest.mark.parametrize("args, message", [
    (["wheel", "--agent", "sarsa"], "unknown agent 'sarsa'"),
    (["wheel", "--posterior", "nope"], "unknown posterior 'nope'"),
    (["cartpole"], "unknown bandit environment"),
    (["wheel", "--steps", "0"], "--steps"),
    (["wheel", "--delta", "1.5", "--steps", "5", "--trials", "1"], "delta"),
    (["wheel", "--option", "bogus=1", "--steps", "5", "--trials", "1"], "unknown option"),
])
def test_bad_arguments_give_clear_errors(tmp_path, capsys, args, message):
    assert main(["bandit", *args, "--out", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err


def test_missing_mushroom_file_gives_clear_error(tmp_path, capsys):
    rc = main(["bandit", "mushroom", "--steps", "5", "--trials", "1", "--data-dir", str(tmp_path / "empty"),
               "--no-download", "--out", str(tmp_path / "x")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "agaricus-lepiota.data" in err and "not found" in err


def test_protocol_option_sets_network_and_is_recorded(tmp_path):
    out = tmp_path / "proto"
    rc = main(["bandit", "wheel", "--agent", "thompson", "--posterior", "mfvi", "--protocol", "fsvgd-paper",
               "--steps", "40", "--trials", "1", "--train-steps", "2", "--train-every", "20", "--out", str(out)])
    assert rc == 0
    meta = json.loads((out / "summary.json").read_text())
    assert meta["protocol"] == "fsvgd-paper" and meta["hidden"] == [100, 100]
    with pytest.raises(SystemExit):
        main(["bandit", "wheel", "--protocol", "nope", "--out", str(tmp_path / "bad")])


def test_trials_in_worker_processes_give_the_same_steps(tmp_path):
    """--workers 2 runs (agent, trial) runs in spawned processes (or threads, --parallel threads);
    every run is seeded by its trial, so the steps (all but the timing column) equal a one-by-one
    run, in the same order."""
    args = ["bandit", "wheel", "--agent", "thompson,linear", "--posterior", "mfvi", "--delta", "0.7",
            "--steps", "100", "--trials", "2", "--seed", "5", "--train-steps", "5", "--train-every", "40",
            "--hidden", "8"]
    assert main(args + ["--out", str(tmp_path / "serial")]) == 0
    assert main(args + ["--workers", "2", "--out", str(tmp_path / "parallel")]) == 0
    assert main(args + ["--workers", "2", "--parallel", "threads", "--out", str(tmp_path / "threads")]) == 0
    serial = pd.read_csv(tmp_path / "serial" / "steps.csv").drop(columns="seconds")
    parallel = pd.read_csv(tmp_path / "parallel" / "steps.csv").drop(columns="seconds")
    threads = pd.read_csv(tmp_path / "threads" / "steps.csv").drop(columns="seconds")
    pd.testing.assert_frame_equal(serial, parallel)
    pd.testing.assert_frame_equal(serial, threads)
    assert main(args + ["--workers", "0", "--out", str(tmp_path / "bad")]) == 2


def test_initial_pulls_option_sets_the_round_robin_and_is_recorded(tmp_path, capsys):
    out = tmp_path / "pulls"
    rc = main(["bandit", "wheel", "--agent", "thompson", "--posterior", "mfvi", "--steps", "30", "--trials", "1",
               "--train-steps", "2", "--hidden", "8", "--initial-pulls", "3", "--out", str(out)])
    assert rc == 0
    steps = pd.read_csv(out / "steps.csv")
    actions = steps[steps["label"] == "thompson[mfvi]"]["action"].to_numpy()
    assert list(actions[:15]) == [0, 1, 2, 3, 4] * 3           # 3 round-robin pulls of each of 5 arms
    assert json.loads((out / "summary.json").read_text())["initial_pulls"] == 3
    default = tmp_path / "default"
    assert main(["bandit", "wheel", "--agent", "linear", "--steps", "5", "--trials", "1", "--out", str(default)]) == 0
    assert json.loads((default / "summary.json").read_text())["initial_pulls"] == 5   # the default protocol's
    assert main(["bandit", "wheel", "--initial-pulls", "-1", "--out", str(tmp_path / "bad")]) == 2
    assert "--initial-pulls must be a non-negative integer" in capsys.readouterr().err


def test_regret_plot_handles_zero_regret_and_replaces_the_file_whole(tmp_path):
    """The log regret axis must not fail on an agent with no regret at all (or on all-zero input),
    and a re-plot replaces the previous file in one step (no temporary files left behind)."""
    from uncertain_agents.agents.experiment import plot_regret

    rows = [{"label": label, "trial": t, "step": s, "cumulative_regret": value * s}
            for label, value in (("uniform", 5.0), ("thompson[mfvi]", 0.5), ("oracle", 0.0))
            for t in range(2) for s in (1, 2, 3)]
    frame = pd.DataFrame(rows)
    path = tmp_path / "regret.png"
    plot_regret(frame, path, title="t")
    first = path.read_bytes()
    plot_regret(frame[frame["label"] == "oracle"], path)
    assert first[:8] == b"\x89PNG\r\n\x1a\n" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.read_bytes() != first
    assert [p.name for p in tmp_path.iterdir()] == ["regret.png"]
