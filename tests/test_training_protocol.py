"""The training protocol: named optimiser groups, named loss traces, phases, refits."""
import numpy as np
import pytest
import torch
from torch import nn

import uncertain_agents as ua
from uncertain_agents.network import MLPSpec
from uncertain_agents.posteriors import OptimizerGroup, Phase, Posterior
from uncertain_agents.posteriors.training import split_steps


class TwoStage(Posterior):
    """A toy method: phase "first" trains ``a`` on one loss, phase "second" trains ``b``."""

    name = "two-stage"
    phases = (Phase("first", 0.25), Phase("second", 0.75, on_refit="restart"))

    def __init__(self, spec, likelihood="gaussian", **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        self.a = nn.Parameter(torch.zeros(spec.num_params))
        self.b = nn.Parameter(torch.zeros(spec.num_params))
        self.started = []

    def optimizer_groups(self):
        return {"a": OptimizerGroup((self.a,)), "b": OptimizerGroup((self.b,), lr_scale=0.1)}

    def start_phase(self, phase, ctx):
        self.started.append((phase.name, ctx.refit, ctx.phase_steps, ctx.steps_before))

    def training_step(self, batch, ctx):
        target = batch.y.mean()
        if ctx.phase.name == "first":
            loss = (self.a.mean() + self.b.mean() - target).square()
            return {"loss": ctx.minimize(loss, "a"), "first_only": loss.detach()}
        loss = (self.b.mean() - 1.0).square() + (self.a.mean() - 5.0).square()
        return {"loss": ctx.minimize(loss, "b")}

    def _sample(self, n, generator):
        return self.a.detach().expand(n, -1), None


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 2, generator=g)
    return x, 3.0 + torch.randn(64, 1, generator=g)


def test_phases_split_steps_and_report_named_traces(data):
    post = TwoStage(MLPSpec(2, 1, (4,)), seed=0)
    result = post.fit(*data, steps=40, batch_size=8, lr=0.05)
    assert result.phase_steps == {"first": 10, "second": 30}
    assert set(result.traces) == {"loss", "first_only"}
    np.testing.assert_array_equal(result.losses, result.traces["loss"])
    assert np.isfinite(result.traces["first_only"][:10]).all()
    assert np.isnan(result.traces["first_only"][10:]).all()  # a name a phase does not report
    assert post.started == [("first", False, 10, 0), ("second", False, 30, 0)]
    post.fit(*data, steps=8, batch_size=8, lr=0.05)
    assert post.started[2:] == [("first", True, 2, 40), ("second", True, 6, 40)]
    assert int(post.steps_trained) == 48


def test_each_optimizer_moves_only_its_own_parameters(data):
    post = TwoStage(MLPSpec(2, 1, (4,)), seed=0)
    post.fit(*data, steps=4, batch_size=8, lr=0.05)  # 1 step of "first", 3 of "second"
    b_before, a_before = post.b.detach().clone(), post.a.detach().clone()
    post.phases = (Phase("first"),)  # only phase "first": the loss also depends on b
    post.fit(*data, steps=5, batch_size=8, lr=0.05)
    assert torch.equal(post.b.detach(), b_before)
    assert not torch.equal(post.a.detach(), a_before)
    a_before = post.a.detach().clone()
    post.phases = (Phase("second"),)  # the loss also depends on a
    post.fit(*data, steps=5, batch_size=8, lr=0.05)
    assert torch.equal(post.a.detach(), a_before)
    assert not torch.equal(post.b.detach(), b_before)


def test_group_learning_rate_is_a_multiple_of_fit_lr(data):
    post = TwoStage(MLPSpec(2, 1, (4,)), seed=0)
    post.fit(*data, steps=4, batch_size=8, lr=0.05)
    # Adam's first step moves every coordinate by about lr (sign of the gradient)
    post.phases = (Phase("second"),)
    before = post.b.detach().clone()
    post.optimizer_set.optimizers["b"].state.clear()
    post.fit(*data, steps=1, batch_size=8, lr=0.05)
    assert torch.allclose((post.b.detach() - before).abs(), torch.full_like(before, 0.005), rtol=1e-3)


def test_split_steps():
    phases = (Phase("a", 0.3), Phase("b", 0.7))
    assert split_steps(phases, 10) == [3, 7]
    assert split_steps(phases, 1) == [0, 1]
    assert sum(split_steps((Phase("a", 1 / 3), Phase("b", 1 / 3), Phase("c", 1 / 3)), 100)) == 100
    with pytest.raises(ValueError, match="sum to 1"):
        split_steps((Phase("a", 0.5),), 10)
    with pytest.raises(ValueError, match="on_refit"):
        Phase("a", on_refit="sometimes")
    with pytest.raises(TypeError, match="graph_safe"):
        Phase("a", graph_safe="no")


def test_refined_vi_refines_outside_cuda_graphs():
    """Its refinement resets the optimiser and sets a new rate per refinement step: that phase is never
    captured (tests/test_cuda.py runs the capture itself), while its VI phase may be."""
    from uncertain_agents import make_posterior

    phases = make_posterior("refined-vi", in_dim=2, out_dim=1).phases
    assert [(p.name, p.graph_safe) for p in phases] == [("vi", True), ("refine", False)]


class NoMainLoss(TwoStage):
    phases = (Phase("first"),)

    def training_step(self, batch, ctx):
        return {"other": torch.tensor(0.0)}


class SharedParameter(TwoStage):
    def optimizer_groups(self):
        return {"a": OptimizerGroup((self.a,)), "again": OptimizerGroup((self.a, self.b))}


def test_protocol_errors_name_the_problem(data):
    with pytest.raises(KeyError, match="'loss'"):
        NoMainLoss(MLPSpec(2, 1, (4,))).fit(*data, steps=2)
    with pytest.raises(ValueError, match="two optimizer groups"):
        SharedParameter(MLPSpec(2, 1, (4,))).fit(*data, steps=2)
    with pytest.raises(ValueError, match="lr_scale"):
        OptimizerGroup((nn.Parameter(torch.zeros(1)),), lr_scale=0.0)


def test_particles_report_their_noise_step(data):
    post = ua.make_posterior("svgd", in_dim=2, out_dim=1, seed=0, n_particles=4)
    result = post.fit(*data, steps=6, batch_size=16)
    assert set(result.traces) == {"loss", "noise"}
    assert set(post.optimizer_groups()) == {"main", "noise"}


def test_steps_trained_is_saved(data, tmp_path):
    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, seed=0)
    post.fit(*data, steps=7)
    post.save(tmp_path / "p.pt")
    assert int(ua.load_posterior(tmp_path / "p.pt").steps_trained) == 7


def test_a_phase_length_may_follow_the_fit():
    from uncertain_agents.posteriors.training import Phase, split_steps

    phases = (Phase("main"), Phase("extra", steps=lambda n: n // 10))
    assert split_steps(phases, 200) == [200, 20]
    with pytest.raises(ValueError, match="phase steps"):
        split_steps((Phase("main"), Phase("extra", steps=lambda n: -1)), 10)
