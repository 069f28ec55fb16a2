"""``FunctionSample``: n fixed functions drawn from a posterior, evaluated in one batch."""
from __future__ import annotations

import numbers

import numpy as np
import torch
from torch import Tensor

from .network import MLPSpec
from .validation import ArrayLike, check_inputs


class FunctionSample:
    """Stacked weight vectors of one batched MLP plus the data scaling of the posterior.

    ``fs(x)`` returns ``[n, B, out]``: the same n functions for every input, in original
    units of y for regression (logits for classification). Indexing (``fs[i]``,
    ``fs[2:5]``, ``fs[index_tensor]``) returns a smaller ``FunctionSample``.

    Attributes:
        params: ``[n, D]`` flat weights in the network's training units.
        spec: the network architecture.
        x_loc, x_scale: ``[in_dim]`` input standardisation (``x_std = (x - loc)/scale``).
        y_loc, y_scale: ``[out]`` output scaling (``f = loc + scale * net(x_std)``).
        noise_std: ``[n, out]`` regression noise std in original units, or ``None``.

    Samples from a finite set (ensemble members, SVGD particles, one MAP network) repeat
    functions: built with ``index=``, the sample keeps the ``m`` distinct functions
    (``distinct_params[m, D]``, ``noise_std`` per distinct function) and which of them each of
    the ``n`` samples is (``index[n]``); evaluation then runs each distinct function once and
    copies its output to every sample that drew it (100 draws from 20 members cost 20
    forward passes). ``params`` and ``noise_std`` still read as ``[n, ...]``.
    """

    def __init__(self, params: Tensor, spec: MLPSpec, x_loc: Tensor, x_scale: Tensor,
                 y_loc: Tensor, y_scale: Tensor, noise_std: Tensor | None = None, *,
                 index: Tensor | None = None):
        if params.dim() != 2 or params.shape[1] != spec.num_params:
            raise ValueError(f"params must be [n, {spec.num_params}], got {tuple(params.shape)}")
        if index is not None and (index.dim() != 1 or index.dtype != torch.long):
            raise ValueError(f"index must be a 1-D long tensor, got {index.dtype} of shape {tuple(index.shape)}")
        self.distinct_params = params
        self.index = index
        self.spec = spec
        self.x_loc, self.x_scale = x_loc, x_scale
        self.y_loc, self.y_scale = y_loc, y_scale
        self.distinct_noise_std = noise_std

    @property
    def params(self) -> Tensor:
        """``[n, D]`` flat weights of every sample in the training units."""
        if self.index is None:
            return self.distinct_params
        return self.distinct_params.index_select(0, self.index)

    @property
    def noise_std(self) -> Tensor | None:
        """``[n, out]`` regression noise std in original units, or ``None``."""
        if self.index is None or self.distinct_noise_std is None:
            return self.distinct_noise_std
        return self.distinct_noise_std.index_select(0, self.index)

    def __len__(self) -> int:
        return self.distinct_params.shape[0] if self.index is None else self.index.shape[0]

    @property
    def device(self) -> torch.device:
        """The device the sampled weights live on."""
        return self.distinct_params.device

    def _batched(self, fn):
        """``fn(params)`` over the distinct functions, copied out to all ``n`` samples."""
        if self.index is None:
            return fn(self.distinct_params)
        if self.index.shape[0] <= self.distinct_params.shape[0]:  # fewer draws than functions
            return fn(self.params)
        return fn(self.distinct_params).index_select(0, self.index)

    def __getitem__(self, index) -> "FunctionSample":
        """A smaller sample: ``fs[i]`` (one function, negative counts from the end),
        ``fs[a:b]``, or an index tensor / array / list (ints or a bool mask).

        Raises:
            IndexError: an integer outside ``[-n, n)``, or an index that selects no function.
            TypeError: an index of another kind (a float, a string, ...).
        """
        index = self._normalize_index(index)
        if self.index is not None:
            picked = self.index[index]
            if picked.shape[0] == 0:
                raise IndexError(f"index {index!r} selects no function of this sample of {len(self)}")
            return FunctionSample(self.distinct_params, self.spec, self.x_loc, self.x_scale, self.y_loc,
                                  self.y_scale, self.distinct_noise_std, index=picked)
        params = self.params[index]
        if params.shape[0] == 0:
            raise IndexError(f"index {index!r} selects no function of this sample of {len(self)}")
        noise = None if self.noise_std is None else self.noise_std[index]
        return FunctionSample(params, self.spec, self.x_loc, self.x_scale, self.y_loc, self.y_scale, noise)

    def _normalize_index(self, index):
        """An integer becomes a one-row slice (checked against the length); others pass."""
        n = len(self)
        if isinstance(index, np.ndarray) and index.ndim == 0:
            index = index.item()
        if isinstance(index, Tensor) and index.dim() == 0:
            index = index.item()
        if isinstance(index, bool):
            raise TypeError("index must be an integer, a slice or an index tensor, got a bool")
        if isinstance(index, numbers.Integral):
            i = int(index)
            if not -n <= i < n:
                raise IndexError(f"function index {i} is out of range for a sample of {n} functions "
                                 f"(valid: {-n}..{n - 1})")
            i %= n
            return slice(i, i + 1)
        if isinstance(index, slice):
            return index
        if isinstance(index, (Tensor, np.ndarray, list, tuple)):
            return self._index_tensor(index)
        raise TypeError(f"index must be an integer, a slice or an index tensor, got {type(index).__name__}")

    def _index_tensor(self, index) -> Tensor:
        """A 1-D long or bool tensor of function indices, every one in range."""
        n = len(self)
        try:
            t = torch.as_tensor(np.asarray(index) if not isinstance(index, Tensor) else index)
        except (TypeError, ValueError) as err:
            raise TypeError(f"index must hold integers or booleans: {err}") from None
        if t.dim() != 1:
            raise IndexError(f"an index tensor must be 1-D, got shape {tuple(t.shape)}")
        if t.numel() == 0:
            raise IndexError(f"an empty index selects no function of this sample of {n}")
        if t.dtype == torch.bool:
            if t.shape[0] != n:
                raise IndexError(f"a boolean index must have {n} entries (one per function), got {t.shape[0]}")
            return t.to(self.device)
        if t.is_floating_point() or t.is_complex():
            raise TypeError(f"index tensor must hold integers or booleans, got dtype {t.dtype}")
        t = t.long()
        if t.numel() and (int(t.min()) < -n or int(t.max()) >= n):
            bad = int(t.max()) if int(t.max()) >= n else int(t.min())
            raise IndexError(f"function index {bad} is out of range for a sample of {n} functions "
                             f"(valid: {-n}..{n - 1})")
        return (t % n).to(self.device)

    def standardize(self, x: ArrayLike) -> Tensor:
        """``x[B, in_dim]`` in original units -> the network's input units (checked; on the samples' device)."""
        x = check_inputs(x, self.spec.in_dim, device=self.device)
        return (x.to(self.distinct_params.dtype) - self.x_loc) / self.x_scale

    def __call__(self, x) -> Tensor:
        """``x[B, in_dim]`` (tensor or array) -> ``f[n, B, out]``."""
        xs = self.standardize(x)
        f = self._batched(lambda params: self.spec.forward(params, xs))
        return self.y_loc + self.y_scale * f

    def features(self, x) -> Tensor:
        """``[n, B, h_last]``: activations of the last hidden layer."""
        xs = self.standardize(x)
        return self._batched(lambda params: self.spec.forward(params, xs, return_features=True)[1])

    def to(self, device: str | torch.device) -> "FunctionSample":
        """The same functions with every tensor on ``device``."""
        mv = lambda t: None if t is None else t.to(device)
        return FunctionSample(self.distinct_params.to(device), self.spec, mv(self.x_loc), mv(self.x_scale),
                              mv(self.y_loc), mv(self.y_scale), mv(self.distinct_noise_std), index=mv(self.index))

    def __repr__(self) -> str:
        return f"FunctionSample(n={len(self)}, spec={self.spec}, device={self.device})"
