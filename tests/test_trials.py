"""Trial-batched posteriors (posteriors/trials.py) and the lock-step runner (agents/lockstep.py).

A trial-batched posterior is R runs of one method side by side: with one trial it computes the
method's own objective (same numbers, same random draws), and trial r's training never depends
on another trial's data."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from uncertain_agents import make_posterior
from uncertain_agents.agents.experiment import AgentSpec, make_env, run_experiment, trials_batchable
from uncertain_agents.agents.lockstep import run_bandit_trials
from uncertain_agents.posteriors.base import Batch
from uncertain_agents.posteriors.function_prior import clipped_precision
from uncertain_agents.posteriors.trials import TRIAL_METHODS, make_trial_posterior
from uncertain_agents.seeding import AGENT_DRAWS_KEY, stream_seed

HIDDEN = (12, 12)
OPTIONS = {"mfvi": {}, "bb-alpha": {"train_samples": 4}, "dropout-alpha": {"train_samples": 4, "dropout": 0.2},
           "bootstrap": {"n_members": 3}, "ensemble": {"n_members": 3}, "fsvgd": {"n_particles": 4},
           "svgd": {"n_particles": 4}}


def _bandit_data(trials: int, n: int = 96, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(trials, n, 2, generator=g)
    arm = torch.randint(3, (trials, n), generator=g)
    reward = torch.sin(x[..., 0] * (arm + 1)) + 0.1 * torch.randn(trials, n, generator=g)
    y = torch.zeros(trials, n, 3).scatter_(2, arm.unsqueeze(-1), reward.unsqueeze(-1))
    mask = torch.zeros(trials, n, 3, dtype=torch.bool).scatter_(2, arm.unsqueeze(-1), True)
    return x, y, mask


def _pair(name: str, trials: int = 1):
    plain = make_posterior(name, in_dim=2, out_dim=3, hidden=HIDDEN, seed=4, noise_std=0.1, **OPTIONS[name])
    batched = make_trial_posterior(name, trials=trials, in_dim=2, out_dim=3, hidden=HIDDEN, seed=4, noise_std=0.1,
                                   **OPTIONS[name])
    for post in (plain, batched):
        post.set_units(x_loc=0.0, x_scale=1.0, y_loc=0.0, y_scale=1.0)
    return plain, batched


def _batches(n_batch: int = 32, dtype: torch.dtype = torch.float32):
    x, y, mask = _bandit_data(1)
    x, y = x.to(dtype), y.to(dtype)
    idx = torch.arange(5, 5 + n_batch)
    maskf = mask.to(dtype)
    one = Batch(x[0, idx], y[0, idx], maskf[0, idx], idx, x.shape[1], x[0], y[0], maskf[0])
    stacked = Batch(x[:, idx], y[:, idx], maskf[:, idx], idx.unsqueeze(0), x.shape[1], x, y, maskf)
    return one, stacked


@pytest.mark.parametrize("name", ["mfvi", "bb-alpha", "dropout-alpha", "bootstrap", "ensemble"])
def test_one_trial_has_the_methods_own_loss_and_gradient(name):
    """In float64, so that the two ways of summing agree to rounding (1e-16 relative, measured);
    in float32 a gradient entry near zero that is the difference of terms of size ~100 differs by
    ~1e-5 between the two summation orders."""
    plain, batched = _pair(name)
    plain.double(), batched.double()
    plain.prepare_data(96)
    batched.prepare_data(96)  # bootstrap: the same counts from the same generator
    one, stacked = _batches(dtype=torch.float64)
    loss = plain.loss(one, torch.Generator().manual_seed(9))
    trial_loss = batched.trial_loss(stacked, torch.Generator().manual_seed(9))
    assert loss.dtype == torch.float64
    assert torch.allclose(loss, trial_loss, rtol=1e-12, atol=1e-12)
    first = next(iter(plain.parameters()))
    grads = torch.autograd.grad(loss, [p for p in plain.parameters() if p.requires_grad])
    trial_grads = torch.autograd.grad(trial_loss, [p for p in batched.parameters() if p.requires_grad])
    for g, tg in zip(grads, trial_grads):
        assert torch.allclose(g, tg.reshape(g.shape), rtol=1e-9, atol=1e-12), first.shape


@pytest.mark.parametrize("name", ["fsvgd", "svgd"])
def test_one_trial_has_the_methods_own_particle_direction(name):
    plain, batched = _pair(name)
    one, stacked = _batches()
    direction, target = plain._direction(one, torch.Generator().manual_seed(9))
    trial_direction, trial_target = batched._direction(stacked, torch.Generator().manual_seed(9))
    assert torch.allclose(target, trial_target, rtol=1e-5, atol=1e-4)
    assert torch.allclose(direction, trial_direction, rtol=1e-4, atol=1e-4 * float(direction.abs().max()))


@pytest.mark.parametrize("name", sorted(TRIAL_METHODS))
def test_a_trial_trains_the_same_whatever_the_other_trials_data(name):
    """Trial 0's state after a fit is the same to the bit when trial 1's rows change: each trial
    sees only its own data and gets only its own objective's gradient."""
    x, y, mask = _bandit_data(2)
    states = []
    for other_seed in (1, 2):
        _, post = _pair(name, trials=2)
        ox, oy, omask = _bandit_data(1, seed=other_seed)
        xs, ys, ms = x.clone(), y.clone(), mask.clone()
        xs[1], ys[1], ms[1] = ox[0], oy[0] * 3.0, omask[0]
        post.fit(xs, ys, ms, steps=30, batch_size=32)
        post.fit(xs, ys, ms, steps=10, batch_size=32)
        states.append({k: v.clone() for k, v in post.state_dict().items()})
    for key, value in states[0].items():
        other = states[1][key]
        if value.dim() == 0 or value.shape[0] < 2:
            continue
        half = value.shape[0] // 2  # trial 0's rows (members/particles: the first R·M/2)
        assert torch.equal(value[:half], other[:half]), key
        if value.is_floating_point() and key in ("mean", "members", "particles", "params"):
            assert not torch.equal(value[half:], other[half:]), key


def test_trial_fits_train_every_trial_towards_its_data():
    x, y, mask = _bandit_data(3)
    for name in sorted(TRIAL_METHODS):
        _, post = _pair(name, trials=3)
        first = post.fit(x, y, mask, steps=150, batch_size=32, lr=1e-2)
        assert first.losses[-1] < first.losses[0]
        samples = post.sample_trials(5)
        assert len(samples) == 3
        for r, fs in enumerate(samples):
            f = fs(x[r])  # [5, N, 3]
            err = ((f.mean(0) - y[r]).square() * mask[r]).sum() / mask[r].sum()
            assert float(err) < float((y[r].square() * mask[r]).sum() / mask[r].sum()), name


def test_trial_posteriors_check_their_inputs():
    with pytest.raises(ValueError, match="fixed noise_std"):
        make_trial_posterior("fsvgd", trials=2, in_dim=2, out_dim=3)
    with pytest.raises(ValueError, match="no trial-batched form"):
        make_trial_posterior("refined-vi", trials=2, in_dim=2, out_dim=3, noise_std=0.1)
    with pytest.raises(TypeError, match="unknown option"):
        make_trial_posterior("bootstrap", trials=2, in_dim=2, out_dim=3, n_particles=3)
    with pytest.raises(ValueError, match="trials must be a positive integer"):
        make_trial_posterior("bootstrap", trials=0, in_dim=2, out_dim=3)
    post = make_trial_posterior("bootstrap", trials=2, in_dim=2, out_dim=3, hidden=HIDDEN)
    x, y, mask = _bandit_data(2)
    with pytest.raises(ValueError, match="set_units"):
        post.fit(x, y, mask, steps=2)
    post.set_units()
    with pytest.raises(ValueError, match=r"x must be \[trials=2"):
        post.fit(x[0], y, mask, steps=2)
    with pytest.raises(ValueError, match=r"y must be \[trials=2"):
        post.fit(x, y[:, :5], mask, steps=2)
    with pytest.raises(TypeError, match="sample_trials"):
        post.sample(3)
    with pytest.raises(TypeError, match="not saved"):
        post.save("never-written.pt")


def test_batched_clipped_precision_is_each_matrix_s():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 6, 6, generator=g, dtype=torch.float64)
    cov = a @ a.mT + 1e-3 * torch.eye(6, dtype=torch.float64)
    batched = clipped_precision(cov, 1e-2)
    for r in range(3):
        assert torch.allclose(batched[r], clipped_precision(cov[r], 1e-2), rtol=1e-10, atol=1e-10)


def test_lockstep_runner_plays_thompson_sampling_in_every_trial():
    steps, R = 120, 3
    envs = [make_env("wheel", steps=steps, delta=0.5) for _ in range(R)]
    post = make_trial_posterior("bootstrap", trials=R, in_dim=2, out_dim=5, hidden=(16,), seed=0, n_members=3)
    seen = []
    frames = run_bandit_trials(envs, post, steps=steps, seeds=[0, 1, 2], train_every=20, train_steps=5,
                               initial_pulls=2, seed=1, progress=seen.append, progress_every=50)
    assert len(frames) == R and sum(seen) == R * steps
    for r, frame in enumerate(frames):
        assert list(frame["step"]) == list(range(1, steps + 1))
        assert list(frame["action"][:10]) == [t % 5 for t in range(10)]  # round robin first
        assert np.allclose(frame["cumulative_regret"], np.cumsum(frame["regret"]))
    # the environments follow their own seeds: trial r's contexts are those of run_bandit with seed r
    assert not frames[0]["optimal_expected_reward"].equals(frames[1]["optimal_expected_reward"])
    with pytest.raises(ValueError, match="envs and seeds must each have one entry per trial"):
        run_bandit_trials(envs[:2], post, steps=5, seeds=[0, 1])


def _one_decision_at_a_time(envs, post, *, steps, seeds, train_every, train_steps, initial_pulls, seed):
    """The lock-step schedule written the plain way: env.step and one host function per decision."""
    from uncertain_agents.agents.host_functions import HostFunctions
    R, arms, d = len(envs), post.spec.out_dim, post.spec.in_dim
    post.set_prior_std(1.0)
    post.use_bandit_defaults()
    post.set_units()
    generator = torch.Generator().manual_seed(stream_seed(seed, AGENT_DRAWS_KEY))  # as PosteriorAgent seeds its draws
    obs = [env.reset(seed=s)[0] for env, s in zip(envs, seeds)]
    xs, ys, masks, actions, regrets = [], [], [], np.empty((R, steps), int), np.empty((R, steps))
    functions, n_fits, warmup = None, 0, initial_pulls * arms
    for t in range(steps):
        if t < warmup:
            chosen = [t % arms] * R
        else:
            if functions is None:
                functions = [HostFunctions(fs) for fs in post.sample_trials(train_every, generator=generator)]
                cursor = 0
            chosen = [functions[r].greedy(cursor, obs[r]) for r in range(R)]
            cursor += 1
        x, y, mask = np.zeros((R, d), np.float32), np.zeros((R, arms), np.float32), np.zeros((R, arms), bool)
        for r, env in enumerate(envs):
            x[r] = obs[r]
            obs[r], reward, _, _, info = env.step(chosen[r])
            y[r, chosen[r]], mask[r, chosen[r]] = reward, True
            actions[r, t], regrets[r, t] = chosen[r], info["regret"]
        xs.append(x), ys.append(y), masks.append(mask)
        n = t + 1
        if n >= warmup and (n % train_every == 0 or n_fits == 0):
            post.fit(torch.from_numpy(np.stack(xs, 1)), torch.from_numpy(np.stack(ys, 1)),
                     torch.from_numpy(np.stack(masks, 1)), steps=train_steps, batch_size=512)
            n_fits, functions = n_fits + 1, None
    return actions, regrets


@pytest.mark.parametrize("name,initial_pulls,options", [
    ("mfvi", 2, OPTIONS["mfvi"]),
    ("bootstrap", 0, OPTIONS["bootstrap"]),  # 3 members, windows of 5-20: the members at every context
    ("ensemble", 2, {"n_members": 8})])  # windows of 5 (split at progress reports): the drawn members' rows
def test_windows_of_decisions_are_the_decisions_taken_one_at_a_time(name, initial_pulls, options):
    """The runner reads each window's contexts ahead and decides it in one batched forward; that
    is the same run, to the bit, as stepping the environments and deciding one context at a time
    (no warm-up included: the first function is drawn before any fit, the first refit follows it)."""
    steps, R, kw = 230, 3, dict(train_every=20, train_steps=5, initial_pulls=initial_pulls, seed=7)

    def posterior():
        return make_trial_posterior(name, trials=R, in_dim=2, out_dim=5, hidden=(16,), seed=0, **options)

    frames = run_bandit_trials([make_env("wheel", steps=steps, delta=0.5) for _ in range(R)], posterior(),
                               steps=steps, seeds=[0, 1, 2], progress_every=45, **kw)
    actions, regrets = _one_decision_at_a_time([make_env("wheel", steps=steps, delta=0.5) for _ in range(R)],
                                               posterior(), steps=steps, seeds=[0, 1, 2], **kw)
    for r, frame in enumerate(frames):
        assert np.array_equal(frame["action"].to_numpy(), actions[r])
        assert np.array_equal(frame["regret"].to_numpy(), regrets[r])
    assert len(set(actions[0, 2 * 5:].tolist())) > 1  # Thompson sampling, not a fixed arm


def test_lockstep_runner_needs_contextual_bandits():
    import gymnasium as gym
    post = make_trial_posterior("mfvi", trials=1, in_dim=4, out_dim=2, hidden=(4,))
    with pytest.raises(TypeError, match="contextual bandits"):
        run_bandit_trials([gym.make("CartPole-v1")], post, steps=5, seeds=[0])
    with pytest.raises(ValueError, match="progress_every"):
        run_bandit_trials([make_env("wheel", steps=5)], make_trial_posterior("mfvi", trials=1, in_dim=2, out_dim=5),
                          steps=5, seeds=[0], progress_every=0)
    # a posterior sized for other contexts is named, not a broadcasting error deep in the runner
    with pytest.raises(ValueError, match=r"in_dim = 3 values.*\(2,\)"):
        run_bandit_trials([make_env("wheel", steps=5)], make_trial_posterior("mfvi", trials=1, in_dim=3, out_dim=5),
                          steps=5, seeds=[0])
    # seeds are checked like every seed of the library (a float was truncated, a bool taken as 0/1)
    for bad in ([0.9], [True]):
        with pytest.raises(TypeError, match=r"seeds\[0\] must be an int"):
            run_bandit_trials([make_env("wheel", steps=5)], make_trial_posterior("mfvi", trials=1, in_dim=2, out_dim=5),
                              steps=5, seeds=bad)
    with pytest.raises(TypeError, match="seed must be an int"):
        run_bandit_trials([make_env("wheel", steps=5)], make_trial_posterior("mfvi", trials=1, in_dim=2, out_dim=5),
                          steps=5, seeds=[0], seed=1.5)


def test_run_experiment_batched_runs_thompson_trials_as_one_model_and_the_rest_as_usual():
    specs = [AgentSpec("uniform"), AgentSpec("linear"),
             AgentSpec("thompson", "bootstrap", {"n_members": 3}), AgentSpec("thompson", "refined-vi")]
    kw = dict(steps=60, trials=2, seed=3, delta=0.6, train_every=20, train_steps=4, hidden=(8,))
    assert trials_batchable(specs[2]) and not trials_batchable(specs[3]) and not trials_batchable(specs[1])
    assert trials_batchable(AgentSpec("thompson", "mfvi"))  # a learned noise is one per trial
    assert trials_batchable(AgentSpec("thompson", "fsvgd"), "fsvgd-paper")  # the preset fixes the noise
    assert not trials_batchable(AgentSpec("thompson", "fsvgd"))  # held-out noise fitting: one by one
    serial = run_experiment("wheel", specs, **kw)
    batched = run_experiment("wheel", specs, parallel="batched", **kw)
    assert batched["label"].tolist() == serial["label"].tolist()
    same = batched["label"] != "thompson[bootstrap]"  # the others ran exactly as one by one
    pd.testing.assert_frame_equal(serial[same].drop(columns="seconds").reset_index(drop=True),
                                  batched[same].drop(columns="seconds").reset_index(drop=True))
    boot = batched[~same]
    assert set(boot["trial"]) == {0, 1} and boot["action"].between(0, 4).all()


@pytest.mark.parametrize("rule", ["gfsf", "wsgld"])
def test_particle_rules_other_than_svgd_run_trial_by_trial(rule):
    """Rules other than svgd are applied trial by trial: one trial's direction is the method's own,
    and trial 0 trains to the same bits whatever trial 1's data (its particles never enter trial 0's
    kernel)."""
    options = dict(in_dim=2, out_dim=3, hidden=HIDDEN, seed=0, noise_std=0.1, n_particles=4, rule=rule)
    plain = make_posterior("fsvgd", **options)
    one = make_trial_posterior("fsvgd", trials=1, **options)
    for post in (plain, one):
        post.set_units()
    batch, stacked = _batches()
    direction, _ = plain._direction(batch, torch.Generator().manual_seed(9))
    trial_direction, _ = one._direction(stacked, torch.Generator().manual_seed(9))
    assert torch.allclose(direction, trial_direction, rtol=1e-4, atol=1e-4 * float(direction.abs().max()))
    x, y, mask = _bandit_data(2)
    particles = []
    for shift in (0.0, 5.0):
        post = make_trial_posterior("fsvgd", trials=2, **options)
        post.set_units()
        ys = y.clone()
        ys[1] += shift * mask[1]
        result = post.fit(x, ys, mask, steps=20, batch_size=32)
        assert np.isfinite(result.losses).all() and len(post.sample_trials(3)) == 2
        particles.append(post.particles.detach().clone())
    assert torch.equal(particles[0][:4], particles[1][:4])      # trial 0: its own data only
    assert not torch.equal(particles[0][4:], particles[1][4:])  # trial 1 saw the change


@pytest.mark.parametrize("name", ["mfvi", "bb-alpha", "dropout-alpha"])
def test_a_learned_noise_is_one_per_trial(name):
    """Without noise_std each trial learns its own noise: one trial gives the method's own loss,
    and a trial whose rewards are noisier ends with a larger noise."""
    plain = make_posterior(name, in_dim=2, out_dim=3, hidden=HIDDEN, seed=4, **OPTIONS[name])
    one = make_trial_posterior(name, trials=1, in_dim=2, out_dim=3, hidden=HIDDEN, seed=4, **OPTIONS[name])
    for post in (plain, one):
        post.set_units()
    batch, stacked = _batches()
    assert torch.allclose(plain.loss(batch, torch.Generator().manual_seed(2)),
                          one.trial_loss(stacked, torch.Generator().manual_seed(2)), rtol=1e-5, atol=1e-6)
    x, y, mask = _bandit_data(2, n=192)
    g = torch.Generator().manual_seed(7)
    y = y.clone()
    y[1] = y[1] + mask[1] * 1.5 * torch.randn(y[1].shape, generator=g)  # trial 1: much noisier rewards
    post = make_trial_posterior(name, trials=2, in_dim=2, out_dim=3, hidden=HIDDEN, seed=4, **OPTIONS[name])
    post.set_units()
    post.fit(x, y, mask, steps=400, batch_size=64, lr=1e-2)
    noise = post.trial_log_noise_std().exp()  # [2, out]
    assert noise.shape == (2, 3) and bool((noise[1] > 2 * noise[0]).all())
    samples = post.sample_trials(3)
    assert torch.allclose(samples[1].noise_std, noise[1].expand(3, -1))
