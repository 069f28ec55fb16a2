"""The one network every posterior samples: a batched multi-layer perceptron.

A posterior sample is a flat weight vector ``params[D]``; ``n`` samples stack into
``params[n, D]`` and :meth:`MLPSpec.forward` evaluates all of them in one batched pass.
The flat layout, layer by layer, is ``[W_0 (in×h0, row-major), b_0, W_1, b_1, ...]``,
so ``x @ W`` maps a row of inputs to the next layer.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor
import torch.nn.functional as F

#: Largest activation block ``[networks, B, width]`` (bytes) that :meth:`MLPSpec.forward`
#: evaluates at once on CPU without autograd (about an L2 cache's worth).
CPU_CHUNK_BYTES = 4 << 20

ACTIVATIONS = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "gelu": F.gelu,
    "elu": F.elu,
    "softplus": F.softplus,
    "leaky_relu": lambda h: F.leaky_relu(h, 0.2),  # slope 0.2, as AADM's networks
}

#: Widest layer output for which :func:`rows_times_weight` stores the weight output-major
#: first: ``h[B, i] @ W[i, o]`` with ``W`` row-major and a narrow ``o`` (a bandit's 2 arms, 10
#: classes) runs 2-3× slower in CPU BLAS (forward and weight gradient) than with the same
#: ``W`` laid out as ``nn.Linear`` keeps it, ``[o, i]`` (docs/speed.md).
NARROW_FAN_OUT = 16


def is_narrow(fan_out: int) -> bool:
    """True for layer widths :func:`rows_times_weight` re-lays out (``2 ≤ fan_out ≤ 16``; a single
    output is a matrix-vector product, fast either way)."""
    return 1 < fan_out <= NARROW_FAN_OUT


def output_major(w: Tensor) -> Tensor:
    """``W[i, o]`` with the same values, laid out output-major (strides ``(1, i)``) when ``o`` is
    narrow (:func:`is_narrow`), else ``w`` itself. Differentiable; the copy is ``i·o`` floats."""
    return w.t().contiguous().t() if is_narrow(w.shape[-1]) else w


def rows_times_weight(h: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """``h[B, i] @ w[i, o] + b[o] -> [B, o]``, with a narrow ``w`` re-laid out first
    (:func:`output_major`): forward and weight gradient 2.3× faster for the bandit head at
    5,120 rows on CPU."""
    return torch.addmm(b, h, output_major(w))


@dataclass(frozen=True)
class MLPSpec:
    """Architecture of a fully connected network ``in_dim -> hidden... -> out_dim``.

    Attributes:
        in_dim: input width ``d``.
        out_dim: output width (regression targets, arms or classes).
        hidden: widths of the hidden layers; ``()`` gives a linear model.
        activation: name of the hidden non-linearity (one of ``ACTIVATIONS``).
    """

    in_dim: int
    out_dim: int
    hidden: tuple[int, ...] = (50,)
    activation: str = "relu"
    _offsets: tuple = field(init=False, repr=False, compare=False)
    _split_sizes: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("in_dim", "out_dim"):
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
            object.__setattr__(self, name, int(value))  # numpy ints (gymnasium spaces) become ints
        if isinstance(self.hidden, (str, bytes)):  # tuple("50") would be ('5', '0')
            raise ValueError(f"hidden must be an int or a sequence of positive integers such as (50,) or "
                             f"[100, 100], got the text {self.hidden!r}")
        try:
            hidden = tuple(self.hidden) if not _is_int(self.hidden) else (self.hidden,)
        except TypeError:  # not a sequence (a float, None): named below like any other bad value
            hidden = (self.hidden,)
        if any(not _is_int(h) or h <= 0 for h in hidden):
            raise ValueError(f"hidden must be a sequence of positive integers, got {self.hidden!r}")
        object.__setattr__(self, "hidden", tuple(int(h) for h in hidden))
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}"
            )
        offsets = []
        start = 0
        for fan_in, fan_out in self.layer_shapes:
            w_end = start + fan_in * fan_out
            offsets.append((start, w_end, w_end + fan_out))
            start = w_end + fan_out
        object.__setattr__(self, "_offsets", tuple(offsets))
        object.__setattr__(self, "_split_sizes", tuple(n for fi, fo in self.layer_shapes for n in (fi * fo, fo)))

    # ------------------------------------------------------------------ layout
    @property
    def widths(self) -> tuple[int, ...]:
        """Layer widths from input to output, ``(in_dim, *hidden, out_dim)``."""
        return (self.in_dim, *self.hidden, self.out_dim)

    @property
    def layer_shapes(self) -> list[tuple[int, int]]:
        """``(fan_in, fan_out)`` of every dense layer."""
        w = self.widths
        return [(w[i], w[i + 1]) for i in range(len(w) - 1)]

    @property
    def num_params(self) -> int:
        """``D``, the length of a flat weight vector."""
        return sum(fi * fo + fo for fi, fo in self.layer_shapes)

    def layer_index(self) -> Tensor:
        """``[D]`` long tensor: the layer each flat parameter belongs to."""
        parts = [torch.full((fi * fo + fo,), i, dtype=torch.long) for i, (fi, fo) in enumerate(self.layer_shapes)]
        return torch.cat(parts)

    def fan_in_per_param(self) -> Tensor:
        """``[D]`` float tensor: the fan-in of the layer of each flat parameter."""
        parts = [torch.full((fi * fo + fo,), float(fi)) for fi, fo in self.layer_shapes]
        return torch.cat(parts)

    def per_layer(self, values) -> Tensor:
        """``[D]`` float tensor holding ``values[l]`` for every weight and bias of layer ``l``
        (one value per dense layer, ``len(hidden) + 1`` of them)."""
        values = list(values)
        if len(values) != len(self.layer_shapes):
            raise ValueError(f"expected one value per layer ({len(self.layer_shapes)} for widths "
                             f"{'-'.join(map(str, self.widths))}), got {len(values)}")
        return torch.cat([torch.full((fi * fo + fo,), float(v)) for (fi, fo), v in zip(self.layer_shapes, values)])

    def weight_mask(self) -> Tensor:
        """``[D]`` bool tensor: True for weight-matrix entries, False for biases."""
        parts = []
        for fi, fo in self.layer_shapes:
            parts += [torch.ones(fi * fo, dtype=torch.bool), torch.zeros(fo, dtype=torch.bool)]
        return torch.cat(parts)

    def unflatten(self, params: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Split ``params[n, D]`` into views ``[(W[n, fan_in, fan_out], b[n, fan_out]), ...]``."""
        if params.dim() != 2 or params.shape[1] != self.num_params:
            raise ValueError(
                f"params must have shape [n, {self.num_params}], got {tuple(params.shape)}"
            )
        n = params.shape[0]
        # one split (its backward is one concatenation) rather than a slice per tensor
        # (each slice's backward writes a zero [n, D] gradient and adds into it)
        parts = torch.split(params, self._split_sizes, dim=1)
        return [(parts[2 * i].view(n, fi, fo), parts[2 * i + 1]) for i, (fi, fo) in enumerate(self.layer_shapes)]

    def unflatten_one(self, vector: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Split one flat vector ``[D]`` into views ``[(W[fan_in, fan_out], b[fan_out]), ...]``."""
        parts = torch.split(vector, self._split_sizes)
        return [(parts[2 * i].view(fi, fo), parts[2 * i + 1]) for i, (fi, fo) in enumerate(self.layer_shapes)]

    def flatten(self, layers: list[tuple[Tensor, Tensor]]) -> Tensor:
        """Inverse of :meth:`unflatten`: ``[(W[n,i,o], b[n,o]), ...] -> params[n, D]``."""
        n = layers[0][0].shape[0]
        return torch.cat([t for w, b in layers for t in (w.reshape(n, -1), b)], dim=1)

    # ----------------------------------------------------------------- forward
    def forward(self, params: Tensor, x: Tensor, *, return_features: bool = False):
        """Evaluate ``n`` networks on a batch.

        Args:
            params: ``[n, D]`` stacked flat weights.
            x: ``[B, in_dim]`` (shared by all networks) or ``[n, B, in_dim]``.
            return_features: also return the last hidden layer ``[n, B, h_last]``.

        Returns:
            ``f[n, B, out_dim]`` (and the features when asked).
        """
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor [B, {self.in_dim}] or [n, B, {self.in_dim}], "
                            f"got {type(x).__name__}")
        if x.dim() not in (2, 3) or x.shape[-1] != self.in_dim:
            raise ValueError(f"x must have shape [B, {self.in_dim}] or [n, B, {self.in_dim}] (in_dim), "
                             f"got {tuple(x.shape)}")
        n = params.shape[0]
        chunk = self._cpu_chunk(params, x)
        if chunk >= n:
            return self._forward(params, x, return_features)
        parts = [self._forward(params[s:s + chunk], x if x.dim() == 2 else x[s:s + chunk], return_features)
                 for s in range(0, n, chunk)]
        if return_features:
            return torch.cat([f for f, _ in parts]), torch.cat([h for _, h in parts])
        return torch.cat(parts)

    def forward_each(self, params: Tensor, x: Tensor) -> Tensor:
        """Network ``i`` at its own single input: ``params[n, D]``, ``x[n, in_dim]`` -> ``[n, out_dim]``.

        One batched row-vector product per layer (``[n, 1, fan_in] @ [n, fan_in, fan_out]``),
        which reads every weight matrix once in its stored order: the lock-step bandit runner's
        decisions, one drawn function per context (on this CPU 2.4–3.6× faster than
        :meth:`forward` with ``x[n, 1, in_dim]``, whose layout suits long batches).
        """
        act = ACTIVATIONS[self.activation]
        layers = self.unflatten(params)
        h = x.unsqueeze(1)
        for i, (w, b) in enumerate(layers):
            h = torch.baddbmm(b.unsqueeze(1), h, w)
            if i < len(layers) - 1:
                h = torch.relu_(h) if self.activation == "relu" else act(h)
        return h.squeeze(1)

    def _cpu_chunk(self, params: Tensor, x: Tensor) -> int:
        """Networks evaluated at once: all of them, except on CPU without autograd, where groups
        whose widest activations ``[chunk, B, width]`` fit in :data:`CPU_CHUNK_BYTES` run one
        after another, so each layer's output is still in cache when the next layer reads it
        (1.7× faster for 100 samples of the 117-100-100-2 bandit net at 1,000 inputs)."""
        n = params.shape[0]
        if params.device.type != "cpu" or (torch.is_grad_enabled() and params.requires_grad):
            return n
        per_network = x.shape[-2] * max(self.hidden + (self.out_dim,)) * params.element_size()
        return max(1, CPU_CHUNK_BYTES // per_network)

    def _forward(self, params: Tensor, x: Tensor, return_features: bool):
        """:meth:`forward` on one group of networks, in a feature-major layout: activations are
        ``[n, width, B]`` and each layer is ``bmm(Wᵀ, h) + b``. The long batch axis is then the
        contiguous one of every product, which BLAS runs faster than ``bmm(h, W)``, most of all
        for narrow layers (the 2-output bandit head: 2.4× on CPU)."""
        act = ACTIVATIONS[self.activation]
        layers = self.unflatten(params)
        n = params.shape[0]
        last = len(layers) - 1
        h = x.transpose(-1, -2)  # [in, B] or [n, in, B], a view
        if h.dim() == 2:  # inputs shared by all n networks: a strided view, no copy
            h = h.unsqueeze(0).expand(n, -1, -1)
        features = None
        for i, (w, b) in enumerate(layers):
            # in place is safe: bmm's backward needs its inputs, not its output
            h = torch.bmm(w.transpose(1, 2), h).add_(b.unsqueeze(-1))
            if i < last:
                h = torch.relu_(h) if self.activation == "relu" else act(h)
                features = h
        out = h.transpose(1, 2).contiguous()  # [n, B, out]
        if return_features:
            if features is None:  # a linear model: the features are the inputs
                return out, (x if x.dim() == 3 else x.unsqueeze(0).expand(n, -1, -1))
            return out, features.transpose(1, 2).contiguous()
        return out

    def init_params(self, n: int, *, generator: torch.Generator | None = None,
                    device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> Tensor:
        """``[n, D]`` independent He/LeCun-style initialisations (biases zero)."""
        gain = math.sqrt(2.0) if self.activation in ("relu", "leaky_relu", "elu", "gelu") else 1.0
        std = (gain / self.fan_in_per_param().sqrt()).to(device=device, dtype=dtype)
        std = std * self.weight_mask().to(device)
        eps = torch.randn(n, self.num_params, generator=generator, device=device, dtype=dtype)
        return eps * std

    def glorot_params(self, n: int, scale: float, *, generator: torch.Generator | None = None,
                      device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> Tensor:
        """``[n, D]`` initialisations with weights ``N(0, scale² / (fan_in + fan_out + 1))`` and zero
        biases — a Glorot-style normal scaled by ``scale`` (Wang et al.'s bandit code uses the
        prior std, √10)."""
        std = torch.cat([torch.cat([torch.full((fi * fo,), scale / math.sqrt(fi + fo + 1)), torch.zeros(fo)])
                         for fi, fo in self.layer_shapes]).to(device=device, dtype=dtype)
        return torch.randn(n, self.num_params, generator=generator, device=device, dtype=dtype) * std

    def uniform_params(self, n: int, bound: float, *, generator: torch.Generator | None = None,
                       device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> Tensor:
        """``[n, D]`` initialisations with weights ``U(−bound, bound)`` and zero biases (Riquelme et
        al.'s bandit networks: TensorFlow's ``random_uniform_initializer(-0.3, 0.3)``)."""
        u = torch.rand(n, self.num_params, generator=generator, device=device, dtype=dtype)
        return (2.0 * u - 1.0) * bound * self.weight_mask().to(device=device, dtype=dtype)

    def to_config(self) -> dict:
        """The architecture as a JSON-ready dict (``MLPSpec(**config)`` rebuilds it)."""
        return {"in_dim": self.in_dim, "out_dim": self.out_dim,
                "hidden": list(self.hidden), "activation": self.activation}


def _is_int(value) -> bool:
    """True for Python and numpy integers (never for bools)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
