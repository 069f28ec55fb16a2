"""Bandit environments: gymnasium conformance, definitions (seeded Monte Carlo), bad input."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs
from envs.wheel import MEANS, quadrant_arm
from uncertain_agents.datasets import ChecksumError, DataNotFoundError
from uncertain_agents.datasets.mushroom import SHA256, load_mushroom, parse_mushroom

from bandit_helpers import one_thread, write_tiny_mushroom  # noqa: F401  (autouse fixture)



@pytest.fixture
def mushroom_dir(tmp_path):
    return write_tiny_mushroom(tmp_path)


def _classification_env(**kw):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 4))
    y = np.arange(60) % 3
    return gym.make("envs:ClassificationBandit-v0", x=x, y=y, **kw)


def _all_envs(mushroom_dir):
    return {"wheel": gym.make("envs:WheelBandit-v0", delta=0.7),
            "mushroom": gym.make("envs:MushroomBandit-v0", data_dir=mushroom_dir, download=False),
            "classification": _classification_env()}


def test_check_env_passes_for_all_three(mushroom_dir):
    for name, env in _all_envs(mushroom_dir).items():
        check_env(env.unwrapped, skip_render_check=True)
        assert env.spec.id.endswith("Bandit-v0"), name


def test_render_mode_none_is_accepted_and_others_are_refused(mushroom_dir):
    """gymnasium passes ``render_mode`` to every environment; these have nothing to render."""
    ids = {"wheel": ("envs:WheelBandit-v0", {}),
           "mushroom": ("envs:MushroomBandit-v0", {"data_dir": mushroom_dir, "download": False}),
           "classification": ("envs:ClassificationBandit-v0",
                              {"x": np.eye(3, dtype=np.float32), "y": np.arange(3)})}
    for env_id, kw in ids.values():
        env = gym.make(env_id, render_mode=None, **kw)
        env.reset(seed=0)
        assert env.unwrapped.render_mode is None and env.render() is None
        with pytest.warns(UserWarning, match="render_modes"), \
                pytest.raises(ValueError, match="render_mode: .* has no rendering"):
            gym.make(env_id, render_mode="rgb_array", **kw)


def _play(env, actions, seed):
    obs, _ = env.reset(seed=seed)
    out = []
    for a in actions:
        nxt, r, term, trunc, info = env.step(int(a))
        out.append((obs, r, info))
        obs = nxt
    return out


def test_same_seed_same_rounds_whatever_the_actions(mushroom_dir):
    for env in _all_envs(mushroom_dir).values():
        n = env.action_space.n
        a = _play(env, np.zeros(300, int), seed=3)
        b = _play(env, np.arange(300) % n, seed=3)
        c = _play(env, np.zeros(300, int), seed=4)
        assert all(np.array_equal(p[0], q[0]) for p, q in zip(a, b))
        assert all(np.array_equal(p[2]["expected_rewards"], q[2]["expected_rewards"]) for p, q in zip(a, b))
        assert [p[1] for p in a] == [q[1] for q in _play(env, np.zeros(300, int), seed=3)]
        assert not all(np.array_equal(p[0], q[0]) for p, q in zip(a, c))


def test_info_describes_the_decision_just_made():
    env = gym.make("envs:WheelBandit-v0", delta=0.5)
    obs, _ = env.reset(seed=0)
    for t in range(50):
        nxt, r, term, trunc, info = env.step(t % 5)
        assert np.array_equal(info["context"], obs)
        assert info["action"] == t % 5
        assert info["optimal_expected_reward"] == info["expected_rewards"].max()
        assert info["regret"] == pytest.approx(info["optimal_expected_reward"] - r)
        obs = nxt


def test_horizon_terminates():
    env = gym.make("envs:WheelBandit-v0", horizon=5)
    env.reset(seed=0)
    flags = [env.step(0)[2] for _ in range(5)]
    assert flags == [False] * 4 + [True]


def test_wheel_contexts_uniform_in_disc_and_arm_rule():
    delta = 0.7
    env = envs.WheelBandit(delta=delta, horizon=100_000)
    env.reset(seed=1)
    ctx, _, expected = env._draw_block(40_000)
    r2 = np.square(ctx.astype(np.float64)).sum(1)
    assert r2.max() <= 1.0 + 1e-6
    assert r2.mean() == pytest.approx(0.5, abs=0.01)            # E‖x‖² = 1/2 in the unit disc
    outer = r2 >= delta ** 2
    assert outer.mean() == pytest.approx(1 - delta ** 2, abs=0.01)
    for q, signs in enumerate([(1, 1), (1, -1), (-1, 1), (-1, -1)]):
        in_q = (np.sign(ctx[:, 0]) == signs[0]) & (np.sign(ctx[:, 1]) == signs[1])
        assert (quadrant_arm(ctx[in_q]) == q).all()
        assert in_q.mean() == pytest.approx(0.25, abs=0.01)
        big = expected[in_q & outer]
        assert (big[:, q] == 50).all() and (np.delete(big, q, axis=1) == MEANS[np.arange(5) != q]).all()
    assert (expected[~outer] == MEANS).all()
    assert (np.argmax(expected[~outer], 1) == 4).all()


def test_wheel_reward_distribution_matches_definition():
    env = envs.WheelBandit(delta=0.5, horizon=100_000)
    env.reset(seed=2)
    _, rewards, expected = env._draw_block(40_000)
    large = expected == 50
    for arm in range(5):
        small = rewards[~large[:, arm], arm]
        assert small.mean() == pytest.approx(MEANS[arm], abs=0.002)
        assert small.std() == pytest.approx(0.05, rel=0.03)
    big = rewards[large]
    assert big.mean() == pytest.approx(50, abs=0.001) and big.std() == pytest.approx(0.01, rel=0.05)


@pytest.mark.parametrize("delta", [0.5, 0.95])
def test_wheel_uniform_regret_analytic_equals_simulation(delta):
    from uncertain_agents.agents import Uniform, run_bandit

    env = gym.make("envs:WheelBandit-v0", delta=delta)
    frame = run_bandit(env, Uniform(5, context_dim=2, seed=0), steps=40_000, seed=5)
    analytic = envs.uniform_expected_regret(delta)
    se = frame["regret"].std() / np.sqrt(len(frame))
    assert abs(frame["regret"].mean() - analytic) < 4 * se
    assert abs(frame["expected_regret"].mean() - analytic) < 4 * se


def test_mushroom_file_encoding(mushroom_dir):
    data = load_mushroom(mushroom_dir, download=False)
    lines = (mushroom_dir / "mushroom" / "agaricus-lepiota.data").read_text().split()
    table = np.array([l.split(",") for l in lines])
    assert data.contexts.shape[1] == sum(len(set(table[:, j])) for j in range(1, 23))
    assert (data.contexts.sum(1) == 22).all()                    # one value per attribute
    assert np.array_equal(data.edible, table[:, 0] == "e")
    assert any(name == "stalk-root=?" for name in data.feature_names)


def test_mushroom_rewards_match_definition(mushroom_dir):
    env = envs.MushroomBandit(mushroom_dir, download=False, horizon=100_000)
    env.reset(seed=0)
    ctx, rewards, expected = env._draw_block(40_000)
    data = env.data
    rows = {tuple(c): i for i, c in enumerate(data.contexts)}
    edible = data.edible[[rows[tuple(c)] for c in ctx]]
    assert (rewards[:, 0] == 0).all()
    assert (rewards[edible, 1] == 5).all()
    poison = rewards[~edible, 1]
    assert set(np.unique(poison)) == {-35.0, 5.0}
    p_bad = (poison == -35).mean()
    assert abs(p_bad - 0.5) < 4 * np.sqrt(0.25 / poison.size)
    assert (expected[edible] == [0, 5]).all() and (expected[~edible] == [0, -15]).all()
    assert (expected.max(1) == np.where(edible, 5, 0)).all()
    counts = np.bincount([rows[tuple(c)] for c in ctx], minlength=len(data.edible))
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()   # uniform rows


@pytest.mark.data
def test_real_mushroom_file_when_available():
    from uncertain_agents.datasets import data_dir
    path = data_dir() / "mushroom" / "agaricus-lepiota.data"
    if not path.is_file():
        pytest.skip("real data folder not available")
    data = load_mushroom(download=False, sha256=SHA256)
    assert data.contexts.shape == (8124, 117) and int(data.edible.sum()) == 4208


def test_mushroom_missing_file_and_bad_checksum(tmp_path):
    with pytest.raises(DataNotFoundError, match="agaricus-lepiota.data"):
        load_mushroom(tmp_path / "empty", download=False)
    with pytest.raises(DataNotFoundError, match="agaricus-lepiota.data"):
        gym.make("envs:MushroomBandit-v0", data_dir=tmp_path / "empty", download=False)
    folder = write_tiny_mushroom(tmp_path / "bad", with_sums=False)
    with pytest.raises(ChecksumError):
        load_mushroom(folder, download=False)                    # the original file's checksum
    with pytest.raises(ChecksumError):
        load_mushroom(folder, download=False, sha256="0" * 64)
    assert load_mushroom(folder, download=False, sha256=None).contexts.shape[0] == 40


def test_mushroom_parser_rejects_bad_rows(tmp_path):
    path = tmp_path / "bad.data"
    path.write_text("e,x,s\n")
    with pytest.raises(ValueError, match="fields"):
        parse_mushroom(path)


def test_bad_actions_and_arguments(mushroom_dir):
    for env in _all_envs(mushroom_dir).values():
        env.reset(seed=0)
        n = env.action_space.n
        with pytest.raises(ValueError, match="action"):
            env.unwrapped.step(n)
        with pytest.raises(ValueError, match="action"):
            env.unwrapped.step(-1)
        with pytest.raises(TypeError, match="action"):
            env.unwrapped.step(0.5)
    with pytest.raises(gym.error.ResetNeeded):
        envs.WheelBandit().step(0)
    for delta in (0.0, 1.0, -0.2, "0.5"):
        with pytest.raises(ValueError, match="delta"):
            envs.WheelBandit(delta=delta)
    with pytest.raises(ValueError, match="horizon"):
        envs.WheelBandit(horizon=0)
    with pytest.raises(ValueError, match="y"):
        envs.ClassificationBandit(np.zeros((5, 2)), np.array([0, 1, 2, 0]))
    with pytest.raises(ValueError, match="x"):
        envs.ClassificationBandit(np.zeros(5), np.zeros(5, int))


def test_peek_and_play_give_the_rounds_step_gives_one_by_one(mushroom_dir):
    """Windows of decisions read ahead and played in one call (across block boundaries and up to
    the horizon) are the rounds step() gives: same contexts, rewards, expectations, optimum."""
    for name, env in _all_envs(mushroom_dir).items():
        base = env.unwrapped
        horizon = 700
        base.horizon = horizon
        actions = np.random.default_rng(1).integers(base.n_actions, size=horizon)
        one_by_one = _play(base, actions, seed=5)
        base.reset(seed=5)
        t, windows = 0, [1, 37, 218, 256, 3, 185]  # crosses the 256-round blocks; ends at the horizon
        for w in windows:
            contexts = base.peek_contexts(w)
            assert np.array_equal(base.peek_contexts(w), contexts)  # reading ahead takes nothing
            played = base.play(actions[t:t + w])
            for i in range(w):
                obs, reward, info = one_by_one[t + i]
                assert np.array_equal(contexts[i], obs), name
                assert played.rewards[i] == reward
                assert played.expected_rewards[i] == info["expected_reward"]
                assert played.optimal_expected_rewards[i] == info["optimal_expected_reward"]
                assert played.optimal_actions[i] == info["optimal_action"]
            t += w
            assert played.terminated == (t == horizon) and base.t == t
        assert base.episode_over
        with pytest.raises(gym.error.ResetNeeded):
            base.play([0])


def test_peek_and_play_check_their_arguments():
    env = envs.WheelBandit(delta=0.5, horizon=10)
    with pytest.raises(gym.error.ResetNeeded):
        env.peek_contexts(1)
    env.reset(seed=0)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            env.peek_contexts(bad)
    with pytest.raises(ValueError, match="11 is more than the 10 decisions left"):
        env.peek_contexts(11)
    with pytest.raises(ValueError, match="action space"):
        env.play([0, 5])
    with pytest.raises(ValueError, match="integer arm indices"):
        env.play([0.0, 1.0])
    with pytest.raises(ValueError, match="integer arm indices"):
        env.play([])
    env.play(np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="more than the 6 decisions left"):
        env.play(np.zeros(7, dtype=np.int64))
    assert env.t == 4
