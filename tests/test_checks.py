"""``check_posterior``: every built-in method passes it, and it catches the defects it names."""
from __future__ import annotations

import pytest
import torch

import uncertain_agents as ua
from uncertain_agents import FunctionSample
from uncertain_agents.posteriors.mfvi import MeanFieldVI
from uncertain_agents.posteriors.point_estimates import PointEstimates

NAMES = ua.available_posteriors()


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_posterior_keeps_the_contract(name):
    assert ua.check_posterior(name) is None


@pytest.mark.cuda
@pytest.mark.parametrize("name", NAMES)
def test_every_registered_posterior_keeps_the_contract_on_cuda(name):
    ua.check_posterior(name, device="cuda")


def test_an_alias_and_method_options_are_accepted():
    ua.check_posterior("bbb", likelihoods=("gaussian",))
    ua.check_posterior("ensemble", likelihoods=("categorical",), n_members=3)


def test_unknown_names_and_jobs_are_refused():
    with pytest.raises(ValueError, match="valid names"):
        ua.check_posterior("no-such-method")
    with pytest.raises(ValueError, match="likelihoods"):
        ua.check_posterior("mfvi", likelihoods=("poisson",))
    with pytest.raises(ValueError, match="likelihoods"):
        ua.check_posterior("mfvi", likelihoods=())


# ------------------------------------------------------------------ defects it must catch
class IgnoresTheGenerator(MeanFieldVI):
    """Draws from torch's global generator instead of the one it is given."""
    name = "test-ignores-generator"

    def _sample(self, n, generator):
        own = torch.Generator(device=self.device).manual_seed(int(torch.randint(2**31, ())))
        return super()._sample(n, own)


class OneFunctionTooMany(MeanFieldVI):
    name = "test-one-too-many"

    def _sample(self, n, generator):
        return super()._sample(n + 1, generator)


class RestandardisesOnEveryFit(MeanFieldVI):
    """The bug the plug-in issue found: units recomputed from the data of every refit."""
    name = "test-restandardises"

    def fit(self, x, y, mask=None, **kwargs):
        self.units_fixed.fill_(False)
        return super().fit(x, y, mask, **kwargs)


class KeepsStateOutsideItsBuffers(PointEstimates):
    """Learns an output offset into a plain attribute, which ``save`` does not write."""
    name = "test-state-outside-buffers"
    default_members = 1

    def fit(self, x, y, mask=None, **kwargs):
        result = super().fit(x, y, mask, **kwargs)
        self.offset = 0.1 * torch.randn(self.members.shape[1], generator=self._init_generator)
        return result

    def _sample_indexed(self, n, generator):
        functions, log_noise, index = super()._sample_indexed(n, generator)
        offset = getattr(self, "offset", None)
        return (functions if offset is None else functions + offset), log_noise, index


class AcceptsZeroSamples(MeanFieldVI):
    name = "test-accepts-zero"

    def sample(self, n, *, generator=None):
        return super().sample(max(int(n), 1), generator=generator)


class WrongWidth(MeanFieldVI):
    """Draws weight vectors one entry short: the network cannot evaluate them."""
    name = "test-wrong-width"

    def _sample(self, n, generator):
        params, noise = super()._sample(n, generator)
        return params[:, :-1], noise


class _DetachedSample(FunctionSample):
    def __call__(self, x):
        return super().__call__(x).detach()


class CutsTheGradient(MeanFieldVI):
    """Functions whose values are detached from x: an attack gets no gradient."""
    name = "test-cuts-gradient"

    def sample(self, n, *, generator=None):
        fs = super().sample(n, generator=generator)
        return _DetachedSample(fs.distinct_params, fs.spec, fs.x_loc, fs.x_scale, fs.y_loc, fs.y_scale,
                               fs.distinct_noise_std, index=fs.index)


DEFECTS = [
    (CutsTheGradient, "differentiable in x .*backward raised"),
    # what _sample returns is checked on its own, before fit
    (WrongWidth, r"_sample\(n, generator\) returns .*\(params: shape \(3, 49\), expected \(3, 50\)\)"),
    (IgnoresTheGenerator, "same generator seed draws the same functions"),
    (OneFunctionTooMany, r"_sample\(n, generator\) returns .*\(params: shape \(4, 50\), expected \(3, 50\)\)"),
    (RestandardisesOnEveryFit, "refit keeps the units of the first fit"),
    (KeepsStateOutsideItsBuffers, "saved and reloaded posterior draws the same functions"),
    (AcceptsZeroSamples, r"bad input raises ValueError \(sample\(0\) raised nothing\)"),
]


@pytest.mark.parametrize("cls,rule", DEFECTS, ids=[cls.name for cls, _ in DEFECTS])
def test_a_broken_posterior_is_caught_by_the_rule_it_breaks(cls, rule):
    ua.register_posterior(cls.name)(cls)
    try:
        with pytest.raises(ua.PosteriorCheckError, match=rule) as err:
            ua.check_posterior(cls.name, likelihoods=("gaussian",))
        assert repr(cls.name) in str(err.value)
    finally:
        ua.unregister_posterior(cls.name)
    assert cls.name not in ua.available_posteriors()


def test_unregister_removes_a_name_with_its_aliases_and_frees_them():
    temporary = type("Temporary", (MeanFieldVI,), {"name": "test-temporary"})
    ua.register_posterior("test-temporary", "test-temp-alias")(temporary)
    assert "test-temporary" in ua.available_posteriors(include_aliases=True)
    assert ua.unregister_posterior("test-temp-alias") is temporary
    names = ua.available_posteriors(include_aliases=True)
    assert "test-temporary" not in names and "test-temp-alias" not in names
    ua.register_posterior("test-temporary")(temporary)  # free again
    ua.unregister_posterior("test-temporary")
    with pytest.raises(ValueError, match="valid names"):
        ua.unregister_posterior("test-temporary")


# ------------------------------------------------------------------ plugins (entry points)
def _fake_entry_points(monkeypatch, value):
    from importlib import metadata

    from uncertain_agents import registry

    entry = metadata.EntryPoint(name="my-plugin", value=value, group=registry.PLUGIN_GROUP)

    def entry_points(*, group):
        return [entry] if group == registry.PLUGIN_GROUP else []

    monkeypatch.setattr(registry.metadata, "entry_points", entry_points)
    return registry


def test_an_installed_packages_entry_point_registers_its_posterior(monkeypatch):
    import sys

    registry = _fake_entry_points(monkeypatch, "plugin_posterior")
    try:
        assert registry.import_posterior_plugins() == ["my-plugin"]
        assert "test-plugin-posterior" in ua.available_posteriors()
        ua.check_posterior("test-plugin-posterior", likelihoods=("gaussian",))
    finally:
        if "test-plugin-posterior" in ua.available_posteriors():
            ua.unregister_posterior("test-plugin-posterior")
        sys.modules.pop("plugin_posterior", None)


def test_a_broken_plugin_is_named_in_the_error(monkeypatch):
    registry = _fake_entry_points(monkeypatch, "no_such_module_for_uncertain_agents")
    with pytest.raises(ImportError, match="posterior plugin 'my-plugin'.*no_such_module_for_uncertain_agents"):
        registry.import_posterior_plugins()


def test_a_failed_registry_load_is_tried_again():
    calls = []

    def load():
        calls.append(1)
        if len(calls) == 1:
            raise ImportError("first try fails")

    reg = ua.registry.Registry("thing", load=load)
    with pytest.raises(ImportError, match="first try"):
        reg.names()
    assert reg.names() == [] and len(calls) == 2
    reg.names()
    assert len(calls) == 2


# ------------------------------------------------------------------ the command line
def test_the_check_command_reports_every_rule_kept_and_the_broken_one(capsys):
    from uncertain_agents.cli import main

    assert main(["check", "map", "vi", "mfvi", "--likelihood", "gaussian"]) == 0
    out = capsys.readouterr().out
    assert out.count("keeps every rule") == 2  # an alias and its name are checked once
    ua.register_posterior(RestandardisesOnEveryFit.name)(RestandardisesOnEveryFit)
    try:
        assert main(["check", "map", RestandardisesOnEveryFit.name, "--likelihood", "gaussian"]) == 1
    finally:
        ua.unregister_posterior(RestandardisesOnEveryFit.name)
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())  # the table may wrap a cell's text
    assert "keeps every rule" in out and "units of the first fit" in out
    assert main(["check", "ensemble", "--option", "n_members=0"]) == 2
    assert "n_members must be a positive integer" in capsys.readouterr().err


def test_register_posterior_refuses_what_load_posterior_could_not_restore():
    with pytest.raises(TypeError, match="expects a subclass of uncertain_agents.Posterior"):
        ua.register_posterior("test-not-a-posterior")(dict)
    with pytest.raises(ValueError, match="has name = 'mfvi'; set name = 'test-renamed'"):
        ua.register_posterior("test-renamed")(type("Renamed", (MeanFieldVI,), {}))
    with pytest.raises(ValueError, match="registered twice"):
        ua.register_posterior("mfvi")(MeanFieldVI)
    for bad in (3, " ", None):  # found by experiments/bad_input_cases.py: 3 used to raise AttributeError
        with pytest.raises(TypeError, match="posterior name or alias must be a non-empty string"):
            ua.register_posterior(bad)
    assert "test-not-a-posterior" not in ua.available_posteriors()
    assert "test-renamed" not in ua.available_posteriors()
