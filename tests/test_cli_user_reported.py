"""Defects users reported in the command line, each checked as the user met it: a per-layer option
checked on the run's real network, non-finite numbers refused up front, write destinations checked
before any work (and errors naming the user's path), one ``--hidden`` syntax everywhere, and a note
when ``--posterior`` has no agent to apply to."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from uncertain_agents.cli import build_parser, main

from cli_helpers import record_calls
from uci_helpers import write_tiny_yacht

TINY_BANDIT = ["bandit", "wheel", "--agent", "thompson", "--posterior", "mfvi", "--steps", "12", "--trials", "1"]


@pytest.fixture
def yacht(tmp_path, monkeypatch) -> Path:
    data = write_tiny_yacht(tmp_path / "data")
    monkeypatch.setenv("UNCERTAIN_AGENTS_DATA", str(data))
    return data


@pytest.fixture
def runs(monkeypatch) -> list[str]:
    """Records every call of the runners that do a command's work (bandit trials, UCI splits, the
    benchmark), then lets it through."""
    import uncertain_agents.agents.experiment
    import uncertain_agents.bench
    import uncertain_agents.regression

    return record_calls(monkeypatch, ((uncertain_agents.agents.experiment, "run_experiment"),
                                      (uncertain_agents.regression, "run_uci"), (uncertain_agents.bench, "run_bench")))


def one_line(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------- 1. per-layer options on the run's real network
def test_bandit_prior_std_list_is_checked_on_the_protocols_network(tmp_path, capsys, runs):
    """showdown's network is 2 -> 100 -> 100 -> 5 on the wheel: three layers, so three stds fit
    (they were refused against a 2-2-2 probe) and two are refused before the run folder."""
    ok = tmp_path / "ok"
    assert main([*TINY_BANDIT, "--protocol", "showdown", "--option", "prior_std=[0.3,0.3,3]", "--out", str(ok)]) == 0
    assert json.loads((ok / "summary.json").read_text())["options"] == {"prior_std": [0.3, 0.3, 3]}
    capsys.readouterr()
    runs.clear()
    bad = tmp_path / "bad"
    assert main([*TINY_BANDIT, "--protocol", "showdown", "--option", "prior_std=[0.3,3]", "--out", str(bad)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "--option for mfvi" in err and "3 for widths 2-100-100-5" in err and "got 2" in err
    assert not bad.exists() and runs == []


def test_bandit_hidden_sets_the_network_the_options_are_checked_on(tmp_path, capsys, runs):
    assert main([*TINY_BANDIT, "--hidden", "8", "--option", "prior_std=[1,1,1]", "--out", str(tmp_path / "r")]) == 2
    assert "2 for widths 2-8-5" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "r").exists() and runs == []


def test_bandit_fsvgd_paper_protocol_runs_fsvgd_from_the_cli(tmp_path, capsys):
    """The protocol's own per-layer prior of f-SVGD fits its 2x100 network: it was refused outright."""
    out = tmp_path / "fs"
    argv = ["bandit", "wheel", "--agent", "thompson", "--posterior", "fsvgd", "--protocol", "fsvgd-paper",
            "--steps", "12", "--trials", "1", "--out", str(out)]
    assert main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["agents"] == ["uniform", "thompson[fsvgd]"]
    capsys.readouterr()
    # with other widths the protocol's three stds no longer fit: refused before the run folder
    assert main([*argv[:-1], str(tmp_path / "fs50"), "--hidden", "50"]) == 2
    err = one_line(capsys.readouterr().err)
    assert "protocol 'fsvgd-paper'" in err and "prior_std" in err and "hidden=(50,)" in err
    assert not (tmp_path / "fs50").exists()


def test_regress_prior_std_list_is_checked_on_the_datasets_network_before_the_run_folder(
        tmp_path, capsys, yacht, runs):
    base = ["regress", "yacht", "--posterior", "mfvi", "--epochs", "1", "--n-samples", "2"]
    bad = tmp_path / "bad"
    assert main([*base, "--hidden", "4", "4", "--option", "prior_std=[1,1]", "--out", str(bad)]) == 2
    err = one_line(capsys.readouterr().err)
    assert "--option for mfvi" in err and "3 for widths 3-4-4-1" in err
    assert not bad.exists() and runs == []
    ok = tmp_path / "ok"
    assert main([*base, "--hidden", "4", "4", "--option", "prior_std=[1,1,1]", "--out", str(ok)]) == 0
    assert (ok / "summary.json").is_file() and runs == ["run_uci"]


@pytest.mark.parametrize("flags, named", [(["--alpha", "0.5"], "--alpha for mfvi"),
                                          (["--alpha", "0.5", "--option", "lr_decay=1"], "--alpha/--option for mfvi")])
def test_regress_an_option_flag_the_method_lacks_is_named_as_given(tmp_path, capsys, yacht, runs, flags, named):
    """``regress --posterior mfvi --alpha 0.5`` used to blame ``--option``, which the user never gave."""
    out = tmp_path / "run"
    assert main(["regress", "yacht", "--posterior", "mfvi", "--epochs", "1", *flags, "--out", str(out)]) == 2
    err = one_line(capsys.readouterr().err)
    assert named in err and "unknown option(s) ['alpha']" in err
    assert not out.exists() and runs == []


def regress_spec(**method_options) -> dict:
    return {"name": "t", "kind": "regress", "settings": {"dataset": "yacht", "epochs": 1, "n_samples": 2},
            "cross": {"split": [0], "hidden": [[4, 4]]},
            "methods": [{"posterior": "mfvi", "options": method_options}]}


def test_grid_prior_std_list_is_checked_on_each_cells_network(yacht):
    from uncertain_agents.grid import parse_spec

    assert parse_spec(regress_spec(prior_std=[1.0, 1.0, 1.0])).methods[0]["options"]["prior_std"] == [1.0] * 3
    with pytest.raises(ValueError, match=r"methods\[0\]\.options for 'mfvi'.*3 for widths 3-4-4-1"):
        parse_spec(regress_spec(prior_std=[1.0, 1.0]))
    # a crossed width: every cell's network counts, so one list cannot fit both
    spec = regress_spec(prior_std=[1.0, 1.0, 1.0])
    spec["cross"]["hidden"] = [[4, 4], [4]]
    with pytest.raises(ValueError, match=r"2 for widths 3-4-1"):
        parse_spec(spec)
    # unknown options are still refused, naming the method
    with pytest.raises(ValueError, match=r"methods\[0\]\.options"):
        parse_spec(regress_spec(no_such_option=1))


def test_grid_run_with_a_fitting_prior_std_list_runs(tmp_path, yacht, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text('name = "t"\nkind = "regress"\n[settings]\ndataset = "yacht"\nepochs = 1\nn_samples = 2\n'
                    'hidden = [4, 4]\n[cross]\nsplit = [0]\n[[methods]]\nposterior = "mfvi"\n'
                    'options = { prior_std = [1.0, 1.0, 1.0] }\n')
    assert main(["grid", "run", str(spec), "--out", str(tmp_path / "g")]) == 0
    assert len(list((tmp_path / "g" / "cells").glob("*.json"))) == 1


def test_grid_bandit_options_are_checked_with_the_protocols(monkeypatch):
    from uncertain_agents.grid import parse_spec

    spec = {"kind": "bandit", "settings": {"steps": 12, "protocol": "fsvgd-paper"},
            "cross": {"trial": [0]}, "methods": [{"posterior": "fsvgd"}, {"agent": "linear"}]}
    assert len(parse_spec(spec).cells()) == 2
    spec["settings"]["hidden"] = [50]
    with pytest.raises(ValueError, match=r"methods\[0\]\.options for 'fsvgd'.*protocol 'fsvgd-paper'"):
        parse_spec(spec)


# ------------------------------------------------ 2. non-finite numbers refused up front
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0"])
def test_bandit_lr_is_refused_before_any_unit_naming_the_flag(tmp_path, capsys, runs, value):
    out = tmp_path / "c1"
    assert main([*TINY_BANDIT, "--lr", value, "--out", str(out)]) == 2
    assert "--lr must be a positive finite number" in capsys.readouterr().err
    assert not out.exists() and runs == []
    # the corrected command is a new run, not "a different run; pass --force"
    assert main([*TINY_BANDIT, "--lr", "0.01", "--out", str(out)]) == 0


@pytest.mark.parametrize("flag, value", [("--lr", "inf"), ("--lr", "nan"), ("--alpha", "nan")])
def test_regress_non_finite_numbers_are_refused_before_the_run_folder(tmp_path, capsys, yacht, runs, flag, value):
    out = tmp_path / "r"
    assert main(["regress", "yacht", "--posterior", "bb-alpha", "--epochs", "1", flag, value, "--out", str(out)]) == 2
    assert f"{flag} must be a" in capsys.readouterr().err
    assert not out.exists() and runs == []


@pytest.mark.parametrize("settings, options, key", [
    ("lr = inf", "{}", "settings.lr"),
    ("lr = nan", "{}", "settings.lr"),
    ("", "{ prior_std = nan }", "methods[0].options.prior_std"),
    ("", "{ prior_std = [1.0, inf] }", "methods[0].options.prior_std[1]"),
])
def test_grid_spec_non_finite_values_name_the_key_and_file(tmp_path, capsys, settings, options, key):
    spec = tmp_path / "bad.toml"
    spec.write_text(f'name = "t"\nkind = "regress"\n[settings]\n{settings}\n[cross]\nsplit = [0]\n'
                    f'[[methods]]\nposterior = "mfvi"\noptions = {options}\n')
    assert main(["grid", "run", str(spec), "--out", str(tmp_path / "g")]) == 2
    err = one_line(capsys.readouterr().err)
    assert f"{spec}: {key} must be a finite number" in err and "JSON" not in err
    assert not (tmp_path / "g").exists()


# ------------------------------------ 3. write destinations checked before work, named in errors
def test_bench_out_that_cannot_be_written_fails_before_measuring(tmp_path, capsys, runs):
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    argv = ["bench", "--network", "boston", "--posteriors", "mfvi", "--rounds", "1", "--steps", "1",
            "--act-calls", "2"]
    assert main([*argv, "--out", str(blocker / "x.json")]) == 2
    assert f"--out {blocker / 'x.json'}: {blocker} is not a folder" in one_line(capsys.readouterr().err)
    assert runs == []
    if Path("/proc/self").is_dir():  # Linux: a file system where no file can be made, even by root
        assert main([*argv, "--out", "/proc/x.json"]) == 2
        err = one_line(capsys.readouterr().err)
        assert "--out /proc/x.json: cannot make a file in /proc" in err and ".tmp" not in err
        assert runs == []


def test_check_writable_leaves_nothing_behind_and_makes_no_folder(tmp_path):
    from uncertain_agents.runs import check_writable

    check_writable(tmp_path / "a.json")
    check_writable(tmp_path / "new" / "deeper" / "a.json")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(IsADirectoryError):
        check_writable(tmp_path)


def test_atomic_writer_errors_name_the_users_path_not_the_temporary_file(tmp_path):
    from uncertain_agents.runs import atomic_write_text

    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError) as caught:
        atomic_write_text(blocker / "sub" / "x.json", "{}")
    assert str(blocker / "sub" / "x.json") in str(caught.value) and f"{blocker} is not a folder" in str(caught.value)
    if Path("/proc/self").is_dir():
        with pytest.raises(FileNotFoundError) as caught:
            atomic_write_text("/proc/x.json", "{}")
        assert caught.value.strerror.startswith("cannot write /proc/x.json") and ".tmp" not in str(caught.value)


def test_grid_out_that_cannot_be_written_fails_before_any_cell(tmp_path, capsys, yacht):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    spec = tmp_path / "s.toml"
    spec.write_text('kind = "regress"\n[settings]\ndataset = "yacht"\nepochs = 1\n[cross]\nsplit = [0]\n'
                    '[[methods]]\nposterior = "mfvi"\n')
    assert main(["grid", "run", str(spec), "--out", str(blocker / "g")]) == 2
    assert f"--out {blocker / 'g'}: {blocker} is not a folder" in one_line(capsys.readouterr().err)


# -------------------------------------------------------------- 4. one --hidden syntax
@pytest.mark.parametrize("words", [["50", "50"], ["50,50"], ["50,", "50"], ["50", "50,"]])
def test_every_command_takes_hidden_with_spaces_or_commas(words):
    parser = build_parser()
    bandit = parser.parse_args(["bandit", "wheel", "--hidden", *words])
    regress = parser.parse_args(["regress", "yacht", "--hidden", *words])
    assert bandit.hidden == regress.hidden == [50, 50]
    assert parser.parse_args(["bandit", "wheel"]).hidden is None          # the protocol's
    assert parser.parse_args(["regress", "yacht"]).hidden == [50]
    assert parser.parse_args(["regress", "yacht", "--hidden", "8", "--hidden", "9,9"]).hidden == [9, 9]


def test_shared_hidden_argument_names_the_flag_for_a_bad_width(capsys):
    from uncertain_agents.commands.common import add_hidden_argument

    parser = argparse.ArgumentParser(prog="x")
    add_hidden_argument(parser, default=[400, 400], help="widths")
    assert parser.parse_args([]).hidden == [400, 400]
    assert parser.parse_args(["--hidden", "4,5", "6"]).hidden == [4, 5, 6]
    for bad in ("wide", ",", "4.5"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--hidden", bad])
        err = capsys.readouterr().err
        assert "argument --hidden" in err and repr(bad) in err and "lambda" not in err
        assert ("positional arguments" in err) == (bad != "4.5")


def test_a_positional_after_hidden_is_named_as_the_likely_mistake(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bandit", "--hidden", "50", "wheel"])
    err = one_line(capsys.readouterr().err)
    assert "got 'wheel'" in err and "put positional arguments (such as the bandit or dataset name) before --hidden" in err


def test_regress_hidden_with_commas_is_the_same_run_as_with_spaces(tmp_path, capsys, yacht):
    out = tmp_path / "r"
    base = ["regress", "yacht", "--posterior", "map", "--epochs", "1", "--n-samples", "2", "--out", str(out)]
    assert main([*base, "--hidden", "4", "4"]) == 0
    assert json.loads((out / "config.json").read_text())["config"]["hidden"] == [4, 4]
    capsys.readouterr()
    assert main([*base, "--hidden", "4,4"]) == 0              # resumed, not "a different run"
    assert "resuming" in capsys.readouterr().err  # a status line, not a result


# ------------------------------------------------ 5. --posterior without a posterior agent
def test_posterior_without_a_posterior_agent_is_noted_before_the_run(tmp_path, capsys):
    out = tmp_path / "lin"
    assert main(["bandit", "wheel", "--agent", "linear", "--posterior", "mfvi,bb-alpha", "--steps", "12",
                 "--trials", "1", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    note = one_line(captured.err)  # a note, on stderr: the results on stdout are the table
    assert "note: --posterior mfvi,bb-alpha not used" in note and "(thompson, greedy)" in note
    assert "normalised regret" in captured.out and "note:" not in captured.out
    assert list(json.loads((out / "summary.json").read_text())["agents"]) == ["uniform", "linear"]


@pytest.mark.parametrize("extra", [[], ["--agent", "thompson,linear", "--posterior", "mfvi"]])
def test_no_note_when_the_posterior_is_used_or_left_out(tmp_path, capsys, extra):
    argv = ["bandit", "wheel", "--agent", "linear", "--steps", "12", "--trials", "1", "--out", str(tmp_path / "r")]
    assert main([*argv, *extra]) == 0
    captured = capsys.readouterr()
    assert "not used" not in captured.err and "not used" not in captured.out


# -------------------------------------------------------------- the same checks in `attack`
ATTACK_TINY = ["attack", "--dataset", "digits", "--attack", "fgsm", "--epochs", "0.05", "--n-attack", "10",
               "--n-samples", "2", "--epsilons", "0", "0.1"]


def test_attack_takes_hidden_with_commas_and_checks_options_on_its_real_network(tmp_path, capsys, monkeypatch):
    import attacks.evaluate

    trained = record_calls(monkeypatch, ((attacks.evaluate, "load_or_train"),))
    assert build_parser().parse_args(["attack", "--posterior", "map", "--out", "x",
                                      "--hidden", "4,4"]).hidden == [4, 4]
    # a per-layer prior for 64 -> 4 -> 10 has two entries: three are refused, naming the real widths
    out = tmp_path / "a"
    assert main([*ATTACK_TINY, "--posterior", "mfvi:prior_std=[1,1,1]", "--hidden", "4", "--out", str(out)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "2 for widths 64-4-10" in err and not out.exists() and not trained
    # --lr must be a positive finite number, named, before any work
    assert main([*ATTACK_TINY, "--posterior", "map", "--hidden", "4", "--lr", "inf", "--out", str(out)]) == 2
    assert "--lr" in capsys.readouterr().err and not out.exists() and not trained
    # the fitting list runs
    assert main([*ATTACK_TINY, "--posterior", "mfvi:prior_std=[1,1]", "--hidden", "4", "--out", str(out)]) == 0
    assert trained and (out / "fgsm.csv").exists()


@pytest.mark.parametrize("command", ["attack", "regress"])
def test_help_states_every_default(command):
    """``attack --help`` and ``regress --help`` state every default (--seed and --device stated none)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [action.option_strings[0] for action in sub.choices[command]._actions
               if action.option_strings and action.default not in (None, False, argparse.SUPPRESS, [])
               and "default" not in (action.help or "")]
    assert missing == []
