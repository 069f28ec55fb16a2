"""The hand-fused hot paths give the same numbers as the composed PyTorch they replace.

Each fusion only removes bookkeeping (optimiser wrappers, autograd nodes, elementwise
passes); the arithmetic is kept in the same order, so seeded runs stay bit-for-bit what they
were (committed results keep reproducing at later commits)."""
from __future__ import annotations

import pytest
import torch

from uncertain_agents.posteriors.fused_adam import DirectFusedAdam
from uncertain_agents.posteriors.training import make_adam


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
    state = opt.state_dict()
    stock = torch.optim.Adam(_params(0), lr=1e-2, fused=True)
    stock.load_state_dict(state)
    assert float(stock.state_dict()["state"][0]["step"]) == 3.0
    assert torch.equal(stock.state_dict()["state"][0]["exp_avg"], state["state"][0]["exp_avg"])


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


def test_make_adam_uses_the_direct_fused_optimizer_for_float_parameters():
    assert isinstance(make_adam(_params(0), lr=1e-3), DirectFusedAdam)
