"""Contextual-bandit agents: Thompson sampling over any posterior, and baselines.

    from uncertain_agents.agents import ThompsonSampling, run_bandit
    agent = ThompsonSampling(ua.make_posterior("mfvi", in_dim=2, out_dim=5), n_actions=5)
    frame = run_bandit(gymnasium.make("envs:WheelBandit-v0", delta=0.95), agent, steps=2000, seed=0)

Ten trials as one trial-batched model in lock step (``uncertain_agents.posteriors.trials``)::

    post = make_trial_posterior("mfvi", trials=10, in_dim=2, out_dim=5)
    frames = run_bandit_trials([envs.WheelBandit(delta=0.95) for _ in range(10)], post, steps=2000,
                               seeds=list(range(10)))
"""
from .base import Agent
from .baselines import Greedy, Uniform
from .bayes_linear import BayesianLinearArms
from .factory import AGENTS, make_agent, resolve_agent
from .history import History
from .linear import LinearThompson, NeuralLinear
from .lockstep import run_bandit_trials
from .protocols import PROTOCOLS, BanditProtocol, get_protocol
from .run import run_bandit
from .schedule import LinearDecay
from .thompson import ThompsonSampling

__all__ = ["AGENTS", "PROTOCOLS", "Agent", "BanditProtocol", "BayesianLinearArms", "Greedy", "History",
           "LinearDecay", "LinearThompson", "NeuralLinear", "ThompsonSampling", "Uniform", "get_protocol",
           "make_agent", "resolve_agent", "run_bandit", "run_bandit_trials"]
