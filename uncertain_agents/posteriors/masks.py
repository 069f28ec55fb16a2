"""``keep_masks``: Bernoulli keep-masks for dropout from as few random bits as the rate needs.

On CPU, torch's generator costs about 3 ns per 32-bit draw and ``torch.rand(shape) >= p``
spends one draw per mask entry, which is a third of a dropout-α training step with
``K = 10`` masks per example. The random words come from numpy's PCG64 (``random_raw``,
about 2.8 ns per 64-bit word here against 7 ns for torch's ``random_``), seeded by one
64-bit draw from the caller's torch generator, so masks stay reproducible from it. A keep probability ``q`` that is a multiple of ``2⁻ᵏ`` for
``k ≤ 8`` (0.5, 0.75, 0.9375, ...) is exactly ``P(v < q·2ᵏ)`` for a uniform ``k``-bit integer
``v``, so one 64-bit draw makes ``64 / k`` masks (64 for the usual ``p = 0.5``); any other
``q`` uses 16 bits per mask, i.e. ``q`` rounded to a multiple of ``2⁻¹⁶`` (an error below
``8·10⁻⁶`` in the drop rate; a ``q`` of ``1 − 2⁻¹⁷`` or more rounds to 1 and keeps every entry). On CUDA, where drawing is cheap, it is ``torch.rand(shape) < q``.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

_INT64_MAX = 2**63 - 1


def bits_per_mask(keep: float) -> int:
    """Random bits one mask entry with keep probability ``keep`` uses on CPU (1, 2, 4, 8 or 16)."""
    for k in (1, 2, 4, 8):
        if float(keep * 2**k).is_integer():
            return k
    return 16


def keep_masks(shape: tuple[int, ...], keep: float, generator: torch.Generator,
               device: torch.device | str = "cpu", dtype: torch.dtype = torch.bool) -> Tensor:
    """``[*shape]`` with each entry independently kept (True, or ``1.`` for a float ``dtype``)
    with probability ``keep``, else False / ``0.``.

    A float ``dtype`` gives the same draws as ``0.``/``1.`` factors, written by the comparison
    itself (on this project's CPU, comparing into a float tensor is 3× faster than comparing into
    bool and converting)."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must lie in (0, 1], got {keep!r}")
    device = torch.device(device)
    numel = 1
    for s in shape:
        numel *= int(s)
    if keep == 1.0:
        return torch.ones(shape, dtype=dtype, device=device)
    if device.type != "cpu":
        return (torch.rand(shape, generator=generator, device=device) < keep).to(dtype)
    k = bits_per_mask(keep)
    if k == 16 and round(keep * 2**16) >= 2**16:
        # q rounds to 1 at 16 bits (a drop rate below 2⁻¹⁷): every entry is kept, as for keep = 1
        # (the int16 threshold 2¹⁵ would overflow and keep nothing)
        return torch.ones(shape, dtype=dtype, device=device)
    raw = random_words(-(-numel * k // 64), generator)
    if k == 16:
        # v uniform on [-2¹⁵, 2¹⁵): P(v + 2¹⁵ < q·2¹⁶), compared in int16 (no widening pass)
        values, threshold = raw.view(torch.int16)[:numel], round(keep * 2**16) - 2**15
    else:
        data = raw.view(torch.uint8)
        if k < 8:
            shifts = torch.arange(0, 8, k, dtype=torch.uint8)
            data = ((data.unsqueeze(-1) >> shifts) & (2**k - 1)).reshape(-1)
        values, threshold = data[:numel], int(keep * 2**k)
    return torch.lt(values, threshold, out=torch.empty(numel, dtype=dtype)).view(shape)


#: Below this many words, torch's generator is used directly (seeding PCG64 costs about 30 µs).
PCG64_MIN_WORDS = 2**14


def random_words(n: int, generator: torch.Generator) -> Tensor:
    """``[n]`` int64 of uniformly random bits (CPU): from numpy's PCG64 seeded by one draw of
    ``generator`` for long requests, from ``generator`` itself for short ones."""
    if n < PCG64_MIN_WORDS:
        return torch.empty(n, dtype=torch.int64).random_(-_INT64_MAX - 1, _INT64_MAX, generator=generator)
    seed = int(torch.empty((), dtype=torch.int64).random_(0, _INT64_MAX, generator=generator))
    return torch.from_numpy(np.random.PCG64(seed).random_raw(n).view(np.int64))
