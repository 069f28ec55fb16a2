"""``HostFunctions``: sampled networks folded into plain host arrays for fast decisions.

A bandit decision evaluates one network on one context, a few microseconds of
arithmetic that torch's per-call overhead would dominate. After every refit the agent
copies the ``n`` drawn functions to host memory once (one transfer, not per decision),
folds the input standardisation into the first layer and the output scaling into the
last, and then evaluates function ``i`` with a handful of small numpy matmuls.

The hot path, :meth:`HostFunctions.greedy` (one Thompson decision), appends each layer's
bias to its weights as a last input row and runs the layers as ``np.dot`` into
preallocated buffers whose last entry is a constant 1, so a decision costs one copy, one
matrix-vector product and one in-place activation per layer, and one ``argmax``
(about 5 µs on the 117-100-100-2 bandit network, docs/speed.md).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..function_sample import FunctionSample


def _relu(h: np.ndarray) -> np.ndarray:
    return np.maximum(h, 0.0, out=h)


def _elu(h: np.ndarray) -> np.ndarray:
    return np.where(h > 0, h, np.expm1(np.minimum(h, 0.0)))


def _gelu(h: np.ndarray) -> np.ndarray:
    return torch.nn.functional.gelu(torch.from_numpy(np.ascontiguousarray(h))).numpy()


HOST_ACTIVATIONS = {
    "relu": _relu,
    "tanh": np.tanh,
    "sigmoid": lambda h: 1.0 / (1.0 + np.exp(-h)),
    "softplus": lambda h: np.logaddexp(0.0, h),
    "elu": _elu,
    "gelu": _gelu,
}


class HostFunctions:
    """``n`` sampled networks as host arrays, evaluated in original units.

    Attributes:
        n: number of draws (decisions it can serve).
        weights, biases: per layer ``W[n, fan_in, fan_out]`` and ``b[n, fan_out]`` (properties).
    """

    def __init__(self, fs: FunctionSample):
        spec = fs.spec
        # a sample from a finite set (ensemble members, particles) keeps its m distinct
        # functions and which one each of the n draws is: decisions then read m networks'
        # weights, which stay in cache, instead of n copies of them
        layers = list(spec.unflatten(fs.distinct_params.detach()))
        w0, b0 = layers[0]
        inv = 1.0 / fs.x_scale
        # the bias fold is a sum over inputs: done in float64 and rounded once, so that a network's
        # folded bias does not depend on how many networks are folded with it (a float32 product's
        # last bits follow the BLAS kernel and thread split chosen for the whole batch)
        shift = torch.einsum("i,nio->no", (fs.x_loc * inv).double(), w0.double()).to(b0.dtype)
        layers[0] = (w0 * inv.unsqueeze(-1), b0 - shift)
        wl, bl = layers[-1]
        layers[-1] = (wl * fs.y_scale, bl * fs.y_scale + fs.y_loc)
        # per layer [m, fan_in + 1, fan_out], the bias as the last input row (one host copy)
        self._augmented = [torch.cat([w, b.unsqueeze(1)], dim=1).cpu().numpy() for w, b in layers]
        m = self._augmented[0].shape[0]
        self._index = np.arange(m) if fs.index is None else fs.index.cpu().numpy()
        self.activation = HOST_ACTIVATIONS[spec.activation]
        self.n = len(self._index)
        # the decision path: per layer an input buffer [fan_in + 1] whose last entry stays 1
        self._inputs = [np.ones(a.shape[1], dtype=a.dtype) for a in self._augmented]
        self._views = [buf[:-1] for buf in self._inputs]  # the writable part of each input buffer
        self._out = np.empty(self._augmented[-1].shape[-1], dtype=self._augmented[-1].dtype)
        self._relu = spec.activation == "relu"
        # per hidden layer: (its input buffer, where its output goes)
        self._hidden = list(zip(self._inputs[:-1], self._views[1:]))
        # per draw: its layers' augmented weights as views, made once here so that a decision
        # indexes a list instead of slicing one 3-d array per layer. With two outputs the
        # decision needs only their difference: the last entry is then the vector
        # ``w[:, 0] - w[:, 1]`` (one dot product and a sign instead of a product and an argmax)
        last = self._augmented[-1]
        self._two_outputs = last.shape[-1] == 2
        heads = np.ascontiguousarray(last[..., 0] - last[..., 1]) if self._two_outputs else last
        distinct = [tuple(a[j] for a in self._augmented[:-1]) + (heads[j],) for j in range(m)]
        self._per_function = [distinct[j] for j in self._index.tolist()]
        self._zero = np.zeros((), dtype=self._augmented[0].dtype)

    @property
    def weights(self) -> list[np.ndarray]:
        """Per layer ``W[n, fan_in, fan_out]`` of every draw (scaling folded in; a copy)."""
        return [a[self._index, :-1] for a in self._augmented]

    @property
    def biases(self) -> list[np.ndarray]:
        """Per layer ``b[n, fan_out]`` of every draw (a copy)."""
        return [a[self._index, -1] for a in self._augmented]

    def __len__(self) -> int:
        return self.n

    def one(self, i: int, x: np.ndarray) -> np.ndarray:
        """Function ``i`` at one context ``x[d]`` -> ``[out]``."""
        j = self._index[i]
        h = x
        last = len(self._augmented) - 1
        for layer, a in enumerate(self._augmented):
            h = h @ a[j, :-1] + a[j, -1]
            if layer < last:
                h = self.activation(h)
        return h

    def greedy(self, i: int, x: np.ndarray) -> int:
        """``argmax`` of function ``i`` at one context ``x[d]`` (float32), the Thompson decision.

        Raises ValueError if ``x`` holds NaN or ±inf. The check is free: every first-layer
        pre-activation is a sum over all of ``x`` with finite weights, so a non-finite entry
        makes each of them non-finite; only then is ``x`` itself inspected (a finite ``x``
        so large that the product overflowed is evaluated as it is).
        """
        w = self._per_function[i]
        self._views[0][:] = x
        hidden, last_in = self._hidden, self._inputs[-1]
        if not hidden:  # no hidden layer: check x directly
            if not np.isfinite(x).all():
                raise ValueError("context contains NaN or infinite values")
        else:
            # ``ndarray.dot`` skips the dispatch ``np.dot`` goes through (≈ 0.15 µs a layer)
            inp, h = hidden[0]
            inp.dot(w[0], out=h)
            if not math.isfinite(h[0]) and not np.isfinite(x).all():
                raise ValueError("context contains NaN or infinite values")
            if self._relu:
                zero, maximum = self._zero, np.maximum
                maximum(h, zero, out=h)
                for layer in range(1, len(hidden)):
                    inp, h = hidden[layer]
                    inp.dot(w[layer], out=h)
                    maximum(h, zero, out=h)
            else:
                h[:] = self.activation(h)
                for layer in range(1, len(hidden)):
                    inp, h = hidden[layer]
                    inp.dot(w[layer], out=h)
                    h[:] = self.activation(h)
        if self._two_outputs:  # argmax of two outputs: the sign of their difference (ties: 0)
            return 0 if last_in.dot(w[-1]) >= 0 else 1
        out = self._out
        last_in.dot(w[-1], out=out)
        return int(out.argmax())

    def features_one(self, i: int, x: np.ndarray) -> np.ndarray:
        """Last hidden layer of function ``i`` at ``x[d]`` -> ``[h_last]`` (x itself without hidden layers)."""
        j = self._index[i]
        h = x
        for a in self._augmented[:-1]:
            h = self.activation(h @ a[j, :-1] + a[j, -1])
        return h

    def mean(self, x: np.ndarray) -> np.ndarray:
        """Average of all ``n`` functions at ``x[d]`` -> ``[out]`` (one batched pass over the
        distinct ones, weighted by how often each was drawn)."""
        h = np.broadcast_to(x, (self._augmented[0].shape[0], x.shape[0]))
        last = len(self._augmented) - 1
        for layer, a in enumerate(self._augmented):
            h = np.einsum("ni,nio->no", h, a[:, :-1]) + a[:, -1]
            if layer < last:
                h = self.activation(h)
        return h[self._index].mean(0)
