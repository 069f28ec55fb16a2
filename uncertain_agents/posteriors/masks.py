"""``keep_masks``: Bernoulli keep-masks for dropout from as few random bits as the rate needs.

On CPU, torch's generator costs about 3 ns per 32-bit draw and ``torch.rand(shape) >= p``
spends one draw per mask entry, which is a third of a dropout-α training step with
``K = 10`` masks per example. A keep probability ``q`` that is a multiple of ``2⁻ᵏ`` for
``k ≤ 8`` (0.5, 0.75, 0.9375, ...) is exactly ``P(v < q·2ᵏ)`` for a uniform ``k``-bit integer
``v``, so one 64-bit draw makes ``64 / k`` masks (64 for the usual ``p = 0.5``); any other
``q`` uses 16 bits per mask, i.e. ``q`` rounded to a multiple of ``2⁻¹⁶`` (an error below
``8·10⁻⁶`` in the drop rate). On CUDA, where drawing is cheap, it is ``torch.rand(shape) < q``.
"""
from __future__ import annotations

import torch
from torch import Tensor

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def bits_per_mask(keep: float) -> int:
    """Random bits one mask entry with keep probability ``keep`` uses on CPU (1, 2, 4, 8 or 16)."""
    for k in (1, 2, 4, 8):
        if float(keep * 2**k).is_integer():
            return k
    return 16


def keep_masks(shape: tuple[int, ...], keep: float, generator: torch.Generator,
               device: torch.device | str = "cpu") -> Tensor:
    """Boolean ``[*shape]`` with each entry independently True with probability ``keep``."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must lie in (0, 1], got {keep!r}")
    device = torch.device(device)
    numel = 1
    for s in shape:
        numel *= int(s)
    if keep == 1.0:
        return torch.ones(shape, dtype=torch.bool, device=device)
    if device.type != "cpu":
        return torch.rand(shape, generator=generator, device=device) < keep
    k = bits_per_mask(keep)
    words = -(-numel * k // 64)
    raw = torch.empty(words, dtype=torch.int64).random_(_INT64_MIN, _INT64_MAX, generator=generator)
    if k == 16:
        # v uniform on [-2¹⁵, 2¹⁵): P(v + 2¹⁵ < q·2¹⁶), compared in int16 (no widening pass)
        return (raw.view(torch.int16)[:numel] < round(keep * 2**16) - 2**15).view(shape)
    data = raw.view(torch.uint8)
    if k < 8:
        shifts = torch.arange(0, 8, k, dtype=torch.uint8)
        data = ((data.unsqueeze(-1) >> shifts) & (2**k - 1)).reshape(-1)
    return (data[:numel] < int(keep * 2**k)).view(shape)
