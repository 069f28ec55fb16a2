"""Training units: the standardisation of x and y a posterior trains in.

The units are fixed once — by the first ``fit`` (from its data, when ``standardize``; as the
identity otherwise) or by :meth:`TrainingUnits.set_units` — and every later warm-started fit keeps them, so a
refit never changes the units of what was learned. Predictions are reported in original
units either way.
"""
from __future__ import annotations

import math

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
        x_loc, x_std = x.mean(0), x.std(0, unbiased=False)
        _check_statistics("x", x_loc, x_std)
        # an input column whose spread is below MIN_SCALE is a constant feature for the network (scale 1)
        x_scale = data_scale("x", x_std, (x.amax(0) == x.amin(0)) | ~(x_std >= MIN_SCALE))
        if self.kind == "categorical":
            self._set_units_from_data(x_loc, x_scale)
            return True
        w = torch.ones_like(y) if mask is None else mask.to(y.dtype)
        count = w.sum(0).clamp_min(1.0)
        loc = (w * y).sum(0) / count
        std = ((w * (y - loc).square()).sum(0) / count).sqrt()
        _check_statistics("y", loc, std)
        if mask is None:
            constant = y.amax(0) == y.amin(0)
        else:  # over the observed entries only
            constant = (torch.where(mask, y, -math.inf).amax(0) == torch.where(mask, y, math.inf).amin(0))
        scale = data_scale("y", std, constant | (count <= 1))
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


#: The smallest spread a varying column is standardised by: its square stays a normal float32 number
#: (above 1.2e-38) with room to spare for the noise variances of y in original units.
MIN_SCALE = 1e-18


def data_scale(name: str, std: Tensor, constant: Tensor) -> Tensor:
    """The standardisation scale of every column: its standard deviation ``std``, or 1 where
    ``constant`` (every value of the column equal, decided exactly from its minimum and maximum —
    not from ``std``, which float32 round-off leaves at ~1e-7 × the value for a constant column such
    as 7.77, and which would then scale the column, and the prior over functions, by that residue).

    Raises ``ValueError`` naming ``name`` for a varying column whose spread is below
    :data:`MIN_SCALE` (too small to standardise in float32; such columns used to be treated as
    constant, so a target varying by 1e-13 got a predictive spread of ~0.5). Inputs pass such
    columns in ``constant``: a feature varying by 1e-20 is a constant feature, not a failed fit."""
    tiny = ~constant & ~(std >= MIN_SCALE)
    if bool(tiny.any()):
        cols = tiny.nonzero().flatten().tolist()
        raise ValueError(f"{name} column(s) {cols} are not constant, but their standard deviation in float32 is only "
                         f"{float(std[tiny].max()):.3g}: too small to standardise; rescale {name} (e.g. multiply it by "
                         f"a constant) or fix the units with set_units(...)")
    return torch.where(constant, torch.ones_like(std), std)
