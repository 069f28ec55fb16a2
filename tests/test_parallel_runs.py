"""Runs side by side: worker processes or threads (``run_experiment(parallel=...)``).

Every (agent, trial) run owns its environment, agent, posterior and generators, so running
runs in threads must give exactly the steps of running them one by one (CPU here; the CUDA
form, one stream per thread, is in tests/test_cuda.py)."""
from __future__ import annotations

import pandas as pd
import pytest

from uncertain_agents.agents.experiment import (AgentSpec, RunsCancelled, StreamSlots, parallel_mode,
                                                run_experiment)


SPECS = [AgentSpec("uniform"), AgentSpec("thompson", posterior="mfvi"),
         AgentSpec("thompson", posterior="bootstrap", options={"n_members": 3}),
         AgentSpec("thompson", posterior="fsvgd", options={"n_particles": 3, "noise_std": 0.1}),
         AgentSpec("linear")]
KW = dict(steps=60, trials=2, seed=11, delta=0.6, train_every=20, train_steps=4, hidden=(8,))


def test_runs_in_threads_equal_runs_one_by_one():
    serial = run_experiment("wheel", SPECS, **KW)
    ticks: list[tuple[str, int]] = []
    threaded = run_experiment("wheel", SPECS, workers=4, parallel="threads",
                              progress=lambda label, k: ticks.append((label, k)), **KW)
    pd.testing.assert_frame_equal(serial.drop(columns="seconds"), threaded.drop(columns="seconds"))
    # the progress callback hears every decision of every run
    assert sum(k for _, k in ticks) == len(SPECS) * KW["trials"] * KW["steps"]


def test_parallel_mode_picks_threads_for_cuda_and_checks_its_argument():
    assert parallel_mode("auto", "cpu") == "processes"
    assert parallel_mode("auto", "cuda") == "threads"
    assert parallel_mode("threads", "cpu") == "threads"
    with pytest.raises(ValueError, match="parallel must be one of"):
        run_experiment("wheel", SPECS[:1], steps=5, trials=1, parallel="fork")


def test_a_failing_run_in_a_thread_stops_the_others_and_raises_its_error(monkeypatch):
    """The first failure propagates; the other threads stop at their next progress report."""
    from uncertain_agents.agents import experiment

    real = experiment._run_one

    def flaky(spec, trial, trial_seed, **kwargs):
        if spec.agent == "linear" and trial == 0:
            raise RuntimeError("boom in a worker thread")
        return real(spec, trial, trial_seed, **kwargs)

    monkeypatch.setattr(experiment, "_run_one", flaky)
    with pytest.raises(RuntimeError, match="boom in a worker thread"):
        run_experiment("wheel", SPECS, workers=3, parallel="threads", **KW)


def test_stream_slots_run_plain_calls_on_a_cpu_device():
    slots = StreamSlots("cpu", 2)
    assert slots.run(lambda a, b: a + b, 2, 3) == 5
    assert issubclass(RunsCancelled, RuntimeError)
