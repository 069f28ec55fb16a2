"""Every Python example of the docs pages runs as written, and says what its comments say.

The examples are fragments of a user's session: some use regression data ``x``, ``y``,
``x_test`` or a bandit history ``contexts``, ``rewards``, ``played_arm_mask`` that the page
describes in words. Each example runs in a namespace that holds small seeded arrays of the
shapes the page names, with its own steps and options untouched, from a temporary working
directory (files it writes land there).
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
    """The names the fragments take from the page's prose: 13-feature regression rows (the Boston
    examples) and a 2-feature, 5-arm bandit history with one played arm per row."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 13)).astype(np.float32)
    y = (x[:, 0] - 0.5 * x[:, 1] + 0.1 * rng.normal(size=64)).astype(np.float32)
    contexts = rng.uniform(-1, 1, size=(40, 2)).astype(np.float32)
    arms = rng.integers(0, 5, size=40)
    played_arm_mask = np.zeros((40, 5), dtype=bool)
    played_arm_mask[np.arange(40), arms] = True
    rewards = np.where(played_arm_mask, rng.normal(1.0, 0.1, size=(40, 5)), 0.0).astype(np.float32)
    import uncertain_agents as ua
    return {"__name__": "__docs__", "ua": ua, "x": x, "y": y, "x_test": x[:16],
            "contexts": contexts, "rewards": rewards, "played_arm_mask": played_arm_mask}


def test_every_page_with_python_examples_is_listed():
    pages = sorted(p.stem for p in DOCS.glob("*.md") if python_blocks(p.stem))
    assert pages == sorted(PAGES)


@pytest.fixture
def run_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def run(page: str) -> dict:
        namespace = session_namespace()
        blocks = python_blocks(page)
        assert blocks, f"docs/{page}.md has no python example"
        for code in blocks:
            exec(compile(code, str(DOCS / f"{page}.md"), "exec"), namespace)
        return namespace

    return run


def test_aadm_example(run_page):
    ns = run_page("aadm")
    assert {"loss", "discriminator", "kl", "beta"} <= set(ns["result"].traces)
    assert ns["pred"].mean.shape[0] == 16 and bool(torch.isfinite(ns["pred"].mean).all())


def test_posteriors_example_adds_a_method_that_keeps_the_contract(run_page):
    try:
        ns = run_page("posteriors")
        assert "perturbed-map" in ns["ua"].available_posteriors()
        assert type(ns["post"]).__name__ == "PerturbedMAP" and ns["post"].scale == 0.02
        assert ns["pred"].mean.shape == (16, 1) and bool(torch.isfinite(ns["pred"].mean).all())
        assert bool((ns["pred"].variance > 0).all())
    finally:
        import uncertain_agents as ua
        if "perturbed-map" in ua.available_posteriors():
            ua.unregister_posterior("perturbed-map")


def test_dropout_alpha_example(run_page):
    ns = run_page("dropout_alpha")
    assert ns["pred"].mean.shape[0] == 16 and bool(torch.isfinite(ns["pred"].mean).all())


def test_refined_vi_example(run_page):
    ns = run_page("refined_vi")
    assert ns["result"].phase_steps == {"vi": 7500, "refine": 800}
    elbo = np.asarray(ns["result"].diagnostics["elbo_aux"])
    assert elbo.ndim == 2 and np.isfinite(elbo).all()


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
    from uncertain_agents.datasets import data_dir

    if not (data_dir() / "uci" / "bostonHousing" / "data.txt").is_file():
        pytest.skip("the smoke grid reads Boston from the real data folder ($UNCERTAIN_AGENTS_DATA)")
    (tmp_path / "experiments" / "specs").mkdir(parents=True)
    shutil.copy(ROOT / "experiments" / "specs" / "smoke.toml", tmp_path / "experiments" / "specs")
    ns = run_page("grid")
    run = ns["run"]
    assert repr(run) == "GridRun(total=4, skipped=0, finished=4, failed=0)"  # as the page prints it
    assert len(ns["table"]) == 2
