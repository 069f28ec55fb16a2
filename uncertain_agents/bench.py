"""Speed benchmark: each posterior's training step and ``predict`` against a plain PyTorch MLP
of the same size, and the ``act`` latency of Thompson sampling.

Everything is measured in one run on the same data; the candidates are interleaved round by
round (so a change of machine load hits all of them alike) and the median over rounds is
reported. Only the public interface is used: :func:`~uncertain_agents.make_posterior`,
``Posterior.fit`` / ``predict``, and an agent's ``act`` / ``update``. The ``uncertain-agents
bench`` command prints and saves the result of :func:`run_bench`.
"""
from __future__ import annotations

import importlib.util
import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from .allocator import freed_memory_kept
from .posteriors.cuda_graphs import cuda_graphs_requested
from .runs import cpu_capability, processor_name


@dataclass(frozen=True)
class BenchNetwork:
    """A benchmark network: widths, the training batch and the likelihood."""

    name: str
    in_dim: int
    hidden: tuple[int, ...]
    out_dim: int
    batch: int
    likelihood: str = "gaussian"

    @property
    def label(self) -> str:
        """Widths as ``13-50-1``."""
        return "-".join(str(w) for w in (self.in_dim, *self.hidden, self.out_dim))


NETWORKS: dict[str, BenchNetwork] = {
    "boston": BenchNetwork("boston", 13, (50,), 1, 32),
    "bandit": BenchNetwork("bandit", 117, (100, 100), 2, 512),
    "mnist": BenchNetwork("mnist", 784, (400, 400), 10, 128, "categorical"),
}

PEERS = ("bayesian_torch", "pyro")
#: Variants timed besides every registered posterior by default: the issue's reference for the
#: particle methods (20 particles) is an ensemble of as many networks; and Bayes by Backprop
#: as Blundell et al. (2015) and the peers run it — one weight draw per minibatch, the ELBO —
#: which is ``bb-alpha`` at α = 0 with K = 1 (``mfvi`` uses the local reparameterisation,
#: per-example noise at twice the arithmetic), so each peer has a like-for-like row.
DEFAULT_VARIANTS = ("ensemble:n_members=20", "bb-alpha:alpha=0,train_samples=1")
PREDICT_SAMPLES = 100
PREDICT_INPUTS = 1000


def get_network(name: str) -> BenchNetwork:
    """The benchmark network ``name`` (``ValueError`` naming the choices otherwise)."""
    try:
        return NETWORKS[name]
    except KeyError:
        raise ValueError(f"unknown network {name!r}; choose one of {', '.join(NETWORKS)}") from None


def parse_candidate(text: str) -> tuple[str, str, dict]:
    """``"name"`` or ``"name:key=value,key=value"`` -> ``(label, registered name, options)``.

    Options are read by :func:`uncertain_agents.options.parse_posterior_spec` (Python literals
    such as ``20``, ``0.5``, ``[0.1, 1.0]``, ``'relu'``; ``true``/``false``/``none``; else plain
    strings); the label is the registered name followed by the options, e.g.
    ``ensemble:n_members=20``.
    """
    from .options import parse_posterior_spec
    from .registry import resolve_name

    name, options = parse_posterior_spec(text)
    canonical = resolve_name(name)
    label = canonical + (":" + ",".join(f"{k}={v}" for k, v in options.items()) if options else "")
    return label, canonical, options


def make_batch(net: BenchNetwork, n: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random inputs and targets for ``net`` (regression targets or class labels)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, net.in_dim, generator=g)
    if net.likelihood == "categorical":
        y = torch.randint(0, net.out_dim, (n,), generator=g)
    else:
        y = torch.randn(n, net.out_dim, generator=g)
    return x, y


def plain_mlp(net: BenchNetwork, *, seed: int = 0) -> nn.Sequential:
    """A plain ReLU MLP with ``net``'s widths."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    width = net.in_dim
    for h in net.hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, net.out_dim))


def plain_step_fn(net: BenchNetwork, x: torch.Tensor, y: torch.Tensor, *, steps: int,
                  lr: float = 1e-3) -> Callable[[], None]:
    """``steps`` Adam steps of a plain MLP on the batch ``(x, y)`` (MSE or cross-entropy),
    on ``x``'s device."""
    model = plain_mlp(net).to(x.device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.functional.cross_entropy if net.likelihood == "categorical" else nn.functional.mse_loss

    def run() -> None:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
    return run


def plain_predict_fn(net: BenchNetwork, x: torch.Tensor, *, n_samples: int = PREDICT_SAMPLES) -> Callable[[], None]:
    """The reference for ``predict``: ``n_samples`` forward passes of the plain MLP on ``x``
    (on ``x``'s device)."""
    model = plain_mlp(net).to(x.device)

    @torch.no_grad()
    def run() -> None:
        torch.stack([model(x) for _ in range(n_samples)]).mean(0)
    return run


def posterior_step_fn(post, x: torch.Tensor, y: torch.Tensor, *, steps: int) -> Callable[[], None]:
    """``steps`` optimiser steps through the public ``fit``, one whole batch ``x`` per step."""
    return lambda: post.fit(x, y, steps=steps, batch_size=x.shape[0])


def posterior_predict_fn(post, x: torch.Tensor, *, n_samples: int = PREDICT_SAMPLES) -> Callable[[], None]:
    """One ``predict`` with ``n_samples`` functions at ``x``."""
    return lambda: post.predict(x, n_samples=n_samples)


def interleaved(fns: dict[str, Callable[[], object]], *, rounds: int, warmup: int = 1,
                sync: Callable[[], None] = lambda: None) -> dict[str, list[float]]:
    """Seconds per call of each candidate, ``rounds`` times, the candidates taking turns within
    each round; ``warmup`` untimed calls each first."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
        sync()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            sync()
            samples[name].append(time.perf_counter() - t0)
    return samples


def act_latency_us(posterior: str | None, net: BenchNetwork, *, calls: int = 500, seed: int = 0,
                   device: str = "cpu", options: dict | None = None, agent: str = "thompson") -> dict[str, float]:
    """Median and mean latency (µs) of ``agent.act`` on one context, after a first fit.

    The agent (default Thompson sampling with ``posterior``; ``posterior=None`` for agents
    without one, e.g. ``"linear"``) has ``net``'s context width and hidden layers and
    ``max(2, out_dim)`` arms; it sees its round-robin warm-up (with one optimiser step per
    refit, so setting it up is quick) and then only acts. The occasional batched draw of
    functions after a refit is included in the mean.
    """
    from .agents import make_agent

    n_actions = max(2, net.out_dim)
    kwargs = dict(hidden=net.hidden, device=device, seed=seed)
    if posterior is not None:
        kwargs.update(posterior=posterior, posterior_options=options, train_steps=1)
    elif agent == "neural-linear":
        kwargs.update(train_steps=1)
    made = make_agent(agent, n_actions=n_actions, context_dim=net.in_dim, **kwargs)
    rng = np.random.default_rng(seed)
    for _ in range(max(getattr(made, "warmup", 0), 0) + max(getattr(made, "train_every", 1), 1) + 1):
        ctx = rng.standard_normal(net.in_dim).astype(np.float32)
        made.update(ctx, made.act(ctx), float(rng.standard_normal()))
    ctx = rng.standard_normal(net.in_dim).astype(np.float32)
    for _ in range(min(20, calls)):
        made.act(ctx)
    times = np.empty(calls)
    for i in range(calls):
        t0 = time.perf_counter_ns()
        made.act(ctx)
        times[i] = time.perf_counter_ns() - t0
    return {"act_median_us": float(np.median(times)) / 1e3, "act_mean_us": float(times.mean()) / 1e3}


#: Agents whose ``act`` is timed besides Thompson sampling with each posterior.
OTHER_AGENTS = (("uniform", None), ("linear", None), ("neural-linear", None), ("greedy", "mfvi"))


def available_peers() -> dict[str, bool]:
    """Which peer libraries (bayesian-torch, pyro) can be imported here (nothing is imported)."""
    return {name: importlib.util.find_spec(name) is not None for name in PEERS}


def peer_step_fns(net: BenchNetwork, x: torch.Tensor, y: torch.Tensor, *, steps: int) -> dict[str, Callable[[], None]]:
    """Mean-field VI training steps of the peers that are installed (Bayes-by-backprop, one
    sample, same widths, Adam), keyed ``peer:NAME``; the missing ones are left out."""
    have = available_peers()
    fns: dict[str, Callable[[], None]] = {}
    if have["bayesian_torch"]:
        fns["peer:bayesian-torch"] = _bayesian_torch_step(net, x, y, steps=steps)
    if have["pyro"]:
        fns["peer:pyro"] = _pyro_step(net, x, y, steps=steps)
    return fns


def _bayesian_torch_step(net: BenchNetwork, x, y, *, steps: int) -> Callable[[], None]:
    from bayesian_torch.models.dnn_to_bnn import dnn_to_bnn, get_kl_loss

    model = plain_mlp(net)
    dnn_to_bnn(model, {"prior_mu": 0.0, "prior_sigma": 1.0, "posterior_mu_init": 0.0,
                       "posterior_rho_init": -3.0, "type": "Reparameterization", "moped_enable": False})
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.functional.cross_entropy if net.likelihood == "categorical" else nn.functional.mse_loss

    def run() -> None:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            (loss_fn(model(x), y) + get_kl_loss(model) / x.shape[0]).backward()
            opt.step()
    return run


def _pyro_step(net: BenchNetwork, x, y, *, steps: int) -> Callable[[], None]:
    import pyro
    import pyro.distributions as dist
    from pyro.infer import SVI, Trace_ELBO
    from pyro.infer.autoguide import AutoNormal
    from pyro.nn import PyroSample
    from pyro.nn.module import to_pyro_module_

    pyro.clear_param_store()
    model = plain_mlp(net)
    to_pyro_module_(model)  # the Sequential and its Linear layers become PyroModules, in place
    for layer in model:
        if isinstance(layer, nn.Linear):
            layer.weight = PyroSample(dist.Normal(0.0, 1.0).expand(list(layer.weight.shape)).to_event(2))
            layer.bias = PyroSample(dist.Normal(0.0, 1.0).expand(list(layer.bias.shape)).to_event(1))

    def prob_model(x, y):
        out = model(x)
        with pyro.plate("data", x.shape[0]):
            if net.likelihood == "categorical":
                pyro.sample("obs", dist.Categorical(logits=out), obs=y)
            else:
                pyro.sample("obs", dist.Normal(out, 1.0).to_event(1), obs=y)

    svi = SVI(prob_model, AutoNormal(prob_model), pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())

    def run() -> None:
        for _ in range(steps):
            svi.step(x, y)
    return run


def run_bench(network: str = "bandit", posteriors: list[str] | None = None, *, rounds: int = 3, steps: int = 20,
              act_calls: int = 500, peers: bool = False, device: str = "cpu", seed: int = 0,
              progress: Callable[[str], None] | None = None) -> dict:
    """Measure every posterior in ``posteriors`` (default: all registered, and
    :data:`DEFAULT_VARIANTS`) on ``network``; an entry may carry options, ``"name:key=value"``
    (:func:`parse_candidate`).

    Training: ``steps`` optimiser steps per timing (µs per step), the plain Adam MLP on the same
    batch as reference. Predict: ``predict`` with 100 samples at 1,000 inputs, against 100 plain
    forward passes. All candidates are interleaved over ``rounds`` rounds; medians are reported.
    Then ``act`` latency of Thompson sampling with each posterior. ``progress(text)`` is told
    what is being measured. Returns a JSON-ready dict (see ``uncertain-agents bench``).
    """
    from .registry import available_posteriors, make_posterior

    net = get_network(network)
    candidates = {}
    for text in posteriors or [*available_posteriors(), *DEFAULT_VARIANTS]:
        label, name, options = parse_candidate(text)
        candidates.setdefault(label, (name, options))
    names = list(candidates)
    say = progress or (lambda text: None)
    dev = torch.device(device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    x, y = make_batch(net, net.batch, seed=seed)
    x, y = x.to(dev), y.to(dev)
    x_test = make_batch(net, PREDICT_INPUTS, seed=seed + 1)[0].to(dev)

    posts = {label: make_posterior(name, in_dim=net.in_dim, out_dim=net.out_dim, hidden=net.hidden,
                                   likelihood=net.likelihood, device=dev, seed=seed, **options)
             for label, (name, options) in candidates.items()}
    step_fns: dict[str, Callable[[], object]] = {"plain": plain_step_fn(net, x, y, steps=steps)}
    step_fns.update({n: posterior_step_fn(p, x, y, steps=steps) for n, p in posts.items()})
    peer_fns = peer_step_fns(net, x.cpu(), y.cpu(), steps=steps) if peers else {}
    step_fns.update(peer_fns)
    say(f"training steps: {len(step_fns)} candidates × {rounds} rounds × {steps} steps")
    step_s = interleaved(step_fns, rounds=rounds, sync=sync)

    pred_fns: dict[str, Callable[[], object]] = {"plain": plain_predict_fn(net, x_test)}
    pred_fns.update({n: posterior_predict_fn(p, x_test) for n, p in posts.items()})
    say(f"predict: {len(pred_fns)} candidates × {rounds} rounds")
    pred_s = interleaved(pred_fns, rounds=rounds, sync=sync)

    def step_us(name: str) -> float:
        return statistics.median(step_s[name]) / steps * 1e6

    def pred_ms(name: str) -> float:
        return statistics.median(pred_s[name]) * 1e3

    plain_step, plain_pred = step_us("plain"), pred_ms("plain")
    entries = []
    for n in names:
        say(f"act latency: thompson[{n}]")
        act = act_latency_us(candidates[n][0], net, calls=act_calls, seed=seed, device=device,
                             options=candidates[n][1])
        entries.append({"posterior": n, "step_us": step_us(n), "step_ratio": step_us(n) / plain_step,
                        "predict_ms": pred_ms(n), "predict_ratio": pred_ms(n) / plain_pred, **act,
                        "step_rounds_s": step_s[n], "predict_rounds_s": pred_s[n]})
    peer_rows = [{"peer": k.split(":", 1)[1], "step_us": step_us(k), "step_ratio": step_us(k) / plain_step}
                 for k in peer_fns]
    agent_rows = []
    for agent, post in OTHER_AGENTS:
        say(f"act latency: {agent}" + (f"[{post}]" if post else ""))
        agent_rows.append({"agent": agent if post is None else f"{agent}[{post}]",
                           **act_latency_us(post, net, calls=act_calls, seed=seed, device=device, agent=agent)})
    have = available_peers()
    return {
        "network": {**asdict(net), "widths": net.label},
        "device": str(dev), "torch_version": torch.__version__, "threads": torch.get_num_threads(),
        # timings depend on the CPU model; the "slow machine state" of earlier notes was another CPU
        "cpu": processor_name(), "cpu_capability": cpu_capability(),
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
        # set by the posteriors' first fit (process-wide, so the plain reference runs under it too)
        "malloc_keeps_freed_memory": freed_memory_kept(),
        # fits replay graph-safe steps from CUDA graphs (CUDA only; off with UNCERTAIN_AGENTS_CUDA_GRAPHS=0)
        "cuda_graphs": dev.type == "cuda" and cuda_graphs_requested(None),
        "rounds": rounds, "steps": steps, "act_calls": act_calls,
        "predict": {"n_samples": PREDICT_SAMPLES, "n_inputs": PREDICT_INPUTS,
                    "reference": f"{PREDICT_SAMPLES} forward passes of the plain MLP"},
        "plain": {"step_us": plain_step, "predict_ms": plain_pred, "optimizer": "Adam(lr=1e-3)",
                  "step_rounds_s": step_s["plain"], "predict_rounds_s": pred_s["plain"]},
        "posteriors": entries,
        "agents": agent_rows,
        "peers": {"requested": peers, "timed": peer_rows,
                  "skipped": [p for p in PEERS if not have[p]] if peers else []},
    }


def all_finite_positive(result: dict) -> bool:
    """True when every timing in ``result`` is a positive finite number."""
    keys = ("step_us", "step_ratio", "predict_ms", "predict_ratio", "act_median_us")
    return all(math.isfinite(e[k]) and e[k] > 0 for e in result["posteriors"] for k in keys)
