"""Evaluation metrics on a :class:`~uncertain_agents.predictive.Predictive`."""
from __future__ import annotations

import torch
from torch import Tensor

from .predictive import Predictive
from .validation import check_positive_int


def test_log_likelihood(pred: Predictive, y) -> float:
    """Mean over test points of ``log (1/S) Σ_s p(y | f_s)`` (original units).

    ``y``: regression targets ``[B, out]`` (or ``[B]`` for one output), or ``[B]`` class labels.
    """
    return float(pred.log_prob(y).mean())


def negative_log_likelihood(pred: Predictive, y) -> float:
    """Mean test negative log-likelihood (the UCI tables' 'test NLL'); ``y`` as for
    :func:`test_log_likelihood`."""
    return -test_log_likelihood(pred, y)


def rmse(pred: Predictive, y) -> float:
    """Root mean squared error of the predictive mean (regression), over all ``y[B, out]``
    entries (``[B]`` for one output)."""
    return float((pred.mean - pred.targets(y)).square().mean().sqrt())


def accuracy(pred: Predictive, y) -> float:
    """Fraction of inputs whose most probable class (under the MC-mean probabilities) is ``y[B]``."""
    return float((pred.probs.argmax(-1) == pred.labels(y)).float().mean())


def expected_calibration_error(pred: Predictive, y, n_bins: int = 15) -> float:
    """ECE with ``n_bins`` equal-width confidence bins: ``Σ_b (n_b/N) |acc_b - conf_b|``; ``y[B]`` labels."""
    n_bins = check_positive_int(n_bins, "n_bins")
    y = pred.labels(y)
    conf, guess = pred.probs.max(-1)
    correct = (guess == y).to(conf.dtype)
    bins = torch.clamp((conf * n_bins).long(), max=n_bins - 1)
    # bin sums in the predictive's dtype (a float64 predictive used to fail in index_add_)
    conf_sum = torch.zeros(n_bins, dtype=conf.dtype, device=conf.device).index_add_(0, bins, conf)
    acc_sum = torch.zeros(n_bins, dtype=conf.dtype, device=conf.device).index_add_(0, bins, correct)
    return float((conf_sum - acc_sum).abs().sum() / conf.numel())


def regression_metrics(pred: Predictive, y) -> dict[str, float]:
    """``{"test_nll", "test_rmse"}`` of a regression predictive at targets ``y[B, out]`` (or ``[B]``)."""
    return {"test_nll": negative_log_likelihood(pred, y), "test_rmse": rmse(pred, y)}


def classification_metrics(pred: Predictive, y) -> dict[str, float]:
    """``{"test_nll", "accuracy", "ece"}`` of a categorical predictive at labels ``y[B]``."""
    return {"test_nll": negative_log_likelihood(pred, y), "accuracy": accuracy(pred, y),
            "ece": expected_calibration_error(pred, y)}
