"""CUDA-graph training steps (posteriors/cuda_graphs.py): the switch, the fallbacks, and the
training loop's use of a captured step — checked on the CPU with a stand-in for the graph
that replays by calling the step again (the capture itself is checked in tests/test_cuda.py).
"""
from __future__ import annotations

import gc
import inspect
import warnings
import weakref

import pytest
import torch

import uncertain_agents as ua
from uncertain_agents.posteriors import cuda_graphs, training
from uncertain_agents.posteriors.cuda_graphs import (ENV_VAR, REFIT_WARMUP_STEPS, WARMUP_STEPS,
                                                     cuda_graphs_requested, run_stages_eagerly, warmup_steps)
from uncertain_agents.registry import POSTERIORS


def _data(n=96):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, generator=g), torch.randn(n, 2, generator=g)


def _make(name="mfvi", **kw):
    return ua.make_posterior(name, in_dim=3, out_dim=2, hidden=(8,), seed=0, **kw)


def test_switch_follows_the_argument_then_the_environment(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert cuda_graphs_requested(None) is True  # on by default (where a fit can use it)
    assert cuda_graphs_requested(False) is False
    monkeypatch.setenv(ENV_VAR, "0")
    assert cuda_graphs_requested(None) is False
    assert cuda_graphs_requested(True) is True
    monkeypatch.setenv(ENV_VAR, "off")
    assert cuda_graphs_requested(None) is False
    monkeypatch.setenv(ENV_VAR, "1")
    assert cuda_graphs_requested(None) is True
    with pytest.raises(TypeError, match="cuda_graph"):
        cuda_graphs_requested("yes")


def test_graph_safe_methods_are_declared():
    safe = {name for name in ua.available_posteriors() if _make(name).graph_safe_step}
    assert {"mfvi", "bb-alpha", "dropout-alpha", "map", "ensemble", "bootstrap"} <= safe
    # particles: capturable unless a learned noise is fitted on held-out rows (counted on the host)
    for name in ("fsvgd", "svgd"):
        assert not _make(name).graph_safe_step
        assert _make(name, noise_std=0.1).graph_safe_step
        assert _make(name, noise_holdout=0.0).graph_safe_step
        assert _make(name, likelihood="categorical").graph_safe_step
        assert _make(name).training_stages is not None  # f-SVGD's eigh runs between two segments


@pytest.mark.parametrize("name", ["fsvgd", "svgd"])
def test_a_staged_step_run_eagerly_or_through_the_loop_trains_exactly_as_before(monkeypatch, name):
    x, y = _data()
    eager_post = _make(name, noise_std=0.1)
    eager = eager_post.fit(x, y, steps=12, batch_size=16, cuda_graph=False)
    _pretend_graphs_work(monkeypatch)
    post = _make(name, noise_std=0.1)
    graphed = post.fit(x, y, steps=12, batch_size=16, cuda_graph=True)
    assert _ReplayByCalling.captures == [16] and all(_ReplayByCalling.staged)
    assert len(_ReplayByCalling.staged) == 12 - WARMUP_STEPS
    assert torch.equal(torch.as_tensor(eager.losses), torch.as_tensor(graphed.losses))
    for (k, a), b in zip(eager_post.state_dict().items(), post.state_dict().values()):
        assert torch.equal(a, b), k


def test_requesting_graphs_on_a_cpu_posterior_warns_and_trains_exactly_as_eager(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    x, y = _data()
    eager = _make().fit(x, y, steps=12, batch_size=16)
    with pytest.warns(RuntimeWarning, match="CUDA posterior"):
        asked = _make().fit(x, y, steps=12, batch_size=16, cuda_graph=True)
    assert torch.equal(torch.as_tensor(eager.losses), torch.as_tensor(asked.losses))
    monkeypatch.setenv(ENV_VAR, "1")  # the default applies where it can, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = _make().fit(x, y, steps=12, batch_size=16)
    assert torch.equal(torch.as_tensor(eager.losses), torch.as_tensor(quiet.losses))


class _ReplayByCalling:
    """Stand-in for GraphedStep: runs the step once when built, then 'replays' by calling the
    step on its own index buffer (driving a staged step's generator eagerly)."""

    captures: list[int] = []
    staged: list[bool] = []
    pools: list = []

    def __init__(self, step, index_like, generator, pool=None, side_stream=None):
        self.step, self.index = step, torch.empty_like(index_like)
        _ReplayByCalling.pools.append(pool)
        _ReplayByCalling.captures.append(index_like.numel())
        self.outputs = self(index_like)

    def __call__(self, index):
        self.index.copy_(index)
        out = self.step(self.index)
        _ReplayByCalling.staged.append(inspect.isgenerator(out))
        return run_stages_eagerly(out) if inspect.isgenerator(out) else out


class _StubStream:
    """Stands for the CUDA stream current before a capture (CPU tests)."""

    def __init__(self) -> None:
        self.synchronized = 0

    def synchronize(self) -> None:
        self.synchronized += 1


ENTRY_STREAM = _StubStream()


def _pretend_graphs_work(monkeypatch, graph_cls=_ReplayByCalling):
    monkeypatch.setattr(training, "graph_unavailable_reason", lambda post: None)
    monkeypatch.setattr(cuda_graphs, "GraphedStep", graph_cls)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ENTRY_STREAM)
    monkeypatch.setattr(torch.cuda, "MemPool", lambda: object())  # a stand-in pool (CPU tests)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: object())  # and side stream
    _ReplayByCalling.captures = []
    _ReplayByCalling.staged = []
    _ReplayByCalling.pools = []


@pytest.mark.parametrize("name", ["mfvi", "bootstrap", "bb-alpha", "dropout-alpha"])
def test_the_loop_with_a_captured_step_trains_exactly_as_eager(monkeypatch, name):
    x, y = _data()
    eager_post = _make(name)
    eager = eager_post.fit(x, y, steps=20, batch_size=16)
    eager_again = eager_post.fit(x, y, steps=7, batch_size=16)
    _pretend_graphs_work(monkeypatch)
    post = _make(name)
    graphed = post.fit(x, y, steps=20, batch_size=16, cuda_graph=True)
    graphed_again = post.fit(x, y, steps=7, batch_size=16, cuda_graph=True)
    # one capture per fit (one phase each), after the warm-up steps, on full-size minibatches
    assert _ReplayByCalling.captures == [16, 16]
    assert torch.equal(torch.as_tensor(eager.losses), torch.as_tensor(graphed.losses))
    assert torch.equal(torch.as_tensor(eager_again.losses), torch.as_tensor(graphed_again.losses))
    for (k, a), b in zip(eager_post.state_dict().items(), post.state_dict().values()):
        assert torch.equal(a, b), k


def test_refits_capture_after_one_warm_up_step_once_the_posterior_has_captured(monkeypatch):
    """The first capture waits WARMUP_STEPS eager steps (lazy initialisation); later fits (bandit
    refits) wait REFIT_WARMUP_STEPS, so a 100-step refit runs 99 steps from its graph."""
    _pretend_graphs_work(monkeypatch)
    x, y = _data()
    post = _make()
    assert warmup_steps(post) == WARMUP_STEPS
    post.fit(x, y, steps=10, batch_size=16, cuda_graph=True)
    assert len(_ReplayByCalling.staged) == 10 - WARMUP_STEPS
    assert warmup_steps(post) == REFIT_WARMUP_STEPS < WARMUP_STEPS
    post.fit(x, y, steps=10, batch_size=16, cuda_graph=True)
    assert len(_ReplayByCalling.staged) == (10 - WARMUP_STEPS) + (10 - REFIT_WARMUP_STEPS)
    assert warmup_steps(_make()) == WARMUP_STEPS  # a fresh posterior starts over
    # both captures allocate from the posterior's one pool (an earlier fit's graph memory is reused)
    assert len(_ReplayByCalling.pools) == 2 and _ReplayByCalling.pools[0] is _ReplayByCalling.pools[1]
    assert _ReplayByCalling.pools[0] is post._cuda_graph_pool


class _RecordsWhetherThePreviousGraphLives(_ReplayByCalling):
    """A stand-in that notes, at each capture, whether the previous capture's graph is still alive."""

    previous = None
    alive_at_capture: list = []

    def __init__(self, *args, **kwargs):
        before = type(self).previous
        type(self).alive_at_capture.append(None if before is None else before() is not None)
        super().__init__(*args, **kwargs)
        type(self).previous = weakref.ref(self)


def test_the_previous_fits_graph_lives_until_the_next_fit_captures(monkeypatch):
    """torch 2.11's pinned-host allocator asserts when a capture begins into a pool none of whose
    graphs is alive (measured on an H100: every refit's capture failed and left the generator
    mid-capture), so a posterior holds its newest graph until the next one is captured."""
    _pretend_graphs_work(monkeypatch, _RecordsWhetherThePreviousGraphLives)
    _RecordsWhetherThePreviousGraphLives.previous = None
    _RecordsWhetherThePreviousGraphLives.alive_at_capture = []
    x, y = _data()
    post = _make("bootstrap")
    for _ in range(3):
        post.fit(x, y, steps=6, batch_size=16, cuda_graph=True)
    gc.collect()
    assert _RecordsWhetherThePreviousGraphLives.alive_at_capture == [None, True, True]
    assert post._cuda_graph_latest is _RecordsWhetherThePreviousGraphLives.previous()


def test_a_fit_shorter_than_the_warm_up_never_captures(monkeypatch):
    _pretend_graphs_work(monkeypatch)
    x, y = _data()
    _make().fit(x, y, steps=WARMUP_STEPS, batch_size=16, cuda_graph=True)
    assert _ReplayByCalling.captures == []


def test_a_failed_capture_warns_once_and_the_posterior_trains_eagerly_from_then_on(monkeypatch):
    class _FailingCapture:
        def __init__(self, step, index_like, generator, pool=None, side_stream=None):
            raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(training, "graph_unavailable_reason", lambda post: None)
    monkeypatch.setattr(cuda_graphs, "GraphedStep", _FailingCapture)
    entry = _StubStream()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: entry)
    monkeypatch.setattr(torch.cuda, "MemPool", lambda: object())
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: object())
    restored = []
    monkeypatch.setattr(torch.cuda, "set_stream", restored.append)
    x, y = _data()
    eager = _make().fit(x, y, steps=15, batch_size=16, cuda_graph=False)
    post = _make()
    with pytest.warns(RuntimeWarning, match="capturing its training step in a CUDA graph failed"):
        failed = post.fit(x, y, steps=15, batch_size=16, cuda_graph=True)
    assert "not permitted" in post._cuda_graph_failure
    # the stream current before the attempt is current again, and waited for (not the whole device)
    assert restored == [entry] and entry.synchronized == 1
    assert torch.equal(torch.as_tensor(eager.losses), torch.as_tensor(failed.losses))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second attempt, no second warning
        post.fit(x, y, steps=15, batch_size=16, cuda_graph=True)


def test_graphs_are_the_default_where_they_apply_and_the_environment_turns_them_off(monkeypatch):
    _pretend_graphs_work(monkeypatch)
    x, y = _data()
    monkeypatch.delenv(ENV_VAR, raising=False)
    _make().fit(x, y, steps=10, batch_size=16)
    assert _ReplayByCalling.captures == [16]
    monkeypatch.setenv(ENV_VAR, "0")
    _make().fit(x, y, steps=10, batch_size=16)
    assert _ReplayByCalling.captures == [16]  # no second capture


#: every graph-safe (method, likelihood, options): the particle methods' learned regression noise is a
#: separate step, not graph-safe (asserted in test_graph_safe_methods_are_declared above)
GRAPH_SAFE_CASES = [(name, likelihood, options)
                    for name in ["mfvi", "bb-alpha", "map", "ensemble", "bootstrap", "fsvgd", "svgd"]
                    for likelihood, options in [("gaussian", {}), ("gaussian", {"noise_std": 0.1}), ("categorical", {})]
                    if not (name in ("fsvgd", "svgd") and likelihood == "gaussian" and not options)]


@pytest.mark.parametrize("name,likelihood,options", GRAPH_SAFE_CASES)
def test_every_step_of_a_graph_safe_method_after_the_first_takes_the_capturable_optimiser_path(
        monkeypatch, name, likelihood, options):
    # torch.optim's own Adam step refuses CUDA-graph capture unless built capturable; the direct
    # fused call is capturable. Session 17's GPU run found the point estimates' steps on the stock
    # path (an unused parameter without a gradient); this checks the path on the CPU.
    from uncertain_agents.posteriors.fused_adam import DirectFusedAdam

    paths = []
    original = DirectFusedAdam.step

    def recording_step(self, closure=None):
        paths.append(self._direct_lists() is not None)
        return original(self, closure)

    monkeypatch.setattr(DirectFusedAdam, "step", recording_step)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=g)
    y = (x[:, 0] > 0).long() if likelihood == "categorical" else torch.randn(64, 2, generator=g)
    post = ua.make_posterior(name, in_dim=3, out_dim=2, hidden=(8,), seed=0, likelihood=likelihood, **options)
    assert post.graph_safe_step
    post.fit(x, y, steps=6, batch_size=16)
    n_groups = len(post.optimizer_set.optimizers)
    assert len(paths) == 6 * n_groups
    assert all(paths[n_groups:]), paths  # every step but the first (which creates the state)


def test_rmsprop_with_a_decaying_rate_may_be_graphed_and_adam_with_one_may_not():
    """The preset bootstrap (TF RMSProp, inverse-time decay) keeps its rate in a device tensor that a
    replay reads (optimizers.TFRMSProp on CUDA), so the optimiser no longer rules graphs out; fused
    Adam takes its rate as a number fixed at capture, so Adam with a decay still trains eagerly."""
    from types import SimpleNamespace

    def reason(**kw):
        return cuda_graphs.graph_unavailable_reason(
            SimpleNamespace(device=torch.device("cuda"), graph_safe_step=True, name="bootstrap", **kw))

    assert "lr_decay" in reason(optimizer="adam", lr_decay=0.5)
    for kw in ({"optimizer": "rmsprop", "lr_decay": 0.5}, {"optimizer": "rmsprop", "lr_decay": 0.0},
               {"optimizer": "adam", "lr_decay": 0.0}):
        r = reason(**kw)
        assert r is None or "learning rate" not in r  # only the torch build can still say no
    cpu = _make("bootstrap", optimizer="rmsprop", lr_decay=0.5)
    cpu.fit(*_data(), steps=3, batch_size=16)
    assert isinstance(cpu.optimizer_set.optimizers["main"].param_groups[0]["lr"], float)  # CPU: as before


def test_set_group_lr_writes_a_tensor_rate_in_place():
    from uncertain_agents.posteriors.optimizers import set_group_lr

    rate = torch.tensor(0.1)
    group = {"lr": rate}
    set_group_lr(group, 0.025)
    assert group["lr"] is rate and float(rate) == pytest.approx(0.025)
    plain = {"lr": 0.1}
    set_group_lr(plain, 0.05)
    assert plain["lr"] == 0.05


def test_cuda_graph_status_of_a_cpu_posterior_reports_no_capture():
    from uncertain_agents.posteriors.cuda_graphs import cuda_graph_status

    post = ua.make_posterior("mfvi", in_dim=2, out_dim=1, hidden=(4,), seed=0)
    post.fit(torch.randn(8, 2), torch.randn(8, 1), steps=2, batch_size=4)
    assert cuda_graph_status(post) == {"captures": 0, "failure": None}
    post._cuda_graph_failure = "RuntimeError: x"     # what a failed capture records
    assert cuda_graph_status(post) == {"captures": 0, "failure": "RuntimeError: x"}
