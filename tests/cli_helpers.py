"""Shared helper of the command-line tests: record which work functions a command called."""
from __future__ import annotations


def record_calls(monkeypatch, targets) -> list[str]:
    """Patch each ``(module, function name)`` of ``targets`` so that a call appends the name to the
    returned list and then runs the real function (a command's work: training, trials, ...)."""
    seen: list[str] = []
    for module, name in targets:
        real = getattr(module, name)

        def record(*args, _real=real, _name=name, **kw):
            seen.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(module, name, record)
    return seen
