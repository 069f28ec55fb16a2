"""``keep_freed_memory``: let glibc's ``malloc`` keep freed memory in the process, so that a
training step on CPU does not page-fault on every large tensor it allocates.

PyTorch's CPU allocator takes every tensor from ``malloc`` and hands it back on free. glibc
serves requests above its mmap threshold (128 KiB at start, raised on the fly as such blocks
are freed) with a fresh ``mmap`` and unmaps them on free, and it returns the top of the heap
to the system beyond its trim threshold; a tensor that reuses such memory pays one page fault
per 4 KiB page on first touch. A ``bb-alpha`` step with 10 weight samples on the bandit
network allocates about 20 MB of activations, gradients and draws and took about 1,400 minor
page faults a step on this project's 2-core VM; they were a quarter of its time (docs/speed.md).

:func:`keep_freed_memory` sets glibc's mmap threshold to 64 MiB and its trim threshold to
256 MiB (``mallopt``), so blocks below 64 MiB come from the heap and freed ones are reused
without faults, and at most 256 MiB of free memory at the top of the heap is held before it
is given back. It is the same remedy PyTorch's CPU performance guide reaches with jemalloc or
TCMalloc, without a preloaded library. The setting is process-wide: :meth:`Posterior.fit
<uncertain_agents.posteriors.base.Posterior.fit>` applies it once, on the first fit of a CPU
posterior, unless the environment variable ``UNCERTAIN_AGENTS_KEEP_FREED_MEMORY=0`` is set.
Where the C library is not glibc (macOS, musl) it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

#: ``mallopt`` parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 64 * 2**20
TRIM_THRESHOLD_BYTES = 256 * 2**20
ENV_VAR = "UNCERTAIN_AGENTS_KEEP_FREED_MEMORY"

_applied: bool | None = None


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.gnu_get_libc_version  # only glibc has it
        return libc
    except (OSError, AttributeError):
        return None


def keep_freed_memory(*, force: bool = False) -> bool:
    """Raise glibc's mmap and trim thresholds (see the module docstring) once per process.

    Returns True when the setting is in force. It is skipped (False) when the C library is not
    glibc or when ``UNCERTAIN_AGENTS_KEEP_FREED_MEMORY=0``; ``force=True`` ignores the
    environment variable (an explicit call by the user)."""
    global _applied
    if _applied is not None and not (force and not _applied):
        return _applied
    if not force and os.environ.get(ENV_VAR, "1").strip().lower() in ("0", "false", "no", "off"):
        _applied = False
        return False
    libc = _glibc()
    if libc is None:
        _applied = False
        return False
    ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    _applied = ok
    return ok


def freed_memory_kept() -> bool:
    """True once :func:`keep_freed_memory` has put the setting in force in this process."""
    return bool(_applied)
