"""Attacks on small networks trained on scikit-learn's 8×8 digits (no network access)."""
import math
import os

import numpy as np
import pandas as pd
import pytest
import torch

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

import eagerpy as ep  # noqa: E402
import foolbox as fb  # noqa: E402

import uncertain_agents as ua  # noqa: E402
from attacks import (PredictiveLogits, auroc, clean_accuracy, fgsm, foolbox_model,  # noqa: E402
                     plot_attack_curves, targeted_ifgsm)
from attacks.evaluate import parse_posterior  # noqa: E402
from uncertain_agents.datasets.digits import load_digits  # noqa: E402

FGSM_COLUMNS = ["epsilon", "accuracy", "mean_entropy", "auroc_entropy"]
IFGSM_COLUMNS = ["step", "accuracy", "target_success", "mean_entropy", "auroc_entropy"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These networks are tiny: one thread is faster than two on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def digits():
    data = load_digits()
    return (torch.as_tensor(data.x_train), torch.as_tensor(data.y_train),
            torch.as_tensor(data.x_test[:200]), torch.as_tensor(data.y_test[:200]))


def train(name, digits, steps=400, device="cpu", **options):
    x, y, _, _ = digits
    post = ua.make_posterior(name, in_dim=64, out_dim=10, hidden=(32,), likelihood="categorical",
                             seed=0, device=device, standardize=False, **options)
    post.fit(x, y, steps=steps, batch_size=64, lr=3e-3)
    return post


@pytest.fixture(scope="module")
def mfvi(digits):
    return train("mfvi", digits)


# ------------------------------------------------------------------ adapter
@pytest.mark.parametrize("resample", [False, True])
def test_adapter_gradient_is_gradient_of_mc_predictive_nll(mfvi, digits, resample):
    from attacks.adapter import make_generator
    from uncertain_agents.seeding import ATTACK_FUNCTIONS_KEY

    _, _, x, y = digits
    x, y = x[:16], y[:16]
    S, seed = 7, 3
    adapter = PredictiveLogits(mfvi, S, seed=seed, resample=resample)
    fmodel = foolbox_model(adapter)
    loss_fn = fb.attacks.LinfFastGradientAttack().get_loss_fn(fmodel, ep.astensor(y))
    value, grad = ep.value_and_grad(loss_fn, ep.astensor(x.clone()))

    # the same S functions by hand: -Σ_n log (1/S) Σ_s softmax(f_s(x_n))[y_n]
    fs = mfvi.sample(S, generator=make_generator(seed, "cpu", ATTACK_FUNCTIONS_KEY))  # the adapter's stream
    xr = x.clone().requires_grad_(True)
    p_mean = torch.softmax(fs(xr), -1).mean(0)
    nll = -torch.log(p_mean.gather(1, y[:, None])).sum()
    (expected,) = torch.autograd.grad(nll, xr)
    assert torch.allclose(value.raw, nll.detach(), rtol=1e-5)
    assert torch.allclose(grad.raw, expected, rtol=1e-4, atol=1e-7)
    assert grad.raw.abs().sum() > 0


def test_adapter_logits_are_log_mean_softmax(mfvi, digits):
    _, _, x, _ = digits
    adapter = PredictiveLogits(mfvi, 5, seed=0, resample=False)
    logits = adapter(x[:10])
    assert logits.shape == (10, 10)
    assert torch.allclose(logits.exp().sum(-1), torch.ones(10), atol=1e-5)
    probs = torch.softmax(adapter.functions()(x[:10]), -1).mean(0)
    assert torch.allclose(logits, probs.log(), atol=1e-5)
    images = x[:10].reshape(10, 1, 8, 8)
    assert torch.allclose(adapter(images), logits)


def test_attack_leaves_posterior_untouched(mfvi, digits):
    _, _, x, y = digits
    before = {k: v.clone() for k, v in mfvi.state_dict().items()}
    gen_state = mfvi.generator().get_state().clone()
    training = mfvi.training
    grads = [None if p.grad is None else p.grad.clone() for p in mfvi.parameters()]
    fgsm(mfvi, x[:20], y[:20], epsilons=[0.1], n_samples=4)
    targeted_ifgsm(mfvi, x[:20], y[:20], steps=2, n_samples=4)
    after = mfvi.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert torch.equal(gen_state, mfvi.generator().get_state())
    assert mfvi.training == training and mfvi.device.type == "cpu"
    for g, p in zip(grads, mfvi.parameters()):
        assert (g is None and p.grad is None) or torch.equal(g, p.grad)


# --------------------------------------------------------------------- FGSM
def test_fgsm_epsilon_zero_leaves_inputs_unchanged(mfvi, digits):
    _, _, x, y = digits
    frame, adv = fgsm(mfvi, x, y, epsilons=[0.0, 0.1], n_samples=5, return_adversarials=True)
    assert torch.equal(adv[0.0], x)
    assert (adv[0.1] - x).abs().max() <= 0.1 + 1e-6
    assert adv[0.1].min() >= 0 and adv[0.1].max() <= 1
    assert not torch.equal(adv[0.1], x)
    assert list(frame.columns[:4]) == FGSM_COLUMNS
    assert frame.loc[0, "accuracy"] == pytest.approx(clean_accuracy(mfvi, x, y, n_samples=5, seed=1),
                                                     abs=0.03)


def test_fgsm_accuracy_falls_as_epsilon_grows(mfvi, digits):
    _, _, x, y = digits
    frame = fgsm(mfvi, x, y, epsilons=[0.0, 0.05, 0.1, 0.2, 0.3], n_samples=10)
    acc = frame["accuracy"].to_numpy()
    assert acc[0] > 0.8
    assert np.all(np.diff(acc) < 0), acc
    assert acc[-1] < 0.2
    assert frame["foolbox_success"].iloc[-1] > frame["foolbox_success"].iloc[0]
    # clean and adversarial inputs are scored by the same functions: at ε = 0 they are the same scores
    assert frame.loc[0, ["auroc_entropy", "auroc_mutual_information"]].tolist() == [0.5, 0.5]


def test_results_are_seeded(mfvi, digits):
    _, _, x, y = digits
    a = fgsm(mfvi, x[:50], y[:50], epsilons=[0.0, 0.2], n_samples=5, seed=4)
    b = fgsm(mfvi, x[:50], y[:50], epsilons=[0.0, 0.2], n_samples=5, seed=4)
    c = fgsm(mfvi, x[:50], y[:50], epsilons=[0.0, 0.2], n_samples=5, seed=5)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["mean_entropy"], c["mean_entropy"])


def test_dropout_alpha_entropy_rises_with_epsilon(digits):
    # a built-in method: were it missing from the registry that is a failure, not a reason to skip
    assert "dropout-alpha" in ua.available_posteriors()
    post = train("dropout-alpha", digits, steps=400, alpha=0.5, dropout=0.5, input_dropout=0.0,
                 train_samples=5)
    _, _, x, y = digits
    # 100 functions: every input is scored with the same draws, so the draw's noise does not average out
    # over inputs — with 10, the mean entropy moves by ±0.1 between draws (clean 0.87–1.17 over six
    # seeds); clean and adversarial inputs share the draws, so the ε steps are compared on one draw
    frame = fgsm(post, x, y, epsilons=[0.0, 0.05, 0.1, 0.2], n_samples=100)
    ent = frame["mean_entropy"].to_numpy()
    assert np.all(np.diff(ent) > 0), ent
    assert frame.loc[3, "auroc_entropy"] > 0.8
    assert frame["accuracy"].iloc[-1] < frame["accuracy"].iloc[0]


# --------------------------------------------------------------- I-FGSM
def test_targeted_ifgsm_pushes_towards_target(mfvi, digits):
    _, _, x, y = digits
    frame, x_adv, keep = targeted_ifgsm(mfvi, x, y, target=3, step=0.03, steps=8, n_samples=20,
                                        return_adversarials=True)
    assert list(frame.columns[:5]) == IFGSM_COLUMNS
    assert list(frame["step"]) == list(range(9))
    assert torch.equal(keep, torch.nonzero(y != 3).squeeze(-1))
    assert (frame["n_inputs"] == int((y != 3).sum())).all()
    assert frame.loc[0, "target_success"] < 0.05  # a few clean inputs are misread as 3
    assert frame["target_success"].iloc[-1] > 0.3
    assert frame["accuracy"].iloc[-1] < frame["accuracy"].iloc[0] - 0.3
    assert (x_adv - x[keep]).abs().max() <= 8 * 0.03 + 1e-5
    # step 0 is the clean inputs, scored by the same functions as the clean reference: chance exactly
    assert frame.loc[0, ["auroc_entropy", "auroc_mutual_information"]].tolist() == [0.5, 0.5]
    # rises step by step; the attacker draws new functions at every step, so a step may dip by
    # Monte-Carlo noise (≈ 0.03 s.e. for 179 inputs), never by more than 0.05
    assert np.all(np.diff(frame["target_success"].to_numpy()) > -0.05), frame["target_success"].tolist()
    assert x_adv.min() >= 0 and x_adv.max() <= 1


def test_progress_is_called_once_per_unit_of_attack_work(mfvi, digits):
    """``fgsm`` reports each chunk of rows, ``targeted_ifgsm`` each step, and ``evaluate`` makes
    exactly ``attack_units`` calls per posterior (the ``attack`` command's bar total)."""
    from attacks.evaluate import attack_units, evaluate

    _, _, x, y = digits
    calls = []
    fgsm(mfvi, x, y, epsilons=[0, 0.1], n_samples=2, batch_size=64, progress=lambda: calls.append("f"))
    assert calls == ["f"] * 4  # 200 rows in chunks of 64
    calls.clear()
    targeted_ifgsm(mfvi, x, y, target=3, step=0.03, steps=3, n_samples=2, progress=lambda: calls.append("i"))
    assert calls == ["i"] * 3
    calls.clear()
    evaluate({"a": mfvi, "b": mfvi}, x[:20], y[:20], x, y, epsilons=[0, 0.1], steps=2, n_samples=2,
             progress=lambda: calls.append(1))
    assert len(calls) == 2 * attack_units(len(y), ("fgsm", "ifgsm"), 2) == 2 * (1 + 2)


def test_targeted_ifgsm_does_not_depend_on_batch_size(mfvi, digits):
    """``batch_size`` bounds memory only: a step's attacking functions are drawn once for all its
    chunks of rows (each chunk used to draw its own, so the chunking changed the attack)."""
    _, _, x, y = digits
    kw = dict(target=3, step=0.03, steps=3, n_samples=5, seed=7)
    whole = targeted_ifgsm(mfvi, x, y, **kw)
    pd.testing.assert_frame_equal(targeted_ifgsm(mfvi, x, y, batch_size=50, **kw), whole)


def test_targeted_ifgsm_epsilon_ball_and_default_labels(mfvi, digits):
    _, _, x, y = digits
    # the default labels are the scoring predictive's clean predictions, and row 0 is scored by the
    # same functions, so its accuracy is exactly 1
    frame, x_adv, keep = targeted_ifgsm(mfvi, x[:40], target=0, step=0.05, steps=4, epsilon=0.08,
                                        n_samples=50, return_adversarials=True)
    assert (x_adv - x[:40][keep]).abs().max() <= 0.08 + 1e-6
    assert frame.loc[0, "accuracy"] == 1.0  # labels = clean predictions


# ---------------------------------------------------------------- detection
def test_auroc_on_hand_made_scores():
    assert auroc([0.1, 0.2, 0.3], [0.25, 0.4, 0.5]) == pytest.approx(8 / 9)
    assert auroc([0.0, 1.0], [2.0, 3.0]) == 1.0
    assert auroc([2.0, 3.0], [0.0, 1.0]) == 0.0
    assert auroc(torch.ones(4), np.ones(3)) == 0.5  # ties count one half
    rng = np.random.default_rng(0)
    same = rng.normal(size=1000)
    assert auroc(same, same.copy()) == 0.5  # exactly: sklearn's trapezoids give 0.49999999999999994
    from sklearn.metrics import roc_auc_score

    for _ in range(20):  # otherwise the same value as sklearn's, ties included
        clean, adv = rng.integers(0, 6, size=37).astype(float), rng.integers(1, 7, size=23).astype(float)
        expected = roc_auc_score(np.r_[np.zeros(37), np.ones(23)], np.r_[clean, adv])
        assert auroc(clean, adv) == pytest.approx(expected, abs=1e-15)
    with pytest.raises(ValueError, match="clean_scores"):
        auroc([], [1.0])
    with pytest.raises(ValueError, match="adversarial_scores.*NaN"):
        auroc([1.0], [float("nan")])


# ------------------------------------------------------------ bad input
def test_bad_arguments(mfvi, digits):
    _, _, x, y = digits
    with pytest.raises(ValueError, match=r"x must lie in \[0, 1\]"):
        fgsm(mfvi, x * 2, y)
    with pytest.raises(ValueError, match="64"):
        fgsm(mfvi, x[:, :10], y)
    with pytest.raises(ValueError, match="y must be a vector of 200"):
        fgsm(mfvi, x, y[:5])
    with pytest.raises(ValueError, match="epsilons must be finite and >= 0"):
        fgsm(mfvi, x, y, epsilons=[-0.1])
    from attacks.inputs import check_epsilons

    assert check_epsilons(list(torch.tensor([0.0, 0.5]))) == [0.0, 0.5]  # 0-d tensors are numbers too
    for not_sizes in (True, [0.1, False], "0.1", None, [torch.tensor(True)]):  # numpy would read True as 1.0, "0.1" as 0.1
        with pytest.raises(TypeError, match="epsilons must be a number or a sequence of numbers"):
            fgsm(mfvi, x, y, epsilons=not_sizes)
    with pytest.raises(ValueError, match="target must be a class index"):
        targeted_ifgsm(mfvi, x, y, target=10)
    with pytest.raises(ValueError, match="step must be a positive"):
        targeted_ifgsm(mfvi, x, y, step=0)
    regression = ua.make_posterior("mfvi", in_dim=64, out_dim=1)
    with pytest.raises(ValueError, match="likelihood='categorical'"):
        fgsm(regression, x, y)
    with pytest.raises(TypeError, match="posterior must be"):
        PredictiveLogits(object())
    with pytest.raises(ValueError, match="key=value"):
        parse_posterior("mfvi:alpha")
    assert parse_posterior("bb-alpha:alpha=0.5,train_samples=3").options == {"alpha": 0.5, "train_samples": 3}


# -------------------------------------------------------------------- plots
def test_plot_writes_png(tmp_path, mfvi, digits):
    _, _, x, y = digits
    frame = fgsm(mfvi, x[:30], y[:30], epsilons=[0.0, 0.2], n_samples=3)
    path = plot_attack_curves({"mfvi": frame, "copy": frame}, tmp_path / "sub" / "fgsm.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="lack column"):
        plot_attack_curves({"mfvi": frame}, tmp_path / "x.png", x="step")
    with pytest.raises(ValueError, match=".png"):
        plot_attack_curves({"mfvi": frame}, tmp_path / "x.jpg")


def _frame(x: str, n: int, shift: float = 0.0, auroc: bool = True) -> pd.DataFrame:
    """A synthetic attack table of ``n`` rows (no training: the plot tests only need columns)."""
    t = np.linspace(0.0, 1.0, n)
    frame = pd.DataFrame({x: t if x == "epsilon" else np.arange(n), "accuracy": 1 - t, "target_success": t,
                          "mean_entropy": t + shift, "mean_mutual_information": t / 2})
    if auroc:
        frame["auroc_entropy"] = 0.5 + 0.4 * t - shift
        frame["auroc_mutual_information"] = 0.5 - 0.2 * t
    return frame


@pytest.fixture
def drawn(monkeypatch):
    """The figures ``plot_attack_curves`` saves (a closed figure keeps its axes and lines)."""
    import attacks.plots as plots

    figures = []
    real = plots.atomic_save_figure

    def keep(path, fig, **kw):
        figures.append(fig)
        return real(path, fig, **kw)

    monkeypatch.setattr(plots, "atomic_save_figure", keep)
    return figures


def _chance_lines(ax) -> list:
    return [line for line in ax.get_lines() if line.get_label() == "chance"]


def test_plot_adds_an_auroc_panel_per_detection_score(tmp_path, drawn):
    from attacks.plots import LABELS, detection_metrics

    results = {"map": _frame("epsilon", 6), "dropout": _frame("epsilon", 6, shift=0.1)}
    assert detection_metrics(results) == ["auroc_entropy", "auroc_mutual_information"]
    plot_attack_curves(results, tmp_path / "fgsm.png", title="FGSM")
    axes = drawn[-1].axes
    assert [ax.get_ylabel() for ax in axes] == [LABELS[m] for m in ("accuracy", "mean_entropy", "auroc_entropy",
                                                                    "auroc_mutual_information")]
    assert [ax.get_subplotspec().get_geometry()[:2] for ax in axes] == [(2, 2)] * 4  # 2 × 2, not one wide row
    for ax in axes[2:]:
        assert ax.get_ylim()[0] <= 0 and ax.get_ylim()[1] >= 1 and ax.get_ylim()[1] - ax.get_ylim()[0] < 1.1
        (chance,) = _chance_lines(ax)
        assert list(chance.get_ydata()) == [0.5, 0.5] and chance.get_linestyle() == "--"
        assert "chance" in [t.get_text() for t in ax.get_legend().get_texts()]
    for ax in axes[:2]:
        assert not _chance_lines(ax)
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["map", "dropout"]
    # one line per posterior in every panel, each posterior in one colour throughout
    colors = [{line.get_label(): line.get_color() for line in ax.get_lines() if line.get_label() != "chance"}
              for ax in axes]
    assert all(c == colors[0] for c in colors) and len(set(colors[0].values())) == 2
    assert list(axes[2].get_lines()[0].get_ydata()) == list(results["map"]["auroc_entropy"])


def test_plot_keeps_old_panels_without_auroc_columns_and_explicit_metrics(tmp_path, drawn):
    from attacks.plots import detection_metrics

    old = {"map": _frame("epsilon", 4, auroc=False)}
    assert detection_metrics(old) == []
    plot_attack_curves(old, tmp_path / "old.png")
    assert [ax.get_ylabel() for ax in drawn[-1].axes] == ["accuracy", "mean predictive entropy (nats)"]
    # an AUROC column only in some frames is not a default panel (and does not raise)
    assert detection_metrics({"map": _frame("epsilon", 4), **old}) == []
    new = {"map": _frame("epsilon", 4)}
    plot_attack_curves(new, tmp_path / "explicit.png", metrics=("accuracy", "mean_entropy"))
    assert len(drawn[-1].axes) == 2 and not any(_chance_lines(ax) for ax in drawn[-1].axes)
    plot_attack_curves(new, tmp_path / "one.png", metrics="auroc_entropy")
    (ax,) = drawn[-1].axes
    assert ax.get_ylabel() == "AUROC (entropy)" and len(_chance_lines(ax)) == 1
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["map", "chance"]
    # one long frame with a posterior column, as the attack command writes it; an I-FGSM layout of 3 + 2
    steps = pd.concat([_frame("step", 5).assign(posterior="map"), _frame("step", 5, 0.1).assign(posterior="mfvi")])
    path = plot_attack_curves(steps, tmp_path / "ifgsm.png", x="step",
                              metrics=("accuracy", "target_success", "mean_entropy", *detection_metrics(steps)))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = drawn[-1].axes
    assert len(axes) == 5 and [len(_chance_lines(ax)) for ax in axes] == [0, 0, 0, 1, 1]
    with pytest.raises(ValueError, match="metrics is empty"):
        plot_attack_curves(new, tmp_path / "none.png", metrics=())
    with pytest.raises(ValueError, match="lack column"):
        plot_attack_curves(old, tmp_path / "x.png", metrics=("auroc_entropy",))


def test_write_outputs_draws_the_auroc_panels(tmp_path, drawn):
    from attacks.evaluate import write_outputs

    results = {"clean": pd.DataFrame({"posterior": ["map"], "clean_accuracy": [0.9]}),
               "fgsm": _frame("epsilon", 4).assign(posterior="map"),
               "ifgsm": _frame("step", 4).assign(posterior="map")}
    write_outputs(results, tmp_path, {"dataset": "digits", "target": 0})
    fgsm_fig, ifgsm_fig = drawn
    assert [ax.get_ylabel() for ax in fgsm_fig.axes][2:] == ["AUROC (entropy)", "AUROC (mutual information)"]
    assert [ax.get_ylabel() for ax in ifgsm_fig.axes] == [
        "accuracy", "target success", "mean predictive entropy (nats)", "AUROC (entropy)",
        "AUROC (mutual information)"]


# --------------------------------------------------------------------- CLI
def test_attack_command_writes_run_folder(tmp_path):
    from uncertain_agents.cli import main

    out = tmp_path / "run"
    argv = ["attack", "--dataset", "digits", "--posterior", "mfvi", "--attack", "fgsm", "ifgsm",
            "--hidden", "16", "--epochs", "1", "--n-attack", "40", "--n-samples", "3",
            "--epsilons", "0", "0.2", "--steps", "2", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 0
    for name in ("clean.csv", "fgsm.csv", "ifgsm.csv", "fgsm.png", "ifgsm.png", "summary.json",
                 "models/mfvi.pt"):
        assert (out / name).is_file(), name
    table = pd.read_csv(out / "fgsm.csv")
    assert list(table["epsilon"]) == [0.0, 0.2] and set(table["posterior"]) == {"mfvi"}
    again = tmp_path / "again"
    assert main([*argv, "--out", str(again), "--load", str(out / "models")]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(again / "fgsm.csv"), table)
    assert main(["attack", "--posterior", "nope", "--out", str(tmp_path / "x")]) == 2
    # an attack named twice used to write every one of its rows twice
    assert main([*argv[:6], "fgsm", "fgsm", *argv[8:], "--out", str(tmp_path / "twice")]) == 2
    assert not (tmp_path / "twice").exists()


# -------------------------------------------------------------------- CUDA
@pytest.mark.cuda
def test_attack_on_cuda(digits):
    post = train("mfvi", digits, steps=100, device="cuda")
    _, _, x, y = digits
    frame = fgsm(post, x[:50], y[:50], epsilons=[0.0, 0.2], n_samples=4)
    assert frame["accuracy"].iloc[1] < frame["accuracy"].iloc[0]
    steps = targeted_ifgsm(post, x[:50], y[:50], steps=2, n_samples=4)
    assert len(steps) == 3 and post.device.type == "cuda"
    assert math.isfinite(steps["auroc_entropy"].iloc[-1])


def test_attack_streams_of_neighbouring_seeds_are_apart():
    """The scorer of seed s used to be seeded s + 1: the very functions the attacker of seed s + 1 drew."""
    from attacks.adapter import make_generator
    from uncertain_agents.seeding import ATTACK_FUNCTIONS_KEY, ATTACK_SCORER_KEY

    post = ua.make_posterior("mfvi", in_dim=4, out_dim=3, hidden=(8,), likelihood="categorical", seed=0)
    draws = {}
    for s in (0, 1):
        draws[s, "scorer"] = post.sample(10, generator=make_generator(s, "cpu", ATTACK_SCORER_KEY)).params
        draws[s, "attacker"] = PredictiveLogits(post, 10, seed=s, resample=False)._fixed.params
    values = list(draws.values())
    assert all(not torch.equal(values[i], values[j]) for i in range(len(values)) for j in range(i))
    assert torch.equal(PredictiveLogits(post, 10, seed=1, resample=False)._fixed.params, draws[1, "attacker"])
    with pytest.raises(ValueError, match="seed must be in"):
        make_generator(-1, "cpu", ATTACK_SCORER_KEY)
    with pytest.raises(TypeError, match="seed must be an int"):
        make_generator(1.0, "cpu", ATTACK_SCORER_KEY)
