"""The file format of saved posteriors.

Format 2 (written now): a header line ``UNCERTAIN-AGENTS-POSTERIOR/2``, a line with the
SHA-256 of the rest of the file, then a torch file (``torch.save``) holding
``{"format", "method", "config" (JSON text), "state" ({name: tensor})}``. The checksum covers
every byte after the header, so any corruption is detected; the torch part is read with
``weights_only=True``, so nothing in a file can run code. Format 1 (older saves) is the
torch file alone, and is still read (without the checksum). A file of another format — one a
later version writes — is refused with an error naming its format, not as a foreign file.
"""
from __future__ import annotations

import hashlib
import io

import torch

from ..runs import atomic_write_bytes

FORMAT_1 = "uncertain-agents/1"
FORMAT_2 = "uncertain-agents/2"
MAGIC_PREFIX = b"UNCERTAIN-AGENTS-POSTERIOR/"
MAGIC = MAGIC_PREFIX + b"2\n"
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
            raise PayloadError("the file is corrupted or truncated (checksum mismatch)")
        expected = FORMAT_2
    elif data.startswith(ZIP_MAGIC):
        body, expected = data, FORMAT_1
    elif data.startswith(MAGIC_PREFIX):  # another format's header (a later version's), or a cut one
        version, newline, _ = data[len(MAGIC_PREFIX):len(MAGIC_PREFIX) + 32].partition(b"\n")
        if not newline:
            raise PayloadError("the file is truncated (it ends inside its header)")
        raise _other_format(f"uncertain-agents/{version.decode('ascii', 'replace')}")
    elif len(data) >= 10 and MAGIC_PREFIX.startswith(data):
        raise PayloadError("the file is truncated (it ends inside its header)")
    else:
        raise PayloadError("not a posterior saved by uncertain-agents (unknown file header)")
    try:
        payload = torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises many types for bad files; none of their advice applies
        raise PayloadError(f"not a posterior saved by uncertain-agents (not a readable torch file: "
                           f"{type(err).__name__})") from None
    _check_dense(payload)
    found = payload.get("format") if isinstance(payload, dict) else None
    if found != expected:
        if isinstance(found, str) and found.startswith("uncertain-agents/") and found not in (FORMAT_1, FORMAT_2):
            raise _other_format(found)
        raise PayloadError(f"not a posterior saved by uncertain-agents (expected format {expected})")
    return payload


def _check_dense(payload) -> None:
    """``PayloadError`` for a tensor anywhere in ``payload`` that is not a dense CPU tensor (sparse,
    meta, ...): the checks and kernels downstream read plain strided arrays."""
    stack = [payload]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided or value.device.type != "cpu":
                raise PayloadError(f"the file holds a tensor of layout {value.layout} on device {value.device.type}; "
                                   f"a saved posterior holds dense (strided) CPU tensors only")
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)


def _other_format(found: str) -> PayloadError:
    """The error for a posterior file in a format this version does not read (a later version's)."""
    return PayloadError(f"saved in file format {found!r}, which this version of uncertain-agents cannot read "
                        f"(it reads {FORMAT_1!r} and {FORMAT_2!r}); load it with the version that saved it, "
                        f"or a newer one")
