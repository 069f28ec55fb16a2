"""Run folders: atomic writes and the manifest that records how a result was made."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def atomic_write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, flushed and
    fsynced, then renamed over ``path`` (a reader sees the old file or the new one, never half)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path, text: str) -> Path:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


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


def run_manifest(argv=None) -> dict:
    """How a result was made: package, commit, command line, versions, machine, time."""
    import torch

    from . import __version__

    return {"package_version": __version__, "git_commit": git_commit(),
            "argv": list(sys.argv if argv is None else argv), "torch_version": torch.__version__,
            "python_version": platform.python_version(), "platform": platform.platform(),
            "cuda": torch.cuda.is_available(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
