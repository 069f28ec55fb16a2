"""Worker pools (uncertain_agents.workers): spawned processes that stop when their parent dies."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from uncertain_agents.workers import spawn_pool

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")


@pytest.mark.parametrize("workers", [0, -2, True, 1.5, "2"])
def test_spawn_pool_refuses_a_worker_count_that_is_not_a_positive_integer(workers):
    with pytest.raises(ValueError, match="workers must be a positive integer"):
        spawn_pool(workers)


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a reaped or exited process is not alive)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@linux_only
def test_workers_run_their_initializer_and_stop_when_the_parent_is_killed(tmp_path):
    # the parent: a pool of one worker whose initializer sets a variable, asked for that
    # variable and the worker's pid, then a long task; the test kills the parent with SIGKILL
    # (no Python clean-up can run) and the worker must go with it
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import os, time
        from uncertain_agents.workers import spawn_pool

        def mark(value):
            os.environ["UA_WORKER_MARK"] = value

        def read_mark():
            return os.environ.get("UA_WORKER_MARK")

        if __name__ == "__main__":
            pool = spawn_pool(1, initializer=mark, initargs=("set",))
            mark = pool.submit(read_mark).result()
            pid = pool.submit(os.getpid).result()
            print(mark, pid, flush=True)
            pool.submit(time.sleep, 120)
            time.sleep(120)
    """))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = parent.stdout.readline().split()
        assert len(line) == 2, f"parent printed {line!r}"
        mark, worker = line[0], int(line[1])
        assert mark == "set"                     # the caller's initializer ran in the worker
        assert worker != parent.pid and _alive(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker), "the worker outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_script_without_a_main_guard_is_told_why_its_workers_failed(tmp_path):
    """Workers are spawned processes that re-import the script; a script that calls
    ``run_experiment(..., workers=2)`` at its top level used to end in a long multiprocessing
    traceback and ``BrokenProcessPool``. Now each worker says what is missing and the run raises
    ``WorkersFailed`` with the same advice."""
    script = tmp_path / "no_guard.py"
    script.write_text(textwrap.dedent("""
        from uncertain_agents.agents.experiment import agent_specs, run_experiment
        run_experiment("wheel", agent_specs(["linear"], []), steps=20, trials=2, workers=2)
    """))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("uncertain_agents.workers.WorkersFailed") and 'if __name__ == "__main__":' in last
    assert "uncertain-agents: worker processes are spawned" in done.stderr  # said by the worker too
