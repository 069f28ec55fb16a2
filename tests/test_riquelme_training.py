"""The training pieces of Riquelme et al.'s bandit networks: TensorFlow 1's RMSProp, the
inverse-time learning-rate decay, the squared-error member objective, per-member gradient
clipping, Bernoulli bootstrap replicas and the uniform initialisation (the ``fsvgd-paper``
preset's ``bootstrap``)."""
import math

import pytest
import torch

import uncertain_agents as ua
from uncertain_agents.posteriors import Batch
from uncertain_agents.posteriors.optimizers import TFRMSProp, decayed_lr, make_optimizer


def make(name="bootstrap", **kw):
    kw.setdefault("noise_std", 0.1)
    return ua.make_posterior(name, in_dim=3, out_dim=2, hidden=(8,), seed=0, standardize=False, **kw)


def bandit_batch(n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = torch.randn(n, 2, generator=g) * 3
    mask = torch.zeros(n, 2)
    mask[torch.arange(n), torch.randint(2, (n,), generator=g)] = 1.0  # the played arm only
    return x, y, mask


def test_tf_rmsprop_first_steps_follow_tensorflow_1():
    """ms_t = 0.9 ms_{t-1} + 0.1 g², ms_0 = 1; p -= lr g / sqrt(ms_t) (TF1's defaults)."""
    p = torch.nn.Parameter(torch.tensor([0.5, -2.0]))
    opt = make_optimizer("rmsprop", [p], lr=0.1)
    assert isinstance(opt, TFRMSProp)
    ms, expected = torch.ones(2), p.detach().clone()
    for g in (torch.tensor([0.2, -3.0]), torch.tensor([0.1, 1.0])):
        p.grad = g.clone()
        opt.step()
        ms = 0.9 * ms + 0.1 * g ** 2
        expected -= 0.1 * g / ms.sqrt()
        assert torch.allclose(p.detach(), expected, atol=1e-6)


def test_cleared_state_restarts_the_mean_square_at_one():
    p = torch.nn.Parameter(torch.zeros(3))
    opt = make_optimizer("rmsprop", [p], lr=1.0)
    p.grad = torch.full((3,), 5.0)
    opt.step()
    opt.state.clear()  # TrainingContext.reset_optimizer / a restore after divergence
    p.grad = torch.full((3,), 0.1)
    before = p.detach().clone()
    opt.step()
    assert torch.allclose(before - p.detach(), torch.full((3,), 0.1 / math.sqrt(0.9 + 0.1 * 0.01)), atol=1e-6)


def test_lr_decay_counts_every_step_of_every_fit():
    """TensorFlow's inverse_time_decay(lr, global_step, 1, rate): the rate of step t (0-based,
    over all fits) is lr / (1 + rate t); a refit does not reset it."""
    x, y, mask = bandit_batch()
    post = make(n_members=2, optimizer="rmsprop", lr_decay=0.5)
    seen = []
    original = TFRMSProp.step

    def traced(self, closure=None):
        seen.append(self.param_groups[0]["lr"])
        return original(self, closure)

    TFRMSProp.step = traced
    try:
        post.fit(x, y, mask.bool(), steps=3, batch_size=8, lr=0.1)
        post.fit(x, y, mask.bool(), steps=2, batch_size=8, lr=0.1)
    finally:
        TFRMSProp.step = original
    assert seen == pytest.approx([0.1 / (1 + 0.5 * t) for t in range(5)])
    assert decayed_lr(0.1, 0.0, 1000) == 0.1


def test_squared_error_objective_is_two_sigma_squared_times_the_nll_gradient():
    """Member m's squared-error objective (1/B) Σ w mask (y − f)² has the gradient of 2σ² × its
    NLL; summed over members, each member gets its own objective's gradient (M × the mean's)."""
    x, y, mask = bandit_batch()
    grads = {}
    for objective in ("nll", "squared-error"):
        post = make(n_members=3, use_prior=False, objective=objective, noise_std=0.3)
        post.set_units()
        batch = Batch(x, y, mask, torch.arange(24), 24, x)
        post.prepare_data(24)
        obj = post.member_objectives(batch)
        total = obj.sum() if objective == "squared-error" else obj.mean()
        grads[objective] = torch.autograd.grad(total, post.members)[0]
        if objective == "squared-error":
            f = post.spec.forward(post.members.detach(), x)
            err = ((y - f) ** 2 * mask).sum(-1) * post.weights[:, :24]
            assert torch.allclose(obj.detach(), err.mean(-1), atol=1e-5)
    assert torch.allclose(grads["squared-error"], grads["nll"] * 3 * 2 * 0.3 ** 2, atol=1e-5, rtol=1e-4)


def test_clip_norm_bounds_each_members_own_gradient_and_leaves_small_ones():
    post = make(n_members=3, clip_norm=2.0)
    g = torch.zeros(3, post.spec.num_params)
    g[0, 0], g[1, 0], g[2, :2] = 0.5, 10.0, 3.0  # own-objective norms 0.5, 10, 4.24 before the 1/M share
    clipped = post._clip_members({post.members: g / 3}, rows=3, share=1 / 3)[post.members] * 3
    norms = torch.linalg.vector_norm(clipped, dim=1)
    assert norms.tolist() == pytest.approx([0.5, 2.0, 2.0], rel=1e-5)
    assert torch.allclose(clipped[1] / norms[1], g[1] / g[1].norm())  # direction kept


def test_clipped_squared_error_steps_train_members_independently():
    """One step of member m depends only on m's data: its own rows' weights and targets."""
    x, y, mask = bandit_batch(seed=1)
    after = []
    for shift in (0.0, 50.0):
        post = make(n_members=2, scheme="bernoulli", objective="squared-error", clip_norm=5.0, use_prior=False,
                    optimizer="rmsprop", lr_decay=0.5)
        post.set_units()
        post.prepare_data(24)
        post.weights.fill_(1.0)
        post.weights[0, 12:] = 0.0
        y2 = y.clone()
        y2[12:] += shift
        post.fit(x, y2, mask.bool(), steps=1, batch_size=24, lr=0.1)
        after.append(post.members.detach().clone())
    assert torch.equal(after[0][0], after[1][0])  # member 0 never sees rows 12..23
    assert not torch.equal(after[0][1], after[1][1])


def test_bernoulli_replicas_keep_rows_with_probability_p_and_the_first_row_in_all():
    post = make(n_members=40, scheme="bernoulli", inclusion=0.9)
    post.prepare_data(1)
    post.prepare_data(3000)
    w = post.weights
    assert w.shape == (40, 3000) and set(w.unique().tolist()) <= {0.0, 1.0}
    assert bool((w[:, 0] == 1).all())
    assert abs(float(w[:, 1:].mean()) - 0.9) < 0.01
    first = w.clone()
    post.prepare_data(3100)  # new rows only; old ones kept
    assert torch.equal(post.weights[:, :3000], first)


def test_init_uniform_draws_weights_in_the_interval_and_zero_biases():
    post = make(n_members=4, init_uniform=0.3)
    layers = post.spec.unflatten(post.members.detach())
    for w, b in layers:
        assert float(w.abs().max()) <= 0.3 and float(w.abs().max()) > 0.25
        assert bool((b == 0).all())
    assert abs(float(layers[0][0].std()) - 0.3 / math.sqrt(3)) < 0.05


def test_trial_batched_bootstrap_takes_the_same_options():
    """The lock-step runner's trial-batched form: trials stay independent under the squared-error,
    clipped, RMSProp training (changing trial 1's targets leaves trial 0's members unchanged)."""
    from uncertain_agents.posteriors.trials import make_trial_posterior

    x, y, mask = bandit_batch(seed=2)
    opts = dict(n_members=3, scheme="bernoulli", objective="squared-error", clip_norm=5.0, use_prior=False,
                optimizer="rmsprop", lr_decay=0.5, init_uniform=0.3, noise_std=0.1)
    after = []
    for shift in (0.0, 40.0):
        post = make_trial_posterior("bootstrap", trials=2, in_dim=3, out_dim=2, hidden=(8,), seed=0, **opts)
        post.set_units()
        ys = torch.stack([y, y + shift])
        post.fit(torch.stack([x, x]), ys, torch.stack([mask, mask]).bool(), steps=3, batch_size=8, lr=0.1)
        after.append(post.members.detach().clone())
    assert torch.equal(after[0][:3], after[1][:3]) and not torch.equal(after[0][3:], after[1][3:])
    assert bool(torch.isfinite(after[0]).all())


@pytest.mark.parametrize("options, match", [
    ({"optimizer": "sgd"}, "optimizer must be one of"),
    ({"lr_decay": -0.5}, "lr_decay must be a finite number >= 0"),
    ({"objective": "mse"}, "objective must be one of"),
    ({"objective": "squared-error", "noise_std": None}, "squared-error.*fixed noise_std"),
    ({"clip_norm": 0.0}, "clip_norm"),
    ({"init_uniform": -0.3}, "init_uniform"),
    ({"scheme": "bernoulli", "inclusion": 0.0}, "inclusion must be a probability"),
    ({"inclusion": 1.5}, "inclusion must be a probability"),
])
def test_bad_training_options_are_named(options, match):
    with pytest.raises(ValueError, match=match):
        make(**options)


def test_options_are_saved_and_loaded(tmp_path):
    x, y, mask = bandit_batch()
    post = make(n_members=2, scheme="bernoulli", objective="squared-error", clip_norm=5.0, optimizer="rmsprop",
                lr_decay=0.5, init_uniform=0.3, use_prior=False)
    post.fit(x, y, mask.bool(), steps=2, batch_size=8, lr=0.1)
    post.save(tmp_path / "b.pt")
    same = ua.load_posterior(tmp_path / "b.pt")
    assert (same.optimizer, same.lr_decay, same.objective, same.clip_norm, same.init_uniform, same.scheme) == \
        ("rmsprop", 0.5, "squared-error", 5.0, 0.3, "bernoulli")
    assert torch.equal(same.members, post.members) and int(same.steps_trained) == 2


def test_fsvgd_paper_bootstrap_is_riquelmes_bootrms():
    """thu-ml/fpovi dcb/main.py ``hparams_rms`` with BootstrappedBNNSampling: q = 20, p = 0.95,
    init U(±0.3), RMSProp 0.1 with inverse-time decay 0.5, clip 5, 100 steps at every refit."""
    from uncertain_agents.agents import get_protocol, make_agent

    agent = make_agent("thompson", n_actions=2, context_dim=117, posterior="bootstrap", protocol="fsvgd-paper", seed=0)
    post = agent.posterior
    assert (post.n_members, post.scheme, post.inclusion, post.init_uniform, post.use_prior) == (20, "bernoulli", 0.95,
                                                                                                0.3, False)
    assert (post.objective, post.clip_norm, post.optimizer, post.lr_decay) == ("squared-error", 5.0, "rmsprop", 0.5)
    assert agent.lr == 0.1 and agent.train_steps == 100
    proto = get_protocol("fsvgd-paper")
    assert proto.steps_for("bootstrap") == 100 and proto.steps_for("fsvgd") == proto.train_steps
    assert proto.steps_for(None) == proto.train_steps
    ens = make_agent("thompson", n_actions=2, context_dim=117, posterior="ensemble", protocol="fsvgd-paper", seed=0)
    assert ens.posterior.optimizer == "adam" and ens.train_steps == proto.train_steps


def test_trial_batched_runner_takes_the_bootstrap_schedule_of_the_preset(monkeypatch):
    """run_thompson_trials (the GPU table's lock-step runner) gives the preset's bootstrap its
    own refit steps (100) and learning rate (0.1), as make_agent does."""
    from uncertain_agents.agents.experiment import run_thompson_trials
    from uncertain_agents.posteriors.trials import TRIAL_METHODS

    seen, original = [], TRIAL_METHODS["bootstrap"].fit

    def traced_fit(self, *args, **kwargs):
        seen.append((kwargs.get("steps"), kwargs.get("lr"), self.optimizer, self.objective))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TRIAL_METHODS["bootstrap"], "fit", traced_fit)
    frames = run_thompson_trials("bootstrap", {"n_members": 3}, [0, 1], env_name="wheel", steps=16, delta=0.5,
                                 protocol="fsvgd-paper", hidden=(8,), train_every=8)
    assert seen and all(s == (100, 0.1, "rmsprop", "squared-error") for s in seen)
    assert len(frames) == 2 and all(len(f) == 16 for f in frames)
