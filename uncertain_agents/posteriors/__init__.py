"""One module per method; each registers itself with :func:`uncertain_agents.registry.register`.

Every module in this package is imported by the registry, so a new method only needs
a new file.
"""
from .base import Posterior
from .training import Batch, FitResult, OptimizerGroup, Phase, TrainingContext, TrainingDivergedError

__all__ = ["Batch", "FitResult", "OptimizerGroup", "Phase", "Posterior", "TrainingContext",
           "TrainingDivergedError"]
