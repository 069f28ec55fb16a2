"""Parsing of method options written as text (command line, experiment scripts).

Two forms, one value grammar:

* ``KEY=VALUE`` (``--option noise_std=0.1``);
* ``NAME[:KEY=VALUE,...]`` (``dropout-alpha:alpha=0.5,train_samples=3``).

Values are read as JSON-like literals (``0.5``, ``3``, ``[50, 50]``, ``"relu"``),
``true``/``false``/``none`` in any case, and otherwise kept as plain strings.
"""
from __future__ import annotations

import ast


def parse_value(text: str):
    """``"0.5" -> 0.5``, ``"true" -> True``, ``"none" -> None``, ``"relu" -> "relu"``."""
    text = text.strip()
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_key_value(text: str, *, what: str = "--option") -> tuple[str, object]:
    """``"KEY=VALUE" -> (key, value)``; a clear ``ValueError`` naming ``what`` otherwise."""
    key, sep, value = str(text).partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{what} expects key=value, got {text!r}")
    return key.strip(), parse_value(value)


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """``text`` split at each ``sep`` outside brackets and quotes:
    ``"a=1,b=[2, 3],c='x,y'" -> ["a=1", "b=[2, 3]", "c='x,y'"]``."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_posterior_spec(text: str) -> tuple[str, dict]:
    """``"NAME[:KEY=VALUE,...]" -> (name, options)`` (the name is not resolved here). Commas
    inside a list or a quoted value belong to it: ``"fsvgd:prior_std=[0.1, 1.0],n_particles=5"``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a posterior must be given as NAME[:key=value,...], got {text!r}")
    name, _, rest = text.strip().partition(":")
    options = dict(parse_key_value(item, what=f"posterior option in {text!r}")
                   for item in (s.strip() for s in split_top_level(rest)) if item)
    return name.strip(), options
