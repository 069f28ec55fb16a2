"""CUDA checks: run only where a GPU is present (``-m cuda``; skipped here, see conftest).

What a GPU user relies on beyond the device-parametrised interface tests: every posterior's
fit / predict / save on the device and loading back onto the host; Thompson sampling with a
posterior on the device; decisions that never wait for the device (``act`` reads functions
copied to the host once per refit); and the bench and the bandit runner with ``device="cuda"``.
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import uncertain_agents as ua
from uncertain_agents.agents import make_agent, run_bandit

pytestmark = pytest.mark.cuda

NAMES = ua.available_posteriors()


def _make(name: str, **kw):
    return ua.make_posterior(name, in_dim=3, out_dim=2, hidden=(8,), device="cuda", seed=0, **kw)


@pytest.mark.parametrize("name", NAMES)
def test_fit_predict_save_on_cuda_and_load_on_the_host(name, tmp_path):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 3, generator=g), torch.randn(64, 2, generator=g)
    post = _make(name)
    result = post.fit(x, y, steps=5, batch_size=16)
    assert len(result.losses) == result.steps and post.device.type == "cuda"
    pred = post.predict(x, n_samples=6)
    assert pred.mean.device.type == "cuda" and bool(torch.isfinite(pred.mean).all())
    path = tmp_path / "post.pt"
    post.save(path)
    host = ua.load_posterior(path)  # default map_location: the host
    assert host.device.type == "cpu"
    a = post.sample(3, generator=torch.Generator(device="cuda").manual_seed(1))(x.cuda()).cpu()
    b = ua.load_posterior(path, map_location="cuda").sample(
        3, generator=torch.Generator(device="cuda").manual_seed(1))(x.cuda()).cpu()
    assert torch.equal(a, b)


@pytest.mark.parametrize("posterior", ["mfvi", "ensemble", "fsvgd"])
def test_thompson_sampling_with_a_cuda_posterior_decides_without_waiting_for_the_device(posterior):
    agent = make_agent("thompson", n_actions=5, context_dim=2, posterior=posterior, device="cuda", seed=0,
                       train_every=20, train_steps=10)
    env = gym.make("envs:WheelBandit-v0", delta=0.5)
    frame = run_bandit(env, agent, steps=60, seed=0)  # three refits on the device
    assert agent.posterior.device.type == "cuda"
    assert frame["action"].between(0, 4).all() and len(frame) == 60
    # between refits a decision is host arithmetic on functions copied once per refit:
    # no operation that synchronises with the device may run in ``act``
    context = torch.zeros(2).numpy()
    agent.act(context)  # draws the next batch of functions if needed (a copy to the host)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            assert 0 <= agent.act(context) < 5
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_bandit_runner_on_cuda_matches_its_own_rerun():
    from uncertain_agents.agents.experiment import AgentSpec, run_experiment

    specs = [AgentSpec("thompson", posterior="mfvi")]
    runs = [run_experiment("wheel", specs, steps=60, trials=1, seed=3, delta=0.5, train_every=20, train_steps=10,
                           device="cuda") for _ in range(2)]
    assert runs[0]["action"].tolist() == runs[1]["action"].tolist()


def test_bench_runs_on_cuda():
    from uncertain_agents.bench import all_finite_positive, run_bench

    result = run_bench("boston", ["mfvi", "ensemble"], rounds=1, steps=3, act_calls=20, device="cuda")
    assert result["device"].startswith("cuda") and all_finite_positive(result)


#: the bootstrap as the fsvgd-paper preset trains it (Riquelme et al.'s BootRMS): TF RMSProp, decaying rate
RIQUELME_BOOTSTRAP = {"n_members": 4, "scheme": "bernoulli", "inclusion": 0.95, "init_uniform": 0.3, "use_prior": False,
                      "objective": "squared-error", "noise_std": 0.1, "clip_norm": 5.0, "optimizer": "rmsprop",
                      "lr_decay": 0.5}
GRAPH_SAFE = [("mfvi", {}), ("bb-alpha", {}), ("dropout-alpha", {}), ("map", {}), ("ensemble", {}), ("bootstrap", {}),
              ("bootstrap", RIQUELME_BOOTSTRAP),
              ("fsvgd", {"noise_std": 0.1}), ("svgd", {"noise_std": 0.1})]  # particles: staged steps


def _regression(n=256):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    y = torch.cat([torch.sin(2 * x[:, :1]), x[:, 1:2] * x[:, 2:]], 1) + 0.1 * torch.randn(n, 2, generator=g)
    return x, y


@pytest.mark.parametrize("name,options", GRAPH_SAFE)
def test_a_cuda_graph_fit_captures_its_step_and_trains_like_an_eager_fit(name, options):
    import warnings

    x, y = _regression()
    eager_post, graphed_post, again_post = _make(name, **options), _make(name, **options), _make(name, **options)
    eager = eager_post.fit(x, y, steps=300, batch_size=64, cuda_graph=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a failed capture warns: fail instead
        graphed = graphed_post.fit(x, y, steps=300, batch_size=64, cuda_graph=True)
        again = again_post.fit(x, y, steps=300, batch_size=64, cuda_graph=True)
        refit = graphed_post.fit(x, y, steps=50, batch_size=64, cuda_graph=True)  # warm refit: a new capture
    assert getattr(graphed_post, "_cuda_graph_failure", None) is None
    assert graphed_post._cuda_graph_captures == 2  # the fit and the refit
    assert torch.isfinite(torch.as_tensor(graphed.losses)).all() and torch.isfinite(torch.as_tensor(refit.losses)).all()
    assert torch.equal(torch.as_tensor(graphed.losses), torch.as_tensor(again.losses))  # reproducible
    if name in ("map", "ensemble", "bootstrap"):
        # nothing random inside these steps: the replayed steps are the eager steps
        torch.testing.assert_close(torch.as_tensor(graphed.losses), torch.as_tensor(eager.losses),
                                   rtol=1e-4, atol=1e-5)
    late_graphed, late_eager = float(graphed.losses[-100:].mean()), float(eager.losses[-100:].mean())
    assert late_graphed < float(graphed.losses[:10].mean())  # it learned
    assert abs(late_graphed - late_eager) <= 0.1 * abs(late_eager) + 0.05
    pred = graphed_post.predict(x, n_samples=8)
    assert bool(torch.isfinite(pred.mean).all())


def test_refined_vi_replays_its_vi_phase_and_refines_eagerly():
    """Refined VI's refinement resets its optimiser and sets a new rate every refinement step, so
    that phase trains eagerly (``Phase.graph_safe=False``) while the VI phase is still replayed:
    no failed capture (session 34's GPU check found one, which then left every later fit eager)."""
    import warnings

    x, y = _regression()
    post = _make("refined-vi")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        first = post.fit(x, y, steps=200, batch_size=64, cuda_graph=True)
        refit = post.fit(x, y, steps=60, batch_size=64, cuda_graph=True)
    assert getattr(post, "_cuda_graph_failure", None) is None
    assert post._cuda_graph_captures == 2  # the VI phase of each fit, never the refinement
    assert bool(post.refined)
    assert torch.isfinite(torch.as_tensor(first.losses)).all() and torch.isfinite(torch.as_tensor(refit.losses)).all()


def test_a_graphed_rmsprop_fit_replays_the_decaying_learning_rate():
    """TF RMSProp with an inverse-time decay (the preset bootstrap) is graphed on CUDA: its rate is a
    device tensor written before every replay, so the graphed fit follows the eager one step by step."""
    x, y = _regression()
    eager_post, graphed_post = _make("bootstrap", **RIQUELME_BOOTSTRAP), _make("bootstrap", **RIQUELME_BOOTSTRAP)
    eager = eager_post.fit(x, y, steps=40, batch_size=64, lr=0.1, cuda_graph=False)
    graphed = graphed_post.fit(x, y, steps=40, batch_size=64, lr=0.1, cuda_graph=True)
    assert graphed_post._cuda_graph_captures == 1
    rate = graphed_post.optimizer_set.optimizers["main"].param_groups[0]["lr"]
    assert isinstance(rate, torch.Tensor) and rate.is_cuda
    assert float(rate) == pytest.approx(0.1 / (1 + 0.5 * 39), rel=1e-6)  # the last step's rate
    torch.testing.assert_close(torch.as_tensor(graphed.losses), torch.as_tensor(eager.losses), rtol=1e-4, atol=1e-5)
    for a, b in zip(eager_post.state_dict().values(), graphed_post.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_cuda_graphs_from_the_environment_reach_the_bandit_agents(monkeypatch):
    from uncertain_agents.posteriors.cuda_graphs import ENV_VAR

    monkeypatch.setenv(ENV_VAR, "1")
    actions = []
    for _ in range(2):
        agent = make_agent("thompson", n_actions=5, context_dim=2, posterior="bootstrap", device="cuda", seed=0,
                           train_every=20, train_steps=10)
        frame = run_bandit(gym.make("envs:WheelBandit-v0", delta=0.5), agent, steps=60, seed=0)
        assert getattr(agent.posterior, "_cuda_graph_captures", 0) >= 2  # refits at 20 and 40 decisions
        actions.append(frame["action"].tolist())
    assert actions[0] == actions[1]


def test_runs_in_threads_on_cuda_streams_match_one_by_one():
    """parallel="threads" on CUDA: every run on its own stream (graphs captured per thread, in
    thread-local mode) while the others keep launching; each run equals its one-by-one rerun."""
    from uncertain_agents.agents.experiment import AgentSpec, run_experiment

    specs = [AgentSpec("thompson", posterior="mfvi"), AgentSpec("thompson", posterior="bootstrap"),
             AgentSpec("thompson", posterior="fsvgd", options={"noise_std": 0.1})]
    kwargs = dict(steps=80, trials=2, seed=3, delta=0.5, train_every=20, train_steps=12, device="cuda")
    serial = run_experiment("wheel", specs, **kwargs)
    threaded = run_experiment("wheel", specs, workers=6, parallel="threads", **kwargs)
    assert threaded["label"].tolist() == serial["label"].tolist()
    assert threaded["action"].tolist() == serial["action"].tolist()


@pytest.mark.parametrize("name", ["mfvi", "bb-alpha", "dropout-alpha", "bootstrap", "fsvgd"])
def test_trial_batched_fits_capture_their_step_on_cuda(name):
    """A trial-batched posterior (posteriors/trials.py) is graph-safe like its method: its fit on
    CUDA captures one step for all trials and trains every trial."""
    from uncertain_agents.posteriors.trials import make_trial_posterior

    options = {"mfvi": {}, "bb-alpha": {"train_samples": 4}, "dropout-alpha": {"train_samples": 4},
               "bootstrap": {"n_members": 4}, "fsvgd": {"n_particles": 4}}[name]
    post = make_trial_posterior(name, trials=3, in_dim=3, out_dim=2, hidden=(16, 16), seed=0, noise_std=0.1,
                                device="cuda", **options)
    post.set_units()
    x, y = _regression()
    xs, ys = x.cuda().expand(3, -1, -1), y.cuda().expand(3, -1, -1)
    result = post.fit(xs, ys, steps=60, batch_size=64)
    assert getattr(post, "_cuda_graph_failure", None) is None and post._cuda_graph_captures == 1
    assert result.losses[-1] < result.losses[0]
    assert len(post.sample_trials(4)) == 3


def test_refits_with_graphs_reuse_the_posteriors_memory_pool():
    """Every fit captures a new graph; they share the posterior's pool, so memory stays flat over
    many refits (per-capture pools piled up to 126 GiB over a 50,000-decision table, session 18)."""
    from uncertain_agents.posteriors.trials import make_trial_posterior

    post = make_trial_posterior("bootstrap", trials=4, in_dim=3, out_dim=2, hidden=(64, 64), seed=0,
                                noise_std=0.1, n_members=8, device="cuda")
    post.set_units()
    x, y = _regression(n=600)
    xs, ys = x.cuda().expand(4, -1, -1), y.cuda().expand(4, -1, -1)
    reserved = []
    for _ in range(30):
        post.fit(xs, ys, steps=8, batch_size=128)
        reserved.append(torch.cuda.memory_reserved())
    assert post._cuda_graph_captures == 30
    assert reserved[-1] <= reserved[9] * 1.1 + 8 * 2**20


def test_trial_batched_lockstep_runs_on_cuda_decide_a_window_at_a_time_and_repeat():
    """parallel="batched" on CUDA (agents/lockstep.py): the drawn functions and the window's forward
    stay on the device and only the ``[R, W]`` actions come to the host; a rerun gives the same
    actions, and every trial's regret is finite and its actions legal."""
    from uncertain_agents.agents.experiment import AgentSpec, run_experiment

    specs = [AgentSpec("thompson", posterior="mfvi"), AgentSpec("thompson", posterior="bootstrap"),
             AgentSpec("thompson", posterior="fsvgd", options={"noise_std": 0.1})]
    kwargs = dict(steps=90, trials=3, seed=5, delta=0.5, train_every=20, train_steps=12, device="cuda",
                  parallel="batched")
    first = run_experiment("wheel", specs, **kwargs)
    again = run_experiment("wheel", specs, **kwargs)
    assert first["action"].tolist() == again["action"].tolist()
    assert first["action"].between(0, 4).all()
    assert bool(np.isfinite(first["regret"].to_numpy(dtype=float)).all())


@pytest.mark.parametrize("shape", [(8, 8), (10, 20, 20)])
def test_a_steps_clipped_precision_on_the_host_matches_the_devices(shape):
    """f-SVGD's eager stage computes a small CUDA covariance's clipped precision with the host's LAPACK
    (``function_prior.clipped_precision_for_step``): the same matrix as cuSOLVER's to rounding, on the
    device, also when the clip is active (a rank-deficient covariance: 3 draws of K values)."""
    from uncertain_agents.posteriors import function_prior as fp

    g = torch.Generator(device="cuda").manual_seed(0)
    draws = torch.randn(*shape[:-2], 3, shape[-1], device="cuda", dtype=torch.float64, generator=g)
    cov = fp.moment_match(draws)[1]
    on_host = fp.clipped_precision_for_step(cov, 1e-3)
    on_device = fp.clipped_precision(cov, 1e-3)
    assert on_host.device == cov.device and on_host.dtype == torch.float64
    assert torch.allclose(on_host, on_device, rtol=1e-9, atol=1e-9)
    assert float(on_host.diagonal(dim1=-2, dim2=-1).max()) > 100  # the clip at 1e-3 acted


@pytest.mark.parametrize("shape", [(8, 8), (10, 20, 20)])
def test_the_iterative_clip_on_the_device_matches_cusolvers(shape):
    """``function_prior.clipped_precision_iterative`` (matrix products only) on CUDA: cuSOLVER's eigen-clip to
    rounding, with the clip acting (3 draws of K values) and with it idle (many draws, scaled up as the
    ``fsvgd-paper`` covariances are: ‖C‖ / floor about 1e8)."""
    from uncertain_agents.posteriors import function_prior as fp

    g = torch.Generator(device="cuda").manual_seed(0)
    for n_draws, scale in ((3, 1.0), (200, 30.0)):
        draws = scale * torch.randn(*shape[:-2], n_draws, shape[-1], device="cuda", dtype=torch.float64, generator=g)
        cov = fp.moment_match(draws)[1]
        iterative = fp.clipped_precision_iterative(cov, 1e-4)
        on_device = fp.clipped_precision(cov, 1e-4)
        assert iterative.device == cov.device and iterative.dtype == torch.float64
        rel = float((iterative - on_device).norm() / on_device.norm())
        assert rel < 1e-7, rel


@pytest.mark.parametrize("trials", [None, 3])
def test_an_fsvgd_step_with_the_iterative_clip_is_one_graph(monkeypatch, trials):
    """With ``function_prior.STEP_CLIP = "iterative"`` f-SVGD's staged step has no eager stage, so its CUDA
    capture is one segment (no host synchronisation per step), for one trial and for a trial batch; it
    trains like the eager-stage step."""
    from uncertain_agents.posteriors import cuda_graphs
    from uncertain_agents.posteriors import function_prior as fp
    from uncertain_agents.posteriors.trials import make_trial_posterior

    segments = []
    original = cuda_graphs.GraphedStep

    class CountingGraphedStep(original):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            segments.append(len(self.segments))

    monkeypatch.setattr(cuda_graphs, "GraphedStep", CountingGraphedStep)
    x, y = _regression()
    losses = {}
    for clip in ("eager", "iterative"):
        monkeypatch.setattr(fp, "STEP_CLIP", clip)
        if trials is None:
            post = _make("fsvgd", noise_std=0.1, n_particles=8)
            result = post.fit(x, y, steps=120, batch_size=64, cuda_graph=True)
        else:
            post = make_trial_posterior("fsvgd", trials=trials, in_dim=3, out_dim=2, hidden=(16, 16), seed=0,
                                        noise_std=0.1, n_particles=4, device="cuda")
            post.set_units()
            result = post.fit(x.cuda().expand(trials, -1, -1), y.cuda().expand(trials, -1, -1), steps=120,
                              batch_size=64)
        assert getattr(post, "_cuda_graph_failure", None) is None and post._cuda_graph_captures == 1
        losses[clip] = torch.as_tensor(result.losses)
    assert segments == [2, 1]  # the eager stage splits the step in two; the iterative clip does not
    late = {k: float(v[-40:].mean()) for k, v in losses.items()}
    assert late["iterative"] < float(losses["iterative"][:10].mean())  # it learned
    assert abs(late["iterative"] - late["eager"]) <= 0.1 * abs(late["eager"]) + 0.05


@pytest.mark.parametrize("name,options", [("mfvi", {}), ("fsvgd", {"noise_std": 0.1}),
                                          ("bootstrap", {"optimizer": "rmsprop", "lr_decay": 0.5})])
def test_a_posterior_saved_on_cuda_resumes_training_there(name, options, tmp_path):
    """posteriors/resume.py on the device: the CUDA generator's state and the optimisers' moments come back
    with ``map_location="cuda"`` (RMSProp's capturable rate included), so the resumed fit, graphed as the
    original's, follows the original's continuation; loaded on the host it still loads and trains."""
    x, y = _regression()
    post = _make(name, **options)
    post.fit(x, y, steps=40, batch_size=64)
    post.save(tmp_path / "post.pt")
    same = ua.load_posterior(tmp_path / "post.pt", map_location="cuda")
    go_on, resumed = post.fit(x, y, steps=40, batch_size=64), same.fit(x, y, steps=40, batch_size=64)
    torch.testing.assert_close(torch.as_tensor(resumed.losses), torch.as_tensor(go_on.losses), rtol=1e-5, atol=1e-6)
    assert getattr(same, "_cuda_graph_failure", None) is None
    host = ua.load_posterior(tmp_path / "post.pt")
    assert np.isfinite(host.fit(x.cpu(), y.cpu(), steps=5, batch_size=64).losses).all()


@pytest.mark.parametrize("name", NAMES)
def test_a_posterior_constructed_directly_lives_on_the_device_it_was_given(name):
    """``Cls(spec, device="cuda")`` moves the finished posterior, as ``make_posterior`` does (it used to
    stay on the host)."""
    from uncertain_agents.network import MLPSpec
    from uncertain_agents.registry import POSTERIORS

    post = POSTERIORS.get(name)(MLPSpec(3, 2, (8,)), "gaussian", device="cuda", seed=0)
    assert post.device.type == "cuda"
    assert all(p.device.type == "cuda" for p in post.parameters())
    ref = ua.make_posterior(name, in_dim=3, out_dim=2, hidden=(8,), device="cuda", seed=0)
    for (k, a), (_, b) in zip(post.state_dict().items(), ref.state_dict().items()):
        assert torch.equal(a, b), k
