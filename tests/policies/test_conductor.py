"""The conductor policy, k-of-n worker subsets and recursion, on scripted completions (no real model)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from puppeteer.agents.pool import Pool, pool_from_dict
from puppeteer.backends.base import SyncBackend
from puppeteer.envs.conductor_prompt import build_prompt
from puppeteer.envs.env import ConductorEnv
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.policies.baselines import SpecError
from puppeteer.policies.conductor import ConductorPolicy, conductor_model
from puppeteer.policies.registry import make_policy
from puppeteer.tasks import load_suite
from puppeteer.types import Completion, CompletionRequest, ModelSpec


class Scripted(SyncBackend):
    """A fake generator: returns the scripted texts in order (the last one repeats) and records prompts."""

    name = "scripted"

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        text = self.texts[min(len(self.requests) - 1, len(self.texts) - 1)]
        return Completion(
            text=text,
            prompt_tokens=100,
            completion_tokens=20,
            cost_usd=0.001,
            flops=1.0,
            latency_s=0.5,
            model="scripted",
        )


def _pool() -> Pool:
    """Deterministic simulated workers: `ace` is always right, `dud` always wrong."""
    sim = {"backend": "sim", "params_b": 1, "price_in": 1.0, "price_out": 2.0}
    return pool_from_dict(
        {
            "name": "det",
            "backend_options": {"sim": {"seed": 0, "default_column": "MATH500"}},
            "models": {
                "ace": {**sim, "target": "ace", "options": {"skills": {"MATH500": 100.0}}},
                "dud": {**sim, "target": "dud", "options": {"skills": {"MATH500": 0.0}}},
            },
            "agents": [
                {"name": "ace", "model": "ace", "pattern": "cot"},
                {"name": "dud", "model": "dud", "pattern": "cot"},
                {"name": "ace2", "model": "ace", "pattern": "cot"},
            ],
        }
    )


RIGHT = "# one solver\nmodel_id = [0]\nsubtasks = ['Solve it.']\naccess_list = [[]]"
WRONG = "model_id = [1]\nsubtasks = ['Solve it.']\naccess_list = [[]]"
UNAVAILABLE = "model_id = [2]\nsubtasks = ['Solve it.']\naccess_list = [[]]"
HOSTILE = "model_id = [__import__('os').system('echo pwned')]\nsubtasks = ['x']\naccess_list = [[]]"
SELF = "model_id = [1, 3]\nsubtasks = ['Solve it.', 'Check it.']\naccess_list = [[], 'all']"
END = "model_id = []\nsubtasks = []\naccess_list = []"


def _policy(texts: Sequence[str]) -> tuple[ConductorPolicy, Scripted]:
    fake = Scripted(texts)
    model = ModelSpec("conductor", "scripted", "fake", params_b=1.0)
    return ConductorPolicy(model=model, backend=fake, name="conductor:scripted"), fake


def _env(**kw: object) -> ConductorEnv:
    return ConductorEnv(mode="workflow", pool=_pool(), suite="arith", split="test", n_tasks=5, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the policy in the env


@pytest.mark.parametrize(
    ("text", "reward", "parse_error"),
    [
        ("I would ask the best agent.", 0.0, True),
        (WRONG, 0.5, False),
        (RIGHT, 1.0, False),
        (HOSTILE, 0.0, True),
        ("x" * 300_000, 0.0, True),
    ],
)
def test_policy_text_goes_through_the_env_parser(text: str, reward: float, parse_error: bool) -> None:
    env = _env()
    policy, fake = _policy([text])
    obs, info = env.reset(seed=0)
    action = policy.act(obs, info)
    assert action == text  # the policy writes text; the env decides what it means
    _, r, term, _, info = env.step(action)
    assert term and r == reward
    assert bool(info["parse_error"]) is parse_error
    # the chat layout: system, two few-shot turns, the question last
    roles = [m.role for m in fake.requests[0].messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert env.task.question in fake.requests[0].messages[-1].content
    assert policy.calls[0].prompt_tokens == 100 and policy.calls[0].latency_s == 0.5


def test_unavailable_worker_is_a_parse_error_and_scores_zero() -> None:
    env = _env()
    obs, info = env.reset(seed=0, options={"available": ["ace", "dud"]})
    assert obs["mask"].tolist() == [1, 1, 0, 1] and info["action_mask"].tolist() == [True, True, False, True]
    prompt = info["conductor_prompt"]
    assert "ace2" not in prompt.messages[0].content and "| ace |" in prompt.messages[0].content
    assert "ace2" not in obs["prompt"]
    _, r, term, _, info = env.step(UNAVAILABLE)
    assert term and r == 0.0 and "not available" in info["parse_error"]
    env.reset(seed=0)  # the next episode has every agent again
    _, r, *_ = env.step(UNAVAILABLE)
    assert r == 1.0


def test_few_shot_examples_use_only_available_agents() -> None:
    pool = _pool()
    prompt = build_prompt(pool, "Q?", "gsm8k", available=[False, True, False])
    shots = [m.content for m in prompt.messages if m.role == "assistant"]
    assert shots and all("model_id = [1" in s and "0" not in s.split("\n")[1] for s in shots)


# --------------------------------------------------------------------------- k of n


def test_k_of_n_draws_a_seeded_subset_that_masks_follow() -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", k_available=3)
    subsets = set()
    for seed in range(30):
        obs, info = env.reset(seed=seed)
        mask = obs["mask"][: len(env.pool)]
        assert mask.sum() == 3 and obs["mask"][-1] == 1  # the Terminator stays available
        assert (info["action_mask"][: len(env.pool)] == mask.astype(bool)).all()
        subsets.add(tuple(mask))
        off = int(np.flatnonzero(mask == 0)[0])
        with pytest.raises(Exception, match="not available"):
            env.step(off)
    assert len(subsets) > 10
    # same seed, same subset and same item
    a, _ = env.reset(seed=7)
    b, _ = env.reset(seed=7)
    assert a["mask"].tolist() == b["mask"].tolist() and a["task"] == b["task"]


def test_k_of_n_keeps_the_item_and_sample_of_the_full_pool() -> None:
    full = ConductorEnv(mode="step", pool="sim-paper", suite="arith")
    sub = ConductorEnv(mode="step", pool="sim-paper", suite="arith", k_available=2)
    for seed in range(5):
        full.reset(seed=seed)
        sub.reset(seed=seed)
        assert full.task.id == sub.task.id and full._sample_index == sub._sample_index


def test_k_of_n_rejects_bad_k_and_unknown_agents() -> None:
    with pytest.raises(ValueError, match="k_available"):
        ConductorEnv(mode="step", pool="sim-paper", suite="arith", k_available=99)
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith")
    with pytest.raises(KeyError):
        env.reset(seed=0, options={"available": ["nobody"]})


# --------------------------------------------------------------------------- recursion


def test_recursion_continues_the_episode_and_sees_the_parent() -> None:
    env = _env(max_depth=1)
    policy, fake = _policy([SELF, RIGHT])
    obs, info = env.reset(seed=0)
    assert "3 | conductor" in obs["prompt"]
    obs, r, term, _, info = env.step(policy.act(obs, info))
    assert not term and r == 0.0 and obs["depth"] == 1
    assert "3 | conductor" not in obs["prompt"]  # at max_depth the conductor is no longer offered
    assert "model_id = [1, 3]" in obs["prompt"]  # the parent workflow
    _, r, term, _, info = env.step(policy.act(obs, info))
    assert term and r == 1.0 and info["depth"] == 1
    assert [rd["depth"] for rd in info["rounds"]] == [0, 1] and info["rounds"][0]["recurse"]
    traj = info["trajectory"]
    assert [s.index for s in traj.steps] == [0, 1]
    assert [c.depth for c in policy.calls] == [0, 1]
    assert "Check it." not in [s.subtask for s in traj.steps]  # the self step is not a worker call
    assert fake.requests[1].messages[-1].content.count("Planning round 1") == 1


def test_inner_round_may_end_with_empty_lists_and_keep_the_answer() -> None:
    env = _env(max_depth=2)
    policy, _ = _policy([SELF, END])
    obs, info = env.reset(seed=0)
    obs, _, term, _, info = env.step(policy.act(obs, info))
    _, r, term, _, info = env.step(policy.act(obs, info))
    assert term and r == 0.5 and info["final_answer"] == info["trajectory"].steps[0].answer


def test_recursion_depth_is_bounded() -> None:
    env = _env(max_depth=2)
    policy, _ = _policy([SELF])  # always recurses
    obs, info = env.reset(seed=0)
    rounds = 0
    for _ in range(5):
        obs, r, term, _, info = env.step(policy.act(obs, info))
        rounds += 1
        if term:
            break
    assert term and rounds == 3 and r == 0.0
    assert "out of range" in info["parse_error"]  # at depth 2 the conductor id is no longer valid


def test_recursion_always_reviews_every_round_below_max_depth_without_offering_itself() -> None:
    env = _env(max_depth=2, recursion="always")
    policy, fake = _policy([WRONG, RIGHT, END])
    obs, info = env.reset(seed=0)
    assert "3 | conductor" not in obs["prompt"] and env.plan_space().self_id is None
    obs, r, term, _, info = env.step(policy.act(obs, info))  # a plain plan still gets a review round
    assert not term and r == 0.0 and obs["depth"] == 1 and info["round"]["recurse"]
    obs, r, term, _, info = env.step(policy.act(obs, info))  # the review replans: ace is right
    assert "Planning round 1" in fake.requests[1].messages[-1].content
    assert not term and obs["depth"] == 2
    _, r, term, _, info = env.step(policy.act(obs, info))  # at max_depth: empty lists keep the answer
    assert term and r == 1.0 and [rd["depth"] for rd in info["rounds"]] == [0, 1, 2]
    assert [s.agent_name for s in info["trajectory"].steps] == ["dud", "ace"]
    # naming the conductor's id is out of range: under "always" it is not a worker
    env.reset(seed=0)
    _, r, term, _, info = env.step(SELF)
    assert term and r == 0.0 and "out of range" in info["parse_error"]
    with pytest.raises(ValueError, match="max_depth >= 1"):
        _env(recursion="always")
    with pytest.raises(ValueError, match="recursion must be one of"):
        _env(max_depth=1, recursion="sometimes")


def test_per_depth_under_recursion_always_reports_what_the_review_changed(tmp_path) -> None:
    tasks = load_suite("arith", "test", n=3)
    # item 1: wrong, its review replans and is right; items 2, 3: right, their reviews keep the answer
    policy, _ = _policy([WRONG, RIGHT, RIGHT, END, RIGHT, END])
    result = evaluate_policy(
        policy, _pool(), "arith", tasks=tasks, progress=False, max_depth=1, recursion="always"
    )
    depth0, depth1 = result.per_depth
    assert result.recursion == "always" and depth1["reached"] == 3
    assert depth0["accuracy"] == pytest.approx(2 / 3) and depth1["accuracy"] == 1.0 == result.correct / 3
    assert depth0["mean_worker_calls"] == 1.0 and depth1["mean_worker_calls"] == pytest.approx(4 / 3)
    assert depth0["mean_conductor_calls"] == 1.0 and depth1["mean_conductor_calls"] == 2.0


def test_conductor_must_be_the_last_step_and_empty_lists_end_only_inner_rounds() -> None:
    env = _env(max_depth=1)
    env.reset(seed=0)
    _, r, term, _, info = env.step("model_id = [3, 0]\nsubtasks = ['a', 'b']\naccess_list = [[], 'all']")
    assert term and r == 0.0 and "last step" in info["parse_error"]
    env.reset(seed=0)
    _, r, term, _, info = env.step(END)
    assert term and r == 0.0 and info["parse_error"]


# --------------------------------------------------------------------------- evaluation


def test_evaluate_conductor_writes_text_parse_status_and_per_depth(tmp_path) -> None:
    tasks = load_suite("arith", "test", n=4)
    policy, _ = _policy(["not a plan", SELF, RIGHT, WRONG])
    result = evaluate_policy(
        policy, _pool(), "arith", tasks=tasks, out_dir=tmp_path, progress=False, max_depth=1
    )
    assert result.n == 4 and result.n_parse_errors == 1 and result.max_depth == 1
    lines = [json.loads(x) for x in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    assert lines[0]["parse_error"] and lines[0]["conductor"][0]["text"] == "not a plan"
    assert lines[1]["rounds"][0]["recurse"] and len(lines[1]["conductor"]) == 2
    assert lines[1]["correct"] and lines[1]["steps"][0]["agent_name"] == "dud"
    assert {"agent_name", "subtask", "visible", "completion", "answer"} <= set(lines[1]["steps"][0])
    # items 3, 4 repeat WRONG (the script's last text): 1 correct of 4
    assert result.correct == 1
    assert result.mean_conductor_calls == pytest.approx(5 / 4)
    depth0, depth1 = result.per_depth
    assert depth0["accuracy"] == 0.0 and depth1["accuracy"] == 0.25 and depth1["reached"] == 1
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["per_depth"][1]["accuracy"] == 0.25


def test_evaluate_on_a_fixed_subset_is_one_argument(tmp_path) -> None:
    tasks = load_suite("arith", "test", n=3)
    policy, _ = _policy([UNAVAILABLE])
    result = evaluate_policy(policy, _pool(), "arith", tasks=tasks, progress=False, available=["ace", "dud"])
    assert result.n_parse_errors == 3 and result.available == ("ace", "dud")
    # baselines follow the same subset: a step policy never picks a masked agent
    result = evaluate_policy("random-step", _pool(), "arith", tasks=tasks, progress=False, available=["dud"])
    assert result.correct == 0


def test_conductor_specs() -> None:
    pool = _pool()
    assert make_policy("conductor", pool).model.target == "qwen2.5-coder-1.5b"  # type: ignore[union-attr]
    assert conductor_model("qwen2.5-coder-0.5b").backend == "llamacpp"
    assert conductor_model("litellm:openai/gpt-4o-mini").target == "openai/gpt-4o-mini"
    hf = conductor_model("hf:/ckpt/step-10")
    assert (hf.backend, hf.target) == ("transformers", "/ckpt/step-10")
    # the FLOPs proxy knows an embedded model's size through either backend
    gguf_hf = conductor_model("hf:embedded:qwen2.5-coder-0.5b")
    assert gguf_hf.params_b == conductor_model("qwen2.5-coder-0.5b").params_b > 0
    assert gguf_hf.flops(100, 10) == 2 * gguf_hf.params_b * 1e9 * 110
    with pytest.raises(SpecError):
        make_policy("conductor:no-such-model", pool)


def test_env_checker_passes_with_k_of_n_and_recursion() -> None:
    # (step mode with k of n raises InvalidAction on the checker's random masked actions, by design)
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    env = gym.make(
        "Conductor-v0", mode="workflow", pool="sim-paper", suite="arith", k_available=3, max_depth=1
    )
    check_env(env.unwrapped, skip_render_check=True)
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        assert env.observation_space.contains(obs)


def test_bind_shares_the_envs_backend_unless_the_conductor_has_options_of_its_own(tmp_path) -> None:
    from puppeteer.backends import make_router

    shared = make_router()
    plain = conductor_model("qwen2.5-coder-0.5b")
    policy = ConductorPolicy(plain)
    policy.bind(tmp_path / "c.sqlite", shared=shared)
    assert policy.backend is shared  # one backend: each model loaded once, one compute lock
    own = ConductorPolicy(plain, backend_options={"llamacpp": {"n_ctx": 2048}})
    own.bind(tmp_path / "c.sqlite", shared=shared)
    assert own.backend is not None and own.backend is not shared
    given = ConductorPolicy(plain, backend=make_router())
    before = given.backend
    given.bind(shared=shared)
    assert given.backend is before


# --------------------------------------------------------------------------- real models (slow)


@pytest.mark.slow
def test_smollm2_conducts_end_to_end_through_llamacpp(tmp_path) -> None:
    pytest.importorskip("llama_cpp")
    result = evaluate_policy(
        "conductor:smollm2-135m",
        "sim-paper",
        "arith",
        n=2,
        out_dir=tmp_path,
        cache=tmp_path / "cache.sqlite",
        progress=False,
        lam=0.0,  # no cost term: a parsed plan scores 0.5 or 1, an unparsable one 0
    )
    assert result.n == 2 and result.n_errors == 0 and result.completed
    assert result.mean_conductor_calls == 1.0 and result.mean_conductor_completion_tokens > 0
    lines = [json.loads(x) for x in (tmp_path / "trajectories.jsonl").read_text().splitlines()]
    for line in lines:
        call = line["conductor"][0]
        assert call["text"] and call["prompt_tokens"] > 100 and call["latency_s"] > 0
        # parsed or not, the status is recorded and the reward follows it
        assert (line["parse_error"] is None) == (line["reward"] > 0)
    # a second run replays the conductor from the response cache
    again = evaluate_policy(
        "conductor:smollm2-135m",
        "sim-paper",
        "arith",
        n=2,
        cache=tmp_path / "cache.sqlite",
        progress=False,
        lam=0.0,
    )
    assert again.correct == result.correct and again.n_parse_errors == result.n_parse_errors


@pytest.mark.slow
@pytest.mark.timeout(1800)  # first use converts the GGUF tokenizer and dequantises the weights
def test_transformers_backend_conducts_with_the_embedded_gguf(tmp_path) -> None:
    pytest.importorskip("gguf")
    policy = make_policy("conductor:hf:embedded:smollm2-135m", _pool())
    assert isinstance(policy, ConductorPolicy)
    policy.max_tokens = 48
    env = _env()
    obs, info = env.reset(seed=0)
    text = policy.act(obs, info)
    call = policy.calls[0]
    assert text == call.text and call.completion_tokens > 0 and call.prompt_tokens > 100
    _, r, term, *_ = env.step(text)
    assert term and r in (0.0, 0.5, 1.0)


def test_training_config_turns_on_k_of_n_for_the_training_env_only() -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from puppeteer.jobs.train import build
    from puppeteer.train.config_schema import register_configs
    from puppeteer.utils.resources import data_dir

    register_configs()  # suite/ and pool/ groups from envs/ and agents/
    with initialize_config_dir(config_dir=str(data_dir("configs")), version_base="1.3"):
        cfg = compose("train", overrides=["k_available=3", "policy.encoder=hashing"])
    env, eval_env, _, _ = build(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    assert env.config.k_available == 3 and eval_env.config.k_available is None
    obs, _ = env.reset(seed=0)
    assert obs["mask"][: len(env.pool)].sum() == 3


def test_the_orchestrator_runs_a_conductor_for_run_and_serve() -> None:
    """Issue 31 section 5: `puppeteer run` / `serve` with a conductor crashed in Orchestrator (it handed
    the conductor a numpy Generator where it reads an info dict). Each request gets its own record of
    the conductor's calls; the conductor's backend is shared."""
    from concurrent.futures import ThreadPoolExecutor

    from puppeteer.serving.orchestrator import Orchestrator

    policy, fake = _policy([RIGHT])
    tasks = load_suite("arith", "test", n=4)
    orch = Orchestrator(policy, _pool(), "conductor:scripted", tasks=tasks, grader="numeric")
    result = orch.answer(tasks[0].question)
    assert result.parse_error is None and result.correct and [s.agent_name for s in result.steps] == ["ace"]
    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(lambda t: orch.answer(t.question), tasks))
    assert all(r.correct for r in results) and len(fake.requests) == 5
    assert policy.calls == []  # the shared policy object keeps no request's state
    orch.close()
