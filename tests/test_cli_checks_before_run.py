"""Every CLI argument is checked before the run folder records the run (and before any training),
and what decides "the same run" is what changes the results: not where they are written."""
from __future__ import annotations

import json

import pytest

from uncertain_agents.cli import main

from cli_helpers import record_calls
from uci_helpers import write_tiny_yacht

ATTACK = ["attack", "--dataset", "digits", "--posterior", "map", "--attack", "fgsm", "ifgsm", "--hidden", "4",
          "--epochs", "0.05", "--n-attack", "10", "--n-samples", "2", "--epsilons", "0", "0.1", "--steps", "1",
          "--no-progress"]
BANDIT = ["bandit", "wheel", "--agent", "thompson", "--posterior", "mfvi", "--steps", "30", "--trials", "2",
          "--train-every", "10", "--train-steps", "2", "--hidden", "8", "--delta", "0.7"]


@pytest.fixture
def calls(monkeypatch):
    """Records every call of the functions that train (attack, regress) or run trials (bandit),
    then lets it through."""
    import attacks.evaluate
    import uncertain_agents.agents.experiment
    import uncertain_agents.regression

    return record_calls(monkeypatch, ((attacks.evaluate, "load_or_train"), (uncertain_agents.regression, "run_uci"),
                                      (uncertain_agents.agents.experiment, "run_experiment")))


# ------------------------------------------------------- bad arguments: no folder, no training
@pytest.mark.parametrize("extra, message", [
    (["--hidden", "0"], "--hidden widths must be positive integers"),
    (["--hidden", "4", "-2"], "--hidden widths must be positive integers"),
    (["--activation", "bogus"], "--activation must be one of"),
    (["--target", "99"], "--target must be a class index in [0, 9]"),
    (["--target", "-1"], "--target must be a class index in [0, 9]"),
    (["--step", "-0.1"], "--step must be a positive finite number"),
    (["--step", "0"], "--step must be a positive finite number"),
    (["--step", "inf"], "--step must be a positive finite number"),
    (["--epsilons", "-0.5"], "--epsilons must be finite numbers >= 0"),
    (["--epsilons", "0.1", "nan"], "--epsilons must be finite numbers >= 0"),
    (["--load", "no_models"], "--load no_models: no map.pt"),
])
def test_attack_bad_argument_fails_before_the_run_folder_and_training(tmp_path, monkeypatch, capsys, calls,
                                                                       extra, message):
    monkeypatch.chdir(tmp_path)
    assert main([*ATTACK, "--out", "run", *extra]) == 2
    err = capsys.readouterr().err
    assert message in " ".join(err.split()) and "Traceback" not in err
    assert not (tmp_path / "run").exists() and calls == []


def test_attack_load_of_a_broken_model_fails_before_the_run_folder(tmp_path, capsys):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "map.pt").write_text("not a model")
    assert main([*ATTACK, "--load", str(tmp_path / "models"), "--out", str(tmp_path / "run")]) == 2
    assert "map.pt" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_attack_posterior_option_error_names_the_posterior_syntax(tmp_path, capsys, calls):
    argv = [*ATTACK, "--out", str(tmp_path / "run")]
    argv[argv.index("map")] = "map:alpha=0.5"
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--posterior map:alpha=0.5:" in err and "unknown option" in err and "alpha" in err
    assert "--option" not in err                     # attack has no --option flag
    assert not (tmp_path / "run").exists() and calls == []


def test_attack_corrected_command_after_a_bad_one_needs_no_force(tmp_path, capsys, calls):
    out = str(tmp_path / "run")
    assert main([*ATTACK, "--out", out, "--hidden", "0"]) == 2
    assert main([*ATTACK, "--out", out, "--target", "99"]) == 2
    assert calls == []
    capsys.readouterr()
    assert main([*ATTACK, "--out", out]) == 0          # no "holds a different run"
    assert calls == ["load_or_train"] and (tmp_path / "run" / "summary.json").is_file()


def test_regress_bad_activation_fails_before_the_run_folder_and_a_corrected_run_needs_no_force(
        tmp_path, capsys, calls):
    data = write_tiny_yacht(tmp_path / "data")
    argv = ["regress", "yacht", "--posterior", "map", "--epochs", "2", "--hidden", "4", "--n-samples", "2",
            "--data-dir", str(data), "--out", str(tmp_path / "rx")]
    assert main([*argv, "--activation", "bogus"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--activation must be one of" in err and "'bogus'" in err and "relu" in err
    assert not (tmp_path / "rx").exists() and calls == []
    assert main([*argv, "--activation", "tanh"]) == 0
    assert calls == ["run_uci"]
    assert json.loads((tmp_path / "rx" / "summary.json").read_text())["config"]["activation"] == "tanh"


@pytest.mark.parametrize("hidden", ["0", "8,0", "-3"])
def test_bandit_bad_hidden_fails_before_the_run_folder(tmp_path, capsys, calls, hidden):
    argv = [*BANDIT, "--out", str(tmp_path / "run")]
    argv[argv.index("--hidden") + 1] = hidden
    assert main(argv) == 2
    assert "--hidden widths must be positive integers" in capsys.readouterr().err
    assert not (tmp_path / "run").exists() and calls == []


def test_bandit_hidden_that_is_not_a_number_names_the_flag(tmp_path, capsys):
    argv = [*BANDIT, "--out", str(tmp_path / "run")]
    argv[argv.index("--hidden") + 1] = "wide"
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--hidden" in err and "'wide'" in err and "lambda" not in err
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ what makes "the same run"
def test_attack_resumes_whatever_way_out_data_dir_and_load_are_spelled(tmp_path, monkeypatch, capsys, calls):
    monkeypatch.chdir(tmp_path)
    assert main([*ATTACK, "--out", "att"]) == 0
    assert calls == ["load_or_train"]
    for out in ("att/", str(tmp_path / "att"), "./att"):
        capsys.readouterr()
        assert main([*ATTACK, "--out", out, "--data-dir", "elsewhere"]) == 0, capsys.readouterr().err
        assert "finished in an earlier run" in capsys.readouterr().err  # a status line
    assert calls == ["load_or_train"]                  # nothing trained again
    config = json.loads((tmp_path / "att" / "config.json").read_text())["config"]
    assert "out" not in config and "data_dir" not in config and config["load"] is None
    # --load: compared as a resolved path
    assert main([*ATTACK, "--out", "loaded", "--load", "att/models"]) == 0
    capsys.readouterr()
    assert main([*ATTACK, "--out", "loaded", "--load", str(tmp_path / "att" / "models") + "/"]) == 0
    assert "finished in an earlier run" in capsys.readouterr().err  # a status line
    assert json.loads((tmp_path / "loaded" / "config.json").read_text())["config"]["load"] == \
        str((tmp_path / "att" / "models").resolve())
    # what changes the results still makes a different run
    assert main([*ATTACK, "--out", "att", "--target", "3"]) == 2
    assert "different run" in capsys.readouterr().err


def test_bandit_batched_run_is_not_resumed_by_a_per_trial_mode(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main([*BANDIT, "--parallel", "batched", "--out", out]) == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    assert config["trial_batched"] == ["thompson[mfvi]"]
    for mode in ("processes", "threads", "auto"):      # other random numbers: refused, not mixed
        capsys.readouterr()
        assert main([*BANDIT, "--parallel", mode, "--out", out]) == 2
        assert "different run" in capsys.readouterr().err
    assert main([*BANDIT, "--parallel", "batched", "--out", out]) == 0
    assert "already finished" in " ".join(capsys.readouterr().err.split())


def test_bandit_per_trial_modes_stay_interchangeable(tmp_path, capsys):
    """processes, threads and one by one give the same runs (tests/test_bandit_cli.py), and
    --parallel batched batches nothing for agents without a trial-batched form: one run."""
    out = str(tmp_path / "run")
    assert main([*BANDIT, "--parallel", "processes", "--out", out]) == 0
    assert "trial_batched" not in json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    for mode in ("threads", "auto"):
        capsys.readouterr()
        assert main([*BANDIT, "--parallel", mode, "--out", out]) == 0
        assert "already finished" in " ".join(capsys.readouterr().err.split())
    linear = [*BANDIT, "--agent", "linear", "--out", str(tmp_path / "linear")]
    assert main([*linear, "--parallel", "batched"]) == 0
    capsys.readouterr()
    assert main([*linear, "--parallel", "processes"]) == 0
    assert "already finished" in " ".join(capsys.readouterr().err.split())


def test_a_run_folder_of_the_old_random_streams_is_not_resumed(tmp_path):
    """A CLI run folder made before session 33 (no seeding key) is another run: resuming would mix streams."""
    import json

    from uncertain_agents.runs import RunFolder

    RunFolder(tmp_path / "run", {"steps": 10})
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["config"]["seeding"] == 2 and saved["manifest"]["seeding"] == 2
    assert RunFolder(tmp_path / "run", {"steps": 10}).resumed
    del saved["config"]["seeding"]
    (tmp_path / "run" / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="random streams of seeding scheme 1"):
        RunFolder(tmp_path / "run", {"steps": 10})
    assert not RunFolder(tmp_path / "run", {"steps": 10}, force=True).resumed
