"""uncertain-agents: Bayesian neural-network posteriors behind one sampler interface.

    import uncertain_agents as ua
    post = ua.make_posterior("bb-alpha", in_dim=13, out_dim=1, alpha=0.5, seed=0)
    post.fit(x, y, steps=5000)
    pred = post.predict(x_test)
"""
from .function_sample import FunctionSample
from .likelihoods import Categorical, Gaussian
from .network import MLPSpec
from .posteriors import FitResult, Posterior, TrainingDivergedError
from .predictive import Predictive
from .registry import (available_posteriors, load_posterior, make_posterior, register_posterior,
                       unregister_posterior)
from .checks import PosteriorCheckError, check_posterior

__version__ = "0.1.0"

__all__ = [
    "Categorical", "FitResult", "FunctionSample", "Gaussian", "MLPSpec", "Posterior",
    "PosteriorCheckError", "Predictive", "TrainingDivergedError", "available_posteriors",
    "check_posterior", "load_posterior", "make_posterior", "register_posterior",
    "unregister_posterior", "__version__",
]
