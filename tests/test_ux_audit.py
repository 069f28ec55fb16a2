"""The user experience of long work and of results (an audit of progress displays, plots, tables,
refusals, Ctrl-C messages and --help): each test pins one defect found and fixed."""
import json
import os
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from uncertain_agents.cli import build_parser, main  # noqa: E402

LINEAR = ["bandit", "wheel", "--agent", "linear", "--steps", "20", "--trials", "2", "--seed", "0"]


def _steps(labels, trials=2, n=30):
    rows = []
    for i, label in enumerate(labels):
        for t in range(trials):
            regret = np.cumsum(np.full(n, 1.0 + i + 0.5 * t))
            rows.append(pd.DataFrame({"label": label, "trial": t, "step": np.arange(1, n + 1),
                                      "cumulative_regret": regret}))
    return pd.concat(rows, ignore_index=True)


# ------------------------------------------------------------------------------------ plots
def test_regret_plot_gives_every_label_its_own_hue_and_names_the_band():
    from uncertain_agents.agents.experiment import regret_figure

    labels = ["uniform", "thompson[mfvi]", "linear", "greedy[mfvi]"]
    fig = regret_figure(_steps(labels), title="wheel δ=0.95, 30 steps, 2 trial(s)")
    try:
        ax = fig.axes[0]
        colors = [tuple(line.get_color()) for line in ax.get_lines()]
        # tab20 paired neighbours into two shades of one hue (uniform and thompson both blue)
        assert colors == [tuple(plt.cm.tab10(i)) for i in range(len(labels))]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == labels
        assert ax.get_yscale() == "log" and "log scale" in ax.get_ylabel()
        assert "mean ± s.e. over 2 trials" in ax.get_title()
    finally:
        plt.close(fig)


def test_regret_plot_past_ten_labels_uses_light_shades_and_keeps_a_given_band_title():
    from uncertain_agents.agents.experiment import label_color, regret_figure

    assert len({label_color(i) for i in range(20)}) == 20
    fig = regret_figure(_steps([f"a{i}" for i in range(3)], trials=1), title="wheel: mean ± s.e. over trials")
    try:
        assert fig.axes[0].get_title() == "wheel: mean ± s.e. over trials"  # not said twice
    finally:
        plt.close(fig)


def test_plot_regret_writes_a_png(tmp_path):
    from uncertain_agents.agents.experiment import plot_regret

    path = plot_regret(_steps(["uniform", "linear"]), tmp_path / "regret.png", title="t") or tmp_path / "regret.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_splits_plot_has_whole_number_split_ticks():
    from uncertain_agents.regression import plot_splits

    frame = pd.DataFrame({"split": [0, 1], "test_nll": [2.0, 3.0], "test_rmse": [4.0, 5.0]})
    fig = plot_splits(frame, title="t")
    try:
        fig.canvas.draw()
        for ax in fig.axes:
            lo, hi = ax.get_xlim()
            ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
            assert ticks and all(float(t).is_integer() for t in ticks)  # was 0.0, 0.2, 0.4, ...
    finally:
        plt.close(fig)


def test_attack_plot_keeps_its_epsilon_ticks_apart(monkeypatch, tmp_path):
    import attacks.plots as plots

    figures = []
    real = plots.atomic_save_figure

    def keep(path, fig, **kw):
        fig.canvas.draw()
        figures.append([(ax.get_xlim(), list(ax.get_xticks())) for ax in fig.axes])
        return real(path, fig, **kw)

    monkeypatch.setattr(plots, "atomic_save_figure", keep)
    eps = [0.0, 0.1, 0.2]
    frame = pd.DataFrame({"epsilon": eps, "accuracy": [0.9, 0.5, 0.1], "mean_entropy": [0.1, 0.5, 0.9]})
    plots.plot_attack_curves({"map": frame}, tmp_path / "fgsm.png")
    for (lo, hi), ticks in figures[0]:
        assert len([t for t in ticks if lo <= t <= hi]) <= 7  # nine ticks 0.000 ... 0.200 ran together
    steps = pd.DataFrame({"step": [0, 1, 2, 3], "accuracy": [0.9, 0.7, 0.5, 0.3], "mean_entropy": [1, 2, 3, 4]})
    plots.plot_attack_curves({"map": steps}, tmp_path / "ifgsm.png", x="step")
    for (lo, hi), ticks in figures[1]:
        assert all(float(t).is_integer() for t in ticks if lo <= t <= hi)


def test_grid_sweep_plot_says_what_the_bands_are(monkeypatch, tmp_path):
    from uncertain_agents.grid.plots import plot_sweeps

    monkeypatch.setattr(plt, "close", lambda fig=None: None)  # keep the figure to look at it
    long = pd.DataFrame({"method": ["a", "a"], "epsilon": [0.1, 0.2], "accuracy": [0.5, 0.2],
                         "accuracy_se": [0.1, 0.1]})
    before = set(plt.get_fignums())
    plot_sweeps(long, ["accuracy"], "epsilon", tmp_path / "sweeps.png", title="grid", replicate="seed")
    (num,) = set(plt.get_fignums()) - before
    fig = plt.figure(num)
    try:
        assert fig._suptitle.get_text() == "grid: mean ± s.e. over seeds"
    finally:
        monkeypatch.undo()
        plt.close(fig)


# --------------------------------------------------------------------- progress displays
def test_every_command_with_a_progress_display_takes_no_progress():
    parser = build_parser()
    for argv in (["bandit", "wheel"], ["regress", "boston"], ["attack", "--posterior", "map", "--out", "x"],
                 ["grid", "run", "spec.toml", "--out", "x"], ["bench"]):
        assert parser.parse_args([*argv, "--no-progress"]).no_progress is True, argv
        assert parser.parse_args(argv).no_progress is False, argv


def _bar_lines(text: str) -> list[str]:
    """The lines of ``text`` that are a progress bar: the bar, then ``done/total``."""
    return [line for line in text.splitlines() if re.search(r"━.*\d+/\d+", line)]


def test_bandit_no_progress_hides_the_bar_and_the_bar_ends_naming_the_bandit(tmp_path, capsys):
    assert main([*LINEAR, "--out", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    bar = _bar_lines(captured.err)
    # the last line of the bar counts every run; it used to name only the last agent ("wheel linear")
    assert len(bar) == 1 and bar[0].split()[0] == "wheel" and "linear" not in bar[0]
    # the bar on stderr, the results on stdout: `bandit ... > out.txt` holds no bar
    assert not _bar_lines(captured.out) and "normalised regret" in captured.out
    assert "normalised regret" not in captured.err and "results in" in captured.out
    assert main([*LINEAR, "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert not _bar_lines(captured.err) and not _bar_lines(captured.out)


def test_fit_progress_bar_shows_no_nan_loss_before_the_first_step():
    from uncertain_agents.posteriors.progress import ProgressBar

    bar = ProgressBar.create(True, 3, "fit x")
    try:
        task = bar.progress.tasks[0]
        assert task.fields["loss"] == "-"  # was "loss nan", which read as a divergence
        bar.update(1, 1.23456)
        assert bar.progress.tasks[0].fields["loss"] == "1.235"
    finally:
        bar.close()
    assert ProgressBar.create(False, 3, "fit x") is None


def test_fit_progress_bar_is_on_stderr_not_among_a_scripts_printed_results(capsys):
    import torch

    from uncertain_agents import make_posterior

    post = make_posterior("map", in_dim=1, out_dim=1, hidden=(4,), seed=0)
    post.fit(torch.linspace(-1, 1, 8)[:, None], torch.zeros(8, 1), steps=2, batch_size=8, progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and len(_bar_lines(captured.err)) == 1 and "2/2" in captured.err


def test_what_a_script_prints_while_a_bar_shows_on_a_terminal_stays_on_a_redirected_stdout(monkeypatch, capsys):
    """stderr a terminal, stdout redirected (``python fit.py > out.txt``): rich passed stdout's
    text through the bar's console, i.e. into stderr; it now stays on stdout."""
    from uncertain_agents.posteriors.progress import ProgressBar

    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: the bar's console is a terminal
    bar = ProgressBar.create(True, 3, "fit x")
    try:
        assert bar.progress.console.is_terminal
        print("RESULT 1.5")
    finally:
        bar.close()
    captured = capsys.readouterr()
    assert captured.out == "RESULT 1.5\n" and "RESULT" not in captured.err and "fit x" in captured.err


def test_regress_bar_and_notes_on_stderr_table_on_stdout(tmp_path, capsys):
    from uci_helpers import write_tiny_yacht

    data = write_tiny_yacht(tmp_path / "data")
    argv = ["regress", "yacht", "--posterior", "map", "--epochs", "1", "--n-samples", "2", "--hidden", "4",
            "--data-dir", str(data), "--out", str(tmp_path / "r"), "--threads", "1"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert [line.split()[0] for line in _bar_lines(captured.err)] == ["yacht"]  # run_uci's bar over splits
    assert not _bar_lines(captured.out) and "test NLL" in captured.out and "test NLL" not in captured.err
    assert main(argv) == 0  # resumed: the status line on stderr, the table again on stdout
    captured = capsys.readouterr()
    assert "resuming" in captured.err and "resuming" not in captured.out and "test NLL" in captured.out


def test_grid_run_bar_on_stderr_table_and_summary_on_stdout(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "ux"\nkind = "toy"\n[settings]\nsteps = 2\nn_train = 16\nn_test = 16\nhidden = [4]\n'
                    '[cross]\nseed = [0]\n[[methods]]\nposterior = "map"\n')
    assert main(["grid", "run", str(spec), "--out", str(tmp_path / "grid"), "--threads", "1"]) == 0
    captured = capsys.readouterr()
    assert [line.split()[:2] for line in _bar_lines(captured.err)] == [["grid", "ux"]]
    assert not _bar_lines(captured.out) and "1 run now, 0 failed" in " ".join(captured.out.split())
    assert "map" in captured.out and "written:" in captured.out and "map" not in captured.err  # the table


# ---------------------------------------------------------------------- tables, files
def test_bandit_summary_fits_80_columns_explains_its_columns_and_writes_standard_json(tmp_path, capsys,
                                                                                       monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # what rich uses when the output is not a terminal
    out = tmp_path / "run"
    assert main([*LINEAR, "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    # the table and its caption fit; the closing path line is one unbroken line, however long
    assert max(len(line) for line in lines if not line.startswith("results in")) <= 80
    assert any(line.strip() == "wheel δ=0.95, 20 steps, 2 trial(s)" for line in lines)  # title on one line
    flat = " ".join(text.split())
    assert "mean ± s.e. over 2 trials" in flat and "Uniform's in the same trial" in flat
    assert any(line.startswith("results in") and line.endswith("units/ per run)") for line in lines)
    # one trial: the s.e. is undefined, written as JSON null, not NaN (which strict parsers refuse)
    one = tmp_path / "one"
    assert main([*LINEAR[:-4], "--trials", "1", "--out", str(one), "--no-progress"]) == 0

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    meta = json.loads((one / "summary.json").read_text(), parse_constant=refuse)
    assert meta["summary"][0]["normalised_regret_se"] is None
    assert "one trial" in " ".join(capsys.readouterr().out.split())


def test_json_safe_turns_non_finite_numbers_into_null():
    from uncertain_agents.commands.common import json_safe

    value = json_safe({"a": float("nan"), "b": [np.float64("inf"), 1.5, np.int64(3)], "c": "x"})
    assert value == {"a": None, "b": [None, 1.5, 3], "c": "x"}
    assert isinstance(value["b"][2], int)


def test_grid_tables_fold_labels_and_metric_names_instead_of_cutting_them(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "ux"\nkind = "toy"\n[settings]\nsteps = 2\nn_train = 16\nn_test = 16\nhidden = [4]\n'
                    '[cross]\nseed = [0, 1]\n[[methods]]\nposterior = "map"\n'
                    'label = "a long method label that a narrow table cut"\n')
    out = tmp_path / "grid"
    assert main(["grid", "run", str(spec), "--out", str(out), "--threads", "1", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "…" not in text and "0:00" not in text  # no cut names, no progress bar
    first_column = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    assert "a long method label that a narrow table cut" in " ".join(first_column)  # was "a long met…"
    assert main(["grid", "table", str(out)]) == 0
    assert "…" not in capsys.readouterr().out


def test_grid_table_lists_the_sweep_files_it_writes(tmp_path, capsys, monkeypatch):
    from uncertain_agents.commands import grid as grid_command

    table = pd.DataFrame({"method": ["a"], "n": [2], "acc@0.1": [0.5], "acc@0.1_se": [0.1]})
    table.attrs["sweep_axes"] = {"acc": "epsilon"}
    monkeypatch.setattr("uncertain_agents.grid.grid_table", lambda out, **kw: table)
    from rich.console import Console

    grid_command._print_table(tmp_path, Console(width=200))
    written = [line for line in capsys.readouterr().out.splitlines() if line.startswith("written:")]
    assert written and "table_sweeps.csv" in written[0] and "sweeps.png" in written[0]


# --------------------------------------------------------------- re-runs, Ctrl-C, --help
def test_a_refused_run_names_what_differs(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*LINEAR, "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main([*LINEAR, "--out", str(out), "--delta", "0.5", "--steps", "30", "--no-progress"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "holds a different run (delta 0.95 in the folder, 0.5 now; steps 20 in the folder, 30 now)" in err
    assert "--force" in err


def test_config_differences_name_what_changed_and_stay_short(tmp_path):
    from uncertain_agents.runs import RunFolder, config_differences

    previous = {"a": 1, "b": [1, 2], "seeding": 2}
    assert config_differences(previous, {"a": 1, "b": [1, 2, 3], "c": "x", "seeding": 2}) == \
        "b [1, 2] in the folder, [1, 2, 3] now; c (not set) in the folder, \"x\" now"
    many = {f"k{i}": i for i in range(10)}
    assert config_differences(previous, many, most=3).endswith("and 9 more")
    assert config_differences(previous, {**previous, "seeding": 1}) == ""
    RunFolder(tmp_path / "run", {"a": 1})                    # the Python API's refusal names them too
    with pytest.raises(ValueError, match=r"holds a different run \(a 1 in the folder, 2 now\)"):
        RunFolder(tmp_path / "run", {"a": 2})


def test_ctrl_c_in_bench_and_check_does_not_promise_a_resume(monkeypatch, capsys):
    import uncertain_agents.bench as bench
    import uncertain_agents.checks as checks

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run_bench", stop)
    assert main(["bench", "--posteriors", "mfvi", "--rounds", "1"]) == 130
    err = " ".join(capsys.readouterr().err.split())
    assert "bench wrote nothing" in err and "run folder" not in err and "resume" not in err
    monkeypatch.setattr(checks, "check_posterior", stop)
    assert main(["check", "mfvi"]) == 130
    err = " ".join(capsys.readouterr().err.split())
    assert "check wrote nothing" in err and "run folder" not in err


def _subparsers(parser):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for inner, subsub in _subparsers(sub):
                    yield f"{name} {inner}", subsub


def test_help_describes_every_command_and_every_device_and_seed_flag():
    for name, sub in _subparsers(build_parser()):
        assert sub.description, f"`{name} --help` has no description"
        for action in sub._actions:
            if set(action.option_strings) & {"--device", "--seed", "--no-progress", "--workers"}:
                assert action.help, f"`{name} {action.option_strings[0]}` has no help"


@pytest.mark.skipif(not os.environ.get("UNCERTAIN_AGENTS_DATA"), reason="needs UNCERTAIN_AGENTS_DATA (Boston splits)")
def test_regress_table_title_fits_and_one_split_shows_no_nan(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "r"
    assert main(["regress", "boston", "--epochs", "1", "--splits", "1", "--n-samples", "5", "--hidden", "8",
                 "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    nll = [line for line in text.splitlines() if "test NLL" in line]
    assert "last NLL" not in text and nll and "nan" not in nll[0] and "–" in nll[0]  # s.e. was shown as "nan"
    assert any(line.strip() == "bostonHousing · bb-alpha · 1 split(s)" for line in text.splitlines())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["test_nll_se"] is None and summary["n_splits"] == 1


def test_attack_names_the_images_of_its_targeted_table_and_lists_its_files(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "att"
    assert main(["attack", "--dataset", "digits", "--posterior", "map", "--attack", "fgsm", "ifgsm",
                 "--epochs", "0.1", "--hidden", "8", "--n-attack", "20", "--n-samples", "2", "--epsilons", "0",
                 "0.1", "--steps", "1", "--threads", "1", "--no-progress", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    flat = " ".join(text.split())
    title = [line for line in text.splitlines() if "targeted I-FGSM" in line]
    assert title and "test images not of class 0)" in title[0]  # the title on one line, with its count
    assert "(clean.csv, fgsm.csv, fgsm.png, ifgsm.csv, ifgsm.png, summary.json; models/, units/)" in flat


def test_the_python_api_writes_standard_json_for_one_split(tmp_path):
    import json

    import pandas as pd

    from uncertain_agents.regression import UCIConfig, write_run

    frame = pd.DataFrame({"split": [0], "test_nll": [2.5], "test_rmse": [3.0], "seconds": [1.0]})
    write_run(frame, UCIConfig(dataset="yacht", posterior="map"), tmp_path)
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


def test_ctrl_c_in_a_grid_speaks_of_cells_and_the_grid_folder(tmp_path, monkeypatch, capsys):
    import uncertain_agents.grid as grid_module
    from uncertain_agents.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(grid_module, "run_grid", interrupted)
    spec = Path(__file__).resolve().parents[1] / "experiments" / "specs" / "smoke.toml"
    assert main(["grid", "run", str(spec), "--out", str(tmp_path / "g")]) == 130
    err = " ".join(capsys.readouterr().err.split())
    assert "finished cells are kept in the grid folder" in err and "run folder" not in err
