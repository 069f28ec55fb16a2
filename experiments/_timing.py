"""Small timing helpers shared by the benchmark scripts (interleaved, median of repeats; operation counts)."""
from __future__ import annotations

import statistics
import time
from typing import Callable

from torch.utils._python_dispatch import TorchDispatchMode


class CountOps(TorchDispatchMode):
    """``with CountOps() as ops: ...`` counts the ATen operations dispatched (``ops.count``):
    on a GPU each is a kernel launch, what a small network's step pays for."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def time_per_call(fn: Callable[[], object], *, number: int, repeats: int = 7, warmup: int = 20) -> float:
    """Median over ``repeats`` of the mean seconds per call of ``fn`` over ``number`` calls."""
    for _ in range(warmup):
        fn()
    results = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        results.append((time.perf_counter() - t0) / number)
    return statistics.median(results)


def compare(fns: dict[str, Callable[[], object]], *, number: int, rounds: int = 7, warmup: int = 20) -> dict[str, float]:
    """Interleave the candidates round by round (so load changes hit all alike); median s/call."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            samples[name].append((time.perf_counter() - t0) / number)
    return {k: statistics.median(v) for k, v in samples.items()}
