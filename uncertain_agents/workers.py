"""Worker processes that never outlive the run that started them.

Every process pool of the library and of the experiment scripts (``run_experiment(workers=...)``,
the grid's local executor, ``experiments/bandit_table.py``, ``experiments/plug_in_matrix.py``)
is made by :func:`spawn_pool`: spawned processes (a forked child cannot initialise CUDA and
copies the parent's threads) whose initialiser :func:`stop_with_parent` asks the kernel to stop
them when their parent dies. Without it, a run killed by ``kill``, an out-of-memory kill or a
closed terminal leaves its workers computing results nobody will write, on every core.
"""
from __future__ import annotations

import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Callable

#: ``prctl`` option that sets the signal a process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def stop_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux
    ``PR_SET_PDEATHSIG``); exit at once if the parent is already gone.

    Returns True where the request was registered, False where the platform has no such
    request (then the process simply behaves as before).
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import multiprocessing

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    # the parent may have died between this process's start and the request above
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(1)
    return True


def _initialise(initializer: Callable[..., None] | None, initargs: tuple) -> None:
    stop_with_parent()
    if initializer is not None:
        initializer(*initargs)


#: Why a spawned pool usually breaks in a user's script, said where it happens and to the parent.
MAIN_GUARD_HINT = ("worker processes are spawned and re-import the script that started them, so a "
                   "script that runs workers (run_grid / run_experiment with workers > 1) must make "
                   "that call under `if __name__ == \"__main__\":` (Python's multiprocessing rule)")


class WorkersFailed(RuntimeError):
    """The pool's worker processes died before returning their results."""


def broken_pool_error(err: BaseException) -> WorkersFailed:
    """The error for a ``BrokenProcessPool``: a worker died (killed, out of memory) or, most often in a
    user's script, could not start because the script lacks a ``__main__`` guard."""
    return WorkersFailed(f"a worker process died before returning its result ({err}). If this ran "
                         f"from a script: {MAIN_GUARD_HINT}. Otherwise a worker was killed (memory?); "
                         f"run with workers=1 to see its own error")


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` now (Ctrl-C, a failed run): drop its queued calls and end its running workers,
    where ``shutdown`` would wait for every running call first."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


def spawn_pool(workers: int, initializer: Callable[..., None] | None = None,
               initargs: tuple = ()) -> ProcessPoolExecutor:
    """A ``ProcessPoolExecutor`` of ``workers`` spawned processes that stop when this process
    dies; ``initializer(*initargs)`` runs in each after that request (it must be importable,
    as with any spawned pool).

    Called while a spawned worker re-imports a script that has no ``__main__`` guard, it raises
    a ``RuntimeError`` that says so (instead of Python's longer message, once per worker); the
    parent then sees ``concurrent.futures.process.BrokenProcessPool``, which the library's
    runners turn into :class:`WorkersFailed` (:func:`broken_pool_error`)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):  # a worker importing the script
        raise RuntimeError(f"uncertain-agents: {MAIN_GUARD_HINT}")

    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_initialise, initargs=(initializer, initargs))
