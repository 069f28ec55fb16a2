"""The mushroom bandit (Riquelme et al. 2018; data: UCI agaricus-lepiota).

Each round shows a mushroom drawn uniformly with replacement (its one-hot features).
Arm 0 = don't eat: reward 0. Arm 1 = eat: +5 if edible; a poisonous one pays −35 with
probability 1/2 and +5 otherwise. The optimal expected reward is 5 (edible, eat) or
0 (poisonous, don't eat).
"""
from __future__ import annotations

import numpy as np

from uncertain_agents.datasets.mushroom import AUTO, MushroomData, load_mushroom

from .base import ContextualBanditEnv

NO_EAT = 0.0
EAT_SAFE = 5.0
EAT_POISON_BAD = -35.0
EAT_POISON_GOOD = 5.0
PROB_POISON_BAD = 0.5


def mushroom_expected_rewards(edible: np.ndarray) -> np.ndarray:
    """``edible[m] -> [m, 2]`` expected reward of (don't eat, eat)."""
    poison = PROB_POISON_BAD * EAT_POISON_BAD + (1 - PROB_POISON_BAD) * EAT_POISON_GOOD
    return np.stack([np.full(edible.shape, NO_EAT), np.where(edible, EAT_SAFE, poison)], axis=1)


class MushroomBandit(ContextualBanditEnv):
    """``MushroomBandit-v0``.

    Args:
        data_dir: data folder holding ``mushroom/agaricus-lepiota.data`` (else
            ``$UNCERTAIN_AGENTS_DATA``, else the user cache; downloaded when missing).
        sha256: expected checksum of the file (default: the folder's ``SHA256SUMS`` entry,
            else the original file's).
        download: allow downloading the file from UCI when it is missing.
        data: already loaded :class:`MushroomData` (skips the file).
        horizon: episode length.
        render_mode: ``None`` (gymnasium's argument; there is nothing to render).
    """

    def __init__(self, data_dir=None, *, sha256: str | None = AUTO, download: bool = True,
                 data: MushroomData | None = None, horizon: int = 50_000, render_mode: str | None = None):
        if data is None:
            data = load_mushroom(data_dir, sha256=sha256, download=download)
        elif not isinstance(data, MushroomData):
            raise TypeError(f"data must be a MushroomData, got {type(data).__name__}")
        self.data = data
        d = data.contexts.shape[1]
        super().__init__(2, np.zeros(d), np.ones(d), horizon, render_mode)

    def _draw_block(self, m: int):
        rng = self.np_random
        idx = rng.integers(self.data.contexts.shape[0], size=m)
        edible = self.data.edible[idx]
        bad = rng.random(m) < PROB_POISON_BAD
        eat = np.where(edible, EAT_SAFE, np.where(bad, EAT_POISON_BAD, EAT_POISON_GOOD))
        rewards = np.stack([np.full(m, NO_EAT), eat], axis=1)
        return self.data.contexts[idx], rewards, mushroom_expected_rewards(edible)
