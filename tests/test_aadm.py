"""AADM / AVB: limits of the objective, the adaptive-contrast KL, the two optimisers."""
import math

import numpy as np
import pytest
import torch

import uncertain_agents as ua
from uncertain_agents.posteriors import Batch
from uncertain_agents.posteriors.implicit import adaptive_contrast


def make(name="aadm", in_dim=2, hidden=(8,), **kw):
    return ua.make_posterior(name, in_dim=in_dim, out_dim=1, hidden=hidden, seed=0, **kw)


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 2, generator=g)
    y = torch.sin(x[:, :1]) + 0.1 * torch.randn(16, 1, generator=g)
    return Batch(x, y, None, torch.arange(16), 200, x)


def g(seed=1):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("mode", ["shared", "per_point"])
def test_aadm_tends_to_avb_as_alpha_goes_to_zero(batch, mode):
    avb = make("avb", sample_mode=mode)
    exact = make("aadm", alpha=0.0, sample_mode=mode)
    assert torch.equal(exact.loss(batch, g()), avb.loss(batch, g()))  # the α = 0 branch is AVB's
    gaps = [float((make("aadm", alpha=a, sample_mode=mode).loss(batch, g()) - avb.loss(batch, g())).abs().detach())
            for a in (1e-2, 1e-4, 1e-6)]
    assert gaps[0] > gaps[1] > gaps[2] - 1e-7 and gaps[2] < 1e-5


def test_avb_has_no_alpha_option():
    with pytest.raises(TypeError, match="alpha"):
        make("avb", alpha=0.5)


@pytest.mark.parametrize("mode", ["shared", "per_point"])
def test_one_sample_data_term_is_the_same_for_every_alpha(batch, mode):
    terms = [make("aadm", alpha=a, train_samples=1, sample_mode=mode).objective_terms(batch, g())[0]
             for a in (0.0, 1e-4, 0.5, 1.0, 2.0, -1.0)]
    for t in terms[1:]:
        assert torch.allclose(t, terms[0], rtol=1e-6, atol=1e-6)


def test_alpha_one_data_term_is_minus_log_mean_likelihood(batch):
    post = make("aadm", alpha=1.0)
    data, _ = post.objective_terms(batch, g())
    weights = post.q((post.train_samples,), g())
    loglik = post.data_loglik(batch, weights).double()
    expected = -(torch.logsumexp(loglik, 0) - math.log(post.train_samples)).mean()
    assert torch.allclose(data.double(), expected, rtol=1e-5)


def test_per_point_samples_give_every_point_its_own_weights(batch):
    post = make("aadm", sample_mode="per_point", train_samples=3)
    weights = post.q((16, 3), g())  # [B, K, |W|]
    loglik = post.data_loglik(batch, weights)  # [K, B]
    row = 5
    one = Batch(batch.x[row:row + 1], batch.y[row:row + 1], None, torch.arange(1), 200)
    direct = post.data_loglik(one, weights[row])  # shared weights on that single point: [K, 1]
    assert torch.allclose(loglik[:, row], direct[:, 0], atol=1e-5)


def test_linear_generator_gives_the_closed_form_ratio_and_kl():
    """q Gaussian (linear generator): a converged discriminator recovers log q − log r, and
    KL̂ matches the analytic KL(q‖p)."""
    torch.manual_seed(0)
    post = ua.make_posterior("avb", in_dim=1, out_dim=1, hidden=(2,), seed=0, noise_dim=4,
                             generator_hidden=(), learn_prior=False, prior_std=1.0)
    assert post.n_weights == 4
    A = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.9, 0.45, 0.0, 0.0], [0.0, 0.0, 0.7, 0.0], [0.0, 0.0, -0.6, 0.5]])
    with torch.no_grad():
        post.q.net[0].weight.copy_(A)
        post.q.net[0].bias.copy_(torch.tensor([0.5, -0.3, 0.2, 0.0]))
        post.q.noise_mean.zero_()
        post.q.noise_log_std.zero_()
    mean, cov = post.q.net[0].bias.detach(), A @ A.T
    q = torch.distributions.MultivariateNormal(mean, cov)
    r = torch.distributions.Normal(mean, cov.diagonal().sqrt())
    opt = torch.optim.Adam(post.discriminator.parameters(), lr=3e-3)
    gen = g(2)
    for _ in range(1500):
        opt.zero_grad()
        post.discriminator_loss(gen, n_samples=512).backward()
        opt.step()
    with torch.no_grad():
        w = post.q(20_000, gen)
        truth = q.log_prob(w) - r.log_prob(w).sum(-1)
        t = post.discriminator(adaptive_contrast(w).standardized)
        kl_hat, _ = post.kl_estimate(w)
    exact_qr = 0.5 * (cov.diagonal().log().sum() - torch.logdet(cov))  # KL(q‖r) = E_q[log q − log r]
    assert float(exact_qr) > 1.0  # a strongly correlated q: the contrast has work to do
    assert abs(float(t.mean() - truth.mean())) < 0.1
    assert float((t - truth).abs().median()) < 0.25
    assert np.corrcoef(t.numpy(), truth.numpy())[0, 1] > 0.95
    p = torch.distributions.MultivariateNormal(torch.zeros(4), torch.eye(4))
    exact_kl = float(torch.distributions.kl_divergence(q, p))
    assert abs(float(kl_hat) - exact_kl) < 0.1


def test_each_optimizer_moves_only_its_own_parameters(batch):
    post = make("aadm")
    groups = post.optimizer_groups()
    assert set(groups) == {"generator", "discriminator"}
    disc = {id(p) for p in groups["discriminator"].params}
    assert disc == {id(p) for p in post.discriminator.parameters()}
    gen_ids = {id(p) for p in groups["generator"].params}
    assert {id(post.biases), id(post.log_prior_scale), id(post.likelihood.log_noise_std),
            id(post.q.noise_mean)} <= gen_ids
    optimizers = {k: torch.optim.Adam(v.params, lr=1e-2) for k, v in groups.items()}
    ctx = ua.posteriors.TrainingContext(optimizers, groups, g(), 1e-2, steps=10, steps_before=0)

    def snapshot():
        return {name: p.detach().clone() for name, p in post.named_parameters()}

    def moved(before):
        return {name for name, p in post.named_parameters() if not torch.equal(p.detach(), before[name])}

    before = snapshot()
    ctx.minimize(post.discriminator_loss(g()), "discriminator")
    assert moved(before) and all(name.startswith("discriminator.") for name in moved(before))
    before = snapshot()
    ctx.minimize(post.loss(batch, g()), "generator")  # depends on T through KL̂, yet T stays
    assert moved(before) and not any(name.startswith("discriminator.") for name in moved(before))
    before = snapshot()
    named = post.training_step(batch, ctx)
    assert set(named) == {"loss", "discriminator", "kl", "beta"}
    assert len(moved(before)) == len(before)


def test_warmup_spans_the_first_fit_only():
    x = torch.randn(64, 2, generator=g(3))
    y = x[:, :1] ** 2
    post = make("aadm", warmup=0.5)
    first = post.fit(x, y, steps=20, batch_size=8)
    beta = first.traces["beta"]
    np.testing.assert_allclose(beta[:10], np.arange(10) / 10, atol=1e-6)
    assert (beta[10:] == 1.0).all()
    again = post.fit(x, y, steps=6, batch_size=8)
    assert (again.traces["beta"] == 1.0).all()
    assert set(first.traces) == {"loss", "discriminator", "kl", "beta"}


def test_classification_predict_save_and_load(tmp_path):
    x = torch.randn(80, 3, generator=g(4))
    labels = (x[:, 0] > 0).long() + (x[:, 1] > 1).long()
    post = ua.make_posterior("aadm", in_dim=3, out_dim=3, likelihood="categorical", seed=0,
                             generator_hidden=[16], discriminator_hidden=[16])
    post.fit(x, labels, steps=30, batch_size=16)
    pred = post.predict(x, n_samples=7, generator=g(5))
    assert pred.probs.shape == (80, 3)
    post.save(tmp_path / "aadm.pt")
    back = ua.load_posterior(tmp_path / "aadm.pt")
    again = back.predict(x, n_samples=7, generator=g(5))
    assert torch.allclose(pred.probs, again.probs)
    assert back.config["generator_hidden"] == [16]


def test_bad_options_name_the_argument():
    with pytest.raises(ValueError, match="sample_mode"):
        make("aadm", sample_mode="every")
    with pytest.raises(ValueError, match="warmup"):
        make("aadm", warmup=1.5)
    with pytest.raises(ValueError, match="generator_hidden"):
        make("aadm", generator_hidden=(0,))
    with pytest.raises(ValueError, match="alpha"):
        make("aadm", alpha=float("nan"))


def test_single_sample_single_point_still_trains():
    x, y = torch.randn(1, 2, generator=g(6)), torch.randn(1, 1, generator=g(7))
    for mode in ("shared", "per_point"):
        post = make("aadm", train_samples=1, sample_mode=mode)
        before = {name: p.detach().clone() for name, p in post.named_parameters()}
        result = post.fit(x, y, steps=3, batch_size=1)
        for key in ("loss", "discriminator", "kl", "beta"):
            assert result.traces[key].shape == (3,) and np.isfinite(result.traces[key]).all(), (mode, key)
        moved = {name for name, p in post.named_parameters() if not torch.equal(p.detach(), before[name])}
        assert any(n.startswith("q.") for n in moved) and any(n.startswith("discriminator.") for n in moved)
        assert int(post.steps_trained) == 3


def test_noise_floor_holds_a_learned_noise_in_original_units_and_lets_it_rise_again():
    """Exact-zero targets drive a learned noise std towards 0; the floor (original units of y)
    holds it at the floor during training and sampling, and data that need more noise raise it."""
    torch.manual_seed(0)
    x, zeros = torch.randn(64, 2), torch.zeros(64, 1)
    free = make("avb", standardize=False)
    free.fit(x, zeros, steps=300, lr=1e-2)
    floor = 0.3
    held = make("avb", standardize=False, noise_floor=floor)
    held.set_units(x_loc=0.0, x_scale=1.0, y_loc=0.0, y_scale=2.0)      # floor is in original units
    held.fit(x, zeros, steps=300, lr=1e-2)
    assert float(free.likelihood.noise_std.detach()) < 0.1                      # without a floor it shrinks
    assert float(held.log_noise_std_train().detach().exp() * 2.0) == pytest.approx(floor, rel=1e-5)
    assert float(held.sample(3, generator=g()).noise_std.max()) == pytest.approx(floor, rel=1e-5)
    held.fit(x, 3.0 * torch.randn(64, 1), steps=300, lr=1e-2)          # noisy targets: the noise rises
    assert float(held.log_noise_std_train().detach().exp() * 2.0) > 2 * floor
    fixed = make("avb", noise_std=0.05, noise_floor=floor)              # a fixed noise is not floored
    fixed.fit(x, zeros, steps=2)
    assert float(fixed.log_noise_std_train().exp().item() * fixed.y_scale.item()) == pytest.approx(0.05)


def test_noise_floor_is_a_bandit_default_of_aadm_and_avb(tmp_path):
    from uncertain_agents.agents import ThompsonSampling

    for name in ("aadm", "avb"):
        post = ua.make_posterior(name, in_dim=2, out_dim=3, hidden=(8,), seed=0)
        assert post.noise_floor is None                                  # regression: no floor
        ThompsonSampling(post, 3, seed=0)
        assert post.noise_floor == 0.1 and post.config["noise_floor"] == 0.1
        post.save(tmp_path / f"{name}.pt")
        assert ua.load_posterior(tmp_path / f"{name}.pt").noise_floor == 0.1
        mine = ua.make_posterior(name, in_dim=2, out_dim=3, hidden=(8,), seed=0, noise_floor=0.2)
        ThompsonSampling(mine, 3, seed=0)
        assert mine.noise_floor == 0.2
        off = ua.make_posterior(name, in_dim=2, out_dim=3, hidden=(8,), seed=0, noise_floor=None)
        ThompsonSampling(off, 3, seed=0)                                 # an explicit None turns it off
        assert off.noise_floor is None


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), "0.1", True])
def test_noise_floor_rejects_bad_values(bad):
    with pytest.raises((ValueError, TypeError), match="noise_floor"):
        make("avb", noise_floor=bad)
