"""Bandit experiments: several agents × trials on one environment, summaries and plots.

Used by ``uncertain-agents bandit`` and ``experiments/bandit_table.py``. Trial ``i``
uses seed ``seed + i`` for the environment (so every agent faces the same contexts and
reward table in that trial) and for the agent. Normalised regret is computed per trial
against Uniform on the same rounds: ``100 × cumulative regret / Uniform's``.
"""
from __future__ import annotations

import io
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..registry import Registry, resolve_name
from ..runs import atomic_write_bytes
from ..validation import check_positive_int, check_seed
from .factory import POSTERIOR_AGENTS, make_agent, resolve_agent
from .protocols import get_protocol
from .run import run_bandit
from ..posteriors.optimizers import load_optimizer_machinery

ENVS: Registry[Callable[..., Any]] = Registry("bandit environment")
"""Bandit-environment factories by name; each imports ``envs`` when called, never before
(``import uncertain_agents`` must not load ``envs``)."""

resolve_env = ENVS.resolve


@dataclass(frozen=True)
class AgentSpec:
    """An agent name, its posterior (for ``thompson``/``greedy``) and posterior options."""

    agent: str
    posterior: str | None = None
    options: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.agent}[{self.posterior}]" if self.posterior else self.agent


@ENVS.register("wheel", "wheelbandit-v0", "envs:wheelbandit-v0")
def _wheel(*, steps: int, delta: float, **_: Any):
    import envs

    return envs.WheelBandit(delta=delta, horizon=steps)


@ENVS.register("mushroom", "mushroombandit-v0", "envs:mushroombandit-v0")
def _mushroom(*, steps: int, data_dir, download: bool, mushroom_data, **_: Any):
    import envs

    if mushroom_data is None:
        return envs.MushroomBandit(data_dir, download=download, horizon=steps)
    return envs.MushroomBandit(data=mushroom_data, horizon=steps)


def make_env(name: str, *, steps: int, delta: float = 0.95, data_dir=None, download: bool = True,
             mushroom_data=None):
    """Build environment ``name`` (a name or alias of :data:`ENVS`: ``wheel`` with parameter ``delta``,
    or ``mushroom``) with horizon ``steps``."""
    return ENVS.get(name)(steps=steps, delta=delta, data_dir=data_dir, download=download,
                          mushroom_data=mushroom_data)


def agent_specs(agents: list[str], posteriors: list[str], options: dict | None = None) -> list[AgentSpec]:
    """Uniform first, then every agent; posterior agents once per posterior. Validates the names."""
    keys = [resolve_agent(a) for a in agents]
    posts = [resolve_name(p) for p in posteriors]
    specs = [AgentSpec("uniform")]
    for key in dict.fromkeys(keys):
        if key == "uniform":
            continue
        if key in POSTERIOR_AGENTS:
            if not posts:
                raise ValueError(f"agent {key!r} needs at least one --posterior")
            specs += [AgentSpec(key, p, dict(options or {})) for p in posts]
        else:
            specs.append(AgentSpec(key))
    return specs


def run_experiment(env_name: str, specs: list[AgentSpec], *, steps: int, trials: int, seed: int = 0,
                   delta: float = 0.95, data_dir=None, download: bool = True, protocol: str = "default",
                   hidden=None, train_every: int | None = None, train_steps=None, batch_size: int | None = None,
                   initial_pulls: int | None = None, lr: float | None = None, device="cpu", workers: int = 1,
                   parallel: str = "auto", progress: Callable[[str, int], None] | None = None,
                   on_run: Callable[[pd.DataFrame], None] | None = None,
                   completed: Callable[[str, int], pd.DataFrame | None] | None = None) -> pd.DataFrame:
    """Run every spec for ``trials`` trials; returns all steps with ``label, agent, posterior, trial, seed, seconds``.

    Agents are built by :func:`make_agent` under ``protocol``; settings left as ``None``
    come from the protocol.

    ``workers > 1`` runs the (agent, trial) runs ``workers`` at a time, in worker processes
    (spawned, one torch thread each) or in threads of this process (``parallel``, see
    :data:`PARALLEL_MODES`; ``"auto"`` picks threads for a CUDA ``device``, processes
    otherwise); every run is seeded by its trial alone and owns all its state, so the steps
    are the same as one by one (only ``seconds`` differs), returned in the same order.

    ``progress(label, k)`` is called as steps complete (with ``workers > 1``: once per run,
    when it finishes); ``on_run(frame)`` after every run. ``completed(label, trial)`` may
    return the frame of a run finished earlier (a resumed run), which is then used instead
    of running it again.
    """
    workers = check_positive_int(workers, "workers")
    steps = check_positive_int(steps, "steps")
    trials = check_positive_int(trials, "trials")
    seed = check_seed(seed)
    if seed is None:
        raise TypeError("seed must be an int (trial t is seeded with seed + t)")
    mode = parallel_mode(parallel, device)
    mushroom_data = None
    if resolve_env(env_name) == "mushroom":
        from ..datasets.mushroom import load_mushroom

        mushroom_data = load_mushroom(data_dir, download=download)
    settings = dict(env_name=env_name, steps=steps, delta=delta, mushroom_data=mushroom_data, protocol=protocol,
                    hidden=hidden, train_every=train_every, train_steps=train_steps, batch_size=batch_size,
                    initial_pulls=initial_pulls, lr=lr, device=device)
    frames: dict[tuple[int, int], pd.DataFrame] = {}
    pending: list[tuple[int, int]] = []
    for trial in range(trials):
        for i, spec in enumerate(specs):
            done = None if completed is None else completed(spec.label, trial)
            if done is None:
                pending.append((trial, i))
                continue
            frames[trial, i] = done
            if progress is not None:
                progress(spec.label, steps)

    def finish(key: tuple[int, int], frame: pd.DataFrame) -> None:
        frames[key] = frame
        if on_run is not None:
            on_run(frame)

    if mode == "batched":
        by_spec: dict[int, list[int]] = {}
        for trial, i in pending:
            by_spec.setdefault(i, []).append(trial)
        for i, trials_of in by_spec.items():
            if not trials_batchable(specs[i], protocol):
                continue
            label = specs[i].label
            tick = None if progress is None else (lambda k, label=label: progress(label, k))
            load_optimizer_machinery()  # a one-off import, not these runs' time
            t0 = time.perf_counter()
            runs = run_thompson_trials(specs[i].posterior, specs[i].options, [seed + t for t in trials_of],
                                       progress=tick, **settings)
            seconds = (time.perf_counter() - t0) / len(trials_of)
            for trial, frame in zip(trials_of, runs):
                finish((trial, i), _label_frame(frame, specs[i], trial, seed + trial, seconds))
        pending = [(trial, i) for trial, i in pending if (trial, i) not in frames]
        mode = parallel_mode("auto", device)
    if workers == 1 or len(pending) <= 1:
        for trial, i in pending:
            label = specs[i].label
            tick = None if progress is None else (lambda k, label=label: progress(label, k))
            finish((trial, i), _run_one(specs[i], trial, seed + trial, tick=tick, **settings))
    elif mode == "threads":
        _run_in_threads(pending, specs, seed, workers, settings, finish, progress)
    else:
        from concurrent.futures import as_completed
        from concurrent.futures.process import BrokenProcessPool

        from ..workers import broken_pool_error, spawn_pool, stop_pool

        pool = spawn_pool(min(workers, len(pending)), initializer=_worker_init)
        try:
            futures = {pool.submit(_run_one, specs[i], trial, seed + trial, **settings): (trial, i)
                       for trial, i in pending}
            for future in as_completed(futures):
                key = futures[future]
                finish(key, future.result())
                if progress is not None:
                    progress(specs[key[1]].label, steps)
        except BaseException as err:   # Ctrl-C or a failed run: stop the workers now, keep what finished
            stop_pool(pool)
            if isinstance(err, BrokenProcessPool):
                raise broken_pool_error(err) from err
            raise
        pool.shutdown()
    return pd.concat([frames[key] for key in sorted(frames)], ignore_index=True)


#: How ``run_experiment`` runs its runs side by side (``workers > 1``):
#: ``"processes"`` — spawned worker processes, one torch thread each (on a CPU: every run gets a
#: core); ``"threads"`` — threads of this process, each run on its own CUDA stream when the device
#: is a GPU (one CUDA context whose streams the device overlaps; processes would time-slice the
#: device between their contexts, docs/speed.md "GPU"); ``"batched"`` — the trials of a Thompson agent
#: whose posterior has a trial-batched form (:func:`trials_batchable`) as one model in lock step
#: (:func:`run_thompson_trials`; the other runs as ``"auto"``); ``"auto"`` — threads on CUDA, else
#: processes. All but ``"batched"`` give exactly the runs of one by one; ``"batched"`` gives runs of
#: the same agent with other random numbers (see :mod:`uncertain_agents.posteriors.trials`).
PARALLEL_MODES = ("auto", "processes", "threads", "batched")


def parallel_mode(parallel: str, device) -> str:
    """``"processes"``, ``"threads"`` or ``"batched"``: what ``parallel`` (one of :data:`PARALLEL_MODES`)
    means on ``device``."""
    if parallel not in PARALLEL_MODES:
        raise ValueError(f"parallel must be one of {list(PARALLEL_MODES)}, got {parallel!r}")
    if parallel != "auto":
        return parallel
    import torch

    return "threads" if torch.device(device).type == "cuda" else "processes"


class RunsCancelled(RuntimeError):
    """Raised inside a thread-run's progress callback once another run has failed (or Ctrl-C), so
    every thread stops at its next progress report instead of finishing its run."""


def _run_in_threads(pending: list[tuple[int, int]], specs: list[AgentSpec], seed: int, workers: int,
                    settings: dict, finish: Callable, progress: Callable[[str, int], None] | None) -> None:
    """The pending (trial, spec index) runs, ``workers`` at a time in threads (see :data:`PARALLEL_MODES`)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor, as_completed

    stop = threading.Event()
    lock = threading.Lock()  # progress callbacks and ``finish`` run one at a time

    def one(trial: int, i: int) -> tuple[tuple[int, int], pd.DataFrame]:
        label = specs[i].label

        def tick(k: int) -> None:
            if stop.is_set():
                raise RunsCancelled("another run failed or was interrupted")
            if progress is not None:
                with lock:
                    progress(label, k)

        frame = _run_one(specs[i], trial, seed + trial, tick=tick, progress_every=50, **settings)
        return (trial, i), frame

    workers = min(workers, len(pending))
    streams = StreamSlots(settings["device"], workers)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="bandit-run")
    try:
        futures = [pool.submit(streams.run, one, trial, i) for trial, i in pending]
        for future in as_completed(futures):
            key, frame = future.result()
            with lock:
                finish(key, frame)
    except BaseException:  # a failed run or Ctrl-C: the other threads stop at their next report
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()


#: At most this many runs share a CUDA device as threads: PyTorch hands out streams from a
#: pool of 32 per device, and two runs must never share one (a run capturing a CUDA graph on
#: its stream would record the other's work).
MAX_CUDA_THREADS = 32


class StreamSlots:
    """``workers`` CUDA streams with distinct handles; ``run(fn, ...)`` runs ``fn`` on a free one,
    held for the call (on a CPU device ``run`` simply calls ``fn``)."""

    def __init__(self, device, workers: int):
        import queue

        import torch

        self.device = torch.device(device)
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        if self.device.type != "cuda":
            return
        if workers > MAX_CUDA_THREADS:
            raise ValueError(f"workers must be at most {MAX_CUDA_THREADS} for runs in threads on CUDA "
                             f"(one stream each), got {workers}")
        streams = [torch.cuda.Stream(self.device) for _ in range(workers)]
        if len({s.cuda_stream for s in streams}) != workers:
            raise RuntimeError("could not get a distinct CUDA stream for every thread (another part of this "
                               "process took streams from PyTorch's pool); use parallel='processes'")
        for s in streams:
            self.free.put(s)
        # PyTorch loads its CUDA linear-algebra library at the first linalg call on the device, and
        # that lazy load is not thread-safe ("lazy wrapper should be called at most once" when two
        # threads' first f-SVGD steps call eigh / qr together, measured on an H100): load it here,
        # on the thread that starts the others
        torch.linalg.eigh(torch.eye(2, device=self.device, dtype=torch.float64))

    def run(self, fn: Callable, *args):
        import torch

        if self.device.type != "cuda":
            return fn(*args)
        stream = self.free.get()
        try:
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                return fn(*args)
        finally:
            stream.synchronize()
            self.free.put(stream)


def _worker_init() -> None:
    """Worker-process initializer: one torch thread per process (workers share the cores), and
    Ctrl-C is left to the parent, which stops the workers and keeps the finished runs (and a
    killed parent takes its workers with it: :func:`~uncertain_agents.workers.spawn_pool`)."""
    import signal

    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)


def _run_one(spec: AgentSpec, trial: int, trial_seed: int, *, env_name: str, steps: int, delta: float,
             mushroom_data, protocol, hidden, train_every, train_steps, batch_size, initial_pulls, lr, device,
             tick: Callable[[int], None] | None = None, progress_every: int = 100) -> pd.DataFrame:
    """One agent for one trial: environment and agent seeded by ``trial_seed``."""
    env = make_env(env_name, steps=steps, delta=delta, mushroom_data=mushroom_data)
    agent = make_agent(spec.agent, n_actions=int(env.action_space.n),
                       context_dim=env.observation_space.shape[0], posterior=spec.posterior,
                       posterior_options=spec.options, protocol=protocol, hidden=hidden,
                       train_every=train_every, train_steps=train_steps, batch_size=batch_size,
                       initial_pulls=initial_pulls, lr=lr, device=device, seed=trial_seed)
    load_optimizer_machinery()  # a one-off import, not this run's time
    t0 = time.perf_counter()
    frame = run_bandit(env, agent, steps=steps, seed=trial_seed, progress=tick, progress_every=progress_every)
    return _label_frame(frame, spec, trial, trial_seed, time.perf_counter() - t0)


def _label_frame(frame: pd.DataFrame, spec: AgentSpec, trial: int, trial_seed: int, seconds: float) -> pd.DataFrame:
    frame.insert(0, "seed", trial_seed)
    frame.insert(0, "trial", trial)
    frame.insert(0, "posterior", spec.posterior or "")
    frame.insert(0, "agent", spec.agent)
    frame.insert(0, "label", spec.label)
    frame["seconds"] = seconds
    return frame


def trials_batchable(spec: AgentSpec, protocol: str = "default") -> bool:
    """Whether ``spec``'s trials can run as one trial-batched model (``parallel="batched"``): a
    Thompson agent whose posterior has a trial-batched form, with a fixed ``noise_std`` (from the
    protocol or the options) where that form needs one."""
    from ..posteriors.trials import TRIAL_METHODS

    if spec.agent != "thompson" or spec.posterior is None:
        return False
    method = resolve_name(spec.posterior)
    cls = TRIAL_METHODS.get(method)
    if cls is None:
        return False
    options = {**get_protocol(protocol).options_for(method), **spec.options}
    return not cls.needs_fixed_noise or options.get("noise_std") is not None


def run_thompson_trials(posterior: str, options: dict, trial_seeds: list[int], *, env_name: str, steps: int,
                        delta: float, mushroom_data=None, protocol="default", hidden=None, train_every=None,
                        train_steps=None, batch_size=None, initial_pulls=None, lr=None, device="cpu",
                        progress: Callable[[int], None] | None = None, progress_every: int = 100,
                        checkpoint: Callable[[int, np.ndarray], None] | None = None) -> list[pd.DataFrame]:
    """Thompson sampling with ``posterior`` for ``len(trial_seeds)`` trials in lock step, one
    trial-batched model (:func:`~.lockstep.run_bandit_trials`), under ``protocol`` with the same
    settings :func:`make_agent` would use; trial ``r``'s environment is seeded by
    ``trial_seeds[r]``, the posterior and the decisions' draws by ``trial_seeds[0]`` (their own
    streams, :mod:`uncertain_agents.seeding`). Returns one :func:`~.run.run_bandit` frame per trial; ``checkpoint(decisions,
    cumulative_regret[R])`` hears the partial results every ``progress_every`` decisions."""
    from ..posteriors.trials import make_trial_posterior
    from .lockstep import run_bandit_trials

    proto = get_protocol(protocol)
    method = resolve_name(posterior)
    hidden = proto.hidden if hidden is None else tuple(hidden)
    envs = [make_env(env_name, steps=steps, delta=delta, mushroom_data=mushroom_data) for _ in trial_seeds]
    post = make_trial_posterior(method, trials=len(trial_seeds), in_dim=envs[0].observation_space.shape[0],
                                out_dim=int(envs[0].action_space.n), hidden=hidden, device=device,
                                seed=trial_seeds[0], **proto.merged_options(method, hidden, options))
    return run_bandit_trials(
        envs, post, steps=steps, seeds=trial_seeds,
        train_every=proto.train_every if train_every is None else train_every,
        train_steps=proto.steps_for(method) if train_steps is None else train_steps,
        batch_size=proto.batch_size if batch_size is None else batch_size,
        initial_pulls=proto.initial_pulls if initial_pulls is None else initial_pulls,
        lr=proto.lr_for(method) if lr is None else lr, seed=trial_seeds[0], progress=progress,
        progress_every=progress_every, checkpoint=checkpoint, fit_after_warmup=proto.fit_after_warmup)


def summarize(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per label: final cumulative regret and normalised regret (mean, s.e. over trials).

    Normalised regret is ``100 × cumulative regret / Uniform's`` per trial (same rounds).
    """
    final = steps.loc[steps.groupby(["label", "trial"])["step"].idxmax()]
    final = final[["label", "agent", "posterior", "trial", "step", "cumulative_regret", "seconds"]]
    uniform = final[final["label"] == "uniform"].set_index("trial")["cumulative_regret"]
    if uniform.empty:
        raise ValueError("steps must include the 'uniform' agent to normalise the regret")
    final = final.assign(normalised_regret=100.0 * final["cumulative_regret"].to_numpy()
                         / uniform.reindex(final["trial"]).to_numpy())
    order = list(dict.fromkeys(steps["label"]))

    def se(v: pd.Series) -> float:
        return float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")

    rows = []
    for label in order:
        g = final[final["label"] == label]
        rows.append({"label": label, "agent": g["agent"].iloc[0], "posterior": g["posterior"].iloc[0],
                     "trials": len(g), "steps": int(g["step"].iloc[0]),
                     "cumulative_regret": g["cumulative_regret"].mean(), "cumulative_regret_se": se(g["cumulative_regret"]),
                     "normalised_regret": g["normalised_regret"].mean(), "normalised_regret_se": se(g["normalised_regret"]),
                     "seconds": g["seconds"].mean()})
    return pd.DataFrame(rows)


def plot_regret(steps: pd.DataFrame, path, *, title: str = "") -> None:
    """Mean cumulative regret against step (± one standard error over trials) for every label.

    ``steps`` has columns ``label``, ``trial``, ``step``, ``cumulative_regret``. The regret axis
    is logarithmic: Uniform's regret is 10–50 times a learning agent's, so on a linear axis the
    agents being compared would lie on one line at the bottom. Thompson-sampling agents
    (labels ``thompson[...]``) are drawn solid, the baselines dashed. Every label has its own hue
    (ten of them; beyond ten, lighter shades of the same ten). The title says what the line and
    the band are (unless ``title`` already does). Written atomically.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = regret_figure(steps, title=title)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def label_color(i: int):
    """The colour of the ``i``-th line: tab20's dark shades first (ten distinct hues, tab10's), then
    its light ones, so two neighbouring labels never get two shades of one hue."""
    import matplotlib.pyplot as plt

    return plt.cm.tab20((2 * i) % 20 + (i // 10) % 2)


def regret_figure(steps: pd.DataFrame, *, title: str = ""):
    """The figure :func:`plot_regret` saves (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    trials = int(steps.groupby("label")["trial"].nunique().max())
    for i, label in enumerate(dict.fromkeys(steps["label"])):
        color = label_color(i)
        g = steps[steps["label"] == label].pivot(index="step", columns="trial", values="cumulative_regret")
        mean = g.mean(axis=1)
        err = g.std(axis=1, ddof=1) / np.sqrt(g.shape[1]) if g.shape[1] > 1 else 0 * mean
        ax.plot(mean.index, mean.to_numpy(), label=label, color=color,
                linestyle="-" if str(label).lower().startswith("thompson") else "--")
        ax.fill_between(mean.index, (mean - err).to_numpy(), (mean + err).to_numpy(), alpha=0.2, color=color)
    if (steps["cumulative_regret"] > 0).any():
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cumulative regret" + (" (log scale)" if ax.get_yscale() == "log" else ""))
    if trials > 1 and "s.e." not in title:  # the band is ± one standard error over the trials
        title = f"{title}\nmean ± s.e. over {trials} trials" if title else f"mean ± s.e. over {trials} trials"
    ax.set_title(title or "one trial")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig
