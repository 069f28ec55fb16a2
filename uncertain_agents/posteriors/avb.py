"""``avb``: adversarial variational Bayes (Mescheder et al. 2017) with adaptive contrast.

The α → 0 branch of :class:`~uncertain_agents.posteriors.aadm.AADM`: the same implicit q,
discriminator and updates, with the ELBO's data term ``−(1/B) Σ_n mean_k log p(y_n | w_k)``
computed as a plain mean (never a division by a tiny α).
"""
from __future__ import annotations

from ..network import MLPSpec
from ..registry import register
from .aadm import AADM


@register("avb")
class AVB(AADM):
    """AADM at α = 0 (all of ``aadm``'s options except ``alpha``)."""

    name = "avb"
    fixed_options = ("alpha",)

    def __init__(self, spec: MLPSpec, likelihood: str = "gaussian", **kwargs):
        if "alpha" in kwargs:
            raise TypeError("avb is AADM at alpha = 0; use 'aadm' to choose alpha")
        super().__init__(spec, likelihood, alpha=0.0, **kwargs)
