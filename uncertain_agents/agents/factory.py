"""``make_agent``: build any bandit agent by name (what the CLI and experiments use)."""
from __future__ import annotations

from ..registry import make_posterior
from .base import Agent
from .baselines import Greedy, Uniform
from .linear import LinearThompson, NeuralLinear
from .protocols import BanditProtocol, get_protocol
from .schedule import TrainSteps
from .thompson import ThompsonSampling

AGENTS = ("uniform", "greedy", "linear", "neural-linear", "thompson")
_ALIASES = {"ts": "thompson", "thompson-sampling": "thompson", "random": "uniform",
            "linfullpost": "linear", "linear-thompson": "linear", "lin-full-post": "linear",
            "neurallinear": "neural-linear", "neural_linear": "neural-linear"}
POSTERIOR_AGENTS = ("thompson", "greedy")

def resolve_agent(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"agent name must be a string, got {type(name).__name__}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; valid agents: {', '.join(AGENTS)} "
                         f"(aliases: {', '.join(sorted(_ALIASES))})")
    return key


def make_agent(name: str, *, n_actions: int, context_dim: int, posterior: str | None = None,
               posterior_options: dict | None = None, protocol: str | BanditProtocol = "default",
               hidden=None, activation: str = "relu", train_every: int | None = None,
               train_steps: TrainSteps | None = None, batch_size: int | None = None,
               initial_pulls: int | None = None, lr: float | None = None, device="cpu",
               seed: int | None = None) -> Agent:
    """Build agent ``name`` (one of :data:`AGENTS`) under a bandit ``protocol``.

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
    n_actions, context_dim = int(n_actions), int(context_dim)
    hidden = proto.hidden if hidden is None else hidden
    schedule = dict(train_every=proto.train_every if train_every is None else train_every,
                    train_steps=proto.train_steps if train_steps is None else train_steps,
                    batch_size=proto.batch_size if batch_size is None else batch_size,
                    initial_pulls=proto.initial_pulls if initial_pulls is None else initial_pulls)
    lr = proto.lr if lr is None else lr
    if key == "uniform":
        return Uniform(n_actions, context_dim=context_dim, seed=seed)
    if key == "linear":
        return LinearThompson(context_dim, n_actions, initial_pulls=schedule["initial_pulls"], seed=seed)
    if key == "neural-linear":
        return NeuralLinear(context_dim, n_actions, hidden=hidden, activation=activation, device=device,
                            seed=seed, **schedule, **({} if lr is None else {"lr": lr}))
    if posterior is None:
        raise ValueError(f"agent {key!r} needs a posterior name (e.g. 'mfvi')")
    from ..registry import resolve_name

    method = resolve_name(posterior)
    options = {**proto.options_for(method), **(posterior_options or {})}
    post = make_posterior(posterior, in_dim=context_dim, out_dim=n_actions, hidden=hidden,
                          activation=activation, likelihood="gaussian", device=device, seed=seed,
                          **options)
    cls = ThompsonSampling if key == "thompson" else Greedy
    return cls(post, n_actions, lr=lr, seed=None if seed is None else seed + 1, **schedule)
