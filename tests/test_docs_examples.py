"""Every Python example of the docs pages runs as written, and says what its comments say.

Each example is whole: it imports what it uses and makes its data (Boston split 0 from the data
folder, or a made-up bandit history), so a user can paste it (session 39: the method pages used
``x``, ``y``, ``x_test`` and ``ua`` without defining them). The pages that read Boston run where
the data folder has it (``$UNCERTAIN_AGENTS_DATA``, as in CI) and are skipped elsewhere. Each runs
as a script would (``__name__ == "__main__"``), with its own steps and options untouched, from a
temporary working directory (files it writes land there).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Pages with Python examples; a page that gains one must be listed here (checked below).
PAGES = ["aadm", "attacks", "bandits", "dropout_alpha", "fsvgd", "grid", "posteriors", "refined_vi"]


def python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / f"{page}.md").read_text(), flags=re.S)


def session_namespace() -> dict:
    """A fresh script's namespace: nothing defined, so a name an example uses without defining it
    fails here as it would for a user."""
    return {"__name__": "__main__"}


#: Pages whose examples read Boston split 0 from the data folder.
BOSTON_PAGES = {"aadm", "dropout_alpha", "fsvgd", "posteriors", "refined_vi"}


def _skip_without_boston() -> None:
    from uncertain_agents.datasets import data_dir

    try:
        found = (data_dir() / "uci" / "bostonHousing" / "data.txt").is_file()
    except Exception:  # no data folder configured at all
        found = False
    if not found:
        pytest.skip("the example reads Boston from the real data folder ($UNCERTAIN_AGENTS_DATA)")


def test_every_page_with_python_examples_is_listed():
    pages = sorted(p.stem for p in DOCS.glob("*.md") if python_blocks(p.stem))
    assert pages == sorted(PAGES)


@pytest.fixture
def run_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def run(page: str) -> dict:
        if page in BOSTON_PAGES:
            _skip_without_boston()
        namespace = session_namespace()
        blocks = python_blocks(page)
        assert blocks, f"docs/{page}.md has no python example"
        for code in blocks:
            exec(compile(code, str(DOCS / f"{page}.md"), "exec"), namespace)
        return namespace

    return run


@pytest.mark.data
def test_aadm_example(run_page):
    ns = run_page("aadm")
    assert {"loss", "discriminator", "kl", "beta"} <= set(ns["result"].traces)
    assert ns["pred"].mean.shape[0] == len(ns["x_test"]) and bool(torch.isfinite(ns["pred"].mean).all())


@pytest.mark.data
def test_posteriors_example_adds_a_method_that_keeps_the_contract(run_page):
    try:
        ns = run_page("posteriors")
        assert "perturbed-map" in ns["ua"].available_posteriors()
        assert type(ns["post"]).__name__ == "PerturbedMAP" and ns["post"].scale == 0.02
        assert ns["pred"].mean.shape == (len(ns["x_test"]), 1) and bool(torch.isfinite(ns["pred"].mean).all())
        assert bool((ns["pred"].variance > 0).all())
    finally:
        import uncertain_agents as ua
        if "perturbed-map" in ua.available_posteriors():
            ua.unregister_posterior("perturbed-map")


@pytest.mark.data
def test_dropout_alpha_example(run_page):
    ns = run_page("dropout_alpha")
    assert ns["pred"].mean.shape[0] == len(ns["x_test"]) and bool(torch.isfinite(ns["pred"].mean).all())


@pytest.mark.data
def test_refined_vi_example(run_page):
    ns = run_page("refined_vi")
    assert ns["result"].phase_steps == {"vi": 7500, "refine": 800}
    elbo = np.asarray(ns["result"].diagnostics["elbo_aux"])
    assert elbo.ndim == 2 and np.isfinite(elbo).all()


@pytest.mark.data
def test_fsvgd_example(run_page):
    ns = run_page("fsvgd")
    assert ns["post"].spec.out_dim == 5 and bool(torch.isfinite(ns["pred"].mean).all())


def test_bandits_example(run_page, capsys):
    ns = run_page("bandits")
    printed = float(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == pytest.approx(float(ns["frame"]["cumulative_regret"].iloc[-1]))
    assert len(ns["frame"]) == 2000


def test_attacks_example(run_page, tmp_path):
    ns = run_page("attacks")
    assert (tmp_path / "fgsm.png").is_file()
    assert len(ns["table"]) == 4


@pytest.mark.data
def test_grid_example(run_page, tmp_path):
    _skip_without_boston()  # the smoke grid reads Boston
    (tmp_path / "experiments" / "specs").mkdir(parents=True)
    shutil.copy(ROOT / "experiments" / "specs" / "smoke.toml", tmp_path / "experiments" / "specs")
    ns = run_page("grid")
    run = ns["run"]
    assert repr(run) == "GridRun(total=4, skipped=0, finished=4, failed=0)"  # as the page prints it
    assert len(ns["table"]) == 2
