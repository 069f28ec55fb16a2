"""Adversarial-input detection with predictive uncertainty as the score.

A detector flags an input as adversarial when its score is high; its quality is the
area under the ROC curve (AUROC) of clean (label 0) against adversarial (label 1)
scores: 1 = perfect separation, 0.5 = chance, below 0.5 = adversarial inputs look
*more* certain than clean ones.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import Tensor

from uncertain_agents.predictive import Predictive

SCORES = ("entropy", "mutual_information")


def uncertainty_scores(pred: Predictive) -> dict[str, np.ndarray]:
    """``{"entropy": [B], "mutual_information": [B]}`` of a categorical predictive (nats)."""
    if not isinstance(pred, Predictive) or pred.kind != "categorical":
        raise TypeError("pred must be a categorical Predictive (posterior.predict of a classifier)")
    return {"entropy": pred.entropy().detach().cpu().numpy(),
            "mutual_information": pred.mutual_information().detach().cpu().numpy()}


def _as_scores(values, name: str) -> np.ndarray:
    if isinstance(values, Tensor):
        values = values.detach().cpu().numpy()
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D array of numbers") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of scores (an AUROC needs clean and "
                         f"adversarial scores), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite scores")
    return arr


class AUROCWarning(UserWarning):
    """An AUROC was computed from too few scores to mean anything."""


#: Fewer scores than this in either group make an AUROC warn (one score gives 0, 0.5 or 1).
MIN_SCORES_PER_GROUP = 2


def auroc(clean_scores, adversarial_scores) -> float:
    """AUROC of separating adversarial (positive) from clean inputs by a score.

    Equals the probability that a random adversarial input scores higher than a random
    clean one (ties count one half), computed exactly from mid-ranks (the Mann-Whitney U
    statistic): two groups of the same scores give exactly 0.5 (``sklearn.metrics.roc_auc_score``,
    which sums trapezoids, gives 0.49999999999999994 there); otherwise it agrees with sklearn to
    rounding.
    With a single clean or a single adversarial score the value can only be 0, 0.5 or 1
    and says nothing about the detector: it is returned with an :class:`AUROCWarning`.

    Args:
        clean_scores: ``[N_clean]`` scores of clean inputs.
        adversarial_scores: ``[N_adv]`` scores of adversarial inputs.

    Raises:
        ValueError: a group is empty (the AUROC needs both classes) or holds NaN/inf.
    """
    from scipy.stats import rankdata

    clean = _as_scores(clean_scores, "clean_scores")
    adv = _as_scores(adversarial_scores, "adversarial_scores")
    _warn_if_few(clean.size, adv.size)
    ranks = rankdata(np.concatenate([clean, adv]))  # mid-ranks (multiples of 1/2): sums exact below 2**52
    wins = ranks[clean.size:].sum() - adv.size * (adv.size + 1) / 2.0  # adversarial-over-clean pairs
    return float(wins / (clean.size * adv.size))


def _warn_if_few(n_clean: int, n_adv: int) -> None:
    few = [f"{n} {name} score(s)" for name, n in (("clean", n_clean), ("adversarial", n_adv))
           if n < MIN_SCORES_PER_GROUP]
    if few:
        warnings.warn(f"AUROC computed from {' and '.join(few)}: with a single score per group it can only be "
                      f"0, 0.5 or 1 and does not measure detection; attack more inputs (e.g. a larger --n-attack)",
                      AUROCWarning, stacklevel=3)


def score_batch(pred: Predictive, labels: Tensor, clean: dict[str, np.ndarray],
                target: int | None = None) -> dict[str, float]:
    """Summary row of one (adversarial) batch against the clean scores.

    Args:
        pred: predictive at the adversarial inputs ``[B]`` (fresh samples).
        labels: ``[B]`` true labels.
        clean: :func:`uncertainty_scores` of the clean inputs.
        target: the target class of a targeted attack (adds ``target_success``).

    Returns:
        ``accuracy, mean_entropy, auroc_entropy, mean_mutual_information,
        auroc_mutual_information`` (and ``target_success``).
    """
    predicted = pred.probs.argmax(-1)
    labels = labels.to(predicted.device)
    scores = uncertainty_scores(pred)
    row = {"accuracy": float((predicted == labels).float().mean())}
    if target is not None:
        row["target_success"] = float((predicted == target).float().mean())
    row["mean_entropy"] = float(scores["entropy"].mean())
    row["auroc_entropy"] = auroc(clean["entropy"], scores["entropy"])
    row["mean_mutual_information"] = float(scores["mutual_information"].mean())
    row["auroc_mutual_information"] = auroc(clean["mutual_information"], scores["mutual_information"])
    return row


@torch.no_grad()
def predictive_of(functions, x: Tensor, *, chunk: int = 1000) -> Predictive:
    """The categorical predictive of the sampled ``functions`` (a ``FunctionSample``) at
    ``x[B, in_dim]``, evaluated in chunks of rows."""
    f = torch.cat([functions(x[i:i + chunk]) for i in range(0, x.shape[0], chunk)], dim=1)
    return Predictive(f, "categorical")


@torch.no_grad()
def rescore(posterior, x: Tensor, *, n_samples: int, generator: torch.Generator,
            chunk: int = 1000) -> Predictive:
    """The posterior's predictive at ``x[B, in_dim]`` from fresh draws of ``generator``.

    One set of ``n_samples`` functions is used for the whole batch (drawn once), then
    evaluated in chunks of rows. To compare inputs (clean against adversarial) draw the
    functions once and score every batch with them (:func:`predictive_of`): scored with
    different draws, the two groups' scores differ by the draws as well as by the inputs.
    """
    return predictive_of(posterior.sample(n_samples, generator=generator), x, chunk=chunk)
