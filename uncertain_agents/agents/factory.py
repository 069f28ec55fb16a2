"""``make_agent``: build any bandit agent by name (what the CLI and experiments use).

Agents live in :data:`AGENTS`, a :class:`~uncertain_agents.registry.Registry` of builders:
each takes the :class:`AgentSettings` that ``make_agent`` fills in from its arguments and
the protocol, and returns the agent.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..registry import Registry, make_posterior, resolve_name
from .base import Agent, check_context_dim, check_n_actions
from .baselines import Greedy, Uniform
from .linear import LinearThompson, NeuralLinear
from .protocols import BanditProtocol, get_protocol
from .schedule import TrainSteps
from .thompson import ThompsonSampling


@dataclass(frozen=True)
class AgentSettings:
    """``make_agent``'s arguments with the protocol's defaults filled in: what a builder gets."""

    n_actions: int
    context_dim: int
    protocol: BanditProtocol
    hidden: Any
    activation: str
    schedule: dict  # train_every, train_steps, batch_size, initial_pulls, fit_after_warmup
    lr: float | None
    device: Any
    seed: int | None
    posterior: str | None
    posterior_options: dict


AGENTS: Registry[Callable[[AgentSettings], Agent]] = Registry("agent")
"""Agent builders by name (``make_agent``'s names and aliases)."""

POSTERIOR_AGENTS = ("thompson", "greedy")
"""The agents built around a posterior (they need ``posterior``)."""

resolve_agent = AGENTS.resolve


@AGENTS.register("uniform", "random")
def _uniform(s: AgentSettings) -> Agent:
    return Uniform(s.n_actions, context_dim=s.context_dim, seed=s.seed)


@AGENTS.register("linear", "linfullpost", "linear-thompson", "lin-full-post")
def _linear(s: AgentSettings) -> Agent:
    return LinearThompson(s.context_dim, s.n_actions, initial_pulls=s.schedule["initial_pulls"], seed=s.seed)


@AGENTS.register("neural-linear", "neurallinear", "neural_linear")
def _neural_linear(s: AgentSettings) -> Agent:
    return NeuralLinear(s.context_dim, s.n_actions, hidden=s.hidden, activation=s.activation, device=s.device,
                        seed=s.seed, **s.schedule, **({} if s.lr is None else {"lr": s.lr}))


def _posterior_agent(cls: type) -> Callable[[AgentSettings], Agent]:
    """A builder of ``cls`` around the posterior ``settings.posterior`` (see :func:`make_agent`)."""

    def build(s: AgentSettings) -> Agent:
        method = resolve_name(s.posterior)
        options = s.protocol.merged_options(method, s.hidden, s.posterior_options)
        post = make_posterior(method, in_dim=s.context_dim, out_dim=s.n_actions, hidden=s.hidden,
                              activation=s.activation, likelihood="gaussian", device=s.device, seed=s.seed,
                              **options)
        return cls(post, s.n_actions, lr=s.lr, seed=s.seed, **s.schedule)

    return build


AGENTS.register("thompson", "ts", "thompson-sampling")(_posterior_agent(ThompsonSampling))
AGENTS.register("greedy")(_posterior_agent(Greedy))


def _options_dict(options) -> dict:
    """``posterior_options``: a mapping of option names to values (or None for none)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"posterior_options must be a dict of option names to values, got {type(options).__name__}")
    return dict(options)


def make_agent(name: str, *, n_actions: int, context_dim: int, posterior: str | None = None,
               posterior_options: dict | None = None, protocol: str | BanditProtocol = "default",
               hidden: Sequence[int] | int | None = None, activation: str = "relu", train_every: int | None = None,
               train_steps: TrainSteps | None = None, batch_size: int | None = None,
               initial_pulls: int | None = None, lr: float | None = None, device: str | torch.device = "cpu",
               seed: int | None = None) -> Agent:
    """Build agent ``name`` (a name or alias of :data:`AGENTS`) under a bandit ``protocol``.

    Settings left as ``None`` come from the protocol (:mod:`.protocols`; ``"default"`` is
    the library's defaults). ``thompson`` and ``greedy`` need ``posterior`` (a registry
    name): it is built by ``make_posterior`` with ``out_dim = n_actions``, the protocol's
    options for that method, then ``posterior_options`` — nothing else; the agent then
    fixes its training units (see :class:`~.neural.PosteriorAgent`), exactly as for a
    posterior built by hand. Raises ``ValueError`` for an unknown agent, posterior or
    protocol name.
    """
    key = resolve_agent(name)
    proto = get_protocol(protocol)
    if key in POSTERIOR_AGENTS and posterior is None:
        raise ValueError(f"agent {key!r} needs a posterior name (e.g. 'mfvi')")
    method = None if posterior is None else resolve_name(posterior)
    schedule = dict(train_every=proto.train_every if train_every is None else train_every,
                    train_steps=proto.steps_for(method) if train_steps is None else train_steps,
                    batch_size=proto.batch_size if batch_size is None else batch_size,
                    initial_pulls=proto.initial_pulls if initial_pulls is None else initial_pulls,
                    fit_after_warmup=proto.fit_after_warmup)
    settings = AgentSettings(n_actions=check_n_actions(n_actions), context_dim=check_context_dim(context_dim), protocol=proto,
                             hidden=proto.hidden if hidden is None else hidden, activation=activation,
                             schedule=schedule,
                             lr=proto.lr_for(method) if lr is None else lr,
                             device=device, seed=seed,
                             posterior=posterior, posterior_options=_options_dict(posterior_options))
    return AGENTS.get(key)(settings)
