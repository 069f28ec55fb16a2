"""Numerical robustness and input edge cases of fit / predict / sample (an audit of every posterior):
blow-ups between two divergence checks, the standardisation of constant and tiny-spread columns,
numpy arrays of every layout and integer type, float64 values beyond float32, huge class labels,
and ``predict``'s ``max_elements``."""
import numpy as np
import pytest
import torch

import uncertain_agents as ua
from uncertain_agents.function_sample import FunctionSample
from uncertain_agents.posteriors.training import TrainingDivergedError

NAMES = ua.available_posteriors()


def _data(n=24, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, torch.sin(x[:, :1]), (x[:, 0] > 0).long()


def _make(name, likelihood="gaussian", out_dim=1, in_dim=2, **options):
    return ua.make_posterior(name, in_dim=in_dim, out_dim=out_dim, likelihood=likelihood, hidden=(8,), seed=0,
                             **options)


# ------------------------------------------------------- divergence between two checks
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad, message", [(1e9, r"blew up to .* at step 3 "), (float("nan"), "became nan at step 3;")])
def test_a_blow_up_between_two_checks_is_divergence(name, bad, message):
    """The loss is checked every 25 steps; a blow-up (or NaN) at a step in between used to pass unseen
    when the loss had fallen back by the next check."""
    x, y, _ = _data()
    post = _make(name)
    step = post.training_step

    def spiking(batch, ctx):
        out = step(batch, ctx)
        return {**out, "loss": out["loss"] * bad} if ctx.step == 3 else out

    post.training_step = spiking
    with pytest.raises(TrainingDivergedError, match=message):
        post.fit(x, y, steps=30, batch_size=8)
    assert int(post.steps_trained) == 0  # restored to the state before the fit


def test_a_real_blow_up_between_checks_is_caught_and_restored():
    """bb-alpha on a classification toy at lr=10: the loss reached 6e10 at step 2 and fell back to ~1e3
    by the checks at steps 25 and 50, so the fit returned that model without an error."""
    x, _, labels = _data(20)
    post = _make("bb-alpha", "categorical", 2)
    with pytest.raises(TrainingDivergedError, match="blew up"):
        post.fit(x, labels, steps=60, batch_size=8, lr=10.0)
    assert bool(torch.isfinite(post.predict(x, n_samples=5).probs).all())


# ------------------------------------------------------------------ standardisation
@pytest.mark.parametrize("name", ["mfvi", "svgd"])
@pytest.mark.parametrize("value", [7.77, 0.1, 0.7, 7.0, 3.3e6])
def test_a_constant_target_keeps_scale_one_whatever_its_value(name, value):
    """A constant target's float32 standard deviation is round-off (4.8e-7 for 7.77, 0 for 7.0): it
    used to become y's scale, shrinking the prior and the predictive spread by a factor 1e6-1e7."""
    x, _, _ = _data(20)
    post = _make(name)
    post.fit(x, torch.full((20, 1), value), steps=5, batch_size=8)
    assert post.y_scale.tolist() == [1.0]
    assert post.y_loc.item() == pytest.approx(value, rel=1e-6)


def test_constant_columns_are_decided_on_observed_entries_and_for_x_too():
    x, y, _ = _data(20)
    y2 = torch.cat([y, torch.full((20, 1), 7.77)], 1)
    mask = torch.ones(20, 2, dtype=torch.bool)
    mask[::2, 1] = False
    y2[::2, 1] = float("nan")  # unobserved: ignored
    post = _make("mfvi", out_dim=2)
    post.fit(x, y2, mask=mask, steps=3, batch_size=8)
    assert post.y_scale[1].item() == 1.0 and post.y_scale[0].item() == pytest.approx(float(y.std(unbiased=False)))
    one = _make("map", in_dim=1)
    one.fit(torch.full((20, 1), 0.7), y, steps=3)  # its float32 std is 6e-8, not 0
    assert one.x_scale.tolist() == [1.0]


def test_a_tiny_but_varying_target_is_standardised_and_a_vanishing_one_refused():
    """Targets varying by ~1e-13 used to keep scale 1 (treated as constant): a predictive spread of ~0.5,
    ten orders of magnitude wider than the data."""
    x, y, _ = _data(20)
    post = _make("map")
    post.fit(x, y * 1e-13, steps=20, batch_size=20)
    assert post.y_scale.item() == pytest.approx(float((y * 1e-13).std(unbiased=False)), rel=1e-4)
    assert float(post.predict(x, n_samples=4).stddev.max()) < 1e-11
    fresh = _make("map")
    with pytest.raises(ValueError, match=r"y column\(s\) \[0\] are not constant.*rescale y"):
        fresh.fit(x, y * 1e-25, steps=2)
    assert not fresh.units_are_fixed
    fresh.fit(x, y, steps=2)  # a rescaled fit works
    near_constant = x.clone()
    near_constant[:, 0] = 0.0
    near_constant[0, 0] = 1e-20                         # an input varying by 1e-20: a constant feature
    feature = _make("map")
    feature.fit(near_constant, y, steps=2)
    assert feature.x_scale[0].item() == 1.0 and feature.x_scale[1].item() != 1.0


# ------------------------------------------------------- numpy layouts and integer types
def test_numpy_arrays_with_negative_strides_are_accepted():
    x, y, labels = _data()
    xn, yn = x.numpy(), y.numpy()
    a, b = _make("mfvi"), _make("mfvi")
    a.fit(xn[::-1], yn[::-1], steps=4, batch_size=8)
    b.fit(np.ascontiguousarray(xn[::-1]), np.ascontiguousarray(yn[::-1]), steps=4, batch_size=8)
    gen = lambda: torch.Generator().manual_seed(1)
    assert torch.equal(a.predict(np.flip(xn, 0), n_samples=3, generator=gen()).mean,
                       b.predict(xn[::-1].copy(), n_samples=3, generator=gen()).mean)
    assert torch.equal(a.sample(2, generator=gen())(xn[::-1]), b.sample(2, generator=gen())(xn[::-1].copy()))
    assert a.predict(xn, n_samples=3).log_prob(yn[::-1]).shape == (24,)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_wide_unsigned_integer_arrays_are_numbers(dtype):
    """numpy uint16/32/64 arrays were refused with "must hold real numbers"."""
    x, _, labels = _data()
    a, b = _make("map", "categorical", 2), _make("map", "categorical", 2)
    xi = (x.numpy() * 10 + 50).astype(dtype)
    a.fit(xi, labels.numpy().astype(dtype), steps=3, batch_size=8)
    b.fit(xi.astype(np.int64), labels.numpy(), steps=3, batch_size=8)
    pa, pb = a.predict(xi, n_samples=2), b.predict(xi.astype(np.int64), n_samples=2)
    assert torch.equal(pa.probs, pb.probs)
    assert torch.equal(pa.log_prob(labels.numpy().astype(dtype)), pb.log_prob(labels.numpy()))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 1\], got range \[0, 3\]"):
        a.fit(xi, np.array([0, 1, 2, 3] * 6, dtype=dtype), steps=1)


def test_float64_values_beyond_float32_are_named_not_called_infinite():
    x, y, _ = _data()
    big = x.double().numpy()
    big[2, 1] = 1e300
    post = _make("mfvi")
    with pytest.raises(ValueError, match=r"x holds 1 value\(s\) beyond the range of torch.float32 \(up to 1e\+300"):
        post.fit(big, y, steps=1)
    with pytest.raises(ValueError, match="x contains 1 NaN or infinite"):  # a real inf is still that
        post.fit(np.where(big > 1e299, np.inf, big), y, steps=1)


def test_float_labels_beyond_int64_report_their_real_range():
    """The range used to be reported after a wrapping cast: [-9223372036854775808, ...]."""
    x, _, _ = _data(4)
    post = _make("map", "categorical", 3)
    with pytest.raises(ValueError, match=r"y labels must lie in \[0, 2\], got range \[0, 1e\+20\]"):
        post.fit(x, np.array([0.0, 1.0, 2.0, 1e20]), steps=1)


# ------------------------------------------------------------------ predict's chunks
def test_predict_checks_max_elements():
    x, y, _ = _data()
    post = _make("map")
    for bad in (1e9, 0, -5, "big"):
        with pytest.raises(ValueError, match="max_elements must be a positive integer"):
            post.predict(x, n_samples=3, max_elements=bad)


@pytest.mark.parametrize("name", ["mfvi", "ensemble"])
def test_predict_bounds_activations_when_functions_are_many(name, monkeypatch):
    """With n_samples × width > max_elements the chunk of inputs bottomed out at one row and every
    call still evaluated all functions: the activations exceeded max_elements."""
    x, y, _ = _data()
    post = _make(name)
    post.fit(x, y, steps=3, batch_size=8)
    full = post.predict(x, n_samples=40, generator=torch.Generator().manual_seed(2))
    seen = []
    call = FunctionSample.__call__

    def recording(fs, xb):
        seen.append(len(fs) * len(xb) * max(post.spec.widths))
        return call(fs, xb)

    monkeypatch.setattr(FunctionSample, "__call__", recording)
    small = post.predict(x, n_samples=40, generator=torch.Generator().manual_seed(2), max_elements=100)
    assert max(seen) <= 100 and len(seen) > 1
    assert torch.equal(small.samples, full.samples)
    assert torch.equal(small.variance, full.variance)


@pytest.mark.parametrize("likelihood, out_dim", [("gaussian", 1), ("categorical", 2)])
@pytest.mark.parametrize("name", ["mfvi", "map", "dropout-alpha"])
def test_predict_refuses_inputs_that_overflow_inside_the_network(name, likelihood, out_dim):
    """Finite inputs near float32's largest value (3e38) overflowed inside the network and the
    predictive came back NaN; 1e36 still evaluates."""
    x, y, labels = _data()
    post = _make(name, likelihood, out_dim)
    post.fit(x, y if likelihood == "gaussian" else labels, steps=3, batch_size=8)
    with pytest.raises(ValueError, match=r"x: the sampled functions overflow float32 .* at 1 of 2 input row\(s\)"):
        post.predict(torch.tensor([[0.5, 1.0], [3e38, -3e38]]), n_samples=4)
    assert bool(torch.isfinite(post.predict(torch.tensor([[1e36, -1e36]]), n_samples=4).mean).all())


@pytest.mark.parametrize("cast", [lambda p: p.double(), lambda p: p.half(), lambda p: p.to(torch.float64)])
def test_fitting_a_posterior_cast_away_from_float32_is_a_clear_error(cast):
    """Casting is allowed (tests compare objectives in float64), but a fit would fail deep inside torch."""
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(4,), seed=0)
    x = torch.randn(8, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    cast(post)
    with pytest.raises(TypeError, match=r"mfvi.fit: posteriors train in float32 .* cast it back with .float\(\)"):
        post.fit(x, x[:, :1] * 2, steps=2, batch_size=4)
    post.float()
    post.fit(x, x[:, :1] * 2, steps=2, batch_size=4)                       # float64 data are converted
    assert post.steps_trained == 2


def test_pandas_frames_and_series_are_accepted_like_their_arrays():
    pd = pytest.importorskip("pandas")
    x, y, labels = _data(20)
    frame, series = pd.DataFrame(x.numpy(), columns=["a", "b"]), pd.Series(y[:, 0].numpy())
    a, b = _make("map"), _make("map")
    a.fit(frame, series, steps=3, batch_size=8)
    b.fit(x.numpy(), y[:, 0].numpy(), steps=3, batch_size=8)
    assert all(torch.equal(u, v) for u, v in zip(a.state_dict().values(), b.state_dict().values()))
    pred = a.predict(frame, n_samples=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(pred.log_prob(series), pred.log_prob(y[:, 0].numpy()))
    with pytest.raises(TypeError, match="x must be numeric"):
        a.fit(pd.DataFrame({"a": ["p", "q"], "b": [1.0, 2.0]}), [1.0, 2.0], steps=1)
