"""``dropout-alpha``: dropout inference with α-divergences (Li & Gal, ICML 2017).

The approximate posterior is Bernoulli dropout on one set of weights ``W``. Inverted
dropout (keep with probability ``1-p``, scale by ``1/(1-p)``) acts on the input of
every dense layer, the network input included. Training minimises, per minibatch,

    L = -(1/B) Σ_n (1/α) [ logsumexp_k α·log p(y_n | x_n, ŵ_nk) - log K ]
        + Σ_layers l²(1-p_l)/(2N) ‖W_l‖²

over ``K = train_samples`` independent dropout masks per example, evaluated as one
batched pass (the batch is tiled K times; no Python loop over k). ``α = 0`` is the
ordinary MC-dropout loss ``-mean_k log p``.

Weight decay. Gal's prior puts ``N(0, l⁻²)`` on every weight; with a squared-error loss
``(1/2N)Σ‖y-ŷ‖²`` the matching decay is ``wd = l²(1-p)/(2Nτ)`` (τ the noise precision).
Here the data term is the Gaussian negative log-likelihood with a *learned* τ, i.e. τ
times that squared error, so the decay appears as ``τ·wd = l²(1-p)/(2N)`` and τ is not
needed. The length-scale is ``l = 1/prior_std`` (default ``prior_std = 1/sqrt(fan_in)``,
so ``l² = fan_in``). Biases are not decayed.

A sample is one fixed set of masks folded into the weights: inverted dropout on the
input of layer ``l`` with mask ``m[fan_in]`` equals ``x @ (diag(m/(1-p)) W_l)``, so a
sample is an ordinary flat weight vector and the same function for every input.
"""
from __future__ import annotations

import numbers

import torch
from torch import Tensor, nn

from ..network import ACTIVATIONS, MLPSpec, rows_times_weight
from ..objectives import alpha_dropout_loss
from ..registry import register
from ..validation import check_positive_int
from .masks import keep_masks
from .base import Batch, Posterior


def _check_rate(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be a dropout rate in [0, 1), got {value!r}")
    return float(value)


class _DroppedReLU(torch.autograd.Function):
    """``relu(z) * keep`` for ``0``/``1`` factors ``keep``, in one product and an in-place
    clamp forward and one pass backward: the gradient passes where the output is positive,
    which excludes both the negative and the dropped entries. (On CPU, float products are
    several times faster than ``torch.where`` on a bool mask.)"""

    @staticmethod
    def forward(ctx, z: Tensor, keep: Tensor) -> Tensor:
        out = torch.mul(z, keep).relu_()
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (out,) = ctx.saved_tensors
        return torch.ops.aten.threshold_backward(grad, out, 0.0), None


@register("dropout-alpha", "dropout_alpha", "dropoutalpha")
class DropoutAlpha(Posterior):
    """Bernoulli-dropout posterior trained with the α-divergence objective of Li & Gal.

    Method options:
        alpha: α of the divergence (default 0.5; 0 = MC dropout / KL, 1 = -log mean p).
        train_samples: K, dropout masks per example and step (default 10).
        dropout: rate ``p`` before every hidden dense layer (default 0.05).
        input_dropout: rate on the network input (default 0.1; light input dropout keeps a
            learned regression noise from collapsing on small data sets). Under a bandit
            agent the default is 0 (:attr:`bandit_defaults`): a Thompson sample is one mask
            set, and an input mask makes that function blind to whole context features — on
            the 2-feature wheel one sample in five ignores a coordinate. Measured with the
            plug-in matrix's protocol (3,000 decisions, trials 0–4, normalised regret): wheel
            δ = 0.5 32.8 → 21.5, mushroom 19.0 → 15.9 (docs/plug_in.md).
        prior_std: weight prior std, i.e. ``1/l`` (default ``1/sqrt(fan_in)``).
    """

    name = "dropout-alpha"
    bandit_defaults = {"input_dropout": 0.0}
    #: fit on CUDA replays its step from a graph (posteriors/cuda_graphs.py): masks from the
    #: posterior's generator, no host reads. Declared in session 18; its capture has not yet run on
    #: a GPU (tests/test_cuda.py lists it) — a capture that fails warns once and trains eagerly.
    graph_safe_step = True

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", *, alpha: float = 0.5,
                 train_samples: int = 10, dropout: float = 0.05, input_dropout: float = 0.1,
                 **kwargs):
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not abs(float(alpha)) < float("inf"):
            raise ValueError(f"alpha must be a finite real number, got {alpha!r}")
        super().__init__(spec, likelihood, **kwargs)
        self.alpha = float(alpha)
        self.train_samples = check_positive_int(train_samples, "train_samples")
        self.dropout = _check_rate(dropout, "dropout")
        self.input_dropout = _check_rate(input_dropout, "input_dropout")
        self.rates = self._layer_rates()
        self.params = nn.Parameter(spec.init_params(1, generator=self._init_generator)[0])
        self.register_buffer("decay", self._weight_decay())

    def _layer_rates(self) -> tuple[float, ...]:
        """Dropout rate before each dense layer: the input's, then the hidden layers'."""
        return (self.input_dropout,) + (self.dropout,) * (len(self.spec.layer_shapes) - 1)

    def _set_option(self, key: str, value) -> None:
        if key != "input_dropout":
            super()._set_option(key, value)
        self.input_dropout = _check_rate(value, "input_dropout")
        self.rates = self._layer_rates()
        self.decay.copy_(self._weight_decay())

    def _weight_decay(self) -> Tensor:
        """``[D]`` l²(1−p)/2 per weight entry (divided by N at each step); zero for biases."""
        keep = torch.cat([torch.full((fi * fo + fo,), 1.0 - p)
                          for (fi, fo), p in zip(self.spec.layer_shapes, self.rates)])
        return keep.to(self.prior_std.device) * self.spec.weight_mask().float().to(self.prior_std.device) \
            / (2.0 * self.prior_std.square())

    def _on_prior_change(self) -> None:
        self.decay.copy_(self._weight_decay())

    # ------------------------------------------------------------- masks
    def draw_keep(self, shape: tuple[int, ...], generator: torch.Generator,
                  dtype: torch.dtype = torch.bool) -> list[Tensor | None]:
        """One keep-mask per dense layer, ``[*shape, fan_in]`` (True, or ``1.`` for a float
        ``dtype``, = kept, with probability ``1-p``); ``None`` for a layer with rate 0."""
        return [None if p == 0.0 else keep_masks((*shape, fan_in), 1.0 - p, generator, self.device, dtype)
                for (fan_in, _), p in zip(self.spec.layer_shapes, self.rates)]

    def draw_masks(self, shape: tuple[int, ...], generator: torch.Generator) -> list[Tensor | None]:
        """The keep-masks of :meth:`draw_keep` (same draws) as inverted-dropout factors:
        ``[*shape, fan_in]`` with entries ``0`` or ``1/(1-p)``; ``None`` for a layer with rate 0."""
        return [None if keep is None else keep.mul_(1.0 / (1.0 - p))
                for keep, p in zip(self.draw_keep(shape, generator, self.params.dtype), self.rates)]

    def masked_forward(self, x: Tensor, keep: list[Tensor | None]) -> Tensor:
        """``x[B, d]`` with keep-masks ``[k, B or 1, fan_in]`` per layer (:meth:`draw_keep`,
        bool, or the same as ``0.``/``1.`` factors) -> ``f[k, B, out]``.

        One pass per layer for all k mask sets (the weights are shared): dropped inputs are
        zeroed and the ``1/(1-p)`` of inverted dropout is folded into the layer's weights,
        so a mask is a plain ``0``/``1`` factor. Layers before the first mask run once, not k times (with
        no input dropout the first layer's product is shared by every mask set).
        """
        act = ACTIVATIONS[self.spec.activation]
        layers = self.spec.unflatten(self.params.unsqueeze(0))
        k = next((m.shape[0] for m in keep if m is not None), 1)
        h = x
        relu = self.spec.activation == "relu"
        for i, ((w, b), m, p) in enumerate(zip(layers, keep, self.rates)):
            w, b = w[0], b[0]
            if m is not None:  # [k, B, fan_in], broadcast over a shared h
                m = m.view(torch.uint8).to(h.dtype) if m.dtype == torch.bool else m  # 0./1. factors
                h = _DroppedReLU.apply(h, m) if i > 0 and relu else (act(h) if i > 0 else h) * m
                w = w * (1.0 / (1.0 - p))
            elif i > 0:
                h = act(h)
            rows = h.reshape(-1, h.shape[-1])
            h = rows_times_weight(rows, w, b).view(*h.shape[:-1], -1)
        return h.expand(k, -1, -1) if h.dim() == 2 else h

    def fold(self, masks: list[Tensor | None]) -> Tensor:
        """Per-function masks ``[n, fan_in]`` folded into the weights -> ``params[n, D]``."""
        n = next((m.shape[0] for m in masks if m is not None), 1)
        layers = self.spec.unflatten(self.params.unsqueeze(0))
        folded = []
        for (w, b), m in zip(layers, masks):
            w = w.expand(n, -1, -1) if m is None else m.unsqueeze(-1) * w
            folded.append((w, b.expand(n, -1)))
        return self.spec.flatten(folded)

    # -------------------------------------------------------------- objective
    def weight_decay(self, n_data: int) -> Tensor:
        """``Σ_l l²(1-p_l)/(2N) ‖W_l‖²`` (per data point)."""
        return (self.decay * self.params.square()).sum() / n_data

    def loss(self, batch: Batch, generator: torch.Generator) -> Tensor:
        # masks drawn as 0./1. factors directly (the same draws as the boolean ones)
        keep = self.draw_keep((self.train_samples, batch.x.shape[0]), generator, self.params.dtype)
        f = self.masked_forward(batch.x, keep)
        kw = {"log_noise_std": self.log_noise_std_train()} if self.kind == "gaussian" else {}
        loglik = self.likelihood.log_prob(f, batch.y, batch.mask, **kw)
        return alpha_dropout_loss(loglik, self.alpha) + self.weight_decay(batch.n_data)

    def _sample(self, n: int, generator: torch.Generator):
        return self.fold(self.draw_masks((n,), generator)), None
