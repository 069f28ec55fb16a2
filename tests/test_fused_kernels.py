"""The hand-fused hot paths give the same numbers as the composed PyTorch they replace.

Each fusion only removes bookkeeping (optimiser wrappers, autograd nodes, elementwise
passes); the arithmetic is kept in the same order, so seeded runs stay bit-for-bit what they
were (committed results keep reproducing at later commits)."""
from __future__ import annotations

import copy

import pytest
import torch

from uncertain_agents.posteriors.fused_adam import DirectFusedAdam
from uncertain_agents.posteriors.optimizers import make_adam


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g)) for shape in ((50, 7), (7,), ())]


def _run(opt_factory, steps: int = 12, clear_at: int | None = None) -> list[torch.Tensor]:
    params = _params(0)
    opt = opt_factory(params)
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
        if step == clear_at:
            opt.state.clear()
    return [p.detach().clone() for p in params]


@pytest.mark.parametrize("clear_at", [None, 4])
def test_direct_fused_adam_is_bit_identical_to_torch_fused_adam(clear_at):
    stock = _run(lambda ps: torch.optim.Adam(ps, lr=3e-2, fused=True), clear_at=clear_at)
    direct = _run(lambda ps: DirectFusedAdam(ps, lr=3e-2), clear_at=clear_at)
    for a, b in zip(stock, direct):
        assert torch.equal(a, b)


def test_direct_fused_adam_state_dict_round_trips_into_the_stock_optimizer():
    params = _params(0)
    opt = DirectFusedAdam(params, lr=1e-2)
    for _ in range(3):
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
    state = copy.deepcopy(opt.state_dict())  # a copy: load_state_dict would otherwise hold these very tensors
    stock = torch.optim.Adam(_params(0), lr=1e-2, fused=True)
    stock.load_state_dict(state)
    assert float(stock.state_dict()["state"][0]["step"]) == 3.0
    # the stock optimiser carries on from the loaded moments exactly as the direct one does
    stock_params = stock.param_groups[0]["params"]
    for p, q in zip(stock_params, params):
        with torch.no_grad():
            p.copy_(q)
    for ps, o in ((stock_params, stock), (params, opt)):
        for p in ps:
            p.grad = torch.ones_like(p)
        o.step()
    assert all(torch.equal(p, q) for p, q in zip(stock_params, params))
    assert torch.equal(stock.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_direct_fused_adam_falls_back_where_the_direct_call_does_not_apply():
    # a parameter without a gradient and a changed learning rate: the stock step handles the first
    params = _params(0)
    opt = DirectFusedAdam(params, lr=1e-2)
    params[0].grad = torch.ones_like(params[0])
    opt.step()
    assert len(opt.state) == 1 and params[1].grad is None
    before = params[1].detach().clone()
    opt.param_groups[0]["lr"] = 0.5
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    assert not torch.equal(before, params[1])
    assert float(opt.state[params[0]]["step"]) == 2.0


def test_direct_fused_adam_skips_a_parameter_that_never_has_a_gradient_as_the_stock_step_does():
    # a point estimate's unused likelihood noise: its None gradient must not push every step
    # onto the stock path (which cannot be captured in a CUDA graph)
    def run(factory):
        params = _params(0)
        opt = factory(params)
        g = torch.Generator().manual_seed(1)
        direct_steps = 0
        for _ in range(6):
            for p in params[:2]:
                p.grad = torch.randn(p.shape, generator=g)
            if isinstance(opt, DirectFusedAdam):
                direct_steps += opt._direct_lists() is not None
            opt.step()
        return params, direct_steps, opt

    stock, _, _ = run(lambda ps: torch.optim.Adam(ps, lr=3e-2, fused=True))
    direct, direct_steps, opt = run(lambda ps: DirectFusedAdam(ps, lr=3e-2))
    for a, b in zip(stock, direct):
        assert torch.equal(a, b)
    assert direct_steps == 5  # all but the first step (which creates the state)
    assert direct[2] not in opt.state and float(opt.state[direct[0]]["step"]) == 6.0


def test_make_adam_uses_the_direct_fused_optimizer_for_float_parameters():
    assert isinstance(make_adam(_params(0), lr=1e-3), DirectFusedAdam)


def _mean_field(learn_prior: bool = False):
    from uncertain_agents import make_posterior

    post = make_posterior("mfvi", in_dim=5, out_dim=2, hidden=(8,), seed=3, learn_prior=learn_prior)
    with torch.no_grad():  # a posterior away from its initial state
        post.mean.add_(0.3 * torch.randn(post.mean.shape, generator=torch.Generator().manual_seed(4)))
        post.log_std.add_(0.5 * torch.rand(post.log_std.shape, generator=torch.Generator().manual_seed(5)))
    return post


def test_fused_variances_and_kl_match_the_composed_ops_bit_for_bit():
    post = _mean_field()
    g_var = torch.randn(post.mean.shape, generator=torch.Generator().manual_seed(6))
    params = [post.mean, post.log_std]

    variances, kl = post.variances_and_kl()
    fused = torch.autograd.grad((variances * g_var).sum() + kl / 37.0, params)
    composed_var, composed_kl = torch.exp(2.0 * post.log_std), post.kl_divergence()
    composed = torch.autograd.grad((composed_var * g_var).sum() + composed_kl / 37.0, params)

    assert torch.equal(variances, composed_var) and torch.equal(kl, composed_kl)
    for a, b in zip(fused, composed):
        assert torch.equal(a, b)
    # and each output alone (the other's gradient is None)
    for pick in (0, 1):
        out = post.variances_and_kl()[pick]
        ref = (torch.exp(2.0 * post.log_std), post.kl_divergence())[pick]
        got = torch.autograd.grad(out.sum(), params, allow_unused=True)
        want = torch.autograd.grad(ref.sum(), params, allow_unused=True)
        for a, b in zip(got, want):
            assert torch.equal(a if a is not None else torch.zeros_like(b),
                               b if b is not None else torch.zeros_like(a))


def test_fused_variances_and_kl_gradcheck_in_double_precision():
    from uncertain_agents.posteriors.mean_field import _VariancesAndKL

    g = torch.Generator().manual_seed(7)
    mean = torch.randn(6, generator=g, dtype=torch.float64, requires_grad=True)
    log_std = (0.3 * torch.randn(6, generator=g, dtype=torch.float64) - 1).requires_grad_()
    prior_std = torch.rand(6, generator=g, dtype=torch.float64) + 0.5
    assert torch.autograd.gradcheck(lambda m, s: _VariancesAndKL.apply(m, s, prior_std), (mean, log_std))


def test_a_learned_prior_scale_keeps_the_composed_kl_and_its_gradient():
    post = _mean_field(learn_prior=True)
    _, kl = post.variances_and_kl()
    grad = torch.autograd.grad(kl, post.log_prior_scale)[0]
    assert torch.equal(kl, post.kl_divergence()) and bool((grad != 0).all())


def test_keep_freed_memory_respects_the_opt_out_and_is_applied_by_a_cpu_fit(monkeypatch):
    from uncertain_agents import allocator, make_posterior

    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.setenv(allocator.ENV_VAR, "0")
    assert allocator.keep_freed_memory() is False and not allocator.freed_memory_kept()
    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.delenv(allocator.ENV_VAR)
    post = make_posterior("map", in_dim=2, out_dim=1, hidden=(4,), seed=0)
    post.fit(torch.randn(16, 2), torch.randn(16, 1), steps=2, batch_size=8)
    assert allocator.freed_memory_kept() == (allocator._glibc() is not None)
    assert allocator.keep_freed_memory() == allocator.freed_memory_kept()  # idempotent


def _composed_draw(mean, log_std, eps, prior_std):
    """``MeanFieldGaussian.draw``'s arithmetic as plain autograd ops (the reference)."""
    w = mean + log_std.exp() * eps
    log_q = -(log_std + 0.5 * eps.square()).sum(-1)
    log_prior = prior_std.log()
    log_p = -(log_prior + 0.5 * (w * torch.exp(-log_prior)).square()).sum(-1)
    return w, log_q - log_p


def test_fused_draw_matches_the_composed_ops_bit_for_bit_inside_the_bb_alpha_loss(monkeypatch):
    import uncertain_agents.posteriors.mean_field as mean_field
    from uncertain_agents import make_posterior
    from uncertain_agents.posteriors.base import Batch

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(200, 6, generator=g), torch.randn(200, 2, generator=g)
    post = make_posterior("bb-alpha", in_dim=6, out_dim=2, hidden=(16, 16), seed=1)
    post.fit(x, y, steps=5, batch_size=64)  # away from the initial state
    xs, ys = post.to_train_units(x, y)
    batch = Batch(xs[:64], ys[:64], None, None, 200, xs, ys, None)
    params = [p for p in post.parameters() if p.requires_grad]

    def loss_and_grads():
        loss = post.loss(batch, torch.Generator().manual_seed(5))
        return loss, torch.autograd.grad(loss, params)

    fused_loss, fused = loss_and_grads()
    monkeypatch.setattr(mean_field._DrawWithLogRatio, "apply", _composed_draw)
    composed_loss, composed = loss_and_grads()
    assert torch.equal(fused_loss, composed_loss)
    for a, b in zip(fused, composed):
        assert torch.equal(a, b)


def test_fused_draw_gradcheck_in_double_precision():
    from uncertain_agents.posteriors.mean_field import _DrawWithLogRatio

    g = torch.Generator().manual_seed(9)
    mean = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    log_std = (0.2 * torch.randn(5, generator=g, dtype=torch.float64) - 1).requires_grad_()
    eps = torch.randn(3, 5, generator=g, dtype=torch.float64)
    prior_std = torch.rand(5, generator=g, dtype=torch.float64) + 0.5
    assert torch.autograd.gradcheck(lambda m, s: _DrawWithLogRatio.apply(m, s, eps, prior_std), (mean, log_std))


@pytest.mark.parametrize("keep", [0.5, 0.75, 0.9375, 0.95, 0.9, 0.99609375])  # 1, 2, 4, 16, 16, 8 bits
def test_float_keep_masks_are_the_boolean_masks_as_factors(keep):
    from uncertain_agents.posteriors.masks import keep_masks

    shape = (3, 700, 11)  # long enough for the PCG64 path
    as_bool = keep_masks(shape, keep, torch.Generator().manual_seed(4))
    as_float = keep_masks(shape, keep, torch.Generator().manual_seed(4), dtype=torch.float32)
    assert as_bool.dtype == torch.bool and as_float.dtype == torch.float32 and as_float.shape == shape
    assert torch.equal(as_float, as_bool.float())
