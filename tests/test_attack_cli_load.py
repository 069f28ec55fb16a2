"""``uncertain-agents attack --load DIR`` loads only the model asked for, and the printed tables show
the ε and I-FGSM steps that were run (digits, tiny networks: seconds, no network access)."""
from __future__ import annotations

import json

import pandas as pd
import pytest

import uncertain_agents as ua
from uncertain_agents.cli import main

BASE = ["attack", "--dataset", "digits", "--hidden", "4", "--epochs", "0.05", "--n-attack", "10",
        "--n-samples", "2", "--epsilons", "0", "0.1", "--steps", "1", "--no-progress"]


def save_model(folder, stem, name, *, hidden=(4,), activation="relu", **options):
    """An (untrained) digits classifier saved as ``folder/stem.pt``, as a run's models/ holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    post = ua.make_posterior(name, in_dim=64, out_dim=10, hidden=hidden, activation=activation,
                             likelihood="categorical", seed=0, **options)
    post.set_units()
    post.save(folder / f"{stem}.pt")
    return folder / f"{stem}.pt"


@pytest.fixture
def calls(monkeypatch):
    """Records every call of the functions that train or attack, then lets it through."""
    import attacks.evaluate

    seen = []
    for name in ("train_classifier", "evaluate"):
        real = getattr(attacks.evaluate, name)

        def record(*args, _real=real, _name=name, **kw):
            seen.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(attacks.evaluate, name, record)
    return seen


def error_text(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


# ------------------------------------------------------------- defect 1: a wrong file is refused
@pytest.mark.parametrize("saved, asked, differs", [
    # another method under the label's file name (the MAP network reported as "mfvi")
    (("mfvi", "map", {}), ["--posterior", "mfvi"], "method 'map' instead of 'mfvi'"),
    # another option value
    (("dropout-alpha_alpha_0.5", "dropout-alpha", {"alpha": 0.0}), ["--posterior", "dropout-alpha:alpha=0.5"],
     "alpha=0.0 instead of 0.5"),
    # an option the label leaves at its default
    (("dropout-alpha", "dropout-alpha", {"alpha": 0.0}), ["--posterior", "dropout-alpha"],
     "alpha=0.0 instead of 0.5 (the default)"),
    # another network: hidden widths, activation
    (("map", "map", {}), ["--posterior", "map", "--hidden", "8"], "hidden [4] instead of [8]"),
    (("map", "map", {}), ["--posterior", "map", "--hidden", "4", "4"], "hidden [4] instead of [4, 4]"),
    (("map", "map", {}), ["--posterior", "map", "--activation", "tanh"], "activation 'relu' instead of 'tanh'"),
])
def test_load_of_another_model_is_refused_before_the_run_folder_and_any_work(tmp_path, capsys, calls, saved,
                                                                               asked, differs):
    stem, name, options = saved
    path = save_model(tmp_path / "models", stem, name, **options)
    out = tmp_path / "run"
    assert main([*BASE, *asked, "--load", str(tmp_path / "models"), "--out", str(out)]) == 2
    err = error_text(capsys)
    assert f"--load {tmp_path / 'models'}:" in err and str(path) in err      # names the file
    assert f"holds method '{name}'" in err and differs in err                # what it holds vs asked for
    assert "Traceback" not in err
    assert not out.exists() and calls == []                                  # nothing written, trained or attacked


def test_the_reported_repro_map_file_under_mfvi_is_refused(tmp_path, capsys, calls):
    """A run's own saved MAP model copied to mfvi.pt (the user's report), also alongside a good file."""
    first = tmp_path / "att1"
    assert main([*BASE, "--posterior", "map", "--out", str(first)]) == 0
    wrong = tmp_path / "wrongload"
    wrong.mkdir()
    (wrong / "mfvi.pt").write_bytes((first / "models" / "map.pt").read_bytes())
    (wrong / "map.pt").write_bytes((first / "models" / "map.pt").read_bytes())
    capsys.readouterr()
    calls.clear()
    assert main([*BASE, "--posterior", "map", "mfvi", "--load", str(wrong), "--out", str(tmp_path / "a5")]) == 2
    err = error_text(capsys)
    assert "mfvi.pt holds method 'map'" in err and "posterior 'mfvi' asks for method 'mfvi'" in err
    assert not (tmp_path / "a5").exists() and calls == []
    # the run that saved the files loads them again: same numbers as trained
    assert main([*BASE, "--posterior", "map", "--load", str(first / "models"), "--out", str(tmp_path / "a6")]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "a6" / "fgsm.csv"), pd.read_csv(first / "fgsm.csv"))
    assert calls == ["evaluate"]                                             # loaded, not trained


@pytest.mark.parametrize("stem, name, options, posterior", [
    ("vi", "mfvi", {}, "vi"),                                                # alias of the saved method
    ("BBB", "mfvi", {}, "BBB"),                                               # names match in any case
    ("dropout-alpha_alpha_0.5", "dropout-alpha", {}, "dropout-alpha:alpha=0.5"),      # the default, spelled out
    ("dropout_alpha", "dropout-alpha", {"alpha": 0.5}, "dropout_alpha"),    # saved explicitly, left out now
    ("dropout-alpha_alpha_0_dropout_0.5", "dropout-alpha", {"alpha": 0.0, "dropout": 0.5},
     "dropout-alpha:alpha=0,dropout=0.5"),                                   # 0 and 0.0 are one value
])
def test_load_of_the_model_asked_for_runs(tmp_path, capsys, calls, stem, name, options, posterior):
    save_model(tmp_path / "models", stem, name, **options)
    out = tmp_path / "run"
    assert main([*BASE, "--posterior", posterior, "--load", str(tmp_path / "models"), "--out", str(out)]) == 0, \
        capsys.readouterr().err
    assert calls == ["evaluate"]
    assert set(pd.read_csv(out / "fgsm.csv")["posterior"]) == {posterior}
    assert json.loads((out / "config.json").read_text())["config"]["hidden"] == [4]


def test_load_of_a_classifier_for_another_number_of_classes_is_refused(tmp_path, capsys, calls):
    (tmp_path / "models").mkdir()
    post = ua.make_posterior("map", in_dim=64, out_dim=3, hidden=(4,), likelihood="categorical", seed=0)
    post.save(tmp_path / "models" / "map.pt")
    assert main([*BASE, "--posterior", "map", "--load", str(tmp_path / "models"),
                 "--out", str(tmp_path / "run")]) == 2
    err = error_text(capsys)
    assert "map.pt is not a classifier for digits (64 inputs, 10 classes)" in err and "3 outputs" in err
    assert not (tmp_path / "run").exists() and calls == []


def test_check_loaded_compares_the_saved_configuration(tmp_path):
    from attacks.evaluate import check_loaded, parse_posterior

    path = save_model(tmp_path, "x", "bb-alpha", hidden=(4, 3), alpha=0.5, train_samples=3)
    post = ua.load_posterior(path)
    check_loaded(post, parse_posterior("bbalpha:train_samples=3,alpha=0.5"), path, hidden=[4, 3])
    check_loaded(post, parse_posterior("bb-alpha:alpha=0.5,train_samples=3"), path, hidden=(4, 3),
                 activation="relu")
    with pytest.raises(ValueError, match=r"train_samples=3 instead of 4; hidden \[4, 3\] instead of \[4\]"):
        check_loaded(post, parse_posterior("bb-alpha:alpha=0.5,train_samples=4"), path, hidden=4)
    with pytest.raises(ValueError, match=r"method 'bb-alpha' instead of 'mfvi'"):
        check_loaded(post, parse_posterior("mfvi"), path, hidden=(4, 3))


# --------------------------------------------------- defect 2: the printed tables show what was run
def printed_rows(out: str, title: str) -> dict[str, list[float]]:
    """The (posterior -> key column values) of the rich table titled ``title`` in ``out``."""
    block = out.split(title, 1)[1]
    rows: dict[str, list[float]] = {}
    for line in block.splitlines()[4:]:                # title, top rule, header, header rule
        if not line.startswith("│"):
            break
        cells = [c.strip() for c in line.strip("│").split("│")]
        rows.setdefault(cells[0], []).append(float(cells[1]))
    return rows


def test_printed_tables_show_the_requested_epsilons_and_the_steps_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    out = tmp_path / "run"
    argv = [*BASE, "--posterior", "map", "mfvi", "--attack", "fgsm", "ifgsm", "--out", str(out)]
    argv[argv.index("--epsilons") + 1: argv.index("--epsilons") + 3] = ["0", "0.05", "0.15"]
    argv[argv.index("--steps") + 1] = "15"
    assert main(argv) == 0
    text = capsys.readouterr().out
    fgsm_rows = printed_rows(text, "FGSM (10 test images)")
    ifgsm_rows = printed_rows(text, "targeted I-FGSM")
    assert fgsm_rows == {"map": [0.0, 0.05, 0.15], "mfvi": [0.0, 0.05, 0.15]}
    assert sorted(pd.read_csv(out / "ifgsm.csv")["step"].unique()) == list(range(16))
    assert ifgsm_rows == {"map": [0, 3, 6, 9, 12, 15], "mfvi": [0, 3, 6, 9, 12, 15]}


def test_printed_ifgsm_table_shows_every_step_of_a_short_attack(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    argv = [*BASE, "--posterior", "map", "--attack", "ifgsm", "--out", str(tmp_path / "run")]
    argv[argv.index("--steps") + 1] = "3"
    assert main(argv) == 0
    assert printed_rows(capsys.readouterr().out, "targeted I-FGSM") == {"map": [0, 1, 2, 3]}


def test_report_values():
    from attacks.fgsm import DEFAULT_EPSILONS
    from uncertain_agents.commands.attack import REPORT_EPSILONS, REPORT_STEPS, report_values

    assert report_values([0.2, 0.0, 0.1, 0.1], REPORT_EPSILONS) == [0.0, 0.1, 0.2]
    assert report_values(DEFAULT_EPSILONS, REPORT_EPSILONS) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert report_values(range(41), REPORT_STEPS) == [0, 8, 16, 24, 32, 40]
    assert report_values(range(6), REPORT_STEPS) == [0, 1, 2, 3, 4, 5]
    for n in range(1, 120):                            # at most `most`, always the first and the last
        shown = report_values(range(n + 1), REPORT_STEPS)
        assert shown[0] == 0 and shown[-1] == n and len(shown) <= REPORT_STEPS
        assert shown == sorted(set(shown)) and (len(shown) >= 4 or n < 3)
        gaps = [b - a for a, b in zip(shown, shown[1:])]
        assert max(gaps) - min(gaps) <= 1, (n, shown)   # evenly spaced
    assert report_values([5.0], 3) == [5.0]
