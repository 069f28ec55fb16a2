"""Experiment grids: validation before work, cell hashes, resume after a kill, executors agree."""
import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from uncertain_agents.grid import CellStore, cell_hash, grid_table, load_spec, parse_spec, run_grid

ROOT = Path(__file__).resolve().parents[1]


def toy_spec(**overrides) -> dict:
    spec = {"name": "toy-test", "kind": "toy",
            "settings": {"toy": "heteroscedastic", "steps": 40, "hidden": [8], "n_train": 64, "n_test": 64},
            "cross": {"seed": [0, 1, 2]},
            "methods": [{"posterior": "map"}, {"posterior": "mfvi", "options": {"prior_std": 1.0}}]}
    spec.update(overrides)
    return spec


def cell_files(out: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted((out / "cells").glob("*.json"))}


def test_a_cell_hash_changes_with_any_option():
    spec = parse_spec(toy_spec())
    base = spec.cells()[1]
    assert cell_hash(base) == cell_hash(json.loads(json.dumps(base)))
    changed = [dict(base, steps=41), dict(base, seed=7), dict(base, hidden=[9]),
               dict(base, method={"posterior": "mfvi", "options": {"prior_std": 2.0}}),
               dict(base, method={"posterior": "mfvi", "options": {"prior_std": 1.0, "noise_std": 0.1}})]
    hashes = {cell_hash(c) for c in changed}
    assert len(hashes) == len(changed) and cell_hash(base) not in hashes


@pytest.mark.parametrize("patch, key", [
    ({"methods": [{"posterior": "no-such-posterior"}]}, "methods[0].posterior"),
    ({"settings": {"toy": "no-such-toy"}}, "settings.toy"),
    ({"cross": {"seed": 3}}, "cross.seed"),
    ({"cross": {"seed": [0, "one"]}}, "cross.seed[1]"),
    ({"settings": {"stepz": 10}}, "settings.stepz"),
    ({"colour": "red"}, "colour"),
    ({"methods": [{"posterior": "mfvi", "options": {"no_such_option": 1}}]}, "methods[0].options"),
    ({"kind": "dance"}, "kind"),
])
def test_a_bad_spec_fails_before_any_cell_runs(tmp_path, patch, key):
    with pytest.raises(ValueError, match=key.replace("[", r"\[").replace("]", r"\]")):
        run_grid(toy_spec(**patch), tmp_path / "grid")
    assert not (tmp_path / "grid" / "cells").exists()


def test_uci_dataset_names_are_checked():
    spec = {"kind": "regress", "settings": {"dataset": "bostn"}, "methods": [{"posterior": "mfvi"}]}
    with pytest.raises(ValueError, match="settings.dataset"):
        parse_spec(spec)


def test_rerun_skips_finished_cells_and_table_aggregates(tmp_path):
    out = tmp_path / "grid"
    first = run_grid(toy_spec(), out)
    assert (first.total, first.skipped, first.finished, first.failed) == (6, 0, 6, [])
    files = cell_files(out)
    assert len(files) == 6
    record = next(iter(files.values()))
    assert {"package_version", "torch_version", "argv"} <= set(record["manifest"])
    second = run_grid(toy_spec(), out)
    assert (second.skipped, second.finished) == (6, 0)
    assert cell_files(out) == files  # nothing rewritten
    table = grid_table(out)
    assert list(table["method"]) == ["map", "mfvi(prior_std=1.0)"]
    assert (table["n"] == 3).all() and {"test_nll", "test_nll_se"} <= set(table.columns)
    assert (out / "table.md").read_text().count("\n") == 4


#: ``grid run`` in a child process that SIGKILLs itself right after its second cell file is written:
#: a kill at a fixed point (the test used to poll for two cells and kill from here, a race with the run).
KILL_AFTER_TWO_CELLS = """
import os, signal, sys
from uncertain_agents.cli import main
from uncertain_agents.grid.store import CellStore
write, written = CellStore.write, []
def write_then_die(self, *args, **kwargs):
    path = write(self, *args, **kwargs)
    written.append(path)
    if len(written) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return path
CellStore.write = write_then_die
sys.exit(main(sys.argv[1:]))
"""


def test_killed_grid_resumes_to_the_same_table(tmp_path):
    """SIGKILL a CLI grid after some cells, leave a half-written file, resume: the same table
    as an uninterrupted run, no cell missing or duplicated."""
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        'name = "kill"\nkind = "toy"\n[settings]\ntoy = "bimodal"\nsteps = 600\nhidden = [16]\n'
        'n_train = 128\nn_test = 64\n[cross]\nseed = [0, 1, 2, 3]\n'
        '[[methods]]\nposterior = "map"\n[[methods]]\nposterior = "mfvi"\n')
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["grid", "run", str(spec_path), "--threads", "1", "--out"]
    cmd = [sys.executable, "-m", "uncertain_agents.cli", *args]
    killed = tmp_path / "killed"
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_TWO_CELLS, *args, str(killed)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    spec = load_spec(spec_path)
    store = CellStore(killed)
    finished = [c for c in spec.cells() if store.done(c)]
    assert len(finished) == 2 and len(list((killed / "cells").glob("*.json"))) == 2
    missing = next(c for c in spec.cells() if not store.done(c))
    store.path(missing).write_text('{"config": {"kind": "toy", "method"')  # a half-written file
    resumed = subprocess.run(cmd + [str(killed)], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(finished)} already finished" in resumed.stdout.replace("\n", " ")
    clean = tmp_path / "clean"
    assert subprocess.run(cmd + [str(clean)], env=env, capture_output=True, timeout=300).returncode == 0
    assert sorted(cell_files(killed)) == sorted(cell_files(clean))
    assert len(cell_files(killed)) == 8
    metrics = lambda out: {k: {m: v for m, v in r["metrics"].items() if "seconds" not in m}  # noqa: E731
                           for k, r in cell_files(out).items()}
    assert metrics(killed) == metrics(clean)
    strip = lambda t: t.drop(columns=[c for c in t.columns if "seconds" in c])  # noqa: E731
    assert strip(grid_table(killed)).equals(strip(grid_table(clean)))


def test_process_pool_gives_the_same_cells_as_serial(tmp_path):
    run_grid(toy_spec(), tmp_path / "serial", threads=1)
    run_grid(toy_spec(), tmp_path / "pool", workers=2, threads=1)
    metrics = lambda out: {k: {m: v for m, v in r["metrics"].items() if "seconds" not in m}  # noqa: E731
                           for k, r in cell_files(out).items()}
    assert metrics(tmp_path / "serial") == metrics(tmp_path / "pool")


def test_ray_executor_gives_the_same_cells_as_local(tmp_path):
    pytest.importorskip("ray")
    spec = toy_spec(cross={"seed": [0]})
    run_grid(spec, tmp_path / "local", threads=1)
    run_grid(spec, tmp_path / "ray", executor="ray", workers=2, threads=1)
    metrics = lambda out: {k: {m: v for m, v in r["metrics"].items() if "seconds" not in m}  # noqa: E731
                           for k, r in cell_files(out).items()}
    assert metrics(tmp_path / "local") == metrics(tmp_path / "ray")


def cuda_bandit_spec() -> dict:
    """A one-cell bandit grid on CUDA (the toy job has no device setting)."""
    return {"name": "cuda-test", "kind": "bandit", "settings": {"env": "wheel", "steps": 20, "device": "cuda"},
            "cross": {"trial": [0]}, "methods": [{"posterior": "mfvi"}]}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_a_device_the_machine_lacks_fails_before_any_cell(tmp_path):
    spec = cuda_bandit_spec()
    with pytest.raises(ValueError, match=r"settings.device.*CUDA is not available on this machine"):
        run_grid(spec, tmp_path / "g", threads=1)
    assert not (tmp_path / "g").exists()           # nothing written, no cell started


def test_ray_address_needs_the_ray_executor(tmp_path):
    with pytest.raises(ValueError, match=r"ray_address \(--ray-address\) is used with executor='ray'"):
        run_grid(toy_spec(), tmp_path / "g", ray_address="auto", threads=1)
    assert not (tmp_path / "g").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without GPUs")
def test_ray_cells_that_need_a_gpu_the_cluster_lacks_fail_instead_of_waiting(tmp_path):
    pytest.importorskip("ray")
    spec = cuda_bandit_spec()
    with pytest.raises(ValueError, match=r"cells ask for 1 GPU each .*the Ray cluster has 0"):
        run_grid(spec, tmp_path / "g", executor="ray", workers=1, threads=1)
    import ray

    assert not ray.is_initialized()                # the instance started here was shut down


def test_smoke_spec_is_valid():
    spec = load_spec(ROOT / "experiments" / "specs" / "smoke.toml")
    assert spec.kind == "regress" and len(spec.cells()) == 4


def test_bad_executor_arguments(tmp_path):
    with pytest.raises(ValueError, match="executor"):
        run_grid(toy_spec(), tmp_path, executor="slurm")
    with pytest.raises(ValueError, match="workers"):
        run_grid(toy_spec(), tmp_path, workers=0)


def test_atomic_writes_get_the_usual_file_mode(tmp_path):
    """Result files are readable like any file the process creates (mkstemp alone gives 0600)."""
    import os

    from uncertain_agents.runs import atomic_write_text
    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "cell.json", "{}")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_results_page_names_the_recorded_command_and_commit():
    from uncertain_agents.grid import recorded_commands
    record = {"manifest": {"argv": ["/usr/bin/uncertain-agents", "grid", "run", "s.toml", "--out", "d"],
                           "git_commit": "0123456789abcdef"}}
    other = {"manifest": {"argv": ["/x/uncertain-agents", "grid", "run", "s.toml", "--out", "d", "--workers", "2"]}}
    text = recorded_commands([record, record, other])
    assert text.splitlines()[0] == "uncertain-agents grid run s.toml --out d    # commit 0123456789"
    assert "--workers 2" in text.splitlines()[1]
    assert recorded_commands([{"manifest": {}}]) is None


def test_swept_metrics_get_a_long_table_and_a_figure(tmp_path, monkeypatch):
    # an attack cell reports accuracy@eps / entropy@eps; the table and page show them one row per
    # method and eps (not 2 x len(eps) columns) and plot them against eps
    import dataclasses

    import numpy as np

    from uncertain_agents.grid.jobs import JOBS
    from uncertain_agents.grid.table import split_sweeps

    def fake_run(cell):
        s = cell["seed"]
        return {"clean_accuracy": 0.9 + 0.01 * s, "accuracy@0.1": 0.5 + 0.1 * s, "accuracy@0.3": 0.1 * s,
                "entropy@0.1": 1.0, "entropy@0.3": 2.0 + s}

    monkeypatch.setitem(JOBS, "toy", dataclasses.replace(JOBS["toy"], run=fake_run, sweep_axis="epsilon"))
    out = tmp_path / "grid"
    run_grid(toy_spec(), out)
    page = tmp_path / "docs" / "page.md"
    table = grid_table(out, markdown=page)
    assert split_sweeps(["clean_accuracy", "accuracy@0.1", "accuracy@0.3", "x@y"]) == (
        ["clean_accuracy", "x@y"], {"accuracy": [(0.1, "accuracy@0.1"), (0.3, "accuracy@0.3")]})
    assert table.loc[0, "accuracy@0.3"] == pytest.approx(0.1)  # seeds 0, 1, 2 -> mean 0.1
    text = page.read_text()
    assert "Against epsilon:" in text and "| method | n | epsilon | accuracy | entropy |" in text
    assert "| map | 3 | 0.3 | 0.100 ± 0.058 | 3.000 ± 0.577 |" in text
    assert "![toy-test: against epsilon](page.png)" in text and (tmp_path / "docs" / "page.png").stat().st_size > 1000
    long = np.loadtxt(out / "table_sweeps.csv", delimiter=",", skiprows=1, usecols=(2, 3))
    assert long.shape == (4, 2)  # 2 methods x 2 epsilons
    assert (out / "sweeps.png").exists()


def test_only_runs_the_named_methods_and_the_rest_later(tmp_path):
    out = tmp_path / "grid"
    part = run_grid(toy_spec(), out, only=["map"])
    assert (part.total, part.finished) == (3, 3)
    assert {r["config"]["method"]["posterior"] for r in cell_files(out).values()} == {"map"}
    rest = run_grid(toy_spec(), out)
    assert (rest.total, rest.skipped, rest.finished) == (6, 3, 3)
    with pytest.raises(ValueError, match="only must name methods.*mfvi\\(prior_std=1.0\\)"):
        run_grid(toy_spec(), out, only=["mfvi"])
    with pytest.raises(ValueError, match="only must name methods"):  # fails before writing anything
        run_grid(toy_spec(), tmp_path / "untouched", only=["nope"])
    assert not (tmp_path / "untouched").exists()


def test_where_runs_a_slice_of_the_cross_and_the_rest_later(tmp_path):
    out = tmp_path / "grid"
    part = run_grid(toy_spec(), out, where={"seed": ["0", 2]})  # the CLI passes strings
    assert (part.total, part.finished) == (4, 4)
    assert sorted(r["config"]["seed"] for r in cell_files(out).values()) == [0, 0, 2, 2]
    both = run_grid(toy_spec(), out, only=["map"], where={"seed": [1]})
    assert (both.total, both.finished) == (1, 1)
    rest = run_grid(toy_spec(), out)
    assert (rest.total, rest.skipped, rest.finished) == (6, 5, 1)
    run_grid(toy_spec(), out)  # nothing left to run: not a run of the folder
    runs = json.loads((out / "manifest.json").read_text())["runs"]  # one per run that added cells
    assert len(runs) == 3 and all({"git_commit", "argv", "started"} <= set(r) for r in runs)
    from uncertain_agents.commands.grid import _parse_where

    assert _parse_where(["seed=0, 1", "seed=2"]) == {"seed": ["0", "1", "2"]}
    with pytest.raises(ValueError, match="--where must look like KEY=V1,V2"):
        _parse_where(["seed"])
    for where, message in [({"split": [0]}, "'split' is not a cross key of the spec, one of \\['seed'\\]"),
                           ({"seed": [5]}, "where\\['seed'\\]: 5 is not one of the spec's values \\[0, 1, 2\\]"),
                           ({"seed": 0}, "must be a non-empty list")]:
        with pytest.raises(ValueError, match=message):  # fails before writing anything
            run_grid(toy_spec(), tmp_path / "untouched", where=where)
    assert not (tmp_path / "untouched").exists()


def test_attack_cells_with_a_targeted_attack_and_keys_added_later(tmp_path):
    # the targeted I-FGSM keys are optional: a spec that leaves them out makes the same cells
    # (same names) as before they existed; one that sets them adds ifgsm_* metrics per step
    base = {"name": "attack-test", "kind": "attack",
            "settings": {"dataset": "digits", "hidden": [16], "epochs": 0.5, "n_attack": 40, "n_samples": 2,
                         "epsilons": [0.1]},
            "cross": {"seed": [0]}, "methods": [{"posterior": "mfvi"}]}
    plain = parse_spec(base).cells()[0]
    assert not {"targeted_steps", "target", "n_targeted"} & set(plain)
    targeted = json.loads(json.dumps(base))
    targeted["settings"].update(targeted_steps=2, targeted_every=1, n_targeted=30)
    spec = parse_spec(targeted)
    assert cell_hash(spec.cells()[0]) != cell_hash(plain)
    with pytest.raises(ValueError, match="settings.targeted_steps must be an integer"):
        parse_spec({**targeted, "settings": {**targeted["settings"], "targeted_steps": 1.5}})
    out = tmp_path / "grid"
    assert run_grid(spec, out).finished == 1
    metrics = next(iter(cell_files(out).values()))["metrics"]
    assert {"accuracy@0.1", "auroc_mi@0.1", "ifgsm_target_success@0", "ifgsm_target_success@2",
            "ifgsm_accuracy@1", "ifgsm_auroc_entropy@2"} <= set(metrics)
    assert metrics["ifgsm_target_success@0"] <= metrics["ifgsm_target_success@2"] + 0.2
    page = tmp_path / "page.md"
    grid_table(out, markdown=page)
    text = page.read_text()
    assert "Against epsilon:" in text and "Against step:" in text
    assert (tmp_path / "page.png").exists() and (tmp_path / "page_step.png").exists()


def test_attack_cells_share_trained_classifiers_through_the_cache(tmp_path, monkeypatch):
    # a second attack spec with the same training loads the classifier the first one trained
    # and scores exactly what training it again would have given
    from uncertain_agents.grid.jobs import TRAINED_CACHE_ENV

    def spec(name, **settings):
        return {"name": name, "kind": "attack", "cross": {"seed": [3]},
                "settings": {"dataset": "digits", "hidden": [16], "epochs": 0.5, "n_attack": 40, "n_samples": 3,
                             "epsilons": [0.1], **settings},
                "methods": [{"posterior": "dropout-alpha", "options": {"alpha": 0.5, "dropout": 0.2}}]}

    fresh = tmp_path / "fresh"
    run_grid(spec("b", targeted_steps=1, targeted_every=1), fresh)  # no cache: trains
    monkeypatch.setenv(TRAINED_CACHE_ENV, str(tmp_path / "trained"))
    run_grid(spec("a"), tmp_path / "a")  # trains and fills the cache
    assert len(list((tmp_path / "trained").glob("*.pt"))) == 1
    cached = tmp_path / "cached"
    run_grid(spec("b", targeted_steps=1, targeted_every=1), cached)  # loads
    assert len(list((tmp_path / "trained").glob("*.pt"))) == 1
    want, got = (next(iter(cell_files(folder).values()))["metrics"] for folder in (fresh, cached))
    got_train_seconds = got.pop("train_seconds")
    want.pop("train_seconds")
    assert got == want
    assert got_train_seconds == next(iter(cell_files(tmp_path / "a").values()))["metrics"]["train_seconds"]


def test_a_failed_cell_records_its_error_and_traceback_and_is_retried(tmp_path, monkeypatch):
    from uncertain_agents.grid.jobs import JOBS

    job = JOBS["toy"]
    real_run = job.run

    def broken_run(cell):
        if cell["method"]["posterior"] == "mfvi":
            raise RuntimeError("cell broke on purpose")
        return real_run(cell)

    monkeypatch.setitem(JOBS, "toy", dataclasses.replace(job, run=broken_run))
    out = tmp_path / "grid"
    run = run_grid(toy_spec(cross={"seed": [0]}), out)
    assert run.finished == 1 and len(run.failed) == 1
    (error_file,) = (out / "cells").glob("*.error.json")
    record = json.loads(error_file.read_text())
    assert record["error"] == "RuntimeError: cell broke on purpose"
    assert "broken_run" in record["traceback"] and record["traceback"].rstrip().endswith("cell broke on purpose")
    assert record["config"]["method"]["posterior"] == "mfvi" and "manifest" in record
    monkeypatch.setitem(JOBS, "toy", job)
    again = run_grid(toy_spec(cross={"seed": [0]}), out)
    assert (again.skipped, again.finished, again.failed) == (1, 1, [])
    assert not list((out / "cells").glob("*.error.json"))


def test_aggregate_keeps_an_infinite_metric_instead_of_hiding_it():
    """A split whose NLL is +inf used to be dropped from the mean while ``n`` still counted it (the
    table read 2.6 over "4" splits); a missing value (NaN) is still left out."""
    import pandas as pd

    from uncertain_agents.grid.table import aggregate, format_pm

    frame = pd.DataFrame({"method": ["m"] * 4, "split": [0, 1, 2, 3],
                          "test_nll": [2.5, 2.6, float("inf"), 2.7], "test_rmse": [1.0, 2.0, float("nan"), 3.0]})
    row = aggregate(frame, "split", ["test_nll", "test_rmse"]).iloc[0]
    assert row["n"] == 4 and row["test_nll"] == float("inf") and format_pm(row["test_nll"], row["test_nll_se"]) == "inf"
    assert row["test_rmse"] == 2.0 and format_pm(row["test_rmse"], row["test_rmse_se"]) == "2.000 ± 0.577"
