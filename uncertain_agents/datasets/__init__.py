"""Data folders, checksum-verified files and optional downloads.

The data folder is, in order: an explicit ``data_dir`` argument, the environment
variable ``UNCERTAIN_AGENTS_DATA``, else ``~/.cache/uncertain-agents``. Loaders for
each data set live in the modules of this package (``uci``, ``mushroom``, ``mnist``).
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
import urllib.request
from pathlib import Path

ENV_VAR = "UNCERTAIN_AGENTS_DATA"


class DataNotFoundError(FileNotFoundError):
    """A data file is missing and could not be downloaded."""


class ChecksumError(ValueError):
    """A data file does not have the expected SHA-256."""


def data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """Resolve the data folder (argument, then ``$UNCERTAIN_AGENTS_DATA``, then the user cache)."""
    if explicit is not None:
        return Path(explicit).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "uncertain-agents"


def sha256sum(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def read_checksums(folder: Path) -> dict[str, str]:
    """Parse a ``SHA256SUMS`` file (``<hex>  <name>`` lines) if the folder has one."""
    sums = folder / "SHA256SUMS"
    if not sums.is_file():
        return {}
    table = {}
    for line in sums.read_text().splitlines():
        parts = line.strip().split()
        if len(parts) == 2:
            table[parts[1].lstrip("*")] = parts[0].lower()
    return table


def verify(path: Path, expected_sha256: str | None) -> None:
    """Check ``path`` against a SHA-256 (64 hex digits); ``None`` checks nothing.

    Raises:
        ValueError: ``expected_sha256`` is not 64 hex digits.
        ChecksumError: the file's SHA-256 differs.
    """
    if expected_sha256 is None:
        return
    if not isinstance(expected_sha256, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", expected_sha256):
        raise ValueError(f"sha256 must be 64 hexadecimal digits (or None to skip the check), got {expected_sha256!r}")
    actual = sha256sum(path)
    if actual != expected_sha256.lower():
        raise ChecksumError(f"{path} has SHA-256 {actual}, expected {expected_sha256}; "
                            "the file is corrupt or a different version: delete it and fetch it again")


def download(url: str, destination: Path, expected_sha256: str | None = None, timeout: float = 60.0) -> Path:
    """Download ``url`` atomically to ``destination`` and check its SHA-256.

    Folders created for the file are removed again when the download fails and leaves
    them empty, so a failed attempt leaves the cache as it was.
    """
    created = _missing_folders(destination.parent)
    destination.parent.mkdir(parents=True, exist_ok=True)
    done = False
    try:
        fd, tmp_name = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
                while block := response.read(1 << 20):
                    out.write(block)
            verify(tmp, expected_sha256)
            os.replace(tmp, destination)
            done = True
        finally:
            if tmp.exists():
                tmp.unlink()
    finally:
        if not done:
            _remove_empty(created)
    return destination


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and its ancestors that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove each folder (deepest first) while it is empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def fetch_file(relative: str, *, data_dir_arg=None, sha256: str | None = None, url: str | None = None,
               download_if_missing: bool = True, check_sha256: bool = True) -> Path:
    """Path of a verified data file, downloading it when it is missing and a URL is known.

    Args:
        relative: path inside the data folder, e.g. ``"mushroom/agaricus-lepiota.data"``.
        data_dir_arg: explicit data folder (else ``$UNCERTAIN_AGENTS_DATA`` / the cache).
        sha256: expected checksum; when ``None``, a ``SHA256SUMS`` file next to the data
            file is consulted if present.
        url: original source to download from when the file is missing.
        download_if_missing: allow the download (``False``: a missing file is an error
            that says the download is disabled and where to put the file).
        check_sha256: ``False`` skips every checksum check (``sha256`` and ``SHA256SUMS``).

    Raises:
        DataNotFoundError: missing and not downloadable (download disabled, failed, or no
            URL), naming the file and where to put it.
        ChecksumError: the file exists but its checksum is wrong.
    """
    folder = data_dir(data_dir_arg)
    path = folder / relative
    if not check_sha256:
        sha256 = None
    elif sha256 is None:
        sha256 = read_checksums(path.parent).get(path.name)
    if not path.is_file():
        if url is not None and download_if_missing:
            try:
                return download(url, path, sha256)
            except (OSError, ValueError) as err:
                reason = f"downloading {url} failed ({err})"
        elif url is not None:
            reason = (f"downloading is disabled (download=False / --no-download); allow the download "
                      f"(download=True, or drop --no-download) to fetch it from {url}")
        else:
            reason = "it has no download address"
        raise DataNotFoundError(
            f"data file {relative!r} not found in {folder} and {reason}. Put the file at {path}, "
            f"or point {ENV_VAR} (or --data-dir) at a folder that has it.")
    verify(path, sha256)
    return path
