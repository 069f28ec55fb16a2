"""Named bandit protocols: the network, refit schedule and posterior options of a paper.

``make_agent(..., protocol=NAME)`` and ``uncertain-agents bandit --protocol NAME`` take
their settings from here; any argument given explicitly overrides the protocol.

* ``default`` — the library's defaults: a 1×50 network refitted every 50 decisions
  for 100 steps (batch 512) after :data:`DEFAULT_INITIAL_PULLS` (5) round-robin pulls of
  every arm, the posterior's own options (the agent gives a posterior with the default
  prior the bandit prior, see :class:`~.neural.PosteriorAgent`).
* ``showdown`` — Riquelme, Tucker & Snoek (ICLR 2018), "Deep Bayesian bandits
  showdown", as used for the baselines of Wang et al. (2019): 2×100 network, refit
  every 50 decisions for 100 steps at batch 512 after 2 initial pulls of every arm,
  observation noise fixed at σ = 0.1 (their BBB ``noise_sigma``), dropout keep
  probability 0.8.
* ``fsvgd-paper`` — Wang et al. (ICLR 2019, §5.4 and A.4): 2×100 network, 20
  particles (``fsvgd``, ``svgd``) and 20 replicas (``bootstrap``, ``ensemble``),
  σ = 0.1 fixed, and the decaying schedule: 2,000 steps at the first refit, down to
  100 over 20 refits (:class:`~.schedule.LinearDecay`, the ``np.linspace`` of the authors'
  code, reaching 100 at refit 19), every 50 decisions, batch 512; ``fsvgd`` with the prior, initialisation,
  function-prior weight, extra points and learning rate of the authors' bandit code
  (``_FSVGD_AUTHORS``); ``bootstrap`` as the ``BootRMS`` agent of the same code (Riquelme et
  al.'s), ``_BOOTSTRAP_RIQUELME``: 100 steps at every refit, RMSProp at 0.1 under
  inverse-time decay, each row kept in each of the 20 replicas with probability 0.95.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .schedule import LinearDecay, TrainSteps

#: Round-robin pulls of every arm before the first fit, in the library's defaults. Five, not
#: the papers' two: with two, a mushroom agent whose two first meals both pay −35 (about one
#: run in 17) fits every posterior to "eating costs 35" from two rows, and the posteriors
#: whose spread comes from initialisation or resampling (ensembles, bootstrap, SVGD, dropout)
#: never eat again — measured on held-out trials in docs/plug_in.md ("Held-out trials").
DEFAULT_INITIAL_PULLS: int = 5
#: The published protocols' value (Riquelme et al. 2018's code; Wang et al. 2019 follow it).
PAPER_INITIAL_PULLS: int = 2


@dataclass(frozen=True)
class BanditProtocol:
    """Settings of a bandit protocol.

    Attributes:
        name: the protocol's name.
        hidden: hidden-layer widths of the agents' networks.
        train_every, train_steps, batch_size, initial_pulls, lr: the refit schedule.
        posterior_options: per posterior name, options passed to ``make_posterior``; the
            key ``"*"`` applies to every posterior (method-specific keys win).
        posterior_lr: per posterior name, the refits' learning rate where it differs from
            ``lr`` (e.g. the learning rate of the authors' code for one method).
        posterior_train_steps: per posterior name, the refits' steps where they differ from
            ``train_steps`` (a method the paper's code trains on another schedule).
    """

    name: str
    hidden: tuple[int, ...] = (50,)
    train_every: int = 50
    train_steps: TrainSteps = 100
    batch_size: int = 512
    initial_pulls: int = DEFAULT_INITIAL_PULLS
    lr: float | None = None
    #: fit once as soon as the round robin ends (the library's default). ``False``: the first fit
    #: is at the first multiple of ``train_every``, as Riquelme et al.'s and Wang et al.'s code
    #: (``if self.t % self.training_freq == 0: train``), the decisions in between acting on the
    #: initial posterior.
    fit_after_warmup: bool = True
    posterior_options: dict[str, dict] = field(default_factory=dict)
    posterior_lr: dict[str, float] = field(default_factory=dict)
    posterior_train_steps: dict[str, TrainSteps] = field(default_factory=dict)

    def options_for(self, posterior: str) -> dict:
        """Posterior options of this protocol for the registry name ``posterior``."""
        return {**self.posterior_options.get("*", {}), **self.posterior_options.get(posterior, {})}

    def merged_options(self, posterior: str, hidden: tuple[int, ...], explicit: dict) -> dict:
        """The protocol's options for ``posterior`` overridden by the ``explicit`` ones, for a
        network with ``hidden`` layers. A per-layer option of the protocol (a list, e.g.
        ``prior_std``) that does not fit a network of other widths is refused here, naming the
        option to pass instead."""
        merged = {**self.options_for(posterior), **explicit}
        n_layers = len(tuple(hidden)) + 1
        for key, value in merged.items():
            if key not in explicit and isinstance(value, (list, tuple)) and len(value) != n_layers:
                raise ValueError(
                    f"protocol {self.name!r} gives {posterior} one {key} per layer of its {self.hidden} network "
                    f"({len(value)} values); with hidden={tuple(hidden)} give {key} yourself, a number or "
                    f"{n_layers} values (Python: posterior_options={{{key!r}: ...}}; command line: "
                    f"--option {key}=...)")
        return merged

    def lr_for(self, posterior: str | None) -> float | None:
        """The refits' learning rate for the registry name ``posterior`` (``None``: the method's
        default)."""
        return self.posterior_lr.get(posterior, self.lr) if posterior is not None else self.lr

    def steps_for(self, posterior: str | None) -> TrainSteps:
        """The refits' training steps for the registry name ``posterior`` (``None``: an agent
        without a posterior)."""
        return self.posterior_train_steps.get(posterior, self.train_steps) if posterior is not None \
            else self.train_steps


_SHOWDOWN_NOISE = {"noise_std": 0.1}

#: f-SVGD as Wang et al.'s own bandit code runs it (thu-ml/fpovi, ``dcb/main.py`` and
#: ``dcb/bandits/algorithms/nnet.py``; docs/bandits.md, "The authors' f-SVGD settings"): 20
#: particles; weight prior variance 10, i.e. std √10/√fan_out = √10/10 on the two hidden layers
#: of 100 units (weights and biases) and √10 on the output layer; particles initialised with
#: weights ``N(0, 10/(fan_in + fan_out + 1))`` and zero biases; the log function prior weighted
#: by 1/4 (divided by its 4 moment-matching points); 64 extra points per step; the prior
#: covariance floored at 1e-4 (their jitter); Adam at 1e-3 (the library's particle default,
#: 4e-3, is their UCI setting).
_FSVGD_AUTHORS = {"n_particles": 20, "prior_std": (math.sqrt(10.0) / 10.0, math.sqrt(10.0) / 10.0, math.sqrt(10.0)),
                  "init_scale": math.sqrt(10.0), "prior_scale": 0.25, "n_extra": 64, "prior_eig_floor": 1e-4}
_FSVGD_AUTHORS_LR = 1e-3

#: The bootstrap as the ``BootRMS`` agent of the same code runs it (Riquelme, Tucker & Snoek's
#: ``bootstrapped_bnn_sampling.py`` and ``neural_bandit_model.py``, with the hyper-parameters of
#: Wang et al.'s ``dcb/main.py``; docs/bandits.md, "The authors' bootstrap settings"): ``q = 20``
#: replicas, each row kept in each with probability ``p = 0.95`` (the first row in all); weights
#: ``U(−0.3, 0.3)``, zero biases; the squared error of the played arm, no weight penalty;
#: TensorFlow's RMSProp at 0.1 divided by ``1 + 0.5 t`` (``t`` counting every step since the
#: start: their learning-rate reset is a no-op), each replica's gradient clipped at norm 5;
#: 100 steps at every refit from the first (not the decaying schedule of their f-SVGD).
_BOOTSTRAP_RIQUELME = {"n_members": 20, "scheme": "bernoulli", "inclusion": 0.95, "init_uniform": 0.3,
                       "use_prior": False, "objective": "squared-error", "clip_norm": 5.0,
                       "optimizer": "rmsprop", "lr_decay": 0.5}
_BOOTSTRAP_RIQUELME_LR = 0.1
_BOOTSTRAP_RIQUELME_STEPS = 100

#: The refit schedule of Wang et al.'s bandit code (``svgd_model.py``, the same for their BBB):
#: ``np.linspace(2000, 100, 20)`` steps at refits 0–19, i.e. 2,000, 1,900, …, 100, then the
#: ``training_epochs`` of 100. Until 2026-11-27 (session 32) the preset used ``LinearDecay(2000,
#: 100, 20)``, which reaches 100 one refit later (2,000, 1,905, …, 195, 100): 950 more steps over
#: the first 20 refits, 0.8% of a 50,000-decision run's steps; the tables made with it say so.
_AUTHORS_SCHEDULE = LinearDecay(2000, 100, 19)

PROTOCOLS: dict[str, BanditProtocol] = {
    "default": BanditProtocol("default"),
    "showdown": BanditProtocol(
        "showdown", hidden=(100, 100), initial_pulls=PAPER_INITIAL_PULLS, fit_after_warmup=False,
        posterior_options={"*": dict(_SHOWDOWN_NOISE), "dropout-alpha": {"dropout": 0.2}}),
    "fsvgd-paper": BanditProtocol(
        "fsvgd-paper", hidden=(100, 100), train_steps=_AUTHORS_SCHEDULE,
        initial_pulls=PAPER_INITIAL_PULLS, fit_after_warmup=False,
        posterior_options={"*": dict(_SHOWDOWN_NOISE), "fsvgd": dict(_FSVGD_AUTHORS), "svgd": {"n_particles": 20},
                           "bootstrap": dict(_BOOTSTRAP_RIQUELME), "ensemble": {"n_members": 20},
                           "dropout-alpha": {"dropout": 0.2}},
        posterior_lr={"fsvgd": _FSVGD_AUTHORS_LR, "bootstrap": _BOOTSTRAP_RIQUELME_LR},
        posterior_train_steps={"bootstrap": _BOOTSTRAP_RIQUELME_STEPS}),
}


def get_protocol(name: str | BanditProtocol) -> BanditProtocol:
    """The protocol called ``name`` (or ``name`` itself if it is a :class:`BanditProtocol`)."""
    if isinstance(name, BanditProtocol):
        return name
    if not isinstance(name, str):
        raise TypeError(f"protocol must be a name or a BanditProtocol, got {type(name).__name__}")
    key = name.strip().lower().replace("_", "-")
    if key not in PROTOCOLS:
        raise ValueError(f"unknown bandit protocol {name!r}; valid: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[key]
