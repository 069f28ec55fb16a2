"""The one ``Registry`` class, and the three registries built on it (posteriors, agents, environments)."""
import subprocess
import sys

import pytest

from uncertain_agents.agents.experiment import ENVS, make_env, resolve_env
from uncertain_agents.agents.factory import AGENTS, POSTERIOR_AGENTS, make_agent, resolve_agent
from uncertain_agents.registry import (POSTERIORS, Registry, available_posteriors, posterior_class, register,
                                       resolve_name)


@pytest.fixture
def shapes() -> Registry:
    reg = Registry("shape")

    @reg.register("circle", "round", "Disc ")
    class Circle:
        pass

    reg.register("square")(tuple)
    return reg


def test_register_as_decorator_or_call_and_look_up(shapes):
    assert shapes.names() == ["circle", "square"] == list(shapes)
    assert shapes.get("square") is tuple
    assert shapes.get("circle").__name__ == "Circle"
    assert shapes.resolve(" ROUND ") == shapes.resolve("disc") == shapes.resolve("circle") == "circle"
    assert shapes.aliases("circle") == shapes.aliases("round") == ["disc", "round"]
    assert shapes.aliases("square") == []
    assert shapes.alias_table() == {"round": "circle", "disc": "circle"}
    assert "Round" in shapes and "square" in shapes
    assert "triangle" not in shapes and 3 not in shapes
    assert "circle" in repr(shapes)


def test_alias_table_is_a_copy(shapes):
    shapes.alias_table()["oval"] = "circle"
    assert "oval" not in shapes


def test_the_decorator_returns_the_object():
    reg = Registry("thing")

    def build():
        return 1

    assert reg.register("thing")(build) is build


@pytest.mark.parametrize("name, aliases", [
    ("circle", ()),          # a name registered twice
    ("oval", ("round",)),    # an alias taken by another name
    ("round", ()),           # a name that is an alias already
    ("SQUARE", ()),          # names are case-insensitive
    ("oval", ("oval",)),     # a name that is its own alias
    ("oval", ("o", "o")),    # an alias given twice
])
def test_duplicate_registration_is_an_error(shapes, name, aliases):
    before = (shapes.names(), shapes.alias_table())
    with pytest.raises(ValueError, match="shape name.*registered twice"):
        shapes.register(name, *aliases)(object)
    assert (shapes.names(), shapes.alias_table()) == before


def test_unknown_name_lists_names_and_aliases(shapes):
    with pytest.raises(ValueError, match=r"unknown shape 'hexagon'; valid names: circle, square "
                                         r"\(aliases: disc, round\)"):
        shapes.resolve("hexagon")
    with pytest.raises(ValueError, match="unknown shape 'hexagon'"):
        shapes.get("hexagon")
    with pytest.raises(ValueError, match="unknown shape 'hexagon'"):
        shapes.aliases("hexagon")
    with pytest.raises(TypeError, match="shape name must be a string, got int"):
        shapes.resolve(3)


def test_unknown_name_without_aliases_mentions_none():
    reg = Registry("colour")
    reg.register("red")(1)
    with pytest.raises(ValueError) as err:
        reg.resolve("blue")
    assert str(err.value) == "unknown colour 'blue'; valid names: red"


def test_load_runs_once_before_the_first_lookup():
    calls = []
    reg = Registry("plugin", load=lambda: calls.append(reg.register("late", "l")(object)))
    reg.register("early")(int)
    assert calls == []  # registering does not load
    assert reg.resolve("l") == "late"
    assert "late" in reg.names() and "early" in reg
    assert len(calls) == 1


# ------------------------------------------------------------------ the library's registries
def test_posteriors_agents_and_environments_share_the_one_class():
    for reg in (POSTERIORS, AGENTS, ENVS):
        assert type(reg) is Registry
    assert {"mfvi", "bb-alpha", "fsvgd"} <= set(POSTERIORS.names())
    assert AGENTS.names() == ["greedy", "linear", "neural-linear", "thompson", "uniform"]
    assert ENVS.names() == ["mushroom", "wheel"]
    assert set(POSTERIOR_AGENTS) <= set(AGENTS.names())


def test_aliases_are_public():
    assert {"vi", "bbb"} <= set(POSTERIORS.aliases("mfvi"))
    assert POSTERIORS.alias_table()["fpovi"] == "fsvgd"
    assert {"ts", "thompson-sampling"} <= set(AGENTS.aliases("thompson"))
    assert AGENTS.alias_table()["random"] == "uniform"
    assert ENVS.aliases("wheel") == ["envs:wheelbandit-v0", "wheelbandit-v0"]
    assert available_posteriors(include_aliases=True) == sorted(POSTERIORS.names()
                                                                + list(POSTERIORS.alias_table()))


def test_public_lookups_are_the_registries():
    assert register == POSTERIORS.register
    assert resolve_name("VI") == "mfvi" and posterior_class("bbb") is POSTERIORS.get("mfvi")
    assert resolve_agent("TS") == "thompson" and resolve_agent("linfullpost") == "linear"
    assert resolve_env("envs:MushroomBandit-v0") == "mushroom"
    assert type(make_agent("random", n_actions=3, context_dim=2)).__name__ == "Uniform"
    assert type(make_env("WheelBandit-v0", steps=5)).__name__ == "WheelBandit"


def test_library_error_messages():
    with pytest.raises(ValueError, match="unknown posterior 'nope'; valid names: .*mfvi.*aliases: .*bbb"):
        resolve_name("nope")
    with pytest.raises(ValueError, match="unknown agent 'sarsa'; valid names: .*thompson.*aliases: .*ts"):
        make_agent("sarsa", n_actions=3, context_dim=2)
    with pytest.raises(ValueError, match="unknown bandit environment 'cartpole'; valid names: mushroom, wheel"):
        make_env("cartpole", steps=5)
    with pytest.raises(ValueError, match="agent 'thompson' needs a posterior name"):
        make_agent("ts", n_actions=3, context_dim=2)


def test_environment_lookups_do_not_import_envs():
    code = ("import sys; from uncertain_agents.agents.experiment import ENVS; "
            "ENVS.resolve('wheel'); ENVS.get('mushroom'); ENVS.aliases('wheel'); "
            "print('envs' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_list_command_shows_aliases(capsys):
    from uncertain_agents.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mfvi" in out and "bbb" in out and "fpovi" in out


def test_options_a_method_fixes_are_not_listed_and_their_error_says_why():
    import uncertain_agents as ua
    from uncertain_agents.registry import method_options

    assert "n_members" not in method_options("map") and "n_members" in method_options("ensemble")
    assert "alpha" not in method_options("avb") and "alpha" in method_options("aadm")
    with pytest.raises(TypeError, match="use 'ensemble'"):
        ua.make_posterior("map", in_dim=2, out_dim=1, n_members=3)
    with pytest.raises(TypeError, match="use 'aadm'"):
        ua.make_posterior("avb", in_dim=2, out_dim=1, alpha=0.5)
