"""The file format of saved posteriors.

Format 2 (written now): a header line ``UNCERTAIN-AGENTS-POSTERIOR/2``, a line with the
SHA-256 of the rest of the file, then a torch file (``torch.save``) holding
``{"format", "method", "config" (JSON text), "state" ({name: tensor})}``. The checksum covers
every byte after the header, so any corruption is detected; the torch part is read with
``weights_only=True``, so nothing in a file can run code. Format 1 (older saves) is the
torch file alone, and is still read (without the checksum).
"""
from __future__ import annotations

import hashlib
import io

import torch

from ..runs import atomic_write_bytes

FORMAT_1 = "uncertain-agents/1"
FORMAT_2 = "uncertain-agents/2"
MAGIC = b"UNCERTAIN-AGENTS-POSTERIOR/2\n"
ZIP_MAGIC = b"PK\x03\x04"


class PayloadError(Exception):
    """What is wrong with a file, in words (``load_posterior`` adds the file name)."""


def write_payload(path, payload: dict) -> None:
    """Write ``payload`` in format 2, atomically."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    body = buffer.getvalue()
    atomic_write_bytes(path, MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def read_payload(data: bytes) -> dict:
    """The payload of a saved posterior's bytes, or :class:`PayloadError`."""
    if not data:
        raise PayloadError("the file is empty")
    if data.startswith(MAGIC):
        digest, body = data[len(MAGIC):len(MAGIC) + 64], data[len(MAGIC) + 65:]
        if data[len(MAGIC) + 64:len(MAGIC) + 65] != b"\n" or hashlib.sha256(body).hexdigest().encode() != digest:
            raise PayloadError("the file is corrupted (checksum mismatch)")
        expected = FORMAT_2
    elif data.startswith(ZIP_MAGIC):
        body, expected = data, FORMAT_1
    else:
        raise PayloadError("not a posterior saved by uncertain-agents (unknown file header)")
    try:
        payload = torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for bad files; none of their advice applies
        raise PayloadError(f"not a posterior saved by uncertain-agents (not a readable torch file: "
                           f"{type(err).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != expected:
        raise PayloadError(f"not a posterior saved by uncertain-agents (expected format {expected})")
    return payload
