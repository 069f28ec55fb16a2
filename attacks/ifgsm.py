"""Targeted iterative FGSM (Kurakin et al.'s basic iterative method), as used by
Li & Gal (ICML 2017, §5.3) and Wang et al. (ICLR 2019, appendix A.3).

Starting from the inputs whose label is not the target, every step moves each pixel
by ``step`` against the sign of the gradient of ``-log p̂(target|x)`` and clips to
``[0, 1]``: ``x_{k+1} = clip(x_k - step · sign(∇_x [-log p̂(target|x_k)]), 0, 1)``.
Each step is one call of foolbox's L∞ basic iterative attack with ``steps=1`` (its
ε-ball around ``x_k`` with radius ``step`` does not bind), so the attack can be scored
after every step; an optional ``epsilon`` projects onto the ball around the clean input.
The attacked predictive draws fresh functions at every step (the attacker averages
over the posterior's randomness); the scores come from separate fresh, seeded draws.
"""
from __future__ import annotations

import numbers
from typing import Callable

import pandas as pd
import torch

from uncertain_agents.seeding import ATTACK_SCORER_KEY
from uncertain_agents.validation import check_positive_int

from .adapter import PredictiveLogits, check_classifier, foolbox_model, make_generator
from .detection import predictive_of, score_batch, uncertainty_scores
from .inputs import check_images, check_labels, check_positive_number, chunks


def targeted_ifgsm(posterior, x, y=None, *, target: int = 0, step: float = 0.01, steps: int = 40,
                   n_samples: int = 20, eval_samples: int | None = None, epsilon: float | None = None,
                   seed: int = 0, batch_size: int = 500, return_adversarials: bool = False,
                   progress: Callable[[], None] | None = None):
    """Targeted I-FGSM towards class ``target``, scored after every step.

    Args:
        posterior: a classifier (``likelihood="categorical"``); not moved or modified.
        x: ``[N, in_dim]`` (or ``[N, H, W]``) inputs in ``[0, 1]``.
        y: ``[N]`` true labels; ``None`` uses the posterior's clean predictions. Rows
            whose label equals ``target`` are left out.
        target: the class every input is pushed towards.
        step: L∞ size of one step.
        steps: number of steps.
        n_samples: functions averaged by the attacked predictive at each step.
        eval_samples: fresh functions, drawn once, that score the clean inputs and every step
            (default ``n_samples``).
        epsilon: optional L∞ radius around the clean input to project onto.
        seed: seeds the attacker's and the scorer's generators (their own streams of it,
            :mod:`uncertain_agents.seeding`).
        batch_size: rows attacked at once (bounds memory; the result does not depend on it: a
            step's functions are drawn once for all its chunks).
        return_adversarials: also return the final ``x_adv[M, in_dim]`` and kept rows.
        progress: called with no arguments after each step (``steps`` calls), for a progress bar.

    Returns:
        A ``pandas.DataFrame`` with one row per step ``0..steps`` (0 = clean inputs
        re-scored) and columns ``step, accuracy, target_success, mean_entropy,
        auroc_entropy, mean_mutual_information, auroc_mutual_information, n_inputs``.
    """
    import foolbox as fb

    check_classifier(posterior)
    x = check_images(x, posterior)
    n_classes = posterior.spec.out_dim
    if isinstance(target, bool) or not isinstance(target, numbers.Integral) or not 0 <= target < n_classes:
        raise ValueError(f"target must be a class index in [0, {n_classes - 1}], got {target!r}")
    target = int(target)
    step = check_positive_number(step, "step")
    steps = check_positive_int(steps, "steps")
    n_samples = check_positive_int(n_samples, "n_samples")
    eval_samples = n_samples if eval_samples is None else check_positive_int(eval_samples, "eval_samples")
    epsilon = None if epsilon is None else check_positive_number(epsilon, "epsilon")
    batch_size = check_positive_int(batch_size, "batch_size")

    # one set of scoring functions for the labels, the clean inputs and every step (drawn once)
    scorer = posterior.sample(eval_samples, generator=make_generator(seed, posterior.device, ATTACK_SCORER_KEY))
    if y is None:
        y = predictive_of(scorer, x).probs.argmax(-1)
    y = check_labels(y, x.shape[0], n_classes, posterior.device)
    keep = torch.nonzero(y != target).squeeze(-1)
    if keep.numel() == 0:
        raise ValueError(f"every input already has label {target} (the target); nothing to attack")
    x0, y = x[keep], y[keep]

    # one draw of the attacker's functions per step, shared by every chunk of rows, so that batch_size
    # bounds memory only (session 39: each chunk used to draw its own, so it changed the attack)
    adapter = PredictiveLogits(posterior, n_samples, seed=seed, resample=False)
    fmodel = foolbox_model(adapter)
    attack = fb.attacks.LinfBasicIterativeAttack(abs_stepsize=step, steps=1, random_start=False)

    pred = predictive_of(scorer, x0)
    clean = uncertainty_scores(pred)
    rows_out = [{"step": 0, **score_batch(pred, y, clean, target), "n_inputs": int(x0.shape[0])}]
    x_adv = x0.clone()
    for k in range(1, steps + 1):
        if k > 1:
            adapter.redraw()  # step 1 uses the draw made with the adapter
        with torch.enable_grad():  # never attack under no_grad
            parts = []
            for rows in chunks(x_adv.shape[0], batch_size):
                crit = fb.criteria.TargetedMisclassification(torch.full_like(y[rows], target))
                parts.append(attack.run(fmodel, x_adv[rows], crit, epsilon=step).detach())
        x_adv = torch.cat(parts).clamp(0.0, 1.0)
        if epsilon is not None:
            x_adv = torch.minimum(torch.maximum(x_adv, x0 - epsilon), x0 + epsilon)
        pred = predictive_of(scorer, x_adv)
        rows_out.append({"step": k, **score_batch(pred, y, clean, target), "n_inputs": int(x0.shape[0])})
        if progress is not None:
            progress()
    frame = pd.DataFrame(rows_out)
    return (frame, x_adv, keep) if return_adversarials else frame


__all__ = ["targeted_ifgsm"]
