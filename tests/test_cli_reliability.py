"""CLI runs survive interruption and bad input: units on disk, resume, refusal, exit codes."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from uncertain_agents.cli import main
from uncertain_agents.runs import RunFolder

BANDIT = ["bandit", "wheel", "--agent", "thompson", "--posterior", "mfvi", "--steps", "300", "--trials", "3",
          "--train-every", "25", "--train-steps", "20", "--delta", "0.7"]


def cli(args, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("UNCERTAIN_AGENTS_DEBUG", None)
    return subprocess.Popen([sys.executable, "-m", "uncertain_agents.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def without_seconds(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if "seconds" in c])


# ------------------------------------------------------------------ RunFolder
def test_run_folder_resumes_refuses_and_forces(tmp_path):
    folder = RunFolder(tmp_path / "run", {"a": 1})
    assert not folder.resumed
    folder.save_frame("u1", pd.DataFrame({"x": [1.5, 2.0]}))
    again = RunFolder(tmp_path / "run", {"a": 1})
    assert again.resumed and again.finished() == ["u1"]
    assert again.load_frame("u1")["x"].tolist() == [1.5, 2.0]
    assert again.load_frame("u2") is None
    with pytest.raises(ValueError, match="different run.*--force"):
        RunFolder(tmp_path / "run", {"a": 2})
    forced = RunFolder(tmp_path / "run", {"a": 2}, force=True)
    assert not forced.resumed and forced.finished() == []
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a run"):
        RunFolder(tmp_path / "other", {"a": 1})
    assert not list((tmp_path / "run").rglob("*.tmp"))  # atomic writes leave no temporary files
    manifest = json.loads((tmp_path / "run" / "config.json").read_text())["manifest"]
    assert {"package_version", "torch_version", "argv", "git_commit"} <= set(manifest)


def test_a_run_folder_in_use_by_another_process_is_refused_even_with_force(tmp_path):
    """Two runs into one folder used to mix their trials (a --force run deleted units/ under a live
    run, which kept writing into it). The folder is now locked for the life of the run's process."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom uncertain_agents.runs import RunFolder\n"
         f"RunFolder({str(tmp_path / 'run')!r}, {{'a': 1}})\nprint('ready', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        for force in (False, True):
            with pytest.raises(ValueError, match="in use by another run"):
                RunFolder(tmp_path / "run", {"a": 2}, force=force)
    finally:
        holder.kill()
        holder.wait()
    assert not RunFolder(tmp_path / "run", {"a": 2}, force=True).resumed  # free once that process is gone


def test_force_removes_the_replaced_runs_results_and_resume_keeps_every_runs_record(tmp_path):
    first = RunFolder(tmp_path / "run", {"a": 1})
    for name in ("summary.json", "steps.csv", "regret.png"):
        (tmp_path / "run" / name).write_text("old")
    (tmp_path / "run" / "notes.txt").write_text("a user's file")
    RunFolder(tmp_path / "run", {"a": 1})  # resumed: a second command adds its record
    runs = json.loads((tmp_path / "run" / "config.json").read_text())["runs"]
    assert len(runs) == 2 and first.resumed is False
    RunFolder(tmp_path / "run", {"a": 2}, force=True)
    left = sorted(p.name for p in (tmp_path / "run").iterdir() if not p.name.startswith("."))
    assert left == ["config.json", "notes.txt", "units"]  # no result of the replaced run survives
    assert len(json.loads((tmp_path / "run" / "config.json").read_text())["runs"]) == 1


def test_grid_table_names_a_broken_grid_file(tmp_path):
    from uncertain_agents.grid import grid_table

    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "grid.json").write_text("[]")
    with pytest.raises(ValueError, match=r"grid\.json is not a grid file"):
        grid_table(tmp_path / "g")


@pytest.mark.parametrize("command", [BANDIT, ["regress", "yacht", "--posterior", "map", "--epochs", "1"],
                                     ["attack", "--dataset", "digits", "--posterior", "map", "--epochs", "1"]])
def test_unwritable_out_is_an_error_before_work_naming_the_flag(tmp_path, capsys, monkeypatch, command):
    from uci_helpers import write_tiny_yacht

    monkeypatch.setenv("UNCERTAIN_AGENTS_DATA", str(write_tiny_yacht(tmp_path / "data")))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main([*command, "--out", str(blocker / "run")]) == 2
    assert "--out" in capsys.readouterr().err


# ----------------------------------------------------------- interrupt, resume
#: The CLI in a child process that sends itself SIGINT right after the first Thompson unit is on disk:
#: a real Ctrl-C at a fixed point of the run. (The test used to poll for that unit and signal from
#: here, which raced the run: under load it sometimes finished first, exit 0 instead of 130.)
INTERRUPT_AFTER_FIRST_THOMPSON_UNIT = """
import os, signal, sys
from uncertain_agents.cli import main
from uncertain_agents.runs import RunFolder
save = RunFolder.save_frame
def save_then_interrupt(self, name, frame):
    path = save(self, name, frame)
    if name.startswith("thompson"):
        os.kill(os.getpid(), signal.SIGINT)
    return path
RunFolder.save_frame = save_then_interrupt
sys.exit(main(sys.argv[1:]))
"""


def test_sigint_keeps_finished_trials_and_the_resumed_run_matches(tmp_path):
    out, clean = tmp_path / "interrupted", tmp_path / "clean"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("UNCERTAIN_AGENTS_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", INTERRUPT_AFTER_FIRST_THOMPSON_UNIT, *BANDIT, "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "resume" in proc.stderr
    units = sorted(p.name for p in (out / "units").glob("*.csv"))
    # trial 0's two runs (uniform first) finished before the interrupt and are kept; nothing after it
    assert units == ["thompson[mfvi]__trial0.csv", "uniform__trial0.csv"]
    assert not (out / "summary.csv").exists()
    resumed = cli([*BANDIT, "--out", str(out)])
    stdout, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "already finished" in " ".join(err.split())  # the status line on stderr, the results on stdout
    assert "normalised regret" in stdout
    full = cli([*BANDIT, "--out", str(clean)])
    _, err = full.communicate(timeout=300)
    assert full.returncode == 0, err
    a, b = pd.read_csv(out / "summary.csv"), pd.read_csv(clean / "summary.csv")
    pd.testing.assert_frame_equal(without_seconds(a), without_seconds(b))
    pd.testing.assert_frame_equal(without_seconds(pd.read_csv(out / "steps.csv")),
                                  without_seconds(pd.read_csv(clean / "steps.csv")))


def test_a_different_run_into_the_same_out_is_refused_unless_forced(tmp_path, capsys):
    out = tmp_path / "run"
    small = ["bandit", "wheel", "--agent", "linear", "--steps", "30", "--trials", "1", "--out", str(out)]
    assert main(small) == 0
    assert main([*small, "--delta", "0.5"]) == 2
    assert "different run" in capsys.readouterr().err
    assert main([*small, "--delta", "0.5", "--force"]) == 0
    assert json.loads((out / "summary.json").read_text())["delta"] == 0.5


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("extra, message", [
    (["--delta", "1.5"], "--delta must lie in (0, 1)"),
    (["--delta", "0"], "--delta must lie in (0, 1)"),
    (["--option", "no_such_option=1"], "--option for mfvi"),
    (["--option", "prior_std=-1"], "--option for mfvi"),
    (["--device", "banana"], "--device"),
    (["--threads", "0"], "--threads"),
    (["--train-every", "0"], "--train-every"),
    (["--lr", "-1"], "--lr"),
])
def test_bad_arguments_fail_before_any_unit(tmp_path, capsys, extra, message):
    out = tmp_path / "run"
    assert main([*BANDIT, "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) <= 2
    assert not (out / "units").exists()


def test_cuda_without_cuda_is_refused_up_front(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    args = ["bandit", "wheel", "--agent", "neural-linear", "--steps", "20", "--trials", "1", "--device", "cuda",
            "--out", str(tmp_path / "run")]
    assert main(args) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_divergence_is_one_line_and_keeps_earlier_units(tmp_path):
    out = tmp_path / "run"
    proc = cli(["bandit", "wheel", "--agent", "thompson", "--posterior", "mfvi", "--steps", "200", "--trials", "1",
                "--train-every", "20", "--train-steps", "50", "--lr", "1e8", "--out", str(out)])
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in err and "lr" in err
    assert (out / "units" / "uniform__trial0.csv").exists()  # Uniform finished before the diverging agent


def test_threads_above_the_cores_are_lowered(capsys, monkeypatch):
    from uncertain_agents.commands.common import check_threads
    from uncertain_agents.runs import available_cores

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert check_threads(10_000)[0] == available_cores()
    assert check_threads(None)[0] == available_cores()
    assert check_threads(None, default=1) == (1, None)
    with pytest.raises(ValueError, match="--threads"):
        check_threads(-2)


def test_default_threads_never_exceed_a_set_omp_num_threads(monkeypatch):
    """``OMP_NUM_THREADS=1 uncertain-agents bench`` (or ``attack``, ``grid run``) runs on one thread:
    the defaults used to start 2 (or every core) regardless, several times slower beside another job.
    An explicit ``--threads`` still wins; a value that is not a positive integer is ignored."""
    from uncertain_agents.commands.common import check_threads
    from uncertain_agents.runs import available_cores, default_threads

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert check_threads(None) == (1, None)
    assert check_threads(None, default=2) == (1, None)
    assert check_threads(min(2, available_cores())) == (min(2, available_cores()), None)
    for junk in ("", "zero", "0", "-3"):
        monkeypatch.setenv("OMP_NUM_THREADS", junk)
        assert default_threads(2) == min(2, available_cores())


def test_grid_threads_default_follows_omp_num_threads(tmp_path, monkeypatch):
    from uncertain_agents import grid

    seen = {}

    def fake_local(cells, report, *, workers, threads):  # records the threads instead of running
        seen["threads"] = threads

    monkeypatch.setattr(grid, "run_local", fake_local)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = Path(__file__).resolve().parents[1] / "experiments" / "specs" / "smoke.toml"
    grid.run_grid(spec, tmp_path / "out", workers=1)
    assert seen == {"threads": 1}


@pytest.mark.data
def test_regress_resumes_split_by_split(tmp_path, capsys):
    if not os.environ.get("UNCERTAIN_AGENTS_DATA"):
        pytest.skip("needs UNCERTAIN_AGENTS_DATA")
    out = tmp_path / "reg"
    args = ["regress", "boston", "--posterior", "map", "--splits", "2", "--epochs", "2", "--n-samples", "5",
            "--threads", "1", "--out", str(out)]
    assert main(args[:-4] + ["--splits", "1", "--threads", "1", "--out", str(out)]) == 0
    assert main(args) == 2  # a different configuration (2 splits) into the same folder
    assert main(args + ["--force"]) == 0
    first = pd.read_csv(out / "splits.csv")
    (out / "units" / "split1.json").unlink()  # as if interrupted during split 1
    assert main(args) == 0
    assert "1 of 2 splits already finished" in " ".join(capsys.readouterr().err.split())
    pd.testing.assert_frame_equal(without_seconds(pd.read_csv(out / "splits.csv")), without_seconds(first))


# ------------------------------------------------------------ atomic result files
def test_records_survive_a_cut_last_line_and_files_are_written_whole(tmp_path):
    """``append_record`` writes whole JSON lines; ``read_records`` skips a last line a kill cut short; CSVs
    and figures go through a temporary file (no ``*.tmp`` left, the old file replaced whole)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from uncertain_agents.runs import append_record, atomic_save_figure, atomic_write_csv, read_records

    path = tmp_path / "runs.jsonl"
    append_record(path, {"a": 1})
    append_record(path, {"a": 2})
    with open(path, "a") as fh:
        fh.write('{"a": 3, "b"')  # a write cut short
    assert read_records(path) == [{"a": 1}, {"a": 2}]
    assert read_records(tmp_path / "missing.jsonl") == []
    csv = atomic_write_csv(tmp_path / "t.csv", pd.DataFrame({"x": [1, 2]}))
    atomic_write_csv(csv, pd.DataFrame({"x": [3]}))
    assert csv.read_text() == "x\n3\n"
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    png = atomic_save_figure(tmp_path / "f.png", fig, dpi=50)
    plt.close(fig)
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))


def test_run_folders_work_unlocked_where_the_file_system_has_no_flock(tmp_path, monkeypatch):
    """NFS without lockd or Lustre without -o flock raise ENOLCK: runs go on unlocked (as before the
    lock existed) instead of failing, and no descriptor is left open."""
    import errno
    import fcntl

    from uncertain_agents.runs import record_run

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    before = len(os.listdir("/proc/self/fd"))
    folder = RunFolder(tmp_path / "run", {"a": 1})
    assert not folder.resumed and not folder.replaced
    record_run(tmp_path / "grid")
    assert len(os.listdir("/proc/self/fd")) == before
    assert RunFolder(tmp_path / "run", {"a": 2}, force=True).replaced  # --force over an earlier run
