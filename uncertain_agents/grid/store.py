"""The grid's folder: one JSON file per finished cell, named by a hash of its configuration.

``DIR/grid.json`` holds the spec the grid was last run with; ``DIR/cells/<hash>.json`` holds
``{"config", "metrics", "manifest"}`` of one finished cell, written atomically (a temporary
file in the same folder, then a rename), so a killed grid leaves either a whole file or none
under that name. A file that does not parse or whose configuration does not match its name
counts as not finished: the cell runs again and the file is replaced. Failed cells leave
``DIR/cells/<hash>.error.json`` (retried on the next run).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..runs import atomic_write_text


def canonical(config: dict) -> str:
    """The configuration as canonical JSON (sorted keys, no spaces)."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)


def cell_hash(config: dict) -> str:
    """16 hex digits of the SHA-256 of the canonical configuration."""
    return hashlib.sha256(canonical(config).encode()).hexdigest()[:16]


class CellStore:
    """Finished cells of a grid folder."""

    def __init__(self, root) -> None:
        self.root = Path(root)
        self.cells_dir = self.root / "cells"

    def path(self, config: dict) -> Path:
        return self.cells_dir / f"{cell_hash(config)}.json"

    def load(self, config: dict) -> dict | None:
        """The finished record of ``config``, or None (missing, unreadable or mismatched)."""
        try:
            record = json.loads(self.path(config).read_text())
        except (OSError, ValueError):
            return None
        if (not isinstance(record, dict) or record.get("config") != json.loads(canonical(config))
                or not isinstance(record.get("metrics"), dict)):
            return None
        return record

    def done(self, config: dict) -> bool:
        return self.load(config) is not None

    def write(self, config: dict, metrics: dict, manifest: dict) -> Path:
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        record = {"config": config, "metrics": metrics, "manifest": manifest}
        path = self.path(config)
        atomic_write_text(path, json.dumps(record, indent=1, default=float))
        error = path.with_suffix(".error.json")
        if error.exists():
            error.unlink()
        return path

    def write_error(self, config: dict, message: str, manifest: dict, traceback: str | None = None) -> Path:
        """``<hash>.error.json``: the cell's config, the error (``Type: message``), the worker's
        traceback when there is one (where the cell failed, for the user to debug) and the manifest."""
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        path = self.path(config).with_suffix(".error.json")
        record = {"config": config, "error": message}
        if traceback:
            record["traceback"] = traceback
        record["manifest"] = manifest
        atomic_write_text(path, json.dumps(record, indent=1))
        return path

    def records(self, configs: list[dict]) -> list[dict]:
        """The finished records among ``configs`` (in their order)."""
        return [r for r in (self.load(c) for c in configs) if r is not None]
