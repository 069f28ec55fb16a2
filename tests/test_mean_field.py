"""mfvi and bb-alpha: closed-form checks on Bayesian linear regression and objective limits."""
import math

import pytest
import torch

import uncertain_agents as ua
from uncertain_agents.objectives import bb_alpha_energy, negative_elbo


def blr_problem(n=80, noise=0.5, prior=1.0):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 2, generator=g)
    y = x @ torch.tensor([[1.5], [-0.7]]) + 0.3 + noise * torch.randn(n, 1, generator=g)
    feats = torch.cat([x, torch.ones(n, 1)], 1).double()  # flat layout: W (2x1) then bias
    precision = feats.T @ feats / noise**2 + torch.eye(3, dtype=torch.double) / prior**2
    mean = torch.linalg.solve(precision, feats.T @ y.double() / noise**2).squeeze(-1)
    return x, y, mean, precision


def test_mfvi_recovers_bayesian_linear_regression_posterior():
    x, y, exact_mean, precision = blr_problem()
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(), noise_std=0.5, prior_std=1.0,
                             standardize=False, train_samples=64, init_std=1.0, seed=0)
    post.fit(x, y, steps=2500, batch_size=80, lr=3e-2)
    post.fit(x, y, steps=1500, batch_size=80, lr=3e-3)  # warm-started refinement
    mf_var = 1.0 / torch.diagonal(precision)
    assert torch.allclose(post.mean.double(), exact_mean, atol=0.01)
    assert torch.allclose(post.std.double().square(), mf_var, rtol=0.05)


def test_bb_alpha_single_sample_equals_one_sample_negative_elbo():
    g = torch.Generator().manual_seed(0)
    loglik = torch.randn(1, 16, generator=g) * 3 - 2
    log_ratio = torch.randn(1, generator=g) * 50
    n = 300
    elbo = negative_elbo(loglik, log_ratio[0], n)
    for alpha in (-1.0, 1e-3, 0.5, 1.0, 2.0):
        assert torch.allclose(bb_alpha_energy(loglik, log_ratio, alpha, n), elbo, atol=1e-5)


def test_bb_alpha_tends_to_negative_elbo_and_is_nonincreasing_in_alpha():
    g = torch.Generator().manual_seed(2)
    loglik = torch.randn(10, 32, generator=g) * 2 - 1
    log_ratio = torch.randn(10, generator=g) * 20
    n = 500
    elbo = negative_elbo(loglik, log_ratio.mean(), n)
    assert torch.allclose(bb_alpha_energy(loglik, log_ratio, 0.0, n), elbo, atol=1e-6)
    gaps = [float((bb_alpha_energy(loglik, log_ratio, a, n) - elbo).abs()) for a in (1e-1, 1e-2, 1e-3, 1e-4)]
    assert gaps[0] > gaps[1] > gaps[2] > gaps[3] and gaps[3] < 1e-3
    # the gap shrinks linearly in α, without float32 round-off blowing up at small α
    assert 5 < gaps[2] / gaps[3] < 20
    alphas = [-2.0, -1.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 1.0, 2.0]
    energies = torch.stack([bb_alpha_energy(loglik, log_ratio, a, n) for a in alphas])
    assert bool((energies[1:] <= energies[:-1] + 1e-6).all())


def test_bb_alpha_energy_matches_textbook_form_in_float64():
    """The cancellation-free energy equals the paper's formula with explicit sites and normalisers."""
    torch.manual_seed(0)
    d, k, b, n, alpha = 5, 4, 3, 50, 0.5
    m = torch.randn(d, dtype=torch.double)
    v = torch.rand(d, dtype=torch.double) * 0.5 + 0.1
    v0 = torch.full((d,), 2.0, dtype=torch.double)
    w = m + v.sqrt() * torch.randn(k, d, dtype=torch.double)
    loglik = torch.randn(k, b, dtype=torch.double)
    log_z_q = (0.5 * m.square() / v + 0.5 * torch.log(2 * math.pi * v)).sum()
    log_z_0 = (0.5 * torch.log(2 * math.pi * v0)).sum()
    log_f = (w * (m / v) - 0.5 * w.square() * (1 / v - 1 / v0)).sum(-1) / n
    inner = torch.logsumexp(alpha * (loglik - log_f.unsqueeze(-1)), 0) - math.log(k)
    textbook = (log_z_0 - log_z_q - n / (alpha * b) * inner.sum()) / n
    log_q = (-0.5 * (w - m).square() / v - 0.5 * torch.log(2 * math.pi * v)).sum(-1)
    log_p = (-0.5 * w.square() / v0 - 0.5 * torch.log(2 * math.pi * v0)).sum(-1)
    ours = bb_alpha_energy(loglik, log_q - log_p, alpha, n)
    assert torch.allclose(ours, textbook, atol=1e-10)


def test_bb_alpha_energy_is_stable_for_tiny_variances():
    post = ua.make_posterior("bb-alpha", in_dim=3, out_dim=1, hidden=(8,), seed=0, init_std=1e-4)
    with torch.no_grad():
        post.mean.mul_(1e3)
    x = torch.randn(32, 3, generator=torch.Generator().manual_seed(0))
    post.fit(x, x[:, :1], steps=3, batch_size=32)  # must not raise TrainingDivergedError
    _, log_ratio = post.draw(4, torch.Generator().manual_seed(0))
    assert bool(torch.isfinite(log_ratio).all())


@pytest.mark.parametrize("name", ["mfvi", "bb-alpha"])
def test_predictions_are_in_original_units(name, regression_data):
    """Targets 1000 + 50·y train the same standardised network as y, so the predictive is mapped
    back exactly: mean 1000 + 50·mean, sd 50·sd, noise variance 50²·noise variance (a sd scaled by
    50 instead of the variance by 50², or a forgotten shift, would show here)."""
    x, y = regression_data
    y_big = 1000.0 + 50.0 * y
    preds = []
    for target in (y, y_big):
        post = ua.make_posterior(name, in_dim=3, out_dim=1, hidden=(16,), seed=0)
        post.fit(x, target, steps=300, batch_size=32, lr=1e-2)
        preds.append(post.predict(x, n_samples=50, generator=torch.Generator().manual_seed(2)))
    small, big = preds
    torch.testing.assert_close(big.mean, 1000.0 + 50.0 * small.mean, rtol=0, atol=1e-2)
    torch.testing.assert_close(big.stddev, 50.0 * small.stddev, rtol=1e-4, atol=0)
    torch.testing.assert_close(big.aleatoric_variance, 2500.0 * small.aleatoric_variance, rtol=1e-4, atol=0)
    assert float(big.stddev.mean()) > 5.0  # noise reported in original units, not standardised


def test_fixed_noise_is_in_original_units(regression_data):
    x, y = regression_data
    post = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(8,), noise_std=2.0, seed=0)
    post.fit(x, 10 * y, steps=2, batch_size=32)
    assert torch.allclose(post.sample(3).noise_std, torch.full((3, 1), 2.0))
    assert torch.allclose(post.predict(x, n_samples=4).aleatoric_variance, torch.full((64, 1), 4.0))


def test_alpha_must_be_finite():
    with pytest.raises(ValueError, match="alpha"):
        ua.make_posterior("bb-alpha", in_dim=2, out_dim=1, alpha=float("nan"))


# ------------------------------------------------------------ empirical-Bayes prior
def test_learned_prior_scale_reaches_the_closed_form_empirical_bayes_optimum():
    """For a fixed q, KL(q ‖ N(0, s_l² σ_l²)) is minimised per layer at
    s_l² = mean over the layer of (μ² + σ²) / σ_l²; learn_prior finds it by gradient."""
    post = ua.make_posterior("mfvi", in_dim=3, out_dim=2, hidden=(8,), seed=0, learn_prior=True)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        post.mean.copy_(torch.randn(post.mean.shape, generator=g) * 0.7)
        post.log_std.copy_(torch.randn(post.log_std.shape, generator=g) * 0.3 - 1.0)
    opt = torch.optim.Adam([post.log_prior_scale], lr=0.05)
    for _ in range(1500):
        opt.zero_grad()
        post.kl_divergence().backward()
        opt.step()
    second = (post.mean.detach().square() + torch.exp(2 * post.log_std.detach())) / post.prior_std.square()
    for layer in range(2):
        rows = post.layer_of_param == layer
        expected = 0.5 * math.log(second[rows].mean().item())
        assert post.log_prior_scale[layer].item() == pytest.approx(expected, abs=1e-3)


def test_fixed_prior_kl_is_unchanged_and_learned_prior_trains_and_saves(tmp_path):
    fixed = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(8,), seed=0)
    ratio = fixed.log_std - fixed.prior_std.log()
    closed = 0.5 * (torch.exp(2 * ratio) + (fixed.mean / fixed.prior_std).square() - 1 - 2 * ratio).sum()
    assert torch.allclose(fixed.kl_divergence(), closed)
    assert "log_prior_scale" not in dict(fixed.named_parameters())
    learned = ua.make_posterior("refined-vi", in_dim=3, out_dim=1, hidden=(8,), seed=0, learn_prior=True,
                                refine_iters=5)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=g)
    y = x[:, :1] * 2 + 0.1 * torch.randn(64, 1, generator=g)
    learned.fit(x, y, steps=200, batch_size=32)
    assert learned.log_prior_scale.abs().max() > 1e-3                 # the scale moved
    learned.save(tmp_path / "p.pt")
    again = ua.load_posterior(tmp_path / "p.pt")
    assert torch.equal(again.log_prior_scale, learned.log_prior_scale)
    with pytest.raises(TypeError, match="learn_prior"):
        ua.make_posterior("mfvi", in_dim=3, out_dim=1, learn_prior="yes")


# ------------------------------------------------------------ local reparameterisation layer
def test_local_reparam_layer_gradients_match_autograd_of_the_composed_ops():
    from uncertain_agents.posteriors.local_reparam import local_reparam_linear
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(9, 5, generator=g, dtype=torch.float64), torch.randn(5, 4, generator=g, dtype=torch.float64),
            torch.randn(4, generator=g, dtype=torch.float64), torch.rand(5, 4, generator=g, dtype=torch.float64) + 0.1,
            torch.rand(4, generator=g, dtype=torch.float64) + 0.1]
    args = [a.requires_grad_() for a in args]
    eps = torch.randn(9, 4, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda *a: local_reparam_linear(*a, eps), tuple(args))
    h, wm, bm, wv, bv = args
    composed = torch.addmm(bm, h, wm) + torch.addmm(bv, h.square(), wv).sqrt() * eps
    ours = local_reparam_linear(h, wm, bm, wv, bv, eps)
    assert torch.allclose(ours, composed, atol=1e-12)
    weights = torch.randn(9, 4, generator=g, dtype=torch.float64)
    grads_ref = torch.autograd.grad((composed * weights).sum(), args)
    grads = torch.autograd.grad((ours * weights).sum(), args)
    for a, b in zip(grads, grads_ref):
        assert torch.allclose(a, b, atol=1e-10)
    # the input needs no gradient: none is computed for it
    grads = torch.autograd.grad(local_reparam_linear(h.detach(), wm, bm, wv, bv, eps).sum(), [wm, bv])
    assert all(torch.isfinite(t).all() for t in grads)
