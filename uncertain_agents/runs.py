"""Run folders: atomic writes, the manifest that records how a result was made, and
:class:`RunFolder` — a CLI run's configuration and its finished units, so an interrupted
run resumes and a different run is never overwritten silently."""
from __future__ import annotations

import errno
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, flushed and
    fsynced, then renamed over ``path`` (a reader sees the old file or the new one, never half).

    Missing folders above ``path`` are made. A link is written through, as ``open`` does: its target
    is replaced, the link stays. An ``OSError`` (of the same kind and ``errno``) names
    ``path``, not the temporary file: ``cannot write PATH: <reason>``."""
    given, path = Path(path), _through_link(path)
    if path.is_dir():
        raise IsADirectoryError(f"cannot write {path}: it is a folder; give a file path inside it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        blocking = next((f for f in reversed(path.parents) if f.exists() and not f.is_dir()), None)
        if blocking is not None:  # mkdir says "File exists" for a file where a folder must be
            raise NotADirectoryError(errno.ENOTDIR, f"cannot write {path}: {blocking} is not a folder") from err
        raise _naming(err, path) from err
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _default_file_mode())   # mkstemp makes 0600; results are shared files
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise _naming(err, path) from err
        raise
    return given


def _through_link(path) -> Path:
    """``path``, or where it leads when it is a symbolic link (a rename would replace the link itself)."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _naming(err: OSError, path: Path) -> OSError:
    """``err`` again (same ``errno``, so the same subclass), its message naming ``path``."""
    reason = err.strerror or str(err)
    if err.filename is not None and Path(str(err.filename)) not in (path, path.parent) \
            and not Path(str(err.filename)).name.startswith(f".{path.name}."):
        reason += f": {err.filename}"  # e.g. a folder above path that could not be made
    return OSError(err.errno, f"cannot write {path}: {reason}") if err.errno is not None \
        else OSError(f"cannot write {path}: {reason}")


def check_writable(path) -> Path:
    """Raise an ``OSError`` naming the reason unless a file can be written at ``path`` the way
    :func:`atomic_write_bytes` writes it: ``path`` is not a folder, and a file can be made in its
    folder, or, where that folder does not exist yet, a folder in its nearest existing parent.

    Tried for real (a file or folder made and removed at once), because permission bits say
    nothing on a read-only or special file system (``/proc``) or for root. Nothing is left
    behind; missing folders are not made. A link is checked where it leads."""
    given, path = Path(path), _through_link(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder; give a file path inside it")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        if folder.is_symlink():  # a dangling link: mkdir would fail
            raise FileNotFoundError(f"{folder} is a link to nowhere")
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder")
    try:
        if folder == path.parent:
            fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".check", dir=folder)
            os.close(fd)
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".check.", dir=folder))
    except OSError as err:
        what = "a file" if folder == path.parent else "a folder"
        raise OSError(err.errno, f"cannot make {what} in {folder} ({err.strerror or err})") from err
    return given


def _default_file_mode() -> int:
    """The mode ``open()`` would give a new file: 0o666 less the process umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_text(path, text: str) -> Path:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_csv(path, frame, **kwargs) -> Path:
    """A pandas frame written as CSV atomically (``kwargs`` go to ``DataFrame.to_csv``; ``index=False``
    unless given)."""
    kwargs.setdefault("index", False)
    return atomic_write_text(path, frame.to_csv(**kwargs))


def append_record(path, record: dict) -> Path:
    """Append ``record`` to a JSON-lines file as one whole line: ``write`` with ``O_APPEND`` (again for
    the rest if the OS wrote only part), then ``fsync``. A killed run leaves at most a last line
    without its newline, which :func:`read_records` skips and the next ``append_record`` cuts off
    first (so the new record is never joined onto it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(record) + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, _default_file_mode())
    try:
        _drop_partial_line(fd)
        while data:
            written = os.write(fd, data)
            if written <= 0:
                raise OSError(f"could not append to {path}: the OS wrote {written} bytes")
            data = data[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def _drop_partial_line(fd: int) -> None:
    """Truncate an open file after its last newline (a last line a kill cut short); whole lines stay."""
    size = end = os.fstat(fd).st_size
    while end > 0:
        start = max(0, end - 4096)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end != size:
        os.ftruncate(fd, end)


def read_records(path) -> list[dict]:
    """The whole records of a JSON-lines file written by :func:`append_record` (none if it is missing);
    a last line cut short by a kill (no newline) is left out. Raises ``ValueError`` naming the file and
    line for a whole line that is not JSON."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_bytes().split(b"\n")[:-1]  # the last piece has no newline: partial (or empty)
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: line {number} is not a JSON record ({err})") from None
    return records


def atomic_save_figure(path, figure, **kwargs) -> Path:
    """A matplotlib figure saved atomically (rendered in memory, then :func:`atomic_write_bytes`); the
    format follows the suffix (png by default). ``kwargs`` go to ``savefig``."""
    import io

    path = Path(path)
    buffer = io.BytesIO()
    figure.savefig(buffer, format=path.suffix.lstrip(".") or "png", **kwargs)
    return atomic_write_bytes(path, buffer.getvalue())


def available_cores() -> int:
    """CPU cores this process may use (its affinity where the OS tells, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def thread_cap() -> int | None:
    """The thread count the user set in ``OMP_NUM_THREADS`` (a positive integer), else None.

    torch itself starts with that many threads; a command's default (``--threads`` not given) never
    goes above it, so ``OMP_NUM_THREADS=1 uncertain-agents bench`` runs on one thread, as the
    variable asks. An explicit ``--threads`` still wins."""
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 1 else None


def default_threads(default: int | None = None) -> int:
    """The threads a run uses when none are asked for: ``default`` (else every available core), at most
    the available cores and at most :func:`thread_cap`."""
    cores = available_cores()
    cap = thread_cap()
    return max(1, min(default or cores, cores, cap or cores))


def git_commit() -> str | None:
    """The commit of the repository this package runs from, or None (no git, not a checkout)."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def processor_name() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``; elsewhere :func:`platform.processor`).

    Recorded with every result because timings, and the last bits of floating-point results,
    depend on it: the BLAS picks its kernels per CPU, so a chaotic run (a bandit trial) made on
    one CPU model replays to the bit on that model only.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_capability() -> str:
    """The vector instruction set PyTorch's CPU kernels dispatch to here (e.g. ``"AVX512"``)."""
    import torch

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):  # older torch
        return "unknown"


def run_manifest(argv=None) -> dict:
    """How a result was made: package, commit, command line, versions, machine, time."""
    import torch

    from . import __version__

    from .seeding import SEEDING_SCHEME

    return {"package_version": __version__, "git_commit": git_commit(), "seeding": SEEDING_SCHEME,
            "argv": list(sys.argv if argv is None else argv), "torch_version": torch.__version__,
            "python_version": platform.python_version(), "platform": platform.platform(),
            "cpu": processor_name(), "cpu_capability": cpu_capability(),
            "cuda": torch.cuda.is_available(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


MANIFEST = "manifest.json"
LOCK = ".lock"


_HELD: dict[str, int] = {}  # folders this process has locked (a process may open its own folder again)


def lock_folder(folder: Path, what: str = "run") -> None:
    """Hold an exclusive ``flock`` on ``folder/.lock`` until this process ends, however it ends (the
    kernel drops the lock with the process). Raises ``ValueError`` when another process holds it.
    Re-entrant within a process; a no-op where ``fcntl`` is missing (not POSIX)."""
    key = os.path.realpath(folder)
    if key in _HELD:
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return
    fd = os.open(Path(folder) / LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), _default_file_mode())
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(f"{folder} is in use by another {what} right now; wait for it to finish, "
                         f"or choose another --out") from None
    except OSError:  # a file system without flock (NFS without lockd, Lustre without -o flock): run unlocked
        os.close(fd)
        return
    _HELD[key] = fd


def record_run(out, argv=None) -> Path:
    """Append this run's :func:`run_manifest` to ``out/manifest.json`` (written atomically).

    Experiment scripts that write a results folder call it once per invocation, so a folder
    filled over several resumed runs lists every one of them (commit, command line, versions,
    time) under ``"runs"``; other keys of an existing manifest are kept.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    entry = run_manifest(argv)
    fd = os.open(out / f".{MANIFEST}.lock", os.O_RDWR | os.O_CREAT, _default_file_mode())
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)  # two runs into one folder (grid --only) must not drop an entry
        except (ImportError, OSError):  # no fcntl, or a file system without flock: append unlocked
            pass
        try:
            manifest = json.loads(path.read_text())
        except FileNotFoundError:
            manifest = {}
        except ValueError:
            raise ValueError(f"{path} is not a JSON manifest; move it away before writing results into {out}") from None
        if not isinstance(manifest, dict) or not isinstance(manifest.setdefault("runs", []), list):
            raise ValueError(f"{path} is not a manifest (an object with a list of runs)")
        manifest["runs"].append(entry)
        atomic_write_text(path, json.dumps(manifest, indent=1) + "\n")
    finally:
        os.close(fd)
    return path


def config_differences(previous: dict, current: dict, most: int = 6) -> str:
    """What differs between two run configurations (JSON values; the seeding scheme left out, which
    :class:`RunFolder` names on its own): ``"epochs 1 in the folder, 2 now; ..."`` for at most ``most``
    keys (then ``"and N more"``); ``""`` when only the seeding scheme differs."""
    missing = object()

    def shown(value) -> str:
        text = "(not set)" if value is missing else json.dumps(value, ensure_ascii=False)
        return text if len(text) <= 60 else text[:57] + "..."

    keys = [k for k in sorted(set(previous) | set(current))
            if k != "seeding" and previous.get(k, missing) != current.get(k, missing)]
    parts = [f"{k} {shown(previous.get(k, missing))} in the folder, {shown(current.get(k, missing))} now"
             for k in keys[:most]]
    if len(keys) > most:
        parts.append(f"and {len(keys) - most} more")
    return "; ".join(parts)


class RunFolder:
    """The folder of one CLI run: its configuration and the units (trials, splits, ...) it
    has finished, each written atomically as it finishes.

    Opening a folder that holds the same configuration resumes it (finished units are kept);
    a different configuration, or files that are not a run, are refused unless ``force``
    (which clears the earlier units).

    Args:
        path: the run folder.
        config: the job's full configuration (JSON-serialisable).
        force: replace whatever run the folder holds.
    """

    CONFIG = "config.json"
    UNITS = "units"
    #: what the CLI's runs write beside config.json and units/ (bandit, regress, attack): --force over
    #: an earlier run removes them too, so the folder never shows the replaced run's results
    OUTPUTS = ("steps.csv", "summary.csv", "summary.json", "regret.png", "splits.csv", "splits.png",
               "clean.csv", "fgsm.csv", "fgsm.png", "ifgsm.csv", "ifgsm.png")

    def __init__(self, path, config: dict, *, force: bool = False) -> None:
        from .seeding import SEEDING_SCHEME

        self.path = Path(path)
        # the seeding scheme is part of what makes two runs the same run (uncertain_agents.seeding)
        self.config = {**json.loads(json.dumps(config, default=str)), "seeding": SEEDING_SCHEME}
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"cannot create the run folder {self.path}: {err.strerror or err}") from None
        if not os.access(self.path, os.W_OK):
            raise ValueError(f"the run folder {self.path} is not writable")
        # held for the life of this process: a second run (with or without --force) is refused, not mixed in
        lock_folder(self.path)
        self.replaced = False  # set when --force replaced an earlier run (not a folder of a user's files)
        self.resumed = self._check_previous(force)
        manifest = run_manifest()
        runs = [*self._previous_runs(), manifest] if self.resumed else [manifest]
        atomic_write_text(self.path / self.CONFIG, json.dumps(
            {"config": self.config, "manifest": manifest, "runs": runs}, indent=2, default=str))
        (self.path / self.UNITS).mkdir(exist_ok=True)

    def _previous_runs(self) -> list:
        """The manifests of every earlier invocation that filled this folder (oldest first)."""
        try:
            data = json.loads((self.path / self.CONFIG).read_text())
        except (OSError, ValueError):
            return []
        runs = data.get("runs") if isinstance(data, dict) else None
        if isinstance(runs, list):
            return runs
        return [data["manifest"]] if isinstance(data, dict) and data.get("manifest") else []

    def _check_previous(self, force: bool) -> bool:
        config_file = self.path / self.CONFIG
        previous = None
        if config_file.exists():
            try:
                previous = json.loads(config_file.read_text()).get("config")
            except (OSError, ValueError, AttributeError):
                previous = None
        elif not any(p.name != LOCK for p in self.path.iterdir()):
            return False
        if previous == self.config:
            return True
        if not force:
            what = "a different run" if previous is not None else "files that are not a run of this command"
            if isinstance(previous, dict) and (differences := config_differences(previous, self.config)):
                what = f"a different run ({differences})"
            if isinstance(previous, dict) and {**previous, "seeding": self.config["seeding"]} == self.config:
                what = (f"this run made with the random streams of seeding scheme {previous.get('seeding', 1)} "
                        f"(before session 33; today's is {self.config['seeding']}), whose results would mix with "
                        f"today's")
            raise ValueError(f"{self.path} holds {what}; pass --force to replace it, or choose another --out")
        shutil.rmtree(self.path / self.UNITS, ignore_errors=True)
        if previous is not None:  # an earlier run's results, not a user's files: none may outlive it
            self.replaced = True
            for name in self.OUTPUTS:
                target = self.path / name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    target.unlink(missing_ok=True)
        return False

    def _unit(self, name: str, suffix: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad unit name {name!r}")
        return self.path / self.UNITS / f"{name}{suffix}"

    def save_frame(self, name: str, frame) -> Path:
        """Write one finished unit (a DataFrame) atomically."""
        return atomic_write_text(self._unit(name, ".csv"), frame.to_csv(index=False))

    def load_frame(self, name: str):
        """The unit's DataFrame, or None when it is not finished (missing or unreadable)."""
        import pandas as pd

        try:
            return pd.read_csv(self._unit(name, ".csv"))
        except (OSError, ValueError):
            return None

    def save_record(self, name: str, record: dict) -> Path:
        return atomic_write_text(self._unit(name, ".json"), json.dumps(record, indent=1, default=float))

    def load_record(self, name: str) -> dict | None:
        try:
            record = json.loads(self._unit(name, ".json").read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def finished(self) -> list[str]:
        """Names of the finished units."""
        folder = self.path / self.UNITS
        return sorted(p.stem for p in folder.iterdir() if p.suffix in (".csv", ".json")) if folder.exists() else []

    def write_text(self, name: str, text: str) -> Path:
        """An output file of the run (summary, table), written atomically."""
        return atomic_write_text(self.path / name, text)

    def write_figure(self, name: str, figure, **kwargs) -> Path:
        """A matplotlib figure saved atomically as ``name``."""
        return atomic_save_figure(self.path / name, figure, **kwargs)


def json_safe(value):
    """``value`` with every non-finite float (the s.e. of one trial or one split is NaN) as ``None``,
    so that the JSON written is standard JSON (``null``), which every reader parses, not ``NaN``."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    try:
        import numpy as np

        if isinstance(value, np.floating):
            return json_safe(float(value))
        if isinstance(value, np.integer):
            return int(value)
    except ImportError:  # pragma: no cover
        pass
    return value
