"""``keep_masks``: Bernoulli keep-masks for dropout from as few random bits as the rate needs.

On CPU, torch's generator costs about 3 ns per 32-bit draw and ``torch.rand(shape) >= p``
spends one draw per mask entry, which is a third of a dropout-α training step with
``K = 10`` masks per example. The random words come from numpy's PCG64 (``random_raw``,
about 2.8 ns per 64-bit word here against 7 ns for torch's ``random_``), seeded by one
64-bit draw from the caller's torch generator, so masks stay reproducible from it. A keep probability ``q`` that is a multiple of ``2⁻ᵏ`` for
``k ≤ 8`` (0.5, 0.75, 0.9375, ...) is exactly ``P(v < q·2ᵏ)`` for a uniform ``k``-bit integer
``v``, so one 64-bit draw makes ``64 / k`` masks (64 for the usual ``p = 0.5``); any other
``q`` uses 16 bits per mask, i.e. ``q`` rounded to a multiple of ``2⁻¹⁶`` (an error below
``8·10⁻⁶`` in the drop rate; a ``q`` of ``1 − 2⁻¹⁷`` or more rounds to 1 and keeps every entry of a
short request; long ones with such rates are drawn by skipping, below, at the exact rate). On CUDA, where
drawing is cheap, it is ``torch.rand(shape) < q``.

A low drop rate ``p = 1 − q`` whose ``q`` needs 8 or 16 bits (``p`` at most 1/16 or 1/8 respectively,
:data:`SKIP_MAX_DROP_PER_BIT`), in a request of at least :data:`SKIP_MIN_ENTRIES` entries (a dropout-α training step: ``K × B`` rows of
every layer), is drawn by skipping instead: the gaps between dropped entries are independent
geometric variables, ``G = 1 + ⌊log U / log(1 − p)⌋`` with ``U`` uniform on ``(0, 1]``, so the cost
follows the ``p·n`` dropped entries, not the ``16·n`` bits of the comparison (for the default rates 0.05
and 0.1, 55–65% of the comparison's time). ``U`` has 24 random bits and float32 arithmetic for
``p ≥ 2⁻⁸`` (:data:`SKIP_FLOAT32_MIN_DROP`): every gap's probability is then exact to ``2⁻²⁴``, i.e. to a
relative ``2⁻²⁴ / p`` (``10⁻⁶`` at ``p = 0.05``); lower rates, whose gaps are long, take 53 bits and float64.
The gaps come from a logarithm whose last bit may differ between numpy builds and CPUs, so at the default
rates about one gap in 10⁷ may come out one entry longer or shorter elsewhere: such masks replay to the bit
on the CPU and numpy that drew them, as a run's floating-point results do anyway (docs/speed.md, "Session
26").
"""
from __future__ import annotations

import math

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
    if k >= 8 and 1.0 - keep <= k * SKIP_MAX_DROP_PER_BIT and numel >= SKIP_MIN_ENTRIES:
        return _keep_masks_by_skipping(numel, 1.0 - keep, generator, dtype).view(shape)
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
    return torch.from_numpy(_pcg64(generator).random_raw(n).view(np.int64))


def _pcg64(generator: torch.Generator) -> np.random.PCG64:
    """numpy's PCG64 seeded by one 64-bit draw of ``generator`` (so its words are reproducible from it)."""
    return np.random.PCG64(int(torch.empty((), dtype=torch.int64).random_(0, _INT64_MAX, generator=generator)))


#: Largest drop rate drawn by skipping (:func:`_keep_masks_by_skipping`), per random bit the comparison would spend
#: on an entry: 1/8 for 16-bit rates, 1/16 for 8-bit ones. Skipping costs about 5–6 ns per dropped entry here, the
#: comparison about 0.05 ns per bit and entry, so above these rates the comparison is as fast or faster.
SKIP_MAX_DROP_PER_BIT = 1 / 128
#: Smallest request drawn by skipping (below it, the fixed cost of a few array operations dominates).
SKIP_MIN_ENTRIES = 2**15
#: Drop rates from here up use 24-bit uniforms in float32 for the gaps; lower rates 53-bit ones in float64.
SKIP_FLOAT32_MIN_DROP = 2.0**-8
_U24 = np.float32(2.0**-24)
_U53 = 2.0**-53


def gaps_per_round(remaining: int, drop: float) -> int:
    """Gaps drawn at once for ``remaining`` undecided entries: their expected number of drops plus
    eight standard deviations and 32 (the rest of the mask is covered in one round but for a chance
    far below 10⁻¹⁰)."""
    expected = remaining * drop
    return math.ceil(expected + 8.0 * math.sqrt(expected) + 32.0)


def _keep_masks_by_skipping(numel: int, drop: float, generator: torch.Generator, dtype: torch.dtype) -> Tensor:
    """``[numel]`` keep-mask whose dropped entries are found by geometric skips (module docstring).

    Dropped positions are ``start − 1 + cumsum(G)`` for gaps ``G ≥ 1`` with ``P(G > g) = (1 − p)^g``;
    the gaps come in rounds sized to cover the rest of the mask with overwhelming probability (a
    shortfall only costs another round: the gaps are memoryless). Random bits: :func:`_pcg64`, as for
    long requests of :func:`random_words`."""
    rng = _pcg64(generator)
    wide = drop < SKIP_FLOAT32_MIN_DROP
    per_log = 1.0 / math.log1p(-drop) if wide else np.float32(1.0 / math.log1p(-drop))  # < 0
    out = torch.ones(numel, dtype=dtype)
    start = 0  # the first entry not yet decided
    while start < numel:
        n_gaps = gaps_per_round(numel - start, drop)
        if wide:  # 53 random bits, float64
            u = (rng.random_raw(n_gaps) >> 11).astype(np.float64)
            u += 1.0
            u *= _U53
        else:  # 24 random bits from each half of a 64-bit word, float32
            u = (rng.random_raw(-(-n_gaps // 2)).view(np.uint32)[:n_gaps] >> 8).astype(np.float32)
            u += 1.0
            u *= _U24
        # u: uniform on (0, 1], exactly representable
        np.log(u, out=u)
        u *= per_log
        gaps = np.floor(u, out=u).astype(np.int64)
        np.minimum(gaps, numel, out=gaps)  # a gap past the end ends the mask either way (no overflow)
        gaps += 1
        positions = np.cumsum(gaps, out=gaps)
        positions += start - 1
        inside = int(np.searchsorted(positions, numel))
        out.index_fill_(0, torch.from_numpy(positions[:inside]), False if dtype == torch.bool else 0.0)
        start = int(positions[-1]) + 1
    return out
