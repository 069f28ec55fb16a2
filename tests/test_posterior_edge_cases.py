"""Edge cases of the posterior machinery: near-one keep masks, pinned learning rates under
``lr_decay``, units fixed by a ``standardize=False`` fit, ``input_scale`` with raw inputs, and
``steps_trained`` after a divergence."""
import math

import pytest
import torch

import uncertain_agents as ua
import uncertain_agents.posteriors.training as training
from uncertain_agents.posteriors.masks import SKIP_MIN_ENTRIES, keep_masks, random_words
from uncertain_agents.posteriors.training import TrainingContext, TrainingDivergedError


def _data(n=64, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g) * 2 + 1
    return x, x.sum(1, keepdim=True) * 3 + 0.1 * torch.randn(n, 1, generator=g)


# ------------------------------------------------------------------ keep masks
@pytest.mark.parametrize("keep", [1 - 1e-6, 1 - 2**-17, 1 - 2**-17 + 1e-9, 0.999995])
@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_keep_masks_keep_everything_when_q_rounds_to_one(keep, dtype):
    # below SKIP_MIN_ENTRIES: the 16-bit comparison, which rounds q to a multiple of 2⁻¹⁶
    mask = keep_masks((SKIP_MIN_ENTRIES - 1,), keep, torch.Generator().manual_seed(0), dtype=dtype)
    assert mask.dtype == dtype and bool(mask.all())


@pytest.mark.parametrize("keep,n", [(0.9, 20_000), (1 - 2**-16, 20_000), (0.99999, 20_000), (0.123, 50_000),
                                    (0.8, 50_000)])
def test_keep_masks_of_other_rates_are_the_16_bit_comparison(keep, n):
    # short requests, and drop rates above 1/8 (16-bit rates) at any length
    mask = keep_masks((n,), keep, torch.Generator().manual_seed(1))
    raw = random_words(-(-n * 16 // 64), torch.Generator().manual_seed(1))
    expected = raw.view(torch.int16)[:n] < round(keep * 2**16) - 2**15
    assert torch.equal(mask, expected)


def test_an_8_bit_rate_above_one_sixteenth_keeps_the_comparison_at_any_length():
    keep, n = 1 - 20 / 256, 50_000  # drop 0.078 > 1/16: the 8-bit comparison is the cheaper draw
    mask = keep_masks((n,), keep, torch.Generator().manual_seed(2))
    raw = random_words(-(-n * 8 // 64), torch.Generator().manual_seed(2))
    assert torch.equal(mask, raw.view(torch.uint8)[:n] < 236)


def test_dropout_alpha_with_a_tiny_rate_keeps_its_layers():
    post = ua.make_posterior("dropout-alpha", in_dim=3, out_dim=1, hidden=(16,), seed=0, dropout=1e-6,
                             input_dropout=0.0)
    keep = post.draw_keep((2, 5), torch.Generator().manual_seed(0))
    assert bool(keep[1].all())
    weights = post.spec.unflatten(post.sample(4, generator=torch.Generator().manual_seed(0)).params)[1][0]
    assert not any(bool((weights[i] == 0).all()) for i in range(4))


# ------------------------------------------------- pinned learning rates and lr_decay
def _member_rates(monkeypatch, **options):
    """(steps trained before the step, members' lr) of every refinement step of a short fit."""
    seen = []
    apply = TrainingContext.apply_gradients

    def recording(self, grads, group="main"):
        if group == "members":
            pg = self._optimizers[group].param_groups[0]
            seen.append((self.steps_before + self.step, float(pg["lr"])))
        return apply(self, grads, group)

    monkeypatch.setattr(TrainingContext, "apply_gradients", recording)
    post = ua.make_posterior("refined-vi", in_dim=3, out_dim=1, hidden=(8,), seed=0, n_members=2,
                             refine_iters=5, **options)
    x, y = _data()
    post.fit(x, y, steps=20, lr=1e-2)
    post.fit(x, y, steps=20, lr=1e-2)  # a warm refit: t continues from the first fit
    return post, seen


@pytest.mark.parametrize("decay", [0.0, 1e-6, 0.05])
def test_refinement_rates_are_decayed_not_replaced(monkeypatch, decay):
    post, seen = _member_rates(monkeypatch, lr_decay=decay, refine_lr=2e-3)
    K = post.schedule.steps
    iters = 20 // K
    assert len(seen) == 2 * K * iters
    for j, (t, rate) in enumerate(seen):
        k = (j % (K * iters)) // iters + 1
        expected = 2e-3 * 0.3 ** (k / 2)
        if decay:
            expected /= 1 + decay * t
        assert rate == pytest.approx(expected, rel=1e-12), (j, t, k)


def test_pinned_rate_does_not_leak_into_other_groups(monkeypatch):
    seen = []
    apply = TrainingContext.apply_gradients

    def recording(self, grads, group="main"):
        if group == "main":
            seen.append((self.steps_before + self.step, float(self._optimizers[group].param_groups[0]["lr"])))
        return apply(self, grads, group)

    monkeypatch.setattr(TrainingContext, "apply_gradients", recording)
    post = ua.make_posterior("refined-vi", in_dim=3, out_dim=1, hidden=(8,), seed=0, n_members=2,
                             refine_iters=5, lr_decay=0.05)
    x, y = _data()
    post.fit(x, y, steps=20, lr=1e-2)
    assert [r for _, r in seen] == pytest.approx([1e-2 / (1 + 0.05 * t) for t, _ in seen], rel=1e-12)


# ------------------------------------------------------- units with standardize=False
@pytest.mark.parametrize("name", ["mfvi", "dropout-alpha", "fsvgd"])
def test_a_raw_unit_fit_fixes_the_units(name):
    x, y = _data()
    post = ua.make_posterior(name, in_dim=3, out_dim=1, hidden=(8,), seed=0, standardize=False)
    assert not post.units_are_fixed
    post.fit(x, y, steps=30)
    assert post.units_are_fixed
    for key, value in (("x_loc", 0.0), ("x_scale", 1.0), ("y_loc", 0.0), ("y_scale", 1.0)):
        assert bool((getattr(post, key) == value).all()), key
    before = post.predict(x[:5], generator=torch.Generator().manual_seed(1)).mean
    prior = post.prior_std.clone()
    with pytest.raises(ValueError, match="set_prior_std"):
        post.set_prior_std(2.0)
    with pytest.raises(ValueError, match="already fixed"):
        post.set_units(x_loc=5.0)
    if name == "dropout-alpha":  # a method with bandit defaults to switch
        with pytest.raises(ValueError, match="use_bandit_defaults"):
            post.use_bandit_defaults()
    assert torch.equal(post.prior_std, prior)
    assert torch.equal(post.predict(x[:5], generator=torch.Generator().manual_seed(1)).mean, before)
    post.fit(x, y, steps=5)  # refits keep working


def test_set_units_before_a_raw_unit_fit_is_kept():
    x, y = _data()
    post = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(8,), seed=0, standardize=False)
    post.set_prior_std(0.5)
    post.set_units(x_loc=0.0, x_scale=1.0, y_loc=0.0, y_scale=4.0)
    post.fit(x, y, steps=10)
    assert bool((post.y_scale == 4.0).all()) and bool((post.prior_std == 0.5).all())


def test_a_raw_unit_fit_round_trips_through_save(tmp_path):
    x, y = _data()
    post = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(8,), seed=0, standardize=False)
    post.fit(x, y, steps=10)
    post.save(tmp_path / "p.pt")
    assert ua.load_posterior(tmp_path / "p.pt").units_are_fixed


# ------------------------------------------------------------------ input_scale
@pytest.mark.parametrize("name, scale", [("svgd", 10.0), ("svgd", "sqrt_dim"), ("fsvgd", 3.0)])
def test_an_explicit_input_scale_with_raw_inputs_is_refused(name, scale):
    with pytest.raises(ValueError, match="input_scale.*standardize=False"):
        ua.make_posterior(name, in_dim=4, out_dim=1, hidden=(8,), seed=0, input_scale=scale, standardize=False)


@pytest.mark.parametrize("name, options", [("fsvgd", {}), ("fsvgd", {"input_scale": "sqrt_dim"}),
                                           ("fsvgd", {"input_scale": 1.0}), ("svgd", {}),
                                           ("svgd", {"input_scale": 1.0})])
def test_default_or_unit_input_scale_with_raw_inputs_trains_unscaled(name, options):
    x, y = _data(d=4)
    post = ua.make_posterior(name, in_dim=4, out_dim=1, hidden=(8,), seed=0, standardize=False, **options)
    post.fit(x, y, steps=2)
    assert bool((post.x_scale == 1.0).all())


def test_input_scale_applies_to_standardised_inputs_only():
    x, y = _data(d=4)
    post = ua.make_posterior("svgd", in_dim=4, out_dim=1, hidden=(8,), seed=0, input_scale=10.0)
    post.fit(x, y, steps=2)
    assert torch.allclose(post.x_scale, x.std(0, unbiased=False) * 10.0)
    fixed = ua.make_posterior("fsvgd", in_dim=4, out_dim=1, hidden=(8,), seed=0)  # as the bandit agents
    fixed.set_units(x_loc=0.0, x_scale=1.0)
    fixed.fit(x, y, steps=2)
    assert bool((fixed.x_scale == 1.0).all())


# ------------------------------------------------------- steps_trained after divergence
def _diverge_at(monkeypatch, at_step):
    check = training._check_loss

    def failing(post, value, first, step, lr):
        if step == at_step:
            raise TrainingDivergedError(f"simulated divergence at step {step}")
        return check(post, value, first, step, lr)

    monkeypatch.setattr(training, "_check_loss", failing)


# checks run at steps 0, 25, 50, ...; a check's state (after step s: s + 1 steps) becomes the
# restore point once the next check passes, so a divergence at step 75 restores 26 steps
@pytest.mark.parametrize("at_step, restored", [(0, 0), (25, 0), (50, 1), (75, 26)])
def test_steps_trained_counts_the_restored_state(monkeypatch, at_step, restored):
    x, y = _data()
    post = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(8,), seed=0)
    _diverge_at(monkeypatch, at_step)
    with pytest.raises(TrainingDivergedError, match="simulated"):
        post.fit(x, y, steps=100)
    assert int(post.steps_trained) == restored
    if restored:  # the restored state is that of a fit of exactly `restored` steps
        fresh = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(8,), seed=0)
        fresh.fit(x, y, steps=restored)
        assert torch.equal(fresh.mean, post.mean) and torch.equal(fresh.log_std, post.log_std)


def test_steps_trained_after_a_diverged_refit(monkeypatch):
    x, y = _data()
    post = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(8,), seed=0)
    post.fit(x, y, steps=10)
    _diverge_at(monkeypatch, 75)
    with pytest.raises(TrainingDivergedError):
        post.fit(x, y, steps=100)
    assert int(post.steps_trained) == 10 + 26


def test_a_retry_after_divergence_at_the_start_is_a_first_fit(monkeypatch):
    x, y = _data()
    post = ua.make_posterior("aadm", in_dim=3, out_dim=1, hidden=(16,), seed=0)
    _diverge_at(monkeypatch, 0)
    with pytest.raises(TrainingDivergedError):
        post.fit(x, y, steps=100)
    monkeypatch.undo()
    assert int(post.steps_trained) == 0
    retry = post.fit(x, y, steps=100).traces["beta"]
    fresh = ua.make_posterior("aadm", in_dim=3, out_dim=1, hidden=(16,), seed=0).fit(x, y, steps=100).traces["beta"]
    assert retry[0] < 1.0 and retry[:5].tolist() == fresh[:5].tolist()


def test_an_absurd_learning_rate_leaves_no_steps_behind():
    """lr = 1e8 blows the outputs up at the first check (step 0): the posterior is put back to its
    state before the fit, every learned tensor equal to a fresh posterior's, and no step is counted."""
    x, y = _data()
    post = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(16,), seed=0)
    with pytest.raises(TrainingDivergedError, match="at step 0"):
        post.fit(x, y, steps=200, lr=1e8)
    assert int(post.steps_trained) == 0
    fresh = dict(ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(16,), seed=0).named_parameters())
    for name, p in post.named_parameters():
        assert torch.equal(p.detach(), fresh[name].detach()), name
    assert math.isfinite(float(post.predict(x[:3], n_samples=4).mean.abs().max()))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_a_directly_constructed_posterior_checks_its_device():
    """``Cls(spec, device=...)`` is checked like ``make_posterior``'s ``device`` (it used to be stored and
    ignored: the posterior stayed on the host whatever was asked)."""
    from uncertain_agents.network import MLPSpec
    from uncertain_agents.posteriors.mfvi import MeanFieldVI

    with pytest.raises(ValueError, match="CUDA is not available"):
        MeanFieldVI(MLPSpec(3, 2, (8,)), device="cuda")
    with pytest.raises(ValueError, match="device must be"):
        MeanFieldVI(MLPSpec(3, 2, (8,)), device="tpu")
    post = MeanFieldVI(MLPSpec(3, 2, (8,)), device="cpu", seed=0)
    assert post.device.type == "cpu"


def test_a_posterior_moves_to_its_device_after_every_constructor_has_run(monkeypatch):
    """The move happens once the whole construction is done, so state a mixin's ``__init__`` adds
    after the method's own moves too (with per-class ``__init__`` wrappers it stayed on the host).
    PyTorch's ``meta`` device stands in for CUDA, which this machine may not have."""
    from torch import nn

    import uncertain_agents.posteriors.base as base
    from uncertain_agents.network import MLPSpec
    from uncertain_agents.posteriors.mfvi import MeanFieldVI

    monkeypatch.setattr(base, "check_device", lambda value, name="device": torch.device(value))

    class ExtraScale:
        def __init__(self, spec, likelihood="gaussian", **kw):
            super().__init__(spec, likelihood, **kw)
            self.log_scale = nn.Parameter(torch.zeros(spec.out_dim))

    class ScaledVI(ExtraScale, MeanFieldVI):
        name = "scaled-vi-test"

    post = ScaledVI(MLPSpec(2, 3, (4,)), device="meta", seed=0)
    assert {name: t.device.type for name, t in post.named_parameters()} == dict.fromkeys(
        ["mean", "log_std", "log_scale", "likelihood.log_noise_std"], "meta")
    assert all(b.device.type == "meta" for b in post.buffers())
