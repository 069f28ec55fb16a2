"""Grid specs and their runs: what a spec may say is checked before any cell runs, the CLI selects
what the Python API selects, the Ray executor runs with its defaults, and JSON-lines records
survive a kill."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from uncertain_agents.grid import load_spec, parse_spec, run_grid, select_cells
from uncertain_agents.grid.table import method_label

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_grid import ROOT, cell_files, toy_spec  # noqa: E402

COMMA_METHOD = {"posterior": "mfvi", "options": {"prior_std": 1.0, "noise_std": 0.1}}
COMMA_LABEL = "mfvi(noise_std=0.1, prior_std=1.0)"


def small_spec(**overrides) -> dict:
    """One seed of the toy spec: a cell runs in well under a second."""
    return toy_spec(**{"cross": {"seed": [0]}, **overrides})


# ------------------------------------------------------------------ load_spec / parse_spec
def test_load_spec_accepts_a_dict():
    spec = load_spec(toy_spec())
    assert spec == parse_spec(toy_spec())
    assert spec.source == "" and len(spec.cells()) == 6


def test_a_threads_key_in_a_spec_is_rejected_not_ignored(tmp_path):
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['threads'\]"):
        run_grid(toy_spec(threads=2), tmp_path / "grid")
    assert not (tmp_path / "grid").exists()


@pytest.mark.parametrize("methods, label", [
    ([{"posterior": "mfvi", "label": "vi", "options": {"prior_std": 1.0}},
      {"posterior": "mfvi", "label": "vi", "options": {"prior_std": 10.0}}], "vi"),
    ([{"posterior": "map"}, {"posterior": "mfvi", "label": "map"}], "map"),  # a label equal to another's default
])
def test_two_methods_with_one_label_are_rejected(methods, label):
    with pytest.raises(ValueError, match=rf"methods\[0\] and methods\[1\] have the same label '{label}'"):
        parse_spec(toy_spec(methods=methods))


def test_every_spec_of_the_project_has_distinct_labels():
    for path in sorted((ROOT / "experiments" / "specs").glob("*.toml")):
        labels = [method_label(m) for m in load_spec(path).methods]
        assert len(set(labels)) == len(labels), path.name


# ------------------------------------------------------------------ reference CSV
def write_spec(path: Path, reference_csv: str) -> Path:
    path.write_text(textwrap.dedent(f"""\
        name = "ref"
        kind = "toy"
        [settings]
        toy = "heteroscedastic"
        steps = 40
        hidden = [8]
        n_train = 64
        n_test = 64
        [cross]
        seed = [0]
        [[methods]]
        posterior = "map"
        [reference]
        csv = "{reference_csv}"
        """))
    return path


def test_a_missing_reference_csv_fails_before_any_cell_runs(tmp_path, capsys):
    from uncertain_agents.cli import main

    spec = write_spec(tmp_path / "spec.toml", "no_such.csv")
    with pytest.raises(FileNotFoundError, match=r"reference\.csv 'no_such.csv' names no file.*no_such\.csv"):
        load_spec(spec)
    with pytest.raises(FileNotFoundError, match=r"reference\.csv"):
        run_grid(spec, tmp_path / "grid")
    with pytest.raises(FileNotFoundError, match=r"reference\.csv"):  # a dict's CSV is looked for in the grid folder
        run_grid({**small_spec(), "reference": {"csv": "no_such.csv"}}, tmp_path / "grid")
    assert not (tmp_path / "grid").exists()
    assert main(["grid", "run", str(spec), "--out", str(tmp_path / "grid"), "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert "reference.csv" in err and "no_such.csv" in err
    assert not (tmp_path / "grid").exists()
    (tmp_path / "ref.csv").write_text("dataset,method,metric,mean,se\n")
    assert load_spec(write_spec(tmp_path / "good.toml", "ref.csv")).reference["csv"] == "ref.csv"


# ------------------------------------------------------------------ CLI --only / --where
def test_cli_only_matches_a_label_that_holds_commas(tmp_path, capsys):
    from uncertain_agents.cli import main
    from uncertain_agents.commands.grid import _parse_only

    labels = ["map", COMMA_LABEL, "a,b"]
    assert _parse_only(COMMA_LABEL, labels) == [COMMA_LABEL]
    assert _parse_only(f"map,{COMMA_LABEL}", labels) == ["map", COMMA_LABEL]
    assert _parse_only(f" {COMMA_LABEL} , map", labels) == [COMMA_LABEL, "map"]
    assert _parse_only("a,b,map", labels) == ["a,b", "map"]
    assert _parse_only("map,nope", labels) == ["map", "nope"]  # passed on for select_cells to name

    raw = small_spec(methods=[{"posterior": "map"}, COMMA_METHOD])
    assert [method_label(m) for m in parse_spec(raw).methods] == ["map", COMMA_LABEL]
    path = tmp_path / "spec.toml"
    path.write_text(
        'name = "comma"\nkind = "toy"\n[settings]\ntoy = "heteroscedastic"\nsteps = 40\nhidden = [8]\n'
        'n_train = 64\nn_test = 64\n[cross]\nseed = [0]\n[[methods]]\nposterior = "map"\n'
        '[[methods]]\nposterior = "mfvi"\noptions = { prior_std = 1.0, noise_std = 0.1 }\n')
    out = tmp_path / "grid"
    assert main(["grid", "run", str(path), "--out", str(out), "--threads", "1", "--only", COMMA_LABEL]) == 0
    methods = [r["config"]["method"] for r in cell_files(out).values()]
    assert methods == [COMMA_METHOD]
    assert "1 run now, 0 failed" in " ".join(capsys.readouterr().out.split())
    assert main(["grid", "run", str(path), "--out", str(out), "--only", "mfvi"]) == 2
    assert "only must name methods" in capsys.readouterr().err


def test_where_compares_numbers_as_numbers():
    from uncertain_agents.commands.grid import _parse_where

    raw = {"kind": "attack", "cross": {"epochs": [0.5, 1], "seed": [0, 1]}, "methods": [{"posterior": "map"}]}
    spec = parse_spec(raw)
    assert spec.cross["epochs"] == [0.5, 1.0]
    for where in (_parse_where(["epochs=1"]), {"epochs": [1]}, {"epochs": ["1.0"]}):
        cells = select_cells(spec, None, where)
        assert [c["epochs"] for c in cells] == [1.0, 1.0] and [c["seed"] for c in cells] == [0, 1]
    assert [c["epochs"] for c in select_cells(spec, None, _parse_where(["epochs=0.5,1", "seed=1"]))] == [0.5, 1.0]
    with pytest.raises(ValueError, match=r"where\['epochs'\]: '2' is not one of the spec's values \[0.5, 1.0\]"):
        select_cells(spec, None, _parse_where(["epochs=2"]))
    with pytest.raises(ValueError, match=r"where\['epochs'\]: 'one' is not one of"):
        select_cells(spec, None, {"epochs": ["one"]})


# ------------------------------------------------------------------ Ray
RAY_SCRIPT = """
import json, sys
import uncertain_agents.grid as grid
grid.available_cores = lambda: 2   # default threads = 2 cores / 1 worker: each task asks for 2 CPUs
spec = json.loads(sys.argv[1])
run = grid.run_grid(spec, sys.argv[2], executor="ray")
print("RESULT", run.total, run.finished, len(run.failed))
"""


def test_ray_executor_runs_with_its_default_workers_and_threads(tmp_path):
    """The default call (1 worker, threads = cores / workers > 1) once started Ray with 1 CPU
    and asked 2 per task, so nothing was ever scheduled; run in a child so a hang fails the test."""
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    done = subprocess.run([sys.executable, "-c", RAY_SCRIPT, json.dumps(small_spec()), str(out)],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "RESULT 2 2 0" in done.stdout
    configs = [r["config"] for r in cell_files(out).values()]
    assert sorted(c["method"]["posterior"] for c in configs) == ["map", "mfvi"]


# ------------------------------------------------------------------ JSON-lines records
def test_a_record_appended_after_a_cut_line_stays_whole(tmp_path, monkeypatch):
    import os

    from uncertain_agents import runs
    from uncertain_agents.runs import append_record, read_records

    path = tmp_path / "runs.jsonl"
    append_record(path, {"a": 1})
    with open(path, "a") as fh:
        fh.write('{"a": 2, "b"')  # a write a kill cut short
    assert read_records(path) == [{"a": 1}]
    append_record(path, {"a": 3})
    assert path.read_text() == '{"a": 1}\n{"a": 3}\n'
    assert read_records(path) == [{"a": 1}, {"a": 3}]

    only_cut = tmp_path / "cut.jsonl"
    only_cut.write_text('{"a": ' + "x" * 5000)  # no newline at all, longer than one read
    append_record(only_cut, {"a": 4})
    assert read_records(only_cut) == [{"a": 4}]

    real_write = os.write
    monkeypatch.setattr(runs.os, "write", lambda fd, data: real_write(fd, data[:3]))  # the OS writes part
    append_record(path, {"a": 5, "long": "y" * 50})
    monkeypatch.undo()
    assert read_records(path) == [{"a": 1}, {"a": 3}, {"a": 5, "long": "y" * 50}]

    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"a": 1}\n{"a": 2, "x"{"a": 3}\n{"a": 4}\n')  # a whole line that is not JSON
    with pytest.raises(ValueError, match=r"broken\.jsonl: line 2 is not a JSON record"):
        read_records(broken)


# ------------------------------------------------------------------ checks across keys, threads
@pytest.mark.data
def test_a_split_the_data_set_lacks_fails_before_any_cell(tmp_path):
    from uncertain_agents.datasets import data_dir
    from uncertain_agents.datasets.uci import UCIDataset

    if not (data_dir() / "uci" / "bostonHousing" / "data.txt").is_file():
        pytest.skip("the UCI data folder is not here (set UNCERTAIN_AGENTS_DATA)")
    n = UCIDataset("bostonHousing").n_splits
    spec = {"name": "bad-split", "kind": "regress", "settings": {"dataset": "bostonHousing", "epochs": 1},
            "cross": {"split": [0, n]}, "methods": [{"posterior": "map"}]}
    with pytest.raises(ValueError, match=rf"split {n} of 'bostonHousing' does not exist: the data set has {n}"):
        run_grid(spec, tmp_path / "grid")
    assert not (tmp_path / "grid").exists()  # nothing ran, no folder


def test_a_serial_grid_gives_the_torch_thread_count_back(tmp_path):
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        run = run_grid(small_spec(), tmp_path / "grid", threads=1)
        assert run.finished == run.total > 0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_cached_classifier_is_keyed_by_the_thread_count(tmp_path, monkeypatch):
    """Training with another thread count rounds differently: its classifier is not the cell's."""
    import torch

    import uncertain_agents as ua
    from uncertain_agents.grid import jobs

    monkeypatch.setenv(jobs.TRAINED_CACHE_ENV, str(tmp_path / "cache"))
    cell = {"method": {"posterior": "map", "options": {}}, "dataset": "digits", "seed": 0, "hidden": [4],
            "epochs": 1, "batch_size": 8, "lr": None, "device": "cpu"}
    trained = []

    def train():
        trained.append(torch.get_num_threads())
        return ua.make_posterior("map", in_dim=2, out_dim=3, hidden=(4,), likelihood="categorical", seed=0), 1.5

    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 1, 2):
            torch.set_num_threads(threads)
            post, seconds = jobs._cached_training(cell, train)
            assert seconds == 1.5 and post.kind == "categorical"
    finally:
        torch.set_num_threads(before)
    assert trained == [1, 2]  # trained once per thread count, then loaded
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2


def test_a_grid_made_with_the_old_random_streams_is_not_extended(tmp_path):
    """Cells of seeding scheme 1 (before session 33) and today's would mix two sets of random numbers."""
    from uncertain_agents.seeding import SEEDING_SCHEME

    out = tmp_path / "grid"
    spec = small_spec()
    first = run_grid(spec, out, threads=1)
    assert first.finished == first.total > 1
    cells = sorted((out / "cells").glob("*.json"))
    assert all(json.loads(p.read_text())["manifest"]["seeding"] == SEEDING_SCHEME for p in cells)
    old = json.loads(cells[0].read_text())
    del old["manifest"]["seeding"]  # as every cell written before session 33
    cells[0].write_text(json.dumps(old))
    again = run_grid(spec, out, threads=1)  # nothing left to run: the folder stays readable
    assert again.finished == 0 and again.skipped == again.total
    cells[1].unlink()
    with pytest.raises(ValueError, match=r"1 finished cell\(s\) were made with the random streams of before"):
        run_grid(spec, out, threads=1)
    assert not cells[1].exists()  # refused before any cell ran
