"""Edge cases of small inputs: function-sample indexing, arm counts, episode ends, AUROC size."""
from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.error import ResetNeeded

import envs  # noqa: F401  (registers the environments)
import uncertain_agents as ua
from attacks import AUROCWarning, auroc
from envs import ClassificationBandit, ContextualBanditEnv, WheelBandit
from uncertain_agents.agents import BayesianLinearArms, LinearThompson, ThompsonSampling, Uniform


# ------------------------------------------------------------ FunctionSample
@pytest.fixture(scope="module")
def seven():
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(4,), seed=0)
    return post.sample(7, generator=torch.Generator().manual_seed(0))


def test_integer_indices_in_range(seven):
    x = torch.zeros(3, 2)
    for i in range(-7, 7):
        one = seven[i]
        assert len(one) == 1
        assert torch.equal(one.params[0], seven.params[i])
    assert torch.equal(seven[-7](x), seven[0](x)) and torch.equal(seven[np.int64(6)](x), seven[-1](x))
    assert len(seven[torch.tensor(3)]) == 1


@pytest.mark.parametrize("index", [7, 100, -8, -100])
def test_integer_index_out_of_range_raises(seven, index):
    with pytest.raises(IndexError, match=rf"function index {index} is out of range .* 7 functions \(valid: -7\.\.6\)"):
        seven[index]


def test_slices_and_index_tensors(seven):
    assert len(seven[2:5]) == 3 and len(seven[::2]) == 4 and len(seven[-3:]) == 3
    assert len(seven[torch.tensor([0, -1, 3])]) == 3 and len(seven[[1, 2]]) == 2
    mask = torch.zeros(7, dtype=torch.bool)
    mask[[1, 4]] = True
    assert torch.equal(seven[mask].params, seven.params[[1, 4]])
    assert seven[[0, 1]].noise_std.shape == (2, 1)


@pytest.mark.parametrize("index, error, message", [
    (slice(10, 20), IndexError, "selects no function"),
    ([], IndexError, "empty index"),
    (torch.tensor([0, 9]), IndexError, "function index 9 is out of range"),
    (torch.ones(3, dtype=torch.bool), IndexError, "boolean index must have 7 entries"),
    (torch.zeros(2, 2, dtype=torch.long), IndexError, "must be 1-D"),
    (1.5, TypeError, "got float"),
    ("0", TypeError, "got str"),
    (True, TypeError, "got a bool"),
    (torch.tensor([0.0, 1.0]), TypeError, "integers or booleans"),
])
def test_bad_indices(seven, index, error, message):
    with pytest.raises(error, match=message):
        seven[index]


# ----------------------------------------------------------------- n_actions
class _TwoArms(ContextualBanditEnv):
    """A minimal env whose arm count is the caller's."""

    def __init__(self, n_actions, horizon=10):
        super().__init__(n_actions, np.zeros(1), np.ones(1), horizon)

    def _draw_block(self, m):
        rewards = self.np_random.random((m, self.n_actions))
        return np.zeros((m, 1), np.float32), rewards, np.full_like(rewards, 0.5)


@pytest.mark.parametrize("bad", [2.7, 2.0, "3", True, 1, 0, None])
def test_env_n_actions_must_be_an_integer(bad):
    with pytest.raises(ValueError, match=rf"n_actions must be an integer >= 2 .*got {bad!r}"):
        _TwoArms(bad)


def test_env_n_actions_accepts_numpy_integers():
    assert _TwoArms(np.int64(3)).action_space.n == 3


def test_classification_env_n_classes_float():
    with pytest.raises(ValueError, match="n_classes must be an integer >= 2, got 2.7"):
        ClassificationBandit(np.zeros((4, 2)), np.array([0, 1, 0, 1]), n_classes=2.7)


@pytest.mark.parametrize("build", [
    lambda n: Uniform(n, context_dim=2),
    lambda n: LinearThompson(2, n),
    lambda n: ThompsonSampling(ua.make_posterior("mfvi", in_dim=2, out_dim=2, hidden=(4,), seed=0), n),
])
def test_agent_n_actions_float_is_refused(build):
    with pytest.raises(ValueError, match=r"n_actions must be an integer >= 2, got 2\.7"):
        build(2.7)


def test_bayesian_linear_arms_n_actions_float_is_refused():
    with pytest.raises(ValueError, match=r"n_actions must be a positive integer, got 2\.7"):
        BayesianLinearArms(2.7, 3)
    with pytest.raises(ValueError, match=r"dim must be a positive integer, got 3\.5"):
        BayesianLinearArms(2, 3.5)


# ------------------------------------------------------------ episode end
@pytest.mark.parametrize("make", [lambda: WheelBandit(delta=0.5, horizon=3),
                                  lambda: gym.make("envs:WheelBandit-v0", delta=0.5, horizon=3),
                                  lambda: _TwoArms(2, horizon=3)])
def test_step_after_the_horizon_needs_a_reset(make):
    env = make()
    env.reset(seed=0)
    flags = [env.step(0)[2] for _ in range(3)]
    assert flags == [False, False, True]
    with pytest.raises(ResetNeeded, match=r"episode is over.*horizon=3.*call reset\(\)"):
        env.step(0)
    with pytest.raises(ResetNeeded):  # still over: no silent continuation
        env.step(1)
    env.reset(seed=1)
    assert env.step(0)[2] is False


def test_horizon_one_and_unwrapped_flag():
    env = WheelBandit(delta=0.5, horizon=1)
    env.reset(seed=0)
    assert env.step(4)[2] is True and env.episode_over
    with pytest.raises(ResetNeeded):
        env.step(4)


def test_run_bandit_resets_at_the_horizon():
    from uncertain_agents.agents import run_bandit

    frame = run_bandit(WheelBandit(delta=0.5, horizon=4), Uniform(5, context_dim=2, seed=0), steps=10, seed=0)
    assert len(frame) == 10


# --------------------------------------------------------------------- AUROC
def test_auroc_from_single_scores_warns():
    with pytest.warns(AUROCWarning, match=r"1 clean score\(s\) and 1 adversarial score\(s\)"):
        assert auroc([0.1], [0.2]) == 1.0
    with pytest.warns(AUROCWarning, match=r"AUROC computed from 1 adversarial score\(s\)"):
        assert auroc([0.1, 0.3], [0.2]) == 0.5


def test_auroc_from_enough_scores_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert auroc([0.1, 0.3], [0.2, 0.4]) == 0.75


@pytest.mark.parametrize("clean, adv, name", [([], [0.1, 0.2], "clean_scores"), ([0.1, 0.2], [], "adversarial_scores")])
def test_auroc_from_one_class_only_is_an_error(clean, adv, name):
    with pytest.raises(ValueError, match=rf"{name} must be a non-empty .*needs clean and adversarial"):
        auroc(clean, adv)


def test_fgsm_on_a_single_row_warns():
    from attacks import fgsm

    post = ua.make_posterior("map", in_dim=4, out_dim=2, hidden=(3,), likelihood="categorical", seed=0)
    x = torch.full((1, 4), 0.5)
    with pytest.warns(AUROCWarning, match="single score"):
        frame = fgsm(post, x, torch.tensor([1]), epsilons=[0.1], n_samples=2)
    assert len(frame) == 1


# ------------------------------------- found by experiments/bad_input_cases.py
def test_classification_env_negative_or_single_class_labels_name_y():
    x = np.zeros((4, 2))
    with pytest.raises(ValueError, match="y labels must be class indices >= 0, got a minimum of -1"):
        ClassificationBandit(x, np.array([-1, 0, -1, 0]))
    with pytest.raises(ValueError, match=r"y holds a single class \(0\).*pass n_classes"):
        ClassificationBandit(x, np.zeros(4, dtype=int))
    assert ClassificationBandit(x, np.zeros(4, dtype=int), n_classes=2).action_space.n == 2


def test_run_bandit_refuses_an_agent_with_another_number_of_arms():
    from uncertain_agents.agents import run_bandit

    env = WheelBandit(delta=0.5)
    for arms in (2, 9):
        with pytest.raises(ValueError, match=rf"agent has n_actions={arms} arms but the environment has 5"):
            run_bandit(env, Uniform(arms, context_dim=2, seed=0), steps=3, seed=0)


def test_save_to_a_folder_names_it(tmp_path):
    post = ua.make_posterior("map", in_dim=2, out_dim=1, hidden=(2,), seed=0)
    with pytest.raises(IsADirectoryError, match=rf"cannot write {tmp_path}: it is a folder"):
        post.save(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_predict_names_n_samples():
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(2,), seed=0)
    for bad in (0, 1.5):
        with pytest.raises(ValueError, match=rf"n_samples must be a positive integer, got {bad}"):
            post.predict(torch.zeros(2, 2), n_samples=bad)


def test_attack_evaluate_checks_sample_counts_and_epochs():
    from attacks.evaluate import evaluate, train_classifier
    from uncertain_agents.datasets.images import ImageDataset

    post = ua.make_posterior("map", in_dim=4, out_dim=2, hidden=(2,), likelihood="categorical", seed=0)
    x, y = torch.rand(6, 4, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1] * 3)
    # a deterministic posterior (map) skips eval_samples: 0 used to pass silently
    with pytest.raises(ValueError, match="eval_samples must be a positive integer, got 0"):
        evaluate({"map": post}, x, y, x, y, attacks=("fgsm",), epsilons=[0.1], eval_samples=0)
    with pytest.raises(ValueError, match="n_samples must be a positive integer, got 0"):
        evaluate({"map": post}, x, y, x, y, attacks=("fgsm",), epsilons=[0.1], n_samples=0)
    data = ImageDataset("tiny", x.numpy(), y.numpy(), x.numpy(), y.numpy(), (2, 2), 2)
    for bad in (float("inf"), 0.0, float("nan")):
        with pytest.raises(ValueError, match="epochs must be a positive finite number"):
            train_classifier(post, data, epochs=bad)


@pytest.mark.parametrize("argv, expected", [
    (["bandit", "wheel", "--agent", ""], "argument --agent: expects a comma-separated list"),
    (["bandit", "wheel", "--agent", ",,"], "argument --agent: expects a comma-separated list"),
    (["bandit", "wheel", "--hidden", ""], "argument --hidden: expects a comma-separated list"),
    (["attack", "--posterior", "map", "--out", "OUT", "--epochs", "inf"], "--epochs must be a positive finite number"),
    (["attack", "--posterior", "map", "--out", "OUT", "--eval-samples", "0"],
     "--eval-samples must be a positive integer"),
    (["--epochs", "3", "regress", "boston"], "--epochs is not an option of uncertain-agents itself"),
])
def test_cli_refuses_before_any_work(tmp_path, capsys, argv, expected):
    from uncertain_agents.cli import main

    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and expected in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------ devices, paths, agent sizes
@pytest.mark.parametrize("device", ["tpu", "not-a-device", 3.5])
def test_make_posterior_names_a_bad_device(device):
    with pytest.raises(ValueError, match="device"):
        ua.make_posterior("mfvi", in_dim=2, out_dim=1, device=device)


def test_load_posterior_names_a_bad_path_or_map_location(tmp_path):
    for path in (None, 3):
        with pytest.raises(TypeError, match="path must be a file path"):
            ua.load_posterior(path)
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(4,), seed=0)
    post.save(tmp_path / "p.pt")
    with pytest.raises(ValueError, match="map_location"):
        ua.load_posterior(tmp_path / "p.pt", map_location="tpu")


@pytest.mark.parametrize("n_actions", [2.7, 2.0, "3", True, 1])
def test_make_agent_refuses_a_non_integer_arm_count(n_actions):
    from uncertain_agents.agents import make_agent
    with pytest.raises(ValueError, match="n_actions must be an integer >= 2"):
        make_agent("uniform", n_actions=n_actions, context_dim=2)


def test_make_agent_names_context_dim():
    from uncertain_agents.agents import make_agent
    with pytest.raises(ValueError, match="context_dim must be a positive integer"):
        make_agent("thompson", n_actions=2, context_dim=0, posterior="mfvi")


# ------------------------------------------------------- scores and metrics
@pytest.mark.parametrize("labels,message", [
    (torch.arange(5) % 3, r"one class label per input \(\[8\]\)"),   # too few: used to score the first five only
    (torch.arange(9) % 3, r"one class label per input"),             # too many
    (torch.tensor([0, 1, 2, 3, 0, 1, 2, 0]), r"class labels in \[0, 2\]"),
    (torch.tensor([0, -1, 2, 0, 0, 1, 2, 0]), r"class labels in \[0, 2\]"),
    (torch.tensor([0.5, 1, 2, 0, 0, 1, 2, 0]), "whole-number"),
])
def test_classification_scores_name_bad_labels(labels, message):
    from uncertain_agents import metrics
    pred = ua.Predictive(torch.randn(4, 8, 3, generator=torch.Generator().manual_seed(0)), "categorical")
    for score in (pred.log_prob, lambda y: metrics.accuracy(pred, y),
                  lambda y: metrics.expected_calibration_error(pred, y)):
        with pytest.raises(ValueError, match=message):
            score(labels)


def test_classification_scores_accept_labels_as_floats_and_columns():
    from uncertain_agents import metrics
    pred = ua.Predictive(torch.randn(4, 8, 3, generator=torch.Generator().manual_seed(0)), "categorical")
    y = torch.arange(8) % 3
    assert torch.equal(pred.log_prob(y.float()), pred.log_prob(y))
    assert metrics.accuracy(pred, y.view(8, 1)) == metrics.accuracy(pred, y.tolist())
    with pytest.raises(ValueError, match="n_bins must be a positive integer"):
        metrics.expected_calibration_error(pred, y, n_bins=2.5)


def test_regression_scores_and_predictive_name_bad_targets_and_noise():
    from uncertain_agents import metrics
    Predictive = ua.Predictive
    f = torch.randn(4, 8, 1, generator=torch.Generator().manual_seed(0))
    pred = Predictive(f, "gaussian", torch.ones(1))
    with pytest.raises(ValueError, match=r"y must have shape \(8, 1\)"):
        metrics.rmse(pred, torch.zeros(5))
    with pytest.raises(ValueError, match=r"y must have shape \(8, 1\)"):
        metrics.negative_log_likelihood(pred, torch.zeros(5))
    assert metrics.rmse(pred, torch.zeros(8)) == metrics.rmse(pred, torch.zeros(8, 1))
    with pytest.raises(ValueError, match="noise_var must broadcast"):
        Predictive(f, "gaussian", torch.ones(3))
    with pytest.raises(TypeError, match="f must be a torch.Tensor"):
        Predictive(f.tolist(), "gaussian", torch.ones(1))


def test_network_forward_names_a_bad_x():
    spec = ua.MLPSpec(3, 2, (4,))
    params = torch.zeros(2, spec.num_params)
    with pytest.raises(ValueError, match=r"x must have shape \[B, 3\] or \[n, B, 3\]"):
        spec.forward(params, torch.zeros(5, 4))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        spec.forward(params, [[0.0, 0.0, 0.0]])
    assert spec.forward(params, torch.zeros(5, 3)).shape == (2, 5, 2)


def test_standardisation_that_overflows_float32_is_refused_before_training():
    """Finite targets whose spread overflows float32 (squares of ~1e19 are inf) used to fit "fine" and
    predict NaN; the first fit now names y, and the units stay unfixed so a rescaled fit works."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 2, generator=g), torch.randn(40, 1, generator=g)
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, seed=0)
    with pytest.raises(ValueError, match=r"y's mean or spread overflows float32 .*rescale y"):
        post.fit(x, y * 1e19, steps=2)
    post.fit(x, y, steps=2)
    assert bool(torch.isfinite(post.predict(x, n_samples=4).mean).all())


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64 - 1])
def test_seeds_out_of_range_are_refused_by_name(seed):
    from uncertain_agents.agents import make_agent

    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*63 - 1\]"):
        ua.make_posterior("mfvi", in_dim=2, out_dim=1, seed=seed)
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*63 - 1\]"):
        make_agent("uniform", n_actions=2, context_dim=2, seed=seed)
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, seed=2**63 - 1)  # the largest: its generators work
    assert post.predict(torch.zeros(3, 2), n_samples=2).mean.shape == (3, 1)


def test_cli_refuses_a_negative_seed_naming_it(capsys):
    from uncertain_agents.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["bandit", "wheel", "--seed", "-5", "--steps", "10"])
    assert stop.value.code == 2
    assert "argument --seed: must be in [0, 2**63 - 1], got -5" in capsys.readouterr().err


def test_run_bandit_names_progress_every_and_make_agent_names_posterior_options():
    from uncertain_agents.agents import make_agent, run_bandit

    env = WheelBandit(delta=0.5, horizon=20)
    with pytest.raises(ValueError, match="progress_every must be a positive integer"):
        run_bandit(env, Uniform(5, seed=0), steps=5, seed=0, progress=lambda k: None, progress_every=0)
    with pytest.raises(TypeError, match="posterior_options must be a dict"):
        make_agent("thompson", n_actions=2, context_dim=2, posterior="mfvi", posterior_options=5)


def test_likelihoods_name_bad_sizes_and_noise():
    from uncertain_agents.likelihoods import Categorical, Gaussian

    with pytest.raises(ValueError, match="noise_std must be a positive"):
        Gaussian(1, noise_std=-1.0)
    with pytest.raises(ValueError, match="init_noise_std must be a positive"):
        Gaussian(1, init_noise_std=0.0)
    with pytest.raises(ValueError, match="out_dim must be a positive integer"):
        Gaussian(0)
    with pytest.raises(ValueError, match=r"out_dim must be an integer >= 2 \(the number of classes\)"):
        Categorical(1)
    with pytest.raises(ValueError, match="noise_var must be finite and positive"):
        ua.Predictive(torch.zeros(2, 3, 1), "gaussian", 0.0)


def test_hidden_given_as_text_is_named_as_text():
    """``hidden="50"`` used to be split into characters and reported as ``('5', '0')``."""
    import uncertain_agents as ua
    from uncertain_agents.network import MLPSpec

    with pytest.raises(ValueError, match=r"hidden must be an int or a sequence .* got the text '50'"):
        ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden="50")
    with pytest.raises(ValueError, match="got the text '50'"):
        MLPSpec(3, 1, "50")
    with pytest.raises(ValueError, match="hidden must be a sequence of positive integers, got None"):
        MLPSpec(3, 1, None)
