"""Adversarial attacks (FGSM, targeted I-FGSM via foolbox) and entropy-based detection.

    from attacks import fgsm, targeted_ifgsm
    table = fgsm(posterior, x_test, y_test, epsilons=[0.0, 0.1, 0.2], n_samples=20)
"""
import os

os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")  # foolbox imports GitPython

from .adapter import PredictiveLogits, foolbox_model  # noqa: E402
from .detection import AUROCWarning, auroc, uncertainty_scores  # noqa: E402
from .fgsm import DEFAULT_EPSILONS, clean_accuracy, fgsm  # noqa: E402
from .ifgsm import targeted_ifgsm  # noqa: E402
from .plots import plot_attack_curves  # noqa: E402

__all__ = ["AUROCWarning", "DEFAULT_EPSILONS", "PredictiveLogits", "auroc", "clean_accuracy", "fgsm",
           "foolbox_model", "plot_attack_curves", "targeted_ifgsm", "uncertainty_scores"]
