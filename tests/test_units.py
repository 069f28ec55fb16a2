"""Training units: fixed by the first fit (or ``set_units``), never changed by a warm refit;
``set_prior_std`` before the units are fixed; per-likelihood default priors."""
from __future__ import annotations

import math

import pytest
import torch

import uncertain_agents as ua

METHODS = ["mfvi", "bb-alpha", "dropout-alpha", "map", "ensemble", "bootstrap", "svgd", "fsvgd"]


def _data(n=120, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 2, generator=g) * 4 - 2
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:] + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def _post(name, **kw):
    return ua.make_posterior(name, in_dim=2, out_dim=1, hidden=(16,), seed=0, **kw)


@pytest.mark.parametrize("name", METHODS)
def test_warm_refit_keeps_units_and_what_was_learned(name):
    """A refit on data with another location and scale must not move the units under the
    trained network: with a vanishing learning rate the predictive is unchanged."""
    torch.set_num_threads(1)
    x, y = _data()
    post = _post(name)
    post.fit(x, y, steps=60, batch_size=32)
    units = [t.clone() for t in (post.x_loc, post.x_scale, post.y_loc, post.y_scale)]
    probe = torch.linspace(-2, 2, 9).unsqueeze(-1).expand(-1, 2)
    before = post.predict(probe, n_samples=8, generator=torch.Generator().manual_seed(1)).mean
    x_new, y_new = 3 * x + 5, 10 * y - 7                       # very different statistics
    post.fit(torch.cat([x, x_new]), torch.cat([y, y_new]), steps=1, batch_size=32, lr=1e-30)
    after = post.predict(probe, n_samples=8, generator=torch.Generator().manual_seed(1)).mean
    for old, new in zip(units, (post.x_loc, post.x_scale, post.y_loc, post.y_scale)):
        assert torch.equal(old, new)
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["mfvi", "dropout-alpha", "ensemble", "fsvgd"])
def test_rescaled_targets_give_rescaled_predictions(name):
    """Standardisation makes a fit equivariant: targets a·y + b give predictions a·f + b
    (the same network is learned), not a re-learned function."""
    torch.set_num_threads(1)
    x, y = _data()
    a, b = 10.0, 3.0
    one, two = _post(name), _post(name)
    one.fit(x, y, steps=80, batch_size=32)
    two.fit(x, a * y + b, steps=80, batch_size=32)
    p1 = one.predict(x[:20], n_samples=10, generator=torch.Generator().manual_seed(2))
    p2 = two.predict(x[:20], n_samples=10, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(p2.mean, a * p1.mean + b, rtol=1e-3, atol=1e-3 * a)
    torch.testing.assert_close(p2.variance, a * a * p1.variance, rtol=1e-3, atol=1e-4 * a * a)


def test_set_units_fixes_units_before_the_first_fit(tmp_path):
    x, y = _data()
    post = _post("mfvi")
    assert not post.units_are_fixed
    post.set_units(x_loc=1.0, x_scale=[2.0, 4.0], y_loc=0.5, y_scale=3.0)
    assert post.units_are_fixed
    assert torch.equal(post.x_scale, torch.tensor([2.0, 4.0])) and torch.equal(post.y_scale, torch.tensor([3.0]))
    assert torch.equal(post.x_loc, torch.ones(2))
    post.fit(x, y, steps=5)
    assert torch.equal(post.x_scale, torch.tensor([2.0, 4.0]))      # the fit did not re-standardise
    with pytest.raises(ValueError, match="already fixed"):
        post.set_units()
    with pytest.raises(ValueError, match="x_scale must be positive"):
        _post("mfvi").set_units(x_scale=0.0)
    with pytest.raises(ValueError, match="y_loc must be a scalar or have 1 values"):
        _post("mfvi").set_units(y_loc=[1.0, 2.0])
    with pytest.raises(ValueError, match="x_loc"):
        _post("mfvi").set_units(x_loc=float("nan"))
    fitted = _post("mfvi")
    fitted.fit(x, y, steps=2)
    assert fitted.units_are_fixed
    fitted.save(tmp_path / "p.pt")
    assert ua.load_posterior(tmp_path / "p.pt").units_are_fixed


def test_set_prior_std_rederives_and_saves(tmp_path):
    post = _post("mfvi")
    assert post.has_default_prior
    post.set_prior_std(2.0)
    assert not post.has_default_prior and post.config["prior_std"] == 2.0
    assert torch.allclose(post.prior_std, torch.full_like(post.prior_std, 2.0))
    assert torch.allclose(post.std, torch.full_like(post.std, 0.2))   # init_std 0.1 × prior
    drop = _post("dropout-alpha")
    drop.set_prior_std(2.0)
    keep = torch.cat([torch.full((fi * fo + fo,), 1 - p) for (fi, fo), p in
                      zip(drop.spec.layer_shapes, drop.rates)])
    torch.testing.assert_close(drop.decay, keep * drop.spec.weight_mask().float() / 8.0)
    fs = _post("fsvgd")
    fs.set_prior_std(2.0)
    assert all(w == 2.0 and b == 2.0 for w, b in fs._layer_stds)
    post.save(tmp_path / "p.pt")
    same = ua.load_posterior(tmp_path / "p.pt")
    assert torch.equal(same.prior_std, post.prior_std)
    post.set_units()
    with pytest.raises(ValueError, match="before the first fit"):
        post.set_prior_std(1.0)
    with pytest.raises(ValueError, match="prior_std"):
        _post("mfvi").set_prior_std(-1.0)


def test_default_prior_depends_on_the_likelihood():
    reg = ua.make_posterior("mfvi", in_dim=4, out_dim=1, hidden=(9,))
    w0, _ = reg.spec.unflatten_one(reg.prior_std)[0]
    assert torch.allclose(w0, torch.full_like(w0, 1 / math.sqrt(4)))
    cls = ua.make_posterior("mfvi", in_dim=4, out_dim=3, hidden=(9,), likelihood="categorical")
    assert torch.allclose(cls.prior_std, torch.ones_like(cls.prior_std))
    assert cls.has_default_prior
    # f-SVGD keeps the fan-in prior for classification (N(0, 1) logits break its function prior)
    fs = ua.make_posterior("fsvgd", in_dim=4, out_dim=3, hidden=(9,), likelihood="categorical")
    w0, _ = fs.spec.unflatten_one(fs.prior_std)[0]
    assert torch.allclose(w0, torch.full_like(w0, 0.5))


def test_identity_units_hand_back_the_data_itself_and_others_transform_it():
    """Raw units (location 0, scale 1, what the bandit agents set) need no copy of the data:
    ``(v - 0) / 1`` is ``v`` to the bit, so ``to_train_units`` returns the tensors themselves."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(50, 3, generator=g), torch.randn(50, 2, generator=g)
    x[0, 0] = -0.0
    raw = ua.make_posterior("mfvi", in_dim=3, out_dim=2, hidden=(4,))
    raw.set_units()
    xs, ys = raw.to_train_units(x, y)
    assert xs is x and ys is y
    assert torch.equal((x - raw.x_loc) / raw.x_scale, x) and torch.equal((y - raw.y_loc) / raw.y_scale, y)
    scaled = ua.make_posterior("mfvi", in_dim=3, out_dim=2, hidden=(4,))
    scaled.set_units(x_loc=1.0, y_scale=2.0)  # x moved, y rescaled: both transformed
    xs, ys = scaled.to_train_units(x, y)
    assert torch.equal(xs, x - 1.0) and torch.equal(ys, y / 2.0)
    only_x = ua.make_posterior("mfvi", in_dim=3, out_dim=2, hidden=(4,))
    only_x.set_units(x_scale=[1.0, 2.0, 1.0])
    xs, ys = only_x.to_train_units(x, y)
    assert xs is not x and torch.equal(xs[:, 1], x[:, 1] / 2.0) and ys is y


def test_finiteness_check_answers_from_one_sum_and_looks_closer_only_when_it_must():
    from uncertain_agents.validation import check_finite
    check_finite(torch.zeros(0), "x")
    check_finite(torch.tensor([3e38, 3e38, -1.0]), "x")  # finite entries whose sum overflows: fine
    check_finite(torch.tensor([60000.0, 60000.0], dtype=torch.float16), "x")  # overflows in float16 too
    check_finite(torch.tensor([1, 2]), "labels")  # integers are always finite
    for bad, count in ((torch.tensor([1.0, float("nan"), 2.0]), 1), (torch.tensor([float("inf"), -float("inf")]), 2),
                       (torch.tensor([[0.0, float("-inf")], [float("nan"), 1.0]]), 2)):
        with pytest.raises(ValueError, match=f"x contains {count} NaN or infinite"):
            check_finite(bad, "x")
