"""Refit schedules: how many optimiser steps the ``k``-th refit of an agent takes.

An agent's ``train_steps`` is either an int (every refit takes that many steps) or a
schedule, a callable ``k -> steps`` of the refit index ``k = 0, 1, 2, ...``.
:class:`LinearDecay` is the schedule of Wang et al. (2019, A.4): many steps at the first
refit, when the network starts from its initialisation, decaying to a few per refit
once it only has to follow the data that arrived since the last one.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable, Union

from ..validation import check_positive_int

TrainSteps = Union[int, Callable[[int], int]]


@dataclass(frozen=True)
class LinearDecay:
    """``first`` steps at refit 0, linearly down to ``last`` at refit ``over``, then ``last``.

    ``steps(k) = round(first + (last − first)·k/over)`` for ``k < over``, else ``last``.

    Args:
        first: steps of the first refit.
        last: steps of every refit from refit ``over`` on.
        over: number of refits the decay takes.
    """

    first: int
    last: int
    over: int

    def __post_init__(self) -> None:
        for name in ("first", "last", "over"):
            check_positive_int(getattr(self, name), name)

    def __call__(self, k: int) -> int:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise ValueError(f"k (the refit index) must be a non-negative integer, got {k!r}")
        if k >= self.over:
            return self.last
        return int(round(self.first + (self.last - self.first) * k / self.over))


def check_train_steps(train_steps) -> TrainSteps:
    """``train_steps`` as given if it is a positive int or a callable schedule."""
    if callable(train_steps):
        return train_steps
    return check_positive_int(train_steps, "train_steps")


def steps_for_refit(train_steps: TrainSteps, k: int) -> int:
    """Optimiser steps of refit ``k`` (0-based) under ``train_steps``."""
    if not callable(train_steps):
        return int(train_steps)
    steps = train_steps(k)
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps <= 0:
        raise ValueError(f"train_steps schedule returned {steps!r} for refit {k}; expected a positive integer")
    return int(steps)
