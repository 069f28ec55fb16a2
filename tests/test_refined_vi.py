"""refined-vi: members independent, keep-the-better rule, the bound on Bayesian linear regression."""
import numpy as np
import pytest
import torch

import uncertain_agents as ua


def blr_data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, 1, generator=g)
    x = torch.cat([z, z + 0.3 * torch.randn(n, 1, generator=g)], 1)  # correlated features
    y = x @ torch.tensor([[1.0], [-0.5]]) + 0.3 + 0.5 * torch.randn(n, 1, generator=g)
    return x, y


def make_blr(name, **kw):
    return ua.make_posterior(name, in_dim=2, out_dim=1, hidden=(), seed=0, prior_std=1.0, noise_std=0.5,
                             standardize=False, **kw)


def test_staircase_is_reported_per_member_and_step():
    x, y = blr_data()
    post = make_blr("refined-vi", refine_iters=20)
    result = post.fit(x, y, steps=500, batch_size=40, lr=1e-2)
    staircase = result.diagnostics["elbo_aux"]  # [M, K + 1], per data point
    assert staircase.shape == (10, 5) and np.isfinite(staircase).all()
    np.testing.assert_allclose(staircase[:, 0].mean(), result.diagnostics["elbo_init"], rtol=1e-6)


def test_members_are_independent():
    x, y = blr_data()
    post = make_blr("refined-vi", n_members=4)
    mean = post.member_mean.detach().clone().requires_grad_(True)
    log_std = torch.full_like(mean, -1.0)
    elbo = post.conditional_elbo(mean, log_std, torch.zeros_like(mean), post.prior_std.square() * 0.3,
                                 x, y, None, 40, generator=torch.Generator().manual_seed(0))
    (grad,) = torch.autograd.grad(elbo[1], mean)
    assert grad[1].abs().sum() > 0
    assert torch.equal(grad[[0, 2, 3]], torch.zeros_like(grad[[0, 2, 3]]))


RUINOUS_LR = 10.0  # large enough that every optimised member ends worse, small enough to stay finite


def test_keep_the_better_rule_survives_a_destructive_optimiser():
    x, y = blr_data()
    post = make_blr("refined-vi", refine_lr=RUINOUS_LR, refine_iters=5)
    result = post.fit(x, y, steps=500, batch_size=40, lr=1e-2)
    assert result.diagnostics["kept_initial"].all()
    assert torch.isfinite(post.member_mean).all()
    pred = post.predict(x, n_samples=50)
    assert torch.isfinite(pred.mean).all()


def test_refit_continues_vi_and_refines_afresh():
    x, y = blr_data()
    post = make_blr("refined-vi", refine_iters=5, n_members=3)
    first = post.fit(x, y, steps=50, batch_size=20)
    assert first.phase_steps == {"vi": 50, "refine": 20} and first.steps == 70
    vi_mean = post.mean.detach().clone()
    second = post.fit(x, y, steps=10, batch_size=20)
    assert second.phase_steps == {"vi": 10, "refine": 4 * 2}  # a short refit refines ≤ steps // K per step
    assert second.diagnostics["elbo_aux"].shape == (3, 5)
    assert not torch.equal(post.mean.detach(), vi_mean)  # phase "vi" trained on from its state
    assert bool(post.refined)


def test_bad_options():
    with pytest.raises(ValueError, match="variance_ratios"):
        make_blr("refined-vi", variance_ratios=(0.8, 0.3))
    with pytest.raises(ValueError, match="refine_iters"):
        make_blr("refined-vi", refine_iters=0)
    with pytest.raises(ValueError, match="n_members"):
        make_blr("refined-vi", n_members=0)


def exact_predictive(x, y, x_star, prior_var=1.0, noise_var=0.25):
    """Bayesian linear regression in closed form: predictive mean and epistemic variance."""
    phi = torch.cat([x, torch.ones(len(x), 1)], 1).double()
    phi_star = torch.cat([x_star, torch.ones(len(x_star), 1)], 1).double()
    cov = torch.linalg.inv(phi.T @ phi / noise_var + torch.eye(3, dtype=torch.float64) / prior_var)
    mean = cov @ phi.T @ y.double() / noise_var
    return (phi_star @ mean).squeeze(1), ((phi_star @ cov) * phi_star).sum(1)


def test_refinement_moves_the_predictive_towards_the_exact_posterior():
    """Correlated features make mean-field VI's predictive variance far too small along the
    anti-correlated direction; the refined mixture recovers part of it. (The refinement lr is
    raised to 1e-2 for this 40-row problem: the paper's 1e-3 moves the members too little in
    300 steps here.)"""
    x, y = blr_data()
    x_star = torch.linspace(-3, 3, 25).unsqueeze(1) * torch.tensor([[1.0, -1.0]])
    _, exact_var = exact_predictive(x, y, x_star)
    vi = make_blr("mfvi")
    vi.fit(x, y, steps=3000, batch_size=40, lr=1e-2)
    post = make_blr("refined-vi", refine_iters=300, refine_lr=1e-2)
    result = post.fit(x, y, steps=3000, batch_size=40, lr=1e-2)
    errors = {}
    for name, p in (("mfvi", vi), ("refined", post)):
        pred = p.predict(x_star, n_samples=20_000, generator=torch.Generator().manual_seed(1))
        errors[name] = float((pred.epistemic_variance[:, 0].double() - exact_var).abs().mean())
    assert errors["refined"] < 0.8 * errors["mfvi"]
    staircase = result.diagnostics["elbo_aux"].mean(0)  # mean over members, per data point
    assert staircase[-1] > staircase[0]


def exact_mean_field_elbo(post, x, y, noise_std=0.5, prior_std=1.0):
    """The ELBO per data point of a mean-field Gaussian over (W, b) of a linear model, by hand."""
    m, s2 = post.mean.detach().double(), torch.exp(2 * post.log_std.detach()).double()
    x, y = x.double(), y.double()
    f_mean = x @ m[:2] + m[2]
    f_var = x.square() @ s2[:2] + s2[2]
    loglik = (-0.5 * ((y[:, 0] - f_mean).square() + f_var) / noise_std**2
              - np.log(noise_std) - 0.5 * np.log(2 * np.pi)).sum()
    kl = 0.5 * (s2 / prior_std**2 + m.square() / prior_std**2 - 1 - torch.log(s2 / prior_std**2)).sum()
    return float((loglik - kl) / len(y))


def test_linear_gaussian_bounds_are_exact_and_rise_for_every_member():
    """No hidden layer and a fixed noise: every conditional ELBO is computed in closed form, so
    the keep-the-better rule acts on exact values and the staircase never falls for any member."""
    x, y = blr_data()
    post = make_blr("refined-vi", refine_iters=100, refine_lr=1e-2, n_members=50)
    assert post.exact_expectation
    result = post.fit(x, y, steps=300, batch_size=40, lr=1e-2)
    staircase = result.diagnostics["elbo_aux"]  # [M, K + 1]
    elbo_init = exact_mean_field_elbo(post, x, y)
    np.testing.assert_allclose(staircase[:, 0], elbo_init, rtol=1e-5)  # same value for every member
    assert (np.diff(staircase, axis=1) >= 0).all()
    assert (staircase[:, -1] >= elbo_init).all() and (staircase[:, -1] > elbo_init + 1e-4).mean() > 0.5


def test_the_staircase_has_the_expectation_of_the_single_path_bound():
    """With every optimised member worse (a ruinous lr), each member's bound stays at ELBO_init,
    and the paper's single-path estimate ``L_K − Σ log q(a_k)/p(a_k)`` must average to it over
    many chains: the closed-form initialisation leaves the bound unchanged in expectation."""
    x, y = blr_data()
    post = make_blr("refined-vi", refine_lr=RUINOUS_LR, refine_iters=3, n_members=4000)
    result = post.fit(x, y, steps=300, batch_size=40, lr=1e-2)
    assert result.diagnostics["kept_initial"].all()
    staircase, path = result.diagnostics["elbo_aux"], result.diagnostics["elbo_aux_path"]
    np.testing.assert_allclose(staircase, staircase[0, 0], rtol=1e-6)
    for k in range(1, 5):
        se = path[:, k].std() / np.sqrt(len(path))
        assert abs(path[:, k].mean() - staircase[0, 0]) < 4 * se, k
    # and with real optimisation the two estimates agree in the mean as well
    post = make_blr("refined-vi", refine_lr=1e-2, refine_iters=50, n_members=4000)
    result = post.fit(x, y, steps=300, batch_size=40, lr=1e-2)
    staircase, path = result.diagnostics["elbo_aux"], result.diagnostics["elbo_aux_path"]
    diff = path[:, -1] - staircase[:, -1]
    assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(len(diff))
    assert staircase[:, -1].mean() > staircase[:, 0].mean() + 4 * diff.std() / np.sqrt(len(diff))


def test_exact_expectation_matches_monte_carlo():
    x, y = blr_data()
    post = make_blr("refined-vi", n_members=3)
    g = torch.Generator().manual_seed(3)
    mean, log_std = torch.randn(3, 3, generator=g), torch.randn(3, 3, generator=g) - 1
    offset, r = torch.zeros(3, 3), post.prior_std.square() * 0.3
    exact = post.conditional_elbo(mean, log_std, offset, r, x, y, None, 40)
    eps = torch.randn(20_000, 3, 3, generator=g)
    w = (mean + log_std.exp() * eps).reshape(-1, 3)
    loglik = post.likelihood.log_prob(post.spec.forward(w, x), y, None,
                                      log_noise_std=post.log_noise_std_train()).view(20_000, 3, -1).mean(-1)
    kl = ua.posteriors.refinement.gaussian_kl(mean, torch.exp(2 * log_std), offset, r).sum(-1)
    mc, se = loglik.mean(0) - kl / 40, loglik.std(0) / 20_000**0.5
    assert ((exact - mc).abs() < 4 * se).all()


def test_draws_visit_members_evenly_and_each_is_uniform():
    x, y = blr_data()
    post = make_blr("refined-vi", refine_iters=2, n_members=5)
    post.fit(x, y, steps=20, batch_size=20)
    with torch.no_grad():  # members far apart and sharp, so a draw tells its member
        post.member_mean.copy_(10.0 * torch.arange(5.0).unsqueeze(1).expand(5, 3))
        post.member_log_std.fill_(-10.0)
    member_of = lambda params: (params[:, 0] / 10.0).round().long()  # noqa: E731
    firsts = {int(member_of(post.sample(1, generator=torch.Generator().manual_seed(s)).params)[0])
              for s in range(100)}
    assert firsts == set(range(5))  # a single draw may come from any member
    draws = post.sample(100, generator=torch.Generator().manual_seed(1)).params
    assert torch.bincount(member_of(draws), minlength=5).tolist() == [20] * 5


def test_refine_noise_gives_each_member_its_noise_and_keeps_the_bound():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(80, 2, generator=g)
    y = torch.sin(2 * x[:, :1]) + 0.2 * torch.randn(80, 1, generator=g)
    post = ua.make_posterior("refined-vi", in_dim=2, out_dim=1, hidden=(16,), seed=0, refine_noise=True,
                             refine_iters=30)
    assert post.refines_noise
    result = post.fit(x, y, steps=300, batch_size=40, lr=1e-2)
    staircase = result.diagnostics["elbo_aux"]
    assert (np.diff(staircase, axis=1) >= 0).all()                 # keep-the-better, noise included
    vi_noise = post.likelihood.log_noise_std.detach()
    assert not torch.allclose(post.member_log_noise, vi_noise.expand_as(post.member_log_noise))
    fs = post.sample(20, generator=torch.Generator().manual_seed(1))
    members_noise = set(np.round(post.member_log_noise.detach().exp().mul(post.y_scale).flatten().numpy(), 6))
    assert set(np.round(fs.noise_std.flatten().numpy(), 6)) <= members_noise
    # a fixed noise has nothing to refine
    fixed = make_blr("refined-vi", refine_noise=True)
    assert not fixed.refines_noise
    with pytest.raises(TypeError, match="refine_noise"):
        make_blr("refined-vi", refine_noise="yes")
