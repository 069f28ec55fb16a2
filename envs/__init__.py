"""Gymnasium contextual-bandit environments (wheel, mushroom, classification).

Importing the package registers ``WheelBandit-v0``, ``MushroomBandit-v0`` and
``ClassificationBandit-v0``, so ``gymnasium.make("envs:WheelBandit-v0", delta=0.95)`` works.
"""
from gymnasium.envs.registration import register, registry

from .base import ContextualBanditEnv, PlayedRounds
from .classification import ClassificationBandit
from .mushroom import MushroomBandit
from .wheel import WheelBandit, uniform_expected_regret, wheel_expected_rewards

for _id, _entry in (("WheelBandit-v0", "envs.wheel:WheelBandit"),
                    ("MushroomBandit-v0", "envs.mushroom:MushroomBandit"),
                    ("ClassificationBandit-v0", "envs.classification:ClassificationBandit")):
    if _id not in registry:
        register(id=_id, entry_point=_entry)

__all__ = ["ClassificationBandit", "ContextualBanditEnv", "MushroomBandit", "PlayedRounds", "WheelBandit",
           "uniform_expected_regret", "wheel_expected_rewards"]
