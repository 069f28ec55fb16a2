"""Defects users reported in the plugin path, each checked as the user met it: a plugin whose
constructor fails is a broken rule of ``check_posterior`` (and one row of ``uncertain-agents check``,
the others still checked), a plugin that fails to import is one line ``error: ...`` (exit 2) and
does not take down the names it does not provide, and a ``_sample`` that returns the wrong thing is
named by its own rule, not blamed on ``fit``."""
from __future__ import annotations

import importlib
import re
import sys
from importlib import metadata

import pytest
import torch
from torch import nn

import uncertain_agents as ua
from uncertain_agents import registry
from uncertain_agents.cli import main
from uncertain_agents.posteriors.mfvi import MeanFieldVI
from uncertain_agents.registry import POSTERIORS, PluginImportError, Registry


def one_line(text: str) -> str:
    return " ".join(text.replace("│", " ").split())  # the table may wrap a cell's text


@pytest.fixture
def registered():
    """``registered(cls)`` registers ``cls`` under its name for the test, unregistered afterwards."""
    names = []

    def add(cls):
        ua.register_posterior(cls.name)(cls)
        names.append(cls.name)
        return cls

    yield add
    for name in names:
        ua.unregister_posterior(name)
    assert not set(names) & set(ua.available_posteriors())


# ------------------------------------------------------------------ defect 1: constructors
class NoKw(ua.Posterior):
    """The user's plugin: a constructor without ``**kwargs`` (make_posterior passes device, seed)."""
    name = "test-nokw"

    def __init__(self, spec, likelihood="gaussian"):
        super().__init__(spec, likelihood)
        self.weights = nn.Parameter(self.initial_params(1, generator=self.generator())[0])

    def _sample(self, n, generator):
        return self.weights.expand(n, -1), None


class RaisingConstructor(MeanFieldVI):
    name = "test-raising-constructor"

    def __init__(self, spec, likelihood="gaussian", **kwargs):
        super().__init__(spec, likelihood, **kwargs)
        raise RuntimeError("cannot allocate the widget")


class SwallowsKwargs(MeanFieldVI):
    """Accepts ``**kwargs`` but does not pass them on: the seed (and device) are lost."""
    name = "test-swallows-kwargs"

    def __init__(self, spec, likelihood="gaussian", **kwargs):
        super().__init__(spec, likelihood)


class ValueErrorWithoutOptions(MeanFieldVI):
    name = "test-valueerror-constructor"

    def __init__(self, spec, likelihood="gaussian", **kwargs):
        raise ValueError("a broken default")


def test_a_constructor_without_kwargs_breaks_the_construction_rule(registered):
    registered(NoKw)
    with pytest.raises(ua.PosteriorCheckError) as err:
        ua.check_posterior(NoKw.name)
    message = str(err.value)
    assert f"posterior {NoKw.name!r} breaks the rule: construction" in message
    assert "unexpected keyword argument 'device'" in message
    assert "must accept **kwargs (device, seed, prior_std, ...) and pass them on to the base class" in message


@pytest.mark.parametrize("cls, found", [
    (RaisingConstructor, r"raised RuntimeError: cannot allocate the widget"),
    (ValueErrorWithoutOptions, r"raised ValueError: a broken default"),
    (SwallowsKwargs, r"keeps the seed and the device it is given .*seed None, device cpu for seed 0"),
])
def test_a_failing_constructor_breaks_the_construction_rule(registered, cls, found):
    registered(cls)
    with pytest.raises(ua.PosteriorCheckError, match=rf"{cls.name}' breaks the rule: construction.*{found}"):
        ua.check_posterior(cls.name, likelihoods=("gaussian",))


def test_the_users_own_bad_option_is_still_a_value_or_type_error(registered):
    with pytest.raises(ValueError, match="n_members must be a positive integer"):
        ua.check_posterior("ensemble", n_members=0)
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['no_such_option'\]"):
        ua.check_posterior("mfvi", no_such_option=1)
    registered(ValueErrorWithoutOptions)  # fails without the option too: the method is at fault
    with pytest.raises(ua.PosteriorCheckError, match="construction.*a broken default"):
        ua.check_posterior(ValueErrorWithoutOptions.name, prior_std=1.0)


def test_the_check_command_reports_a_broken_constructor_as_a_row_and_checks_the_others(registered, capsys):
    registered(NoKw)
    registered(RaisingConstructor)
    assert main(["check", NoKw.name, RaisingConstructor.name, "mfvi", "--likelihood", "gaussian"]) == 1
    captured = capsys.readouterr()
    out = one_line(captured.out)
    assert captured.err == ""
    assert out.count("breaks the rule: construction") == 2
    assert "must accept **kwargs" in out and "cannot allocate the widget" in out
    assert out.count("keeps every rule") == 1  # mfvi


# ------------------------------------------------------------------ defect 3: what _sample returns
class NumpySample(MeanFieldVI):
    name = "test-numpy-sample"

    def _sample(self, n, generator):
        params, noise = super()._sample(n, generator)
        return params.numpy(), noise


class NaNSample(MeanFieldVI):
    name = "test-nan-sample"

    def _sample(self, n, generator):
        params, noise = super()._sample(n, generator)
        return params * float("nan"), noise


class BareTensorSample(MeanFieldVI):
    name = "test-bare-sample"

    def _sample(self, n, generator):
        return super()._sample(n, generator)[0]


class ElsewhereSample(MeanFieldVI):
    """Draws on another device than the posterior's (``meta`` stands in for a GPU on a CPU machine)."""
    name = "test-elsewhere-sample"

    def _sample(self, n, generator):
        params, noise = super()._sample(n, generator)
        return params.to("meta"), noise


class IntegerSample(MeanFieldVI):
    name = "test-integer-sample"

    def _sample(self, n, generator):
        params, noise = super()._sample(n, generator)
        return params.round().long(), noise


class BadNoiseSample(MeanFieldVI):
    name = "test-bad-noise-sample"

    def _sample(self, n, generator):
        params, _ = super()._sample(n, generator)
        return params, torch.zeros(n)


class RaisingSample(MeanFieldVI):
    name = "test-raising-sample"

    def _sample(self, n, generator):
        raise KeyError("layer0")


SAMPLE_DEFECTS = [
    (NumpySample, r"params: a numpy ndarray of shape \(3, 50\), not a torch tensor"),
    (NaNSample, r"params: holds NaN or inf"),
    (BareTensorSample, r"it returned a torch Tensor of shape \(3, 50\), not a \(params, log_noise_std\) pair"),
    (ElsewhereSample, r"params: on meta, not on the posterior's device"),
    (IntegerSample, r"params: dtype torch.int64, not a float"),
    (BadNoiseSample, r"log_noise_std: shape \(3,\), expected \(3, 2\)"),
    (RaisingSample, r"_sample\(3, generator\) raised KeyError: 'layer0'"),
]


@pytest.mark.parametrize("cls, found", SAMPLE_DEFECTS, ids=[cls.name for cls, _ in SAMPLE_DEFECTS])
def test_what_sample_returns_is_checked_by_its_own_rule_before_fit(registered, cls, found):
    registered(cls)
    with pytest.raises(ua.PosteriorCheckError) as err:
        ua.check_posterior(cls.name, likelihoods=("gaussian",))
    message = str(err.value)
    assert message.startswith(f"posterior {cls.name!r} breaks the rule: _sample(n, generator) returns "
                              f"(params, log_noise_std or None): params a finite float torch tensor [n, D] "
                              f"(here [3, 50])")
    assert re.search(found, message), message
    assert "fit trains" not in message and "smaller lr" not in message


def test_the_sample_rule_holds_in_classification_too(registered):
    registered(NumpySample)
    with pytest.raises(ua.PosteriorCheckError, match=r"_sample\(n, generator\) returns .*\[n, D\] \(here \[3, 59\]\)"
                                                     r".*params: a numpy ndarray"):
        ua.check_posterior(NumpySample.name, likelihoods=("categorical",))


def test_the_check_command_shows_the_sample_rule_with_its_brackets(registered, capsys):
    registered(NaNSample)
    assert main(["check", NaNSample.name, "--likelihood", "gaussian"]) == 1
    out = one_line(capsys.readouterr().out)
    assert "_sample(n, generator) returns" in out and "[n, D]" in out and "holds NaN or inf" in out


# ------------------------------------------------------------------ defect 2: plugins that fail to import
BROKEN = 'raise ImportError("needs libfoo")\n'
HALF = ('import uncertain_agents as ua\n'
        'from uncertain_agents.posteriors.mfvi import MeanFieldVI\n'
        '@ua.register_posterior("test-half-plugin")\n'
        'class Half(MeanFieldVI):\n'
        '    name = "test-half-plugin"\n'
        'raise ImportError("needs libbar")\n')
FIXED = HALF.replace('raise ImportError("needs libbar")\n', "")


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """``plugins({"entry-name": source})``: those modules installed as posterior plugins, and the
    posterior registry set to import them again at its next lookup (restored afterwards)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    modules = []

    def install(sources: dict[str, str]) -> None:
        entries = []
        for entry_name, source in sources.items():
            module = "ua_test_plugin_" + entry_name.replace("-", "_")
            (tmp_path / f"{module}.py").write_text(source)
            modules.append(module)
            entries.append(metadata.EntryPoint(name=entry_name, value=module, group=registry.PLUGIN_GROUP))
        importlib.invalidate_caches()
        monkeypatch.setattr(registry.metadata, "entry_points",
                            lambda *, group: entries if group == registry.PLUGIN_GROUP else [])
        monkeypatch.setattr(POSTERIORS, "_load", registry._import_posteriors)
        monkeypatch.setattr(POSTERIORS, "_load_error", None)

    yield install
    for module in modules:
        sys.modules.pop(module, None)
    if "test-half-plugin" in POSTERIORS.loaded_names():
        ua.unregister_posterior("test-half-plugin")


def test_a_broken_plugin_is_one_error_line_with_exit_code_2(plugins, capsys):
    plugins({"badone": BROKEN})
    assert main(["list"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: posterior plugin 'badone' (ua_test_plugin_badone, entry-point group "
                               "'uncertain_agents.posteriors') failed to import: ImportError: needs libfoo")


def test_names_a_broken_plugin_does_not_provide_still_work(plugins, tmp_path, capsys):
    plugins({"badone": BROKEN})
    post = ua.make_posterior("mfvi", in_dim=3, out_dim=1, hidden=(4,), seed=0)
    assert isinstance(post, MeanFieldVI)
    post.save(tmp_path / "mfvi.pt")                       # a saved built-in loads, too
    assert isinstance(ua.load_posterior(tmp_path / "mfvi.pt"), MeanFieldVI)
    assert "vi" in POSTERIORS and ua.registry.resolve_name("VI") == "mfvi"
    with pytest.raises(PluginImportError, match=r"unknown posterior 'badone', perhaps one a broken plugin "
                                                r"provides: posterior plugin 'badone' .*needs libfoo") as err:
        ua.make_posterior("badone", in_dim=3, out_dim=1)
    assert isinstance(err.value, ImportError) and set(err.value.failures) == {"badone"}
    with pytest.raises(ImportError, match="posterior plugin 'badone'"):
        ua.available_posteriors()  # the full list is not known
    out = str(tmp_path / "run")
    assert main(["bandit", "wheel", "--agent", "linear", "--steps", "12", "--trials", "1", "--out", out]) == 0
    capsys.readouterr()
    assert main(["bandit", "wheel", "--agent", "thompson", "--posterior", "badone", "--steps", "12",
                 "--trials", "1", "--out", str(tmp_path / "run2")]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and "unknown posterior 'badone', perhaps one a broken plugin provides" in err_lines[0]


def test_every_plugin_is_tried_and_a_half_imported_one_registers_nothing(plugins):
    plugins({"half": HALF, "badone": BROKEN})
    for _ in range(2):  # tried again: the half plugin's name is free again, so the same error
        with pytest.raises(PluginImportError) as err:
            registry.import_posterior_plugins()
        assert list(err.value.failures) == ["half", "badone"]
        assert "ImportError: needs libbar" in str(err.value) and "ImportError: needs libfoo" in str(err.value)
        assert "registered twice" not in str(err.value) and "\n" not in str(err.value)
        assert "test-half-plugin" not in POSTERIORS.loaded_names()


def test_a_plugin_fixed_after_its_failure_is_imported_by_the_next_lookup(plugins, tmp_path):
    plugins({"half": HALF})
    with pytest.raises(PluginImportError, match="needs libbar"):
        ua.available_posteriors()
    assert "mfvi" in POSTERIORS  # answered from what loaded, not tried again
    (tmp_path / "ua_test_plugin_half.py").write_text(FIXED)
    importlib.invalidate_caches()
    assert "test-half-plugin" in ua.available_posteriors()
    assert POSTERIORS._load_error is None


def test_check_without_names_reports_a_broken_plugin_as_a_row_and_checks_the_rest(plugins, monkeypatch, capsys):
    import uncertain_agents.checks

    plugins({"badone": BROKEN})
    checked = []
    monkeypatch.setattr(uncertain_agents.checks, "check_posterior", lambda name, **kw: checked.append(name))
    assert main(["check", "--likelihood", "gaussian"]) == 1
    out = one_line(capsys.readouterr().out)
    assert "plugin badone" in out and "failed to import: ImportError: needs libfoo" in out
    assert checked == POSTERIORS.loaded_names() and "mfvi" in checked
    assert out.count("keeps every rule") == len(checked)


def test_a_registry_whose_load_fails_keeps_what_it_registered():
    calls = []

    def load():
        calls.append(1)
        if "circle" not in reg.loaded_names():
            reg.register("circle")(object)
        raise PluginImportError("plugin 'shapes' failed to import: ImportError: no", {"shapes": "no"})

    reg = Registry("shape", load=load)
    assert reg.resolve("circle") == "circle" and "circle" in reg  # the first lookup already
    assert len(calls) == 1  # a registered name is answered without trying the load again
    with pytest.raises(PluginImportError, match="unknown shape 'square', perhaps one a broken plugin provides"):
        reg.resolve("square")
    assert len(calls) == 2
    assert reg.loaded_names() == ["circle"]
