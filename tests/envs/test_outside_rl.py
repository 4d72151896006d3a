"""Conductor-v0 as outside RL code sees it: numpy actions, TimeLimit, close, render, vector envs, SB3."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import InvalidAction

import puppeteer  # noqa: F401  (registers Conductor-v0)
from puppeteer.backends.base import BackendRegistry, Router
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.wrappers import EncodedObservation, make_encoded_env
from puppeteer.tasks.signals import SIGNAL_NAMES
from puppeteer.types import Task

pytestmark = pytest.mark.integration

UNICODE_TASK = Task(
    id="u/0",
    question="Combien font 2×3 ? — «π≈3.14» 中文 ünïcode",
    answer="6",
    suite="u",
    domain="arith",
    grader="numeric",
)


def _env(**kw) -> ConductorEnv:
    return ConductorEnv(mode="step", pool="sim-paper", suite="arith", split="train", **kw)


# --------------------------------------------------------------------------- actions


@pytest.mark.parametrize("action", [np.int64(2), np.array(2), np.array(2, dtype=np.int32), np.uint8(2), 2])
def test_numpy_integer_and_0d_array_actions_are_accepted(action) -> None:
    env = _env()
    env.reset(seed=0)
    assert env.action_space.contains(action)
    _, _, terminated, _, info = env.step(action)
    assert not terminated and info["step"].agent_id == 2


@pytest.mark.parametrize("action", [2.0, np.array([2, 3]), np.array(2.0), True, "2"])
def test_actions_the_space_rejects_are_invalid(action) -> None:
    env = _env()
    env.reset(seed=0)
    with pytest.raises(InvalidAction):
        env.step(action)


def test_model_predict_output_drives_the_env_to_the_end() -> None:
    env = _env(max_steps=3)
    env.reset(seed=1)
    for _ in range(3):
        _, _, terminated, truncated, info = env.step(np.array(0))  # what model.predict returns
    assert terminated and not truncated and info["terminated_by"] == "max_steps"


# --------------------------------------------------------------------------- truncation


def test_a_time_limit_truncated_episode_is_graded_like_a_terminated_one() -> None:
    env = gym.make("Conductor-v0", pool="sim-paper", suite="arith", max_steps=5, max_episode_steps=2)
    env.reset(seed=3)
    env.step(0)
    _, _, terminated, truncated, info = env.step(1)
    assert truncated and not terminated
    traj = info["trajectory"]
    assert len(traj.steps) == 2 and traj.final_answer == info["final_answer"]
    assert isinstance(info["correct"], bool) and traj.correct == info["correct"]
    # the same two actions ended by the Terminator give the same answer and grade
    ref = _env(max_steps=5)
    ref.reset(seed=3)
    ref.step(0)
    ref.step(1)
    *_, ref_info = ref.step(ref.pool.terminator_id)
    assert ref_info["correct"] == info["correct"] and ref_info["final_answer"] == info["final_answer"]
    assert [s.answer for s in ref_info["trajectory"].steps] == [s.answer for s in traj.steps]


def test_max_steps_above_the_time_limit_does_not_truncate() -> None:
    env = gym.make("Conductor-v0", pool="sim-paper", suite="arith", max_steps=2, max_episode_steps=10)
    env.reset(seed=0)
    env.step(0)
    _, _, terminated, truncated, info = env.step(0)
    assert terminated and not truncated and info["terminated_by"] == "max_steps"


# --------------------------------------------------------------------------- close and render


class _Closable:
    name = "sim"

    def __init__(self, inner) -> None:
        self.inner_backend = inner
        self.closed = 0

    def complete(self, request):
        return self.inner_backend.complete(request)

    async def acomplete(self, request):
        return await self.inner_backend.acomplete(request)

    def close(self) -> None:
        self.closed += 1


def test_close_releases_the_backends_the_env_created(monkeypatch: pytest.MonkeyPatch) -> None:
    import puppeteer.envs.parts as envparts_module
    from puppeteer.backends import default_registry

    created: list[_Closable] = []

    def fake_router(options, cache=None, **_):
        registry = BackendRegistry()
        real = default_registry()

        def sim(**kw):
            created.append(_Closable(real.create("sim", **kw)))
            return created[-1]

        registry.register("sim", sim)
        return Router(registry, options)

    monkeypatch.setattr(envparts_module, "make_router", fake_router)
    env = _env()
    env.reset(seed=0)
    env.step(0)
    clone = env.clone()
    clone.close()  # a clone shares the backend: closing it must not close the original's
    assert created[0].closed == 0
    env.close()
    assert created[0].closed == 1
    env.reset(seed=0)  # a closed env recreates its backends on the next call
    env.step(0)
    assert len(created) == 2


def test_close_leaves_a_passed_in_backend_open() -> None:
    from puppeteer.agents.pool import load_pool
    from puppeteer.backends import make_router
    from puppeteer.envs.build import sim_answer_key
    from puppeteer.tasks import load_suite

    tasks = load_suite("arith", "train", n=4)
    options = {k: dict(v) for k, v in load_pool("sim-paper").backend_options.items()}
    options["sim"]["answer_key"] = sim_answer_key(tasks)
    backend = _Closable(make_router(options))
    env = ConductorEnv(pool="sim-paper", tasks=tasks, backend=backend)
    env.close()
    assert backend.closed == 0


def test_human_render_writes_each_step(capsys: pytest.CaptureFixture[str]) -> None:
    env = gym.make("Conductor-v0", pool="sim-paper", suite="arith", render_mode="human", max_steps=3)
    env.reset(seed=0)
    first = capsys.readouterr().out
    assert first.startswith("Task ") and first.count("\n") == 1
    env.step(0)
    assert capsys.readouterr().out.strip().startswith("[1] ")
    env.step(1)
    out = capsys.readouterr().out
    assert out.strip().startswith("[2] ") and "[1]" not in out
    env.step(env.unwrapped.pool.terminator_id)
    assert "final answer=" in capsys.readouterr().out


# --------------------------------------------------------------------------- vector envs


def test_async_vector_env_in_step_mode_keeps_unicode_text() -> None:
    envs = gym.make_vec(
        "Conductor-v0",
        num_envs=2,
        vectorization_mode="async",
        pool="sim-paper",
        tasks=[UNICODE_TASK],
        max_steps=2,
    )
    try:
        obs, _ = envs.reset(seed=0)
        assert obs["task"] == (UNICODE_TASK.question, UNICODE_TASK.question)
        assert obs["mask"].shape == (2, envs.single_action_space.n)
        obs, _, terminated, truncated, info = envs.step(np.array([0, 1]))
        assert obs["step"].tolist() == [1, 1] and "] " in obs["state"][0]
        obs, _, terminated, truncated, info = envs.step(np.array([0, 1]))
        assert terminated.all() and not truncated.any()
        assert info["final_answer"].shape == (2,) and set(info["correct"].tolist()) <= {True, False}
    finally:
        envs.close()


def test_async_vector_env_in_workflow_mode() -> None:
    envs = gym.make_vec(
        "Conductor-v0",
        num_envs=2,
        vectorization_mode="async",
        mode="workflow",
        pool="sim-paper",
        tasks=[UNICODE_TASK],
    )
    try:
        obs, _ = envs.reset(seed=0)
        assert "model_id" in obs["prompt"][0] and obs["task"][1] == UNICODE_TASK.question
        plan = 'model_id = [0]\nsubtasks = ["Solve the problem."]\naccess_list = [[]]'
        _, rewards, terminated, _, info = envs.step((plan, "not a workflow"))
        assert terminated.all()
        assert rewards[1] == 0.0 and info["parse_error"][1] and info["parse_error"][0] is None
        assert rewards[0] in (0.5, 1.0)
    finally:
        envs.close()


# --------------------------------------------------------------------------- the encoded observation


def test_encoded_observation_is_a_box_with_masks_through_wrappers() -> None:
    env = make_encoded_env("hashing", pool="sim-paper", suite="arith", max_steps=3)
    stacked = gym.wrappers.RecordEpisodeStatistics(env)
    obs, _ = stacked.reset(seed=0)
    assert stacked.observation_space.contains(obs) and obs.shape == env.observation_space.shape
    n = env.unwrapped.pool.n_actions
    assert obs.shape == (2 * 256 + 2 * n + 3 + 1,)
    mask = stacked.get_wrapper_attr("action_masks")()
    assert mask.dtype == bool and mask.shape == (n,) and mask.all()
    obs2, *_ = stacked.step(np.int64(0))
    assert not np.array_equal(obs, obs2)  # the transcript, step and counts changed
    assert env.encoder.encoder.hits + env.encoder.encoder.misses > 0


def test_encoded_observation_can_end_in_the_answer_signals() -> None:
    plain = make_encoded_env("hashing", pool="sim-paper", suite="arith", max_steps=3)
    env = make_encoded_env("hashing", pool="sim-paper", suite="arith", max_steps=3, signals=True)
    assert env.observation_space.shape == (plain.observation_space.shape[0] + len(SIGNAL_NAMES),)
    first, _ = env.reset(seed=0)
    plain_first, _ = plain.reset(seed=0)
    np.testing.assert_array_equal(first[: plain_first.shape[0]], plain_first)  # same layout before them
    assert not first[plain_first.shape[0] :].any()  # nobody has answered yet
    obs, *_ = env.step(np.int64(0))
    raw = env.unwrapped._obs()
    np.testing.assert_array_equal(obs[-len(SIGNAL_NAMES) :], raw["signals"])
    assert obs[-len(SIGNAL_NAMES) + SIGNAL_NAMES.index("last_answered")] == 1.0  # the sim agent answered


def test_an_sb3_policy_directory_remembers_the_signals(tmp_path) -> None:
    """An untrained MaskablePPO on the signal-carrying observation, saved and loaded as ``sb3:DIR``:
    the loaded encoder builds the observation the model was made for, and the policy runs."""
    pytest.importorskip("sb3_contrib")
    from sb3_contrib import MaskablePPO

    from puppeteer.policies.external import load_sb3, save_sb3

    env = make_encoded_env("hashing", pool="sim-paper", suite="arith", max_steps=3, signals=True)
    model = MaskablePPO("MlpPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu")
    pool = env.unwrapped.pool
    save_sb3(model, tmp_path, pool, "hashing", 3, signals=True)
    assert json.loads((tmp_path / "puppeteer.json").read_text())["signals"] is True
    policy = load_sb3(tmp_path, pool)
    assert policy.encoder.signals and policy.encoder.dim == env.observation_space.shape[0]
    raw = ConductorEnv(mode="step", pool=pool, suite="arith", max_steps=3)
    obs, _ = raw.reset(seed=0)
    assert 0 <= policy.act(obs, np.random.default_rng(0)) < pool.n_actions


def test_encoded_observation_refuses_workflow_mode() -> None:
    with pytest.raises(ValueError, match="step"):
        EncodedObservation(gym.make("Conductor-v0", mode="workflow", pool="sim-paper", suite="arith"))


def test_sb3_env_checker_accepts_the_wrapped_env() -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_checker import check_env

    check_env(make_encoded_env("hashing", pool="sim-paper", suite="arith"), warn=False)


@pytest.mark.slow
def test_maskable_ppo_beats_random_routing_on_the_sim_pool(tmp_path) -> None:
    pytest.importorskip("sb3_contrib")
    from puppeteer.train.sb3 import MaskablePPOConfig, train_maskable_ppo

    report = train_maskable_ppo(MaskablePPOConfig(suite="mix-paper", steps=4096), tmp_path)
    assert report.trained.n == report.random.n == 150  # the whole test split
    assert report.trained.accuracy > report.random.accuracy + 0.03
    # the saved model is a policy spec like any other
    from puppeteer.evaluation.evaluate import evaluate_policy

    again = evaluate_policy(f"sb3:{tmp_path / 'model'}", "sim-paper", "mix-paper", progress=False)
    assert again.accuracy == report.trained.accuracy


def test_an_sb3_policy_loads_without_unpickling_and_predicts_like_the_model(tmp_path) -> None:
    """Issue 33: SB3's ``load`` unpickles model.zip's ``data`` (cloudpickle), so a crafted ``sb3:DIR``
    ran code. The loader builds the network anew and reads only its tensors: a pickle planted in the
    zip never runs, and the loaded network acts exactly as the saved model."""
    pytest.importorskip("sb3_contrib")
    import base64
    import pickle
    import zipfile

    from sb3_contrib import MaskablePPO

    from puppeteer.policies.external import load_sb3, save_sb3

    env = make_encoded_env("hashing", pool="sim-paper", suite="arith", max_steps=3)
    model = MaskablePPO("MlpPolicy", env, n_steps=16, batch_size=16, seed=0, device="cpu")
    model.learn(32)
    pool = env.unwrapped.pool
    save_sb3(model, tmp_path / "ok", pool, "hashing", 3)
    policy = load_sb3(tmp_path / "ok", pool)
    raw = ConductorEnv(mode="step", pool=pool, suite="arith", max_steps=3)
    for seed in range(5):
        obs, _ = raw.reset(seed=seed)
        x = policy.encoder(obs)
        want, _ = model.predict(x, deterministic=True, action_masks=np.asarray(obs["mask"], dtype=bool))
        assert policy.act(obs, np.random.default_rng(0)) == int(want)

    class Planted:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "puppeteer.json").write_text((tmp_path / "ok" / "puppeteer.json").read_text())
    with (
        zipfile.ZipFile(tmp_path / "ok" / "model.zip") as src,
        zipfile.ZipFile(evil / "model.zip", "w") as dst,
    ):
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "data":
                doc = json.loads(data)
                payload = base64.b64encode(pickle.dumps(Planted())).decode()
                doc["observation_space"] = {":type:": "x", ":serialized:": payload}
                data = json.dumps(doc).encode()
            dst.writestr(item, data)
    evil_policy = load_sb3(evil, pool)  # the planted pickle sits in an entry the loader never unpickles
    assert not (tmp_path / "pwned").exists()
    obs, _ = raw.reset(seed=0)
    assert evil_policy.act(obs, np.random.default_rng(0)) == policy.act(obs, np.random.default_rng(0))
    # pickled network settings are refused in one line instead of being unpickled
    doc = json.loads(zipfile.ZipFile(evil / "model.zip").read("data"))
    doc["policy_kwargs"] = {
        ":type:": "dict",
        ":serialized:": base64.b64encode(pickle.dumps(Planted())).decode(),
    }
    with (
        zipfile.ZipFile(tmp_path / "ok" / "model.zip") as src,
        zipfile.ZipFile(evil / "model.zip", "w") as dst,
    ):
        for item in src.infolist():
            dst.writestr(
                item, json.dumps(doc).encode() if item.filename == "data" else src.read(item.filename)
            )
    with pytest.raises(ValueError, match="never unpickles"):
        load_sb3(evil, pool)
    assert not (tmp_path / "pwned").exists()


def test_algorithms_that_ignore_masks_run_with_remapped_invalid_actions() -> None:
    """Issue 33: plain PPO, DQN and SB3's check_env died on InvalidAction whenever min_steps >= 1 (the
    Terminator is masked at step 0). ``make_encoded_env`` remaps a forbidden action to the next allowed
    one by default; ``invalid_action="raise"`` (the raw env's default) still raises."""
    pytest.importorskip("stable_baselines3")
    from gymnasium.error import InvalidAction
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_checker import check_env

    kw = dict(pool="sim-paper", suite="arith", max_steps=3, min_steps=1)
    strict = make_encoded_env("hashing", invalid_action="raise", **kw)
    strict.reset(seed=0)
    terminator = strict.unwrapped.pool.terminator_id
    with pytest.raises(InvalidAction):
        strict.step(terminator)
    env = make_encoded_env("hashing", **kw)
    check_env(env, warn=False)
    env.reset(seed=0)
    _, _, done, _, _ = env.step(terminator)  # remapped to agent 0: it acts, the episode goes on
    assert not done and [s.agent_id for s in env.unwrapped._steps] == [0]
    PPO("MlpPolicy", env, n_steps=32, batch_size=16, seed=0, device="cpu").learn(64)
    with pytest.raises(ValueError, match="invalid_action"):
        make_encoded_env("hashing", invalid_action="ignore", **kw)


@pytest.mark.integration
def test_check_env_passes_on_the_documented_env_whatever_actions_it_samples() -> None:
    """SB3's check_env samples actions from an action space it never seeds: on the README's env
    (min_steps=1) each sample at step 0 hit the masked Terminator with probability 1/8, so it passed 14
    of 20 times. With the wrapper's default (remap) it passes for every draw, and so do DQN and PPO."""
    pytest.importorskip("stable_baselines3")
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.env_checker import check_env

    kw = dict(pool="sim-paper", suite="mix-paper", lam=0.1, max_steps=5, min_steps=1)
    env = make_encoded_env("hashing", **kw)
    for seed in range(
        20
    ):  # 20 action draws: with invalid_action="raise" 7 of them fail (seeds 4, 7, 10, ...)
        env.action_space.seed(seed)
        check_env(env)
    DQN("MlpPolicy", env, learning_starts=16, buffer_size=64, seed=0, device="cpu").learn(64)
    PPO("MlpPolicy", env, n_steps=32, batch_size=16, seed=0, device="cpu").learn(64)


@pytest.mark.integration
def test_the_wrapper_sets_one_torch_thread_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    """MaskablePPO's small networks ran 5-20x slower on torch's default threads (2,048 steps: 62.5 s
    against 12.0 s on 2 loaded cores); the wrapper sets 1 thread, OMP_NUM_THREADS wins, None leaves it."""
    import torch

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        make_encoded_env("hashing", torch_threads=None, pool="sim-paper", suite="arith")
        assert torch.get_num_threads() == 2
        make_encoded_env("hashing", pool="sim-paper", suite="arith")
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        make_encoded_env("hashing", pool="sim-paper", suite="arith")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_saved_sb3_policy_keeps_the_min_steps_it_was_trained_with(tmp_path) -> None:
    """A MaskablePPO trained with min_steps=1 never saw the Terminator offered at step 0; evaluated in an
    env that offers it, it stopped at once on every item (accuracy 0). The saved policy masks it itself."""
    from puppeteer.policies.external import MaskableModelPolicy

    class Records:
        def __init__(self) -> None:
            self.masks: list[np.ndarray] = []

        def predict(self, observation, deterministic=True, action_masks=None):
            self.masks.append(action_masks)
            return np.int64(len(action_masks) - 1), None  # always wants the Terminator

    env = make_encoded_env("hashing", pool="sim-paper", suite="arith", max_steps=3)
    raw = env.unwrapped
    obs, _ = raw.reset(seed=0)
    model = Records()
    policy = MaskableModelPolicy(model, env.encoder, min_steps=1)
    policy.act(obs, np.random.default_rng(0))
    assert not model.masks[-1][-1] and model.masks[-1][:-1].all()
    assert (
        MaskableModelPolicy(model, env.encoder).act(obs, np.random.default_rng(0)) == raw.pool.terminator_id
    )
