"""Independent random streams from one user seed.

A run is seeded by one int (a trial's or a split's seed), and several parts of it draw random
numbers: a posterior's initialisation, its training (minibatches, noise), a bandit agent's
draws of functions, the environment. Seeding them ``seed``, ``seed + 1``, … makes streams
collide — within a run (an agent seeded ``s + 1`` drew the very numbers of its posterior's
training stream, also seeded ``s + 1``) and between runs (trial ``s``'s training stream was trial
``s + 1``'s initialisation). Each part instead seeds its generator with
:func:`stream_seed` ``(seed, STREAM)``: numpy's ``SeedSequence(seed, spawn_key=(STREAM,))``, whose
streams for different ``(seed, STREAM)`` pairs are independent (and apart from the plain
``SeedSequence(seed)`` that gymnasium's ``env.reset(seed=seed)`` uses).
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["SEEDING_SCHEME", "AGENT_STREAM_KEY", "AGENT_DRAWS_KEY", "ATTACK_FUNCTIONS_KEY", "ATTACK_SCORER_KEY", "ATTACK_SUBSET_KEY",
           "POSTERIOR_INIT_KEY", "POSTERIOR_TRAIN_KEY", "recorded_scheme", "stream_generator", "stream_seed"]

#: Version of how seeds become streams, recorded in every run's manifest and CLI run configuration:
#: 1 = ``seed`` / ``seed + 1`` (before session 33), 2 = the spawn keys below. A run folder or grid
#: made under another scheme is not resumed (its results would mix two sets of random numbers).
SEEDING_SCHEME: int = 2

#: numpy agents' own draws (Uniform's arms, LinFullPost's samples; ``agents.base.make_rng``). Seeded with
#: the trial's seed alone they drew the environment's very bits (gymnasium's ``SeedSequence(s)``): Uniform,
#: the normaliser of every regret, ate exactly the poisonous half of the mushroom file (docs/bandits.md).
AGENT_STREAM_KEY: int = 0x5A67
#: a posterior agent's (Thompson sampling, Greedy) draws of functions, a torch generator.
AGENT_DRAWS_KEY: int = 0x5A68
#: an attack's functions (``attacks.PredictiveLogits``: what the attacker differentiates).
ATTACK_FUNCTIONS_KEY: int = 0xA77A
#: the fresh functions that re-score clean and adversarial inputs (``attacks.fgsm``, ``targeted_ifgsm``,
#: ``clean_accuracy``); seeded ``seed + 1`` before session 33, the attacker's functions of seed ``seed + 1``.
ATTACK_SCORER_KEY: int = 0xA77B
#: the random subset of test images an attack run takes (``attacks.evaluate.attack_subset``).
ATTACK_SUBSET_KEY: int = 0xA77C
#: a posterior's initialisation (``Posterior._init_generator``).
POSTERIOR_INIT_KEY: int = 0x1A17
#: a posterior's training and default sampling stream (``Posterior.generator()``).
POSTERIOR_TRAIN_KEY: int = 0x7A19


def recorded_scheme(value) -> int:
    """The seeding scheme a stored result was made under, from the value it recorded (a CSV cell or a
    JSON field): results of scheme 1 recorded none, so a missing value (None, NaN, empty) is 1."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return 1
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"a recorded seeding scheme must be a whole number, got {value!r}") from None
    if number != number:  # NaN: a CSV cell of a row written before the column existed
        return 1
    if not number.is_integer() or number < 1:
        raise ValueError(f"a recorded seeding scheme must be a whole number >= 1, got {value!r}")
    return int(number)


def stream_seed(seed: int, stream: int) -> int:
    """A 63-bit torch seed for part ``stream`` of a run seeded ``seed`` (a checked int ≥ 0).

    Different ``(seed, stream)`` pairs give independent streams; the same pair always the same.
    """
    state = np.random.SeedSequence(int(seed), spawn_key=(int(stream),)).generate_state(2, np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def stream_generator(seed: int, stream: int, device="cpu") -> torch.Generator:
    """A torch generator on ``device`` for part ``stream`` of a run seeded ``seed``: seeded
    :func:`stream_seed` ``(seed, stream)``."""
    return torch.Generator(device=torch.device(device)).manual_seed(stream_seed(seed, stream))
