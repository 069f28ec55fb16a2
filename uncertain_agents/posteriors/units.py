"""Training units: the standardisation of x and y a posterior trains in.

The units are fixed once — by the first ``fit`` (from its data, when ``standardize``; as the
identity otherwise) or by :meth:`TrainingUnits.set_units` — and every later warm-started fit keeps them, so a
refit never changes the units of what was learned. Predictions are reported in original
units either way.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..validation import as_tensor, check_finite


class TrainingUnits:
    """Mixin of :class:`~uncertain_agents.posteriors.base.Posterior`: buffers ``x_loc``,
    ``x_scale`` ``[in_dim]``, ``y_loc``, ``y_scale`` ``[out]`` and ``units_fixed``."""

    def _register_units(self, in_dim: int, out_dim: int) -> None:
        self.register_buffer("x_loc", torch.zeros(in_dim))
        self.register_buffer("x_scale", torch.ones(in_dim))
        self.register_buffer("y_loc", torch.zeros(out_dim))
        self.register_buffer("y_scale", torch.ones(out_dim))
        # True once the training units are fixed (by the first fit or set_units)
        self.register_buffer("units_fixed", torch.tensor(False))

    @property
    def units_are_fixed(self) -> bool:
        """Whether the training units are fixed (after the first ``fit`` or :meth:`set_units`)."""
        return bool(self.units_fixed)

    def set_units(self, *, x_loc=0.0, x_scale=1.0, y_loc=0.0, y_scale=1.0) -> None:
        """Fix the units the network is trained in: ``(x − x_loc)/x_scale`` and ``(y − y_loc)/y_scale``.

        Every later ``fit`` keeps them (``fit`` would otherwise set them from the data of the
        first fit when ``standardize=True``). Priors and the initial noise are defined in
        these units, so ``y_scale`` is also the scale of the prior over functions. Jobs that
        know their units set them here (the bandit agents do; see docs/bandits.md).
        Scalars broadcast over the ``in_dim`` / ``out_dim`` columns.

        Raises:
            ValueError: for non-finite values or non-positive scales, and if the units are
                already fixed (changing them would change what was learned).
        """
        if self.units_are_fixed:
            raise ValueError(f"{self.name}: the training units are already fixed (by an earlier fit or "
                             f"set_units); set_units must be called once, before the first fit")
        values = {}
        for name, value, width in (("x_loc", x_loc, self.spec.in_dim), ("x_scale", x_scale, self.spec.in_dim),
                                   ("y_loc", y_loc, self.spec.out_dim), ("y_scale", y_scale, self.spec.out_dim)):
            t = as_tensor(value, name, device=self.device).reshape(-1)
            if t.numel() == 1:
                t = t.expand(width)
            if t.numel() != width:
                raise ValueError(f"{name} must be a scalar or have {width} values, got {t.numel()}")
            check_finite(t, name)
            if name.endswith("scale") and not bool((t > 0).all()):
                raise ValueError(f"{name} must be positive, got {t.tolist()}")
            values[name] = t
        for name, t in values.items():
            getattr(self, name).copy_(t)
        self.units_fixed.fill_(True)

    def fix_units_from_data(self, x: Tensor, y: Tensor, mask: Tensor | None) -> bool:
        """Standardise with the data of the *first* fit; later fits keep those units.

        With ``standardize=False`` the first fit fixes the units as they are (the identity,
        unless :meth:`set_units` chose others), so that, as after a standardised fit, the units
        and the prior can no longer change under what was learned.

        Returns True when this call standardised (the first fit with ``standardize``).
        """
        if self.units_are_fixed:
            return False
        if not self.standardize:
            self.units_fixed.fill_(True)
            return False
        x_loc, x_scale = x.mean(0), safe_scale(x.std(0, unbiased=False))
        _check_statistics("x", x_loc, x_scale)
        if self.kind == "categorical":
            self._set_units_from_data(x_loc, x_scale)
            return True
        w = torch.ones_like(y) if mask is None else mask.to(y.dtype)
        count = w.sum(0).clamp_min(1.0)
        loc = (w * y).sum(0) / count
        var = (w * (y - loc).square()).sum(0) / count
        scale = torch.where(count > 1, safe_scale(var.sqrt()), torch.ones_like(var))
        _check_statistics("y", loc, scale)
        self._set_units_from_data(x_loc, x_scale, loc, scale)
        return True

    def _set_units_from_data(self, x_loc: Tensor, x_scale: Tensor, y_loc: Tensor | None = None,
                             y_scale: Tensor | None = None) -> None:
        self.units_fixed.fill_(True)
        self.x_loc.copy_(x_loc)
        self.x_scale.copy_(x_scale)
        if y_loc is not None:
            self.y_loc.copy_(y_loc)
            self.y_scale.copy_(y_scale)

    def to_train_units(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """``x[N, in_dim]``, ``y`` in original units -> training units (labels unchanged).

        Units that are the identity (location 0, scale 1: the bandit agents' raw units) return
        the data itself — ``(v − 0) / 1`` is ``v`` to the bit — instead of a copy of every row
        at every refit (470 ms for a ten-trial mushroom history of 40,000 rows on this CPU)."""
        xs = x if _identity(self.x_loc, self.x_scale) else (x - self.x_loc) / self.x_scale
        if self.kind == "categorical" or _identity(self.y_loc, self.y_scale):
            return xs, y
        return xs, (y - self.y_loc) / self.y_scale


def _check_statistics(name: str, loc: Tensor, scale: Tensor) -> None:
    """Refuse standardisation statistics that overflowed (finite data whose spread exceeds float32's range,
    e.g. values near 1e19, whose squares are infinite): training would run on NaN units."""
    if not (bool(torch.isfinite(loc).all()) and bool(torch.isfinite(scale).all())):
        raise ValueError(f"{name}'s mean or spread overflows float32 (values up to "
                         f"{float(loc.abs().max()):.3g} ± {float(scale.max()):.3g}); rescale {name} "
                         f"(e.g. divide it by a constant) or fix the units with set_units(...)")


def _identity(loc: Tensor, scale: Tensor) -> bool:
    return bool((loc == 0).all()) and bool((scale == 1).all())


def safe_scale(std: Tensor) -> Tensor:
    """A standard deviation usable as a divisor (constant columns keep scale 1)."""
    return torch.where(std > 1e-12, std, torch.ones_like(std))
