"""map / ensemble / bootstrap: batched members, their objectives, sampling, bootstrap weights."""
import math

import pytest
import torch

import uncertain_agents as ua
from uncertain_agents.posteriors import Batch


def make(name, likelihood="gaussian", out_dim=1, **kw):
    return ua.make_posterior(name, in_dim=3, out_dim=out_dim, hidden=(8,), likelihood=likelihood,
                             seed=0, **kw)


def full_batch(x, y, n_data=None):
    return Batch(x, y, None, torch.arange(x.shape[0]), n_data or x.shape[0], x)


# ------------------------------------------------------------------- members
def test_ensemble_members_differ(regression_data):
    x, y = regression_data
    post = make("ensemble", n_members=4)
    assert post.members.shape == (4, post.spec.num_params)
    post.fit(x, y, steps=50)
    f = post.spec.forward(post.members.detach(), x)
    for i in range(4):
        for j in range(i + 1, 4):
            assert not torch.allclose(post.members[i], post.members[j])
            assert (f[i] - f[j]).abs().max() > 1e-3


def test_members_are_trained_independently(regression_data):
    """The joint loss is the mean of per-member losses: member m's gradient is that of its own loss."""
    x, y = regression_data
    post = make("ensemble", n_members=3)
    batch = full_batch(x, y, n_data=200)
    post.loss(batch, torch.Generator()).backward()
    joint = post.members.grad.clone()
    for m in range(3):
        single = make("map")
        with torch.no_grad():
            single.members.copy_(post.members[m:m + 1])
            single.member_log_noise_std.copy_(post.member_log_noise_std[m:m + 1])
        single.loss(batch, torch.Generator()).backward()
        assert torch.allclose(joint[m] * 3, single.members.grad[0], atol=1e-6)


def test_map_loss_is_nll_plus_gaussian_prior_penalty(regression_data):
    x, y = regression_data
    post = make("map", prior_std=0.7)
    batch = full_batch(x, y, n_data=500)
    theta = post.members[0]
    f = post.spec.forward(post.members, x)
    s = post.member_log_noise_std.exp()
    nll = -torch.distributions.Normal(f[0], s).log_prob(y).mean()
    expected = nll + (theta.square() / (2 * 0.7 ** 2)).sum() / 500
    assert torch.allclose(post.loss(batch, torch.Generator()), expected, atol=1e-5)
    plain = make("map", use_prior=False)
    with torch.no_grad():
        plain.members.copy_(post.members)
    assert torch.allclose(plain.loss(batch, torch.Generator()), nll, atol=1e-5)


def test_map_samples_are_copies_with_no_epistemic_spread(regression_data):
    x, y = regression_data
    post = make("map")
    post.fit(x, y, steps=30)
    f = post.sample(5)(x)
    assert torch.equal(f, f[:1].expand_as(f))
    pred = post.predict(x, n_samples=4)
    assert torch.all(pred.epistemic_variance == 0) and torch.all(pred.variance > 0)


def test_sample_draws_members_uniformly_with_replacement(regression_data):
    x, y = regression_data
    post = make("ensemble", n_members=4)
    post.fit(x, y, steps=5)
    fs = post.sample(4000, generator=torch.Generator().manual_seed(0))
    hits = (fs.params.unsqueeze(1) == post.members.detach().unsqueeze(0)).all(-1)  # [n, M]
    assert torch.all(hits.sum(-1) == 1)  # every sample is exactly one member
    freq = hits.float().mean(0)
    assert torch.all((freq - 0.25).abs() < 0.03)
    index = hits.float().argmax(-1)
    noise = post.member_log_noise_std.detach().exp()[index] * post.y_scale
    assert torch.allclose(fs.noise_std, noise)  # each sample keeps its member's noise


@pytest.mark.parametrize("name", ["ensemble", "map", "fsvgd"])
def test_repeated_draws_evaluate_each_distinct_function_once(name, regression_data):
    """100 draws from a finite set keep the distinct functions and an index: evaluating them is
    the same as evaluating the 100 materialised weight vectors, and sub-samples compose."""
    x, y = regression_data
    post = make(name)
    post.fit(x, y, steps=5)
    fs = post.sample(100, generator=torch.Generator().manual_seed(1))
    m = {"ensemble": 5, "map": 1, "fsvgd": post.n_particles if name == "fsvgd" else 0}[name]
    assert len(fs) == 100 and fs.distinct_params.shape[0] == m and fs.params.shape == (100, post.spec.num_params)
    plain = ua.FunctionSample(fs.params, fs.spec, fs.x_loc, fs.x_scale, fs.y_loc, fs.y_scale, fs.noise_std)
    torch.testing.assert_close(fs(x), plain(x))
    torch.testing.assert_close(fs.features(x), plain.features(x))
    for index in (7, slice(10, 40), torch.tensor([3, 3, 99, 0])):
        torch.testing.assert_close(fs[index](x), plain[index](x))
        torch.testing.assert_close(fs[index].noise_std, plain[index].noise_std)
    pred = post.predict(x, n_samples=100, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(pred.mean, fs(x).mean(0))
    before = fs(x)
    post.fit(x, y, steps=3)  # the drawn functions are fixed: further training does not move them
    torch.testing.assert_close(fs(x), before)


def test_ensemble_fits_and_beats_its_initialisation(regression_data):
    x, y = regression_data
    post = make("ensemble", n_members=3)
    before = post.predict(x, n_samples=30).log_prob(y).mean()
    result = post.fit(x, y, steps=150, lr=1e-2)
    after = post.predict(x, n_samples=30).log_prob(y).mean()
    assert after > before and result.losses[-20:].mean() < result.losses[:20].mean()


def test_classification_members(regression_data):
    x, _ = regression_data
    labels = (x[:, 0] > 0).long()
    post = make("ensemble", likelihood="categorical", out_dim=2, n_members=3)
    post.fit(x, labels, steps=100, lr=1e-2)
    assert post.member_log_noise_std is None
    assert (post.predict(x, n_samples=30).probs.argmax(-1) == labels).float().mean() > 0.9


# ----------------------------------------------------------------- bootstrap
@pytest.mark.parametrize("scheme", ["poisson", "multinomial"])
def test_bootstrap_weights_survive_online_refits(scheme, regression_data):
    x, y = regression_data
    post = make("bootstrap", n_members=6, scheme=scheme)
    post.fit(x[:40], y[:40], steps=3)
    first = post.weights.clone()
    assert first.shape == (6, 40)
    post.fit(x, y, steps=3)  # the data grew: old rows keep their counts, new rows get fresh ones
    assert post.weights.shape == (6, 64) and torch.equal(post.weights[:, :40], first)
    post.fit(x, y, steps=3)  # same data: nothing is redrawn
    assert post.weights.shape == (6, 64) and torch.equal(post.weights[:, :40], first)
    assert not torch.equal(post.weights[0], post.weights[1])  # per-member resampling
    if scheme == "multinomial":  # each block is resampled to its own size
        assert torch.all(post.weights[:, :40].sum(1) == 40) and torch.all(post.weights[:, 40:].sum(1) == 24)


def test_poisson_counts_have_unit_mean():
    post = make("bootstrap", n_members=50)
    post.prepare_data(2000)
    w = post.weights
    assert w.shape == (50, 2000) and bool((w == w.round()).all()) and bool((w >= 0).all())
    assert abs(float(w.mean()) - 1.0) < 0.02 and abs(float(w.var()) - 1.0) < 0.05
    assert abs(float((w == 0).float().mean()) - math.exp(-1)) < 0.02


def test_bootstrap_rows_with_zero_weight_do_not_move_a_member(regression_data):
    x, y = regression_data
    post = make("bootstrap", n_members=2, use_prior=False)
    post.prepare_data(64)
    post.weights.fill_(1.0)
    post.weights[0, :32] = 0.0
    y_changed = y.clone()
    y_changed[:32] += 100.0
    grads = []
    for target in (y, y_changed):
        post.zero_grad()
        post.loss(full_batch(x, target), torch.Generator()).backward()
        grads.append(post.members.grad.clone())
    assert torch.allclose(grads[0][0], grads[1][0])  # member 0 never sees rows 0..31
    assert not torch.allclose(grads[0][1], grads[1][1])  # member 1 does


def test_bootstrap_weights_are_saved_and_keep_growing(regression_data, tmp_path):
    x, y = regression_data
    post = make("bootstrap", n_members=3)
    post.fit(x[:50], y[:50], steps=3)
    post.save(tmp_path / "b.pt")
    same = ua.load_posterior(tmp_path / "b.pt")
    assert torch.equal(same.weights, post.weights)
    same.fit(x, y, steps=3)
    assert same.weights.shape == (3, 64) and torch.equal(same.weights[:, :50], post.weights)


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize("name, options, error, match", [
    ("ensemble", {"n_members": 0}, ValueError, "n_members"),
    ("ensemble", {"n_members": 2.5}, ValueError, "n_members"),
    ("bootstrap", {"scheme": "jackknife"}, ValueError, "scheme"),
    ("ensemble", {"use_prior": "yes"}, TypeError, "use_prior"),
    ("map", {"n_members": 3}, TypeError, "map has exactly one member"),
])
def test_bad_options_are_named(name, options, error, match):
    with pytest.raises(error, match=match):
        make(name, **options)


def test_defaults():
    assert make("map").n_members == 1
    assert make("ensemble").n_members == 5 and make("bootstrap").n_members == 5
    assert make("bootstrap").scheme == "poisson"
