"""The common sampler interface, checked for every registered posterior."""
import math

import numpy as np
import pytest
import torch

import uncertain_agents as ua
from conftest import DEVICES

NAMES = ua.available_posteriors()
FAST = dict(steps=3, batch_size=16)


def make(name, likelihood="gaussian", out_dim=1, device="cpu", seed=0, **kw):
    return ua.make_posterior(name, in_dim=3, out_dim=out_dim, hidden=(8,), likelihood=likelihood,
                             device=device, seed=seed, **kw)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NAMES)
def test_sample_shapes_and_device(name, device, regression_data):
    x, y = regression_data
    post = make(name, out_dim=2, device=device)
    post.fit(x, torch.cat([y, -y], 1), **FAST)
    fs = post.sample(5)
    f = fs(x.to(device))
    assert f.shape == (5, 64, 2) and f.device.type == device
    assert fs[1](x).shape == (1, 64, 2)
    pred = post.predict(x, n_samples=7)
    assert pred.mean.shape == (64, 2) and pred.variance.shape == (64, 2)
    assert pred.log_prob(torch.cat([y, -y], 1)).shape == (64,)
    assert pred.entropy().shape == (64,) and pred.mutual_information().shape == (64,)
    assert bool((pred.variance > 0).all())


@pytest.mark.parametrize("name", NAMES)
def test_function_sample_is_fixed(name, regression_data):
    x, y = regression_data
    post = make(name)
    post.fit(x, y, **FAST)
    fs = post.sample(3)
    assert torch.equal(fs(x), fs(x))
    assert torch.allclose(fs(x[:10]), fs(x)[:, :10], atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_classification_interface(name, regression_data):
    x, _ = regression_data
    labels = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    post = make(name, likelihood="categorical", out_dim=3)
    post.fit(x, labels, **FAST)
    pred = post.predict(x, n_samples=6)
    assert pred.probs.shape == (64, 3)
    assert torch.allclose(pred.probs.sum(-1), torch.ones(64), atol=1e-5)
    assert pred.log_prob(labels).shape == (64,)
    assert bool((pred.entropy() <= math.log(3) + 1e-5).all())


@pytest.mark.parametrize("name", NAMES)
def test_save_load_round_trip(name, regression_data, tmp_path):
    x, y = regression_data
    post = make(name)
    post.fit(x * 3 + 1, y * 10 - 4, **FAST)
    path = tmp_path / "post.pt"
    post.save(path)
    same = ua.load_posterior(path)
    assert type(same) is type(post)
    a = post.sample(4, generator=torch.Generator().manual_seed(3))(x)
    b = same.sample(4, generator=torch.Generator().manual_seed(3))(x)
    assert torch.equal(a, b)
    pa = post.predict(x, generator=torch.Generator().manual_seed(1), n_samples=5)
    pb = same.predict(x, generator=torch.Generator().manual_seed(1), n_samples=5)
    assert torch.allclose(pa.variance, pb.variance)


@pytest.mark.parametrize("likelihood", ["gaussian", "categorical"])
@pytest.mark.parametrize("name", NAMES)
def test_a_loaded_posterior_resumes_training_bit_for_bit(name, likelihood, regression_data, tmp_path):
    """The file holds the optimisers' moments and the training stream (posteriors/resume.py): ``fit`` after
    ``load_posterior`` takes the same steps as ``fit`` on the saved posterior — the same losses and the same
    parameters to the bit — and sampling without a generator continues the same stream."""
    x, y = regression_data
    out_dim, targets = (1, y) if likelihood == "gaussian" else (3, (x[:, 0] > 0).long() + (x[:, 1] > 0).long())
    post = make(name, likelihood=likelihood, out_dim=out_dim)
    post.fit(x, targets, steps=7, batch_size=16)
    post.save(tmp_path / "post.pt")
    same = ua.load_posterior(tmp_path / "post.pt")
    go_on, resumed = post.fit(x, targets, steps=9, batch_size=16), same.fit(x, targets, steps=9, batch_size=16)
    np.testing.assert_array_equal(resumed.losses, go_on.losses)
    for (key, a), b in zip(post.state_dict().items(), same.state_dict().values()):
        assert torch.equal(a, b), key
    assert torch.equal(post.sample(3)(x), same.sample(3)(x))


@pytest.mark.parametrize("name,options", [("bootstrap", {"optimizer": "rmsprop", "lr_decay": 0.5}),
                                          ("mfvi", {"lr_decay": 0.1}), ("ensemble", {"optimizer": "rmsprop"})])
def test_resumed_training_keeps_the_optimiser_and_its_decay(name, options, regression_data, tmp_path):
    """RMSProp's mean squares and the inverse-time decay (counted by ``steps_trained``) resume too; a
    posterior saved again before any use keeps the state it was loaded with."""
    x, y = regression_data
    post = make(name, **options)
    post.fit(x, y, steps=5, batch_size=16)
    post.save(tmp_path / "a.pt")
    ua.load_posterior(tmp_path / "a.pt").save(tmp_path / "b.pt")  # saved again, untouched
    same = ua.load_posterior(tmp_path / "b.pt")
    np.testing.assert_array_equal(same.fit(x, y, steps=6, batch_size=16).losses,
                                  post.fit(x, y, steps=6, batch_size=16).losses)


@pytest.mark.parametrize("name", ["mfvi", "ensemble", "fsvgd"])
def test_a_posterior_moved_between_devices_keeps_its_optimisers_moments(name, regression_data):
    """The optimisers are rebuilt on the device a moved posterior now lives on, with the moments they had:
    the next fit continues as it would have without the move (here the move is simulated: the optimisers
    are marked as built for another device, which is the state ``post.to(device)`` leaves)."""
    x, y = regression_data
    moved, stayed = make(name), make(name)
    for post in (moved, stayed):
        post.fit(x, y, steps=6, batch_size=16)
    moved.optimizer_set.device = torch.device("meta")
    np.testing.assert_array_equal(moved.fit(x, y, steps=6, batch_size=16).losses,
                                  stayed.fit(x, y, steps=6, batch_size=16).losses)


def test_an_unfitted_or_old_file_loads_with_fresh_optimisers(regression_data, tmp_path):
    """Nothing to resume before a fit: the file has no training entry, and the loaded posterior's first fit
    is the original's first fit. A file without the entry (saved by an earlier version) loads with fresh
    optimisers and the stream restarted from ``seed``."""
    from uncertain_agents.posteriors.storage import read_payload

    x, y = regression_data
    fresh = make("mfvi")
    fresh.save(tmp_path / "fresh.pt")
    assert "training" not in read_payload((tmp_path / "fresh.pt").read_bytes())
    np.testing.assert_array_equal(ua.load_posterior(tmp_path / "fresh.pt").fit(x, y, **FAST).losses,
                                  fresh.fit(x, y, **FAST).losses)
    fresh.save(tmp_path / "fitted.pt")
    assert set(read_payload((tmp_path / "fitted.pt").read_bytes())["training"]) == {"optimizers", "generators"}


def test_a_bad_training_entry_is_refused_naming_it(regression_data, tmp_path):
    from uncertain_agents.posteriors.storage import read_payload, write_payload

    x, y = regression_data
    post = make("mfvi")
    post.fit(x, y, **FAST)
    post.save(tmp_path / "good.pt")
    payload = read_payload((tmp_path / "good.pt").read_bytes())
    cases = {"not a table": ("nonsense", "not an {'optimizers', 'generators'} table"),
             "groups": ({**payload["training"], "optimizers": {"other": payload["training"]["optimizers"]["main"]}},
                        r"optimiser groups \['other'\] are not this method's \['main'\]"),
             "moments": ({**payload["training"], "optimizers": {"main": {
                 "state": payload["training"]["optimizers"]["main"]["state"], "param_groups": []}}},
                         "optimiser group 'main' does not fit"),
             "generator": ({**payload["training"], "generators": {"cpu": torch.zeros(3, dtype=torch.uint8)}},
                           "CPU generator state is invalid")}
    for label, (training, message) in cases.items():
        write_payload(tmp_path / "bad.pt", {**payload, "training": training})
        with pytest.raises(ValueError, match=message):
            ua.load_posterior(tmp_path / "bad.pt")


def test_malformed_optimiser_moments_are_refused_at_load(regression_data, tmp_path):
    """Moments the fused kernels would read as dense arrays of their parameter's size (a wrong shape, an
    expanded view of one value: both crashed the interpreter at the first step after loading), entries the
    optimiser cannot step with, and indices outside the group are refused by ``load_posterior`` with a
    ``ValueError`` naming them, not at the first ``fit`` (or never)."""
    from uncertain_agents.posteriors.storage import read_payload, write_payload

    x, y = regression_data
    post = make("mfvi")
    post.fit(x, y, **FAST)
    post.save(tmp_path / "good.pt")
    payload = read_payload((tmp_path / "good.pt").read_bytes())
    main = payload["training"]["optimizers"]["main"]

    def with_entries(change):
        return {**main, "state": {k: change(dict(v)) for k, v in main["state"].items()}}

    cases = {
        "short": (with_entries(lambda e: {**e, "exp_avg": e["exp_avg"][:1]}), "'exp_avg' of parameter 0 has shape"),
        "expanded": (with_entries(lambda e: {**e, "exp_avg_sq": torch.ones(1).expand(e["exp_avg_sq"].shape)}),
                     None),  # the right shape: accepted, but copied dense
        "rmsprop keys": (with_entries(lambda e: {"step": e["step"], "square_avg": e["exp_avg_sq"]}),
                         r"holds \['square_avg', 'step'\], not \['exp_avg', 'exp_avg_sq', 'step'\]"),
        "step vector": (with_entries(lambda e: {**e, "step": torch.zeros(4)}), "'step' of parameter 0 is not a scalar"),
        "nan": (with_entries(lambda e: {**e, "exp_avg": torch.full_like(e["exp_avg"], float("nan"))}),
                "'exp_avg' of parameter 0 holds NaN"),
        "negative square": (with_entries(lambda e: {**e, "exp_avg_sq": -torch.ones_like(e["exp_avg_sq"])}),
                            "'exp_avg_sq' of parameter 0 holds NaN, infinite or negative"),
        "unknown index": ({**main, "state": {**main["state"], 99: main["state"][0]}}, "names parameter 99"),
        "state not a table": ({**main, "state": 5}, "not a {parameter index: moments} table"),
    }
    for label, (optimizer, message) in cases.items():
        training = {**payload["training"], "optimizers": {"main": optimizer}}
        write_payload(tmp_path / "bad.pt", {**payload, "training": training})
        if message is None:
            loaded = ua.load_posterior(tmp_path / "bad.pt")
            moments = loaded.optimizer_set.pending["main"]["state"]
            assert all(v.is_contiguous() for entry in moments.values() for v in entry.values()), label
            assert np.isfinite(loaded.fit(x, y, **FAST).losses).all(), label
            continue
        with pytest.raises(ValueError, match=message):
            ua.load_posterior(tmp_path / "bad.pt")
    for generators, message in (({"cuda": torch.zeros(3, dtype=torch.uint8)}, "CUDA generator state is invalid"),
                                ({"bogus": torch.zeros(16, dtype=torch.uint8)}, "'bogus', which is not a device type")):
        write_payload(tmp_path / "bad.pt", {**payload, "training": {**payload["training"], "generators": generators}})
        with pytest.raises(ValueError, match=message):
            ua.load_posterior(tmp_path / "bad.pt")


def test_loading_an_unseeded_posterior_leaves_torchs_global_stream_alone(regression_data, tmp_path):
    """An unseeded posterior's generator is seeded by a draw from torch's global stream; a loaded one
    continues its saved stream instead, so its fit, like the original's, draws nothing from the global one."""
    x, y = regression_data
    post = make("mfvi", seed=None)
    post.fit(x, y, **FAST)
    post.save(tmp_path / "post.pt")
    same = ua.load_posterior(tmp_path / "post.pt")
    torch.manual_seed(1)
    losses, after = post.fit(x, y, **FAST).losses, torch.rand(3)
    torch.manual_seed(1)
    np.testing.assert_array_equal(same.fit(x, y, **FAST).losses, losses)
    assert torch.equal(torch.rand(3), after)


@pytest.mark.parametrize("name", NAMES)
def test_seed_reproducible(name, regression_data):
    x, y = regression_data
    outs = []
    for seed in (0, 0, 1):
        post = make(name, seed=seed)
        post.fit(x, y, **FAST)
        outs.append(post.sample(3)(x))
    assert torch.equal(outs[0], outs[1])
    assert not torch.allclose(outs[0], outs[2])  # the seed is used, not a fixed stream


@pytest.mark.parametrize("name", NAMES)
def test_numpy_inputs_and_mask(name, regression_data):
    x, y = regression_data
    post = make(name, out_dim=2)
    mask = np.zeros((64, 2), dtype=bool)
    mask[::2, 0] = True
    mask[1::2, 1] = True
    y2 = np.concatenate([y.numpy(), np.full((64, 1), np.nan, dtype=np.float32)], 1)
    y2[1::2, 1] = 1.0
    result = post.fit(x.numpy(), y2, mask=mask, **FAST)
    assert np.isfinite(result.losses).all()
    assert post.sample(2)(x.numpy()).shape == (2, 64, 2)
    # unobserved targets take no part: the units come from the observed entries, and tensors with
    # any other value there train to the same bits as NumPy arrays with NaN
    torch.testing.assert_close(post.y_loc, torch.tensor([float(y[::2].mean()), 1.0]))
    filled = torch.from_numpy(np.where(mask, y2, 123.0))
    same = make(name, out_dim=2)
    again = same.fit(x, filled, mask=torch.from_numpy(mask), **FAST)
    np.testing.assert_array_equal(again.losses, result.losses)
    g = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    assert torch.equal(same.sample(2, generator=g())(x), post.sample(2, generator=g())(x))


# ------------------------------------------------------------------ bad input
def test_unknown_name_lists_valid_ones():
    with pytest.raises(ValueError, match="valid names") as err:
        ua.make_posterior("no-such-method", in_dim=2, out_dim=1)
    for name in NAMES:
        assert name in str(err.value)


def test_unknown_option_is_named():
    with pytest.raises(TypeError, match="bogus"):
        ua.make_posterior("mfvi", in_dim=2, out_dim=1, bogus=3)


@pytest.mark.parametrize("name", NAMES)
def test_bad_arguments(name, regression_data):
    x, y = regression_data
    post = make(name)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        post.sample(0)
    with pytest.raises(ValueError, match="n must be a positive integer"):
        post.sample(-2)
    with pytest.raises(ValueError, match="in_dim|columns"):
        post.fit(torch.randn(64, 4), y, **FAST)
    with pytest.raises(ValueError, match="columns"):
        post.sample(2)(torch.randn(5, 2))
    with pytest.raises(ValueError, match="columns"):
        post.predict(torch.randn(5, 7))
    bad = x.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="x contains .*NaN"):
        post.fit(bad, y, **FAST)
    bad_y = y.clone()
    bad_y[0] = float("inf")
    with pytest.raises(ValueError, match="y contains .*NaN or infinite"):
        post.fit(x, bad_y, **FAST)
    with pytest.raises(ValueError, match="mask has no observed entry"):
        post.fit(x, y, mask=torch.zeros(64, 1, dtype=torch.bool), **FAST)
    with pytest.raises(ValueError, match="same number of rows"):
        post.fit(x, y[:10], **FAST)
    with pytest.raises(ValueError, match="steps"):
        post.fit(x, y, steps=0)
    with pytest.raises(ValueError, match="batch_size"):
        post.fit(x, y, steps=1, batch_size=-1)
    with pytest.raises(TypeError, match="x must be"):
        post.fit("not data", y, **FAST)


def test_bad_network_arguments():
    with pytest.raises(ValueError, match="in_dim"):
        ua.make_posterior("mfvi", in_dim=0, out_dim=1)
    with pytest.raises(ValueError, match="hidden"):
        ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(10, -1))
    with pytest.raises(ValueError, match="activation"):
        ua.make_posterior("mfvi", in_dim=2, out_dim=1, activation="swishy")
    with pytest.raises(ValueError, match="likelihood"):
        ua.make_posterior("mfvi", in_dim=2, out_dim=1, likelihood="poisson")
    with pytest.raises(ValueError, match="labels must lie"):
        p = ua.make_posterior("mfvi", in_dim=2, out_dim=3, likelihood="categorical")
        p.fit(torch.zeros(4, 2), torch.tensor([0, 1, 2, 3]), steps=1)


def test_divergence_raises_clear_error(regression_data):
    x, y = regression_data
    post = make("mfvi")
    with pytest.raises(ua.TrainingDivergedError, match="lr"):
        post.fit(x, y, steps=50, lr=1e6)
    # targets whose spread overflows float32 are refused before training, naming y (they used to end
    # in the same divergence error, blaming the learning rate)
    with pytest.raises(ValueError, match="y's mean or spread overflows"):
        make("mfvi").fit(x, y * 1e30, steps=50, lr=1e6)


@pytest.mark.parametrize("name", ["mfvi", "refined-vi"])
def test_files_saved_before_newer_state_entries_still_load(name, regression_data, tmp_path):
    """A file written before ``learn_prior`` / ``refine_noise`` existed (no ``layer_of_param``,
    ``log_prior_scale``, ``member_log_noise``) loads and predicts as it did."""
    from uncertain_agents.posteriors.storage import write_payload
    x, y = regression_data
    post = make(name)
    post.fit(x, y, **FAST)
    old_state = {k: v for k, v in post.state_dict().items()
                 if k not in ("layer_of_param", "log_prior_scale", "member_log_noise")}
    import json
    from uncertain_agents.posteriors.storage import FORMAT_2
    write_payload(tmp_path / "old.pt", {"format": FORMAT_2, "method": post.name, "config": json.dumps(post.config),
                                        "state": {k: v.detach().clone() for k, v in old_state.items()}})
    same = ua.load_posterior(tmp_path / "old.pt")
    a = post.sample(4, generator=torch.Generator().manual_seed(3))(x)
    b = same.sample(4, generator=torch.Generator().manual_seed(3))(x)
    assert torch.equal(a, b)
