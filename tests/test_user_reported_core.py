"""User-reported defects of the core: the configuration of a posterior built from its class,
NumPy scalars as options, ``Predictive`` attribute and target errors, ``Posterior.to`` on a
device this machine lacks."""
import json

import numpy as np
import pytest
import torch

import uncertain_agents as ua
import uncertain_agents.metrics
from uncertain_agents.agents import ThompsonSampling
from uncertain_agents.network import MLPSpec
from uncertain_agents.posteriors.dropout_alpha import DropoutAlpha
from uncertain_agents.posteriors.mfvi import MeanFieldVI
from uncertain_agents.registry import posterior_class
from uncertain_agents.validation import plain_value


def _same_state(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# ------------------------------------------------------- A: a posterior built from its class
@pytest.mark.parametrize("name, options", [
    ("mfvi", {"prior_std": 3.0}),
    ("dropout-alpha", {"input_dropout": 0.3, "alpha": 0.5}),
    ("ensemble", {"n_members": 3, "noise_std": 0.2}),
    ("svgd", {"n_particles": 4, "noise_prior": [1.0, 0.1]}),
])
def test_class_built_posterior_records_the_config_make_posterior_does(tmp_path, name, options):
    spec = MLPSpec(2, 3, (8,), "tanh")
    direct = posterior_class(name)(spec, seed=5, **options)
    made = ua.make_posterior(name, in_dim=2, out_dim=3, hidden=(8,), activation="tanh", seed=5, **options)
    assert direct.config == made.config
    assert json.dumps(direct.config) == json.dumps(made.config)  # the same file text, key order included
    assert direct.config["name"] == name and direct.config["seed"] == 5
    assert {k: direct.config[k] for k in options} == options
    assert _same_state(direct, made)
    direct.save(tmp_path / "direct.pt")
    back = ua.load_posterior(tmp_path / "direct.pt")
    assert type(back) is type(direct) and back.config == json.loads(json.dumps(direct.config))
    assert _same_state(back, direct)


def test_class_built_config_records_only_the_options_passed():
    post = MeanFieldVI(MLPSpec(4, 1, (6, 5)), "gaussian")
    assert post.config == {"name": "mfvi", "in_dim": 4, "out_dim": 1, "hidden": [6, 5], "activation": "relu",
                           "likelihood": "gaussian", "seed": None}
    assert post.has_default_prior
    cat = MeanFieldVI(spec=MLPSpec(4, 3, (6,)), likelihood="categorical", seed=1, init_std=0.05)
    assert cat.config["likelihood"] == "categorical" and cat.config["init_std"] == 0.05
    assert "spec" not in cat.config and "device" not in cat.config


def test_agent_keeps_explicit_prior_std_of_a_class_built_posterior(tmp_path):
    spec = MLPSpec(2, 5, (20,), "relu")
    mine = MeanFieldVI(spec, prior_std=3.0, seed=0)
    assert not mine.has_default_prior
    ThompsonSampling(mine, n_actions=5, seed=1)
    assert torch.equal(mine.prior_std.unique(), torch.tensor([3.0]))
    default = MeanFieldVI(spec, seed=0)
    ThompsonSampling(default, n_actions=5, seed=1)
    made = ua.make_posterior("mfvi", in_dim=2, out_dim=5, hidden=(20,), seed=0)
    ThompsonSampling(made, n_actions=5, seed=1)
    # the default prior is replaced by the agent's, exactly as for make_posterior
    assert torch.equal(default.prior_std.unique(), torch.tensor([1.0]))
    assert default.config == made.config and _same_state(default, made)
    mine.save(tmp_path / "agent.pt")
    assert ua.load_posterior(tmp_path / "agent.pt").config["prior_std"] == 3.0


def test_agent_keeps_explicit_input_dropout_of_a_class_built_posterior():
    spec = MLPSpec(2, 5, (8,), "relu")
    mine = DropoutAlpha(spec, input_dropout=0.3, seed=0)
    ThompsonSampling(mine, n_actions=5, seed=1)
    assert mine.input_dropout == 0.3 and mine.config["input_dropout"] == 0.3
    left_alone = DropoutAlpha(spec, seed=0)
    ThompsonSampling(left_alone, n_actions=5, seed=1)
    assert left_alone.input_dropout == 0.0 and left_alone.config["input_dropout"] == 0.0


# ----------------------------------------------------------- B: NumPy scalars as options
@pytest.mark.parametrize("name, numpy_options, python_options", [
    ("ensemble", {"n_members": np.int64(3), "seed": np.int64(3)}, {"n_members": 3, "seed": 3}),
    ("bb-alpha", {"alpha": np.float32(0.5), "train_samples": np.int64(2), "noise_std": np.float32(0.25),
                  "seed": np.int32(1)},
     {"alpha": 0.5, "train_samples": 2, "noise_std": 0.25, "seed": 1}),
    ("mfvi", {"prior_std": np.float64(2.0), "standardize": np.bool_(True), "seed": 0},
     {"prior_std": 2.0, "standardize": True, "seed": 0}),
    ("mfvi", {"prior_std": torch.tensor(2.0), "train_samples": torch.tensor(2), "seed": 0},
     {"prior_std": 2.0, "train_samples": 2, "seed": 0}),
    ("svgd", {"noise_prior": (np.float32(1.0), np.float64(0.5)), "n_particles": np.array(4), "seed": 2},
     {"noise_prior": (1.0, 0.5), "n_particles": 4, "seed": 2}),
])
def test_numpy_scalar_options_build_the_python_number_posterior(tmp_path, name, numpy_options, python_options):
    x = torch.linspace(-1, 1, 24).reshape(12, 2)
    y = x.sum(1, keepdim=True)
    posts = []
    for options in (numpy_options, python_options):
        post = ua.make_posterior(name, in_dim=2, out_dim=1, hidden=(6,), **options)
        post.fit(x, y, steps=3, batch_size=6)
        posts.append(post)
    with_numpy, with_python = posts
    assert with_numpy.config == with_python.config
    for key, value in with_numpy.config.items():  # plain Python values, not NumPy / torch scalars
        assert type(value) is type(with_python.config[key]), key
    assert _same_state(with_numpy, with_python)
    with_numpy.save(tmp_path / "numpy.pt")
    assert _same_state(ua.load_posterior(tmp_path / "numpy.pt"), with_python)


def test_numpy_scalar_options_of_a_class_built_posterior(tmp_path):
    post = MeanFieldVI(MLPSpec(np.int64(2), np.int64(1), (np.int64(4),)), seed=np.int64(7),
                       prior_std=np.float32(0.5))
    assert post.config["seed"] == 7 and type(post.config["seed"]) is int
    assert post.config["prior_std"] == 0.5 and type(post.config["prior_std"]) is float
    post.save(tmp_path / "p.pt")
    assert _same_state(ua.load_posterior(tmp_path / "p.pt"), post)


def test_an_option_json_cannot_save_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"aadm: option generator_hidden=range\(4, 5\) .*cannot be saved"):
        ua.make_posterior("aadm", in_dim=2, out_dim=1, hidden=(4,), generator_hidden=range(4, 5))
    with pytest.raises(TypeError, match="option variance_ratios=.*cannot be saved"):
        posterior_class("refined-vi")(MLPSpec(2, 1, (4,)), variance_ratios=np.array([0.3, 0.2]))


def test_plain_value():
    assert plain_value(np.int64(3)) == 3 and type(plain_value(np.int64(3))) is int
    assert type(plain_value(np.float32(0.5))) is float and type(plain_value(np.float64(0.5))) is float
    assert plain_value(np.bool_(False)) is False
    assert type(plain_value(torch.tensor(3))) is int and type(plain_value(np.array(2.5))) is float
    assert plain_value([np.int64(1), 2]) == [1, 2] and type(plain_value((np.int8(1),))) is tuple
    same = [1, 2.0, "relu"]
    assert plain_value(same) is same  # nothing to convert: the same object
    for other in ("relu", None, torch.ones(2), np.ones(2), range(3)):
        assert plain_value(other) is other


# --------------------------------------------------------------------- C, E: Predictive
def test_regression_predictive_probs_names_probs():
    pred = ua.Predictive(torch.zeros(4, 3, 1), "gaussian", torch.ones(1))
    with pytest.raises(AttributeError, match=r"^probs is only defined for a categorical predictive"):
        pred.probs
    with pytest.raises(AttributeError, match=r"^log_probs is only defined for a categorical predictive"):
        pred.log_probs


def test_log_prob_refuses_nan_or_infinite_targets():
    post = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(8,), seed=0)
    pred = post.predict(torch.randn(30, 3, generator=torch.Generator().manual_seed(0)), n_samples=4)
    with pytest.raises(ValueError, match=r"^y contains 30 NaN or infinite value\(s\)"):
        pred.log_prob(torch.full((30, 1), float("nan")))
    y = torch.zeros(30)
    y[4] = float("inf")
    with pytest.raises(ValueError, match=r"^y contains 1 NaN"):
        pred.log_prob(y)
    with pytest.raises(ValueError, match="y contains 1 NaN"):
        ua.metrics.rmse(pred, y)
    assert torch.isfinite(pred.log_prob(torch.zeros(30))).all()
    labels = ua.Predictive(torch.zeros(2, 3, 4), "categorical")
    with pytest.raises(ValueError, match="y contains 1 NaN"):
        labels.log_prob(torch.tensor([0.0, float("nan"), 1.0]))
    assert labels.log_prob(torch.tensor([0.0, 3.0, 1.0])).shape == (3,)


# ------------------------------------------------------------------- D: .to(device)
def test_to_an_absent_device_is_a_clear_error():
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(4,), seed=0)
    before = {k: v.clone() for k, v in post.state_dict().items()}
    with pytest.raises(ValueError, match=r"device='cuda:99'"):
        post.to("cuda:99")  # more CUDA devices than any machine here has (or no CUDA at all)
    with pytest.raises(ValueError, match=r"device=device\(type='cuda', index=99\)"):
        post.to(device=torch.device("cuda", 99))
    with pytest.raises(RuntimeError):
        post.to("tpu")                     # not a CUDA target: torch's own error, as before
    assert post.to("meta").device.type == "meta"   # other targets pass as in torch
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(4,), seed=0)
    with pytest.raises(ValueError, match="cuda"):
        post.cuda(99)
    assert post.to("cpu") is post and post.to(torch.device("cpu")) is post
    assert _same_state(post, type(post)(post.spec, seed=0)) and all(torch.equal(before[k], v)
                                                                     for k, v in post.state_dict().items())


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_to_cuda_without_cuda_matches_make_posterior():
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(4,))
    with pytest.raises(ValueError) as made:
        ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(4,), device="cuda")
    with pytest.raises(ValueError) as moved:
        post.to("cuda")
    assert str(moved.value) == str(made.value) == "device='cuda': CUDA is not available on this machine (use cpu)"
    with pytest.raises(ValueError, match="CUDA is not available"):
        post.cuda()
    with pytest.raises(ValueError, match="CUDA is not available"):
        post.to(0)


def test_an_unregistered_subclass_does_not_save_as_its_parent(tmp_path):
    """It inherits the parent's ``name``; recording that name would load its file as the parent class."""
    from uncertain_agents.posteriors.mfvi import MeanFieldVI

    class Unregistered(MeanFieldVI):
        pass

    post = Unregistered(ua.MLPSpec(2, 1, (4,), "relu"), seed=0, prior_std=2.0)
    assert post.config["name"] is None and post.config["prior_std"] == 2.0
    with pytest.raises(ValueError, match="Unregistered is not the class registered as 'mfvi'"):
        post.save(tmp_path / "p.pt")
    parent = MeanFieldVI(ua.MLPSpec(2, 1, (4,), "relu"), seed=0)
    parent.save(tmp_path / "q.pt")
    assert type(ua.load_posterior(tmp_path / "q.pt")) is MeanFieldVI
