"""Untargeted fast gradient sign method (Goodfellow, Shlens & Szegedy 2014) through foolbox.

``x_adv = clip(x + ε · sign(∇_x [-log p̂(y|x)]), 0, 1)`` where ``p̂`` is the posterior's
Monte-Carlo predictive (see :mod:`attacks.adapter`). The attacker's ``S`` functions are
drawn once, so every ε moves along the same gradient sign. The clean inputs and every
adversarial batch are then scored by one set of fresh, seeded functions (the scorer's, drawn
once; foolbox's own success flag is one noisy draw for a stochastic model), so that clean and
adversarial scores differ by their inputs only: at ε = 0 the AUROC is exactly 0.5.
"""
from __future__ import annotations

from typing import Callable

import pandas as pd
import torch

from uncertain_agents.seeding import ATTACK_SCORER_KEY
from uncertain_agents.validation import check_positive_int

from .adapter import PredictiveLogits, check_classifier, foolbox_model, make_generator
from .detection import predictive_of, score_batch, uncertainty_scores
from .inputs import check_epsilons, check_images, check_labels, chunks

DEFAULT_EPSILONS = tuple(round(0.02 * i, 2) for i in range(26))  # 0, 0.02, ..., 0.5


def fgsm(posterior, x, y, *, epsilons=DEFAULT_EPSILONS, n_samples: int = 20,
         eval_samples: int | None = None, seed: int = 0, batch_size: int = 500,
         return_adversarials: bool = False, progress: Callable[[], None] | None = None):
    """Attack ``posterior`` with untargeted FGSM at every ε and score the result.

    Args:
        posterior: a classifier (``likelihood="categorical"``); not moved or modified.
        x: ``[N, in_dim]`` (or ``[N, H, W]``) inputs in ``[0, 1]``.
        y: ``[N]`` true labels.
        epsilons: L∞ perturbation sizes (default ``0, 0.02, …, 0.5``).
        n_samples: functions averaged by the attacked predictive.
        eval_samples: fresh functions, drawn once, that score the clean inputs and every ε
            (default ``n_samples``).
        seed: seeds the attacker's and the scorer's generators (their own streams of it,
            :mod:`uncertain_agents.seeding`).
        batch_size: rows attacked at once (bounds memory).
        return_adversarials: also return ``{ε: x_adv[N, in_dim]}``.
        progress: called with no arguments after each chunk of ``batch_size`` rows is attacked
            (at every ε): ``ceil(N / batch_size)`` calls in all, for a progress bar.

    Returns:
        A ``pandas.DataFrame`` with one row per ε and columns ``epsilon, accuracy,
        mean_entropy, auroc_entropy, mean_mutual_information, auroc_mutual_information,
        foolbox_success, n_inputs`` (and the adversarial inputs when asked).
    """
    import foolbox as fb

    check_classifier(posterior)
    x = check_images(x, posterior)
    y = check_labels(y, x.shape[0], posterior.spec.out_dim, posterior.device)
    eps = check_epsilons(epsilons)
    n_samples = check_positive_int(n_samples, "n_samples")
    eval_samples = n_samples if eval_samples is None else check_positive_int(eval_samples, "eval_samples")
    batch_size = check_positive_int(batch_size, "batch_size")

    adapter = PredictiveLogits(posterior, n_samples, seed=seed, resample=False)
    fmodel = foolbox_model(adapter)
    attack = fb.attacks.LinfFastGradientAttack()
    adversarials = [[] for _ in eps]
    success = [[] for _ in eps]
    with torch.enable_grad():  # never attack under no_grad
        for rows in chunks(x.shape[0], batch_size):
            _, clipped, ok = attack(fmodel, x[rows], y[rows], epsilons=eps)
            for i in range(len(eps)):
                adversarials[i].append(clipped[i].detach())
                success[i].append(ok[i].detach())
            if progress is not None:
                progress()

    # one set of scoring functions for the clean inputs and every ε (drawn once, fresh and seeded)
    scorer = posterior.sample(eval_samples, generator=make_generator(seed, posterior.device, ATTACK_SCORER_KEY))
    clean = uncertainty_scores(predictive_of(scorer, x))
    rows_out, adv_by_eps = [], {}
    for i, e in enumerate(eps):
        x_adv = torch.cat(adversarials[i])
        pred = predictive_of(scorer, x_adv)
        row = {"epsilon": e, **score_batch(pred, y, clean),
               "foolbox_success": float(torch.cat(success[i]).float().mean()),
               "n_inputs": int(x.shape[0])}
        rows_out.append(row)
        if return_adversarials:
            adv_by_eps[e] = x_adv
    frame = pd.DataFrame(rows_out)
    return (frame, adv_by_eps) if return_adversarials else frame


def clean_accuracy(posterior, x, y, *, n_samples: int = 20, seed: int = 0) -> float:
    """Accuracy of the Monte-Carlo predictive over ``n_samples`` fresh seeded functions on clean
    inputs ``x[N, in_dim]`` (or ``[N, H, W]``) in ``[0, 1]`` with labels ``y[N]``."""
    check_classifier(posterior)
    x = check_images(x, posterior)
    y = check_labels(y, x.shape[0], posterior.spec.out_dim, posterior.device)
    scorer = posterior.sample(check_positive_int(n_samples, "n_samples"),
                              generator=make_generator(seed, posterior.device, ATTACK_SCORER_KEY))
    pred = predictive_of(scorer, x)
    return float((pred.probs.argmax(-1) == y).float().mean())


__all__ = ["DEFAULT_EPSILONS", "clean_accuracy", "fgsm"]
