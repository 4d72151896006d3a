"""The simulated backend: calibration against the Conductor paper's table, and its mechanics."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Sequence

import pytest

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.backends.base import Backend
from puppeteer.backends.sim import (
    SimBackend,
    SimOutcome,
    SkillError,
    expected_accuracy,
    oracle_agent,
    shifted,
    skill,
)
from puppeteer.backends.sim.answers import SimItem, distractors, normalize_answer
from puppeteer.types import Agent, CallContext, CompletionRequest, Message, ModelSpec

# The Conductor paper's table (percent), in the order of COLUMNS.
COLUMNS = ("MATH500", "MMLU", "RLPR", "LiveCodeBench", "AIME25", "BigCodeBench", "GPQA-Diamond")
PAPER = {
    "gpt-5": (99.0, 93.5, 42.2, 82.9, 90.8, 32.75, 82.3),
    "gemini-2.5-pro": (96.0, 92.4, 40.55, 67.24, 78.3, 37.51, 84.8),
    "claude-sonnet-4": (96.0, 91.4, 36.7, 46.54, 74.3, 37.16, 77.7),
    "qwen3-32b": (73.5, 83.5, 31.0, 21.21, 20.0, 30.41, 64.1),
    "qwen3-32b-thinking": (80.7, 84.1, 37.25, 25.86, 72.9, 28.38, 66.8),
    "r1-distill-qwen-32b": (82.5, 84.4, 33.5, 26.86, 63.0, 33.07, 58.1),
    "gemma-3-27b": (39.8, 81.3, 16.67, 13.14, 20.7, 14.86, 38.4),
}
DOMAIN_OF = {
    "MATH500": "math500",
    "MMLU": "mmlu",
    "RLPR": "rlpr",
    "LiveCodeBench": "livecodebench",
    "AIME25": "aime25",
    "BigCodeBench": "bigcodebench",
    "GPQA-Diamond": "gpqa-diamond",
}
SUITES = (
    "gsm8k",
    "math500",
    "mmlu",
    "aime25",
    "gpqa-diamond",
    "humaneval",
    "arith",
    "rg-gsm_symbolic",
    "rg-basic_arithmetic",
    "rg-knights_knaves",
)
N_ITEMS = 4000
ANSWER_RE = re.compile(r"Answer:\s*(.+?)\s*$")
QUESTION = (Message("system", "You are a careful solver."), Message("user", "Solve the problem."))


@pytest.fixture(scope="module")
def pool() -> Pool:
    return load_pool("sim-paper")


@pytest.fixture(scope="module")
def models(pool: Pool) -> dict[str, ModelSpec]:
    return {a.model.name: a.model for a in pool.agents}


def make_backend(pool: Pool, **overrides: object) -> SimBackend:
    options = {**dict(pool.backend_options["sim"]), **overrides}
    return SimBackend(**options)


def request(
    model: ModelSpec,
    key: str,
    pattern: str = "cot",
    visible: Sequence[str] = (),
    sample: int = 0,
    step: int = 0,
    tools: Sequence[str] = (),
    max_tokens: int = 100_000,
    messages: tuple[Message, ...] = QUESTION,
) -> CompletionRequest:
    return CompletionRequest(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        sample_index=sample,
        context=CallContext(
            item_key=key, pattern=pattern, step_index=step, tools=tuple(tools), visible_answers=tuple(visible)
        ),
    )


def numeric_items(prefix: str, domain: str, n: int = N_ITEMS) -> dict[str, SimItem]:
    return {f"{prefix}{i}": SimItem(gold=str(17 * i + 5), domain=domain) for i in range(n)}


def letter_items(prefix: str, domain: str, n: int = N_ITEMS) -> dict[str, SimItem]:
    return {
        f"{prefix}{i}": SimItem(
            gold="ABCD"[i % 4], domain=domain, kind="letter", choices=("A", "B", "C", "D")
        )
        for i in range(n)
    }


def outcomes(backend: SimBackend, model: ModelSpec, keys: Sequence[str], **kw: object) -> list[SimOutcome]:
    return [backend.decide(request(model, k, **kw)) for k in keys]  # type: ignore[arg-type]


def accuracy(results: Sequence[SimOutcome]) -> float:
    return sum(o.correct for o in results) / len(results)


# --------------------------------------------------------------------------- the pool files


def test_sim_paper_pool_declares_the_paper_table(pool: Pool) -> None:
    models = {a.model.name: a.model for a in pool.agents}
    assert set(models) == set(PAPER)
    for name, row in PAPER.items():
        for column, value in zip(COLUMNS, row, strict=True):
            assert skill(models[name], column) == pytest.approx(value / 100)
    assert len(pool.agents) <= 10
    primaries = [a for a in pool.agents if a.pattern == "cot" and not a.tools]
    assert {a.model.name for a in primaries} == set(PAPER) and len(primaries) == 7
    columns = pool.backend_options["sim"]["columns"]
    for suite in SUITES:
        assert columns[suite] in COLUMNS, suite
    assert columns["humaneval"] == "LiveCodeBench" and columns["rg-knights_knaves"] == "RLPR"
    thinking, plain = models["qwen3-32b-thinking"], models["qwen3-32b"]
    assert thinking.options["tokens_mean"] > 2 * plain.options["tokens_mean"]
    assert models["claude-sonnet-4"].price_in == 3.0 and models["claude-sonnet-4"].price_out == 15.0


def test_api_example_pool_mirrors_sim_paper(pool: Pool) -> None:
    api = load_pool("api-example")
    assert [a.name for a in api.agents] == [a.name for a in pool.agents]
    assert [a.pattern for a in api.agents] == [a.pattern for a in pool.agents]
    sim_models = {a.model.name: a.model for a in pool.agents}
    for agent in api.agents:
        sim = sim_models[agent.model.name]
        assert agent.model.backend == "litellm"
        assert "/" in agent.model.target
        assert (agent.model.price_in, agent.model.price_out, agent.model.params_b) == (
            sim.price_in,
            sim.price_out,
            sim.params_b,
        )
    assert {a.model.target for a in api.agents} >= {
        "openai/gpt-5",
        "gemini/gemini-2.5-pro",
        "anthropic/claude-sonnet-4-20250514",
    }


# --------------------------------------------------------------------------- calibration


def test_marginal_accuracy_matches_the_table(pool: Pool, models: dict[str, ModelSpec]) -> None:
    backend = make_backend(pool)
    keys_by_column: dict[str, list[str]] = {}
    for column in COLUMNS:
        items = numeric_items(f"{column}-", DOMAIN_OF[column])
        backend.add_items(items)
        keys_by_column[column] = list(items)
    worst = 0.0
    for name, row in PAPER.items():
        for column, value in zip(COLUMNS, row, strict=True):
            acc = accuracy(outcomes(backend, models[name], keys_by_column[column]))
            worst = max(worst, abs(acc - value / 100))
            assert acc == pytest.approx(value / 100, abs=0.025), (name, column, acc)
    assert worst > 0.0  # it is a draw, not a lookup


def test_text_path_agrees_with_the_decision_and_ends_with_an_answer(
    pool: Pool, models: dict[str, ModelSpec]
) -> None:
    backend = make_backend(pool)
    items = letter_items("gpqa-", "gpqa-diamond")
    backend.add_items(items)
    model = models["qwen3-32b-thinking"]
    correct = 0
    for key, item in items.items():
        text = backend.complete(request(model, key)).text
        match = ANSWER_RE.search(text.splitlines()[-1])
        assert match is not None, text
        answer = normalize_answer(match.group(1), "letter")
        assert answer in "ABCD"
        correct += answer == item.gold
    assert correct / len(items) == pytest.approx(0.668, abs=0.025)


def test_column_comes_from_the_domain_mapping(pool: Pool, models: dict[str, ModelSpec]) -> None:
    backend = make_backend(pool)
    backend.add_items(
        {
            "k": SimItem("Zoey is a knight", "rg-knights_knaves", "text"),
            "h": SimItem("def f():\n    return 1", "humaneval", "code"),
            "x": SimItem("3", "some-new-suite"),
        }
    )
    assert backend.decide(request(models["gpt-5"], "k")).column == "RLPR"
    assert backend.decide(request(models["gpt-5"], "h")).column == "LiveCodeBench"
    assert backend.decide(request(models["gpt-5"], "x")).column == "MATH500"  # default_column


def test_pattern_and_tool_effects_shift_accuracy(pool: Pool, models: dict[str, ModelSpec]) -> None:
    backend = make_backend(pool)
    numbers = numeric_items("n", "math500")
    letters = letter_items("l", "mmlu")
    backend.add_items({**numbers, **letters})
    qwen = models["qwen3-32b"]
    p = 0.735
    direct = accuracy(outcomes(backend, qwen, list(numbers), pattern="direct"))
    assert direct == pytest.approx(shifted(p, -0.6), abs=0.025) and direct < p - 0.08
    python = accuracy(outcomes(backend, qwen, list(numbers), tools=("python",)))
    assert python == pytest.approx(shifted(p, 0.3), abs=0.025) and python > p + 0.03
    mmlu_python = accuracy(outcomes(backend, qwen, list(letters), tools=("python",)))
    assert mmlu_python == pytest.approx(0.835, abs=0.025)  # tools do not help on letter items
    custom = make_backend(pool, pattern_effects={"direct": 0.0})
    custom.add_items(numbers)
    assert accuracy(outcomes(custom, qwen, list(numbers), pattern="direct")) == pytest.approx(p, abs=0.025)


# --------------------------------------------------------------------------- determinism


def test_same_request_same_completion_other_samples_differ(pool: Pool, models: dict[str, ModelSpec]) -> None:
    items = numeric_items("d", "gsm8k", 300)
    a, b = make_backend(pool), make_backend(pool)
    a.add_items(items)
    b.add_items(items)
    model = models["gemma-3-27b"]
    for key in list(items)[:50]:
        assert a.complete(request(model, key)) == a.complete(request(model, key))
        assert a.complete(request(model, key)) == b.complete(request(model, key))
    answers0 = [a.decide(request(model, k)).answer for k in items]
    answers1 = [a.decide(request(model, k, sample=1)).answer for k in items]
    differ = sum(x != y for x, y in zip(answers0, answers1, strict=True))
    assert differ > 30  # gemma is right ~40% of the time: resampling changes many answers
    other_seed = make_backend(pool, seed=1)
    other_seed.add_items(items)
    assert [other_seed.decide(request(model, k)).answer for k in items] != answers0


# --------------------------------------------------------------------------- correlation structure


def _correct_matrix(
    backend: SimBackend, models: dict[str, ModelSpec], keys: Sequence[str]
) -> dict[str, list[bool]]:
    return {name: [o.correct for o in outcomes(backend, model, keys)] for name, model in models.items()}


def _phi(x: Sequence[bool], y: Sequence[bool]) -> float:
    n = len(x)
    px, py = sum(x) / n, sum(y) / n
    pxy = sum(a and b for a, b in zip(x, y, strict=True)) / n
    return (pxy - px * py) / math.sqrt(px * (1 - px) * py * (1 - py))


def test_items_are_hard_for_everyone(pool: Pool, models: dict[str, ModelSpec]) -> None:
    items = letter_items("g", "gpqa-diamond")
    keys = list(items)
    shared = make_backend(pool)
    shared.add_items(items)
    matrix = _correct_matrix(shared, models, keys)
    assert _phi(matrix["qwen3-32b"], matrix["gemma-3-27b"]) > 0.2
    assert _phi(matrix["gpt-5"], matrix["claude-sonnet-4"]) > 0.15
    all_wrong = sum(not any(col[i] for col in matrix.values()) for i in range(len(keys))) / len(keys)
    independent = math.prod(1 - sum(col) / len(col) for col in matrix.values())
    assert all_wrong > 10 * independent and all_wrong > 0.01
    # with rho = 0 the workers are independent: the same statistics collapse
    indep = make_backend(pool, rho=0.0)
    indep.add_items(items)
    matrix0 = _correct_matrix(indep, models, keys)
    assert abs(_phi(matrix0["qwen3-32b"], matrix0["gemma-3-27b"])) < 0.05


def test_repeat_corr_makes_an_agent_asked_again_agree_with_itself(
    pool: Pool, models: dict[str, ModelSpec]
) -> None:
    items = letter_items("r", "mmlu", 2000)
    keys = list(items)
    model = models["qwen3-32b"]

    def first_and_repeat(**overrides: object) -> tuple[list[bool], list[bool]]:
        backend = make_backend(pool, **overrides)
        backend.add_items(items)
        first = [o.correct for o in outcomes(backend, model, keys, step=0)]
        again = [o.correct for o in outcomes(backend, model, keys, step=1)]  # same episode, a later step
        return first, again

    first0, again0 = first_and_repeat()
    first1, again1 = first_and_repeat(repeat_corr=1.0)
    firsth, againh = first_and_repeat(repeat_corr=0.5)
    assert first1 == again1  # a repeat is as right or wrong as the first call
    phi0, phih = _phi(first0, again0), _phi(firsth, againh)
    assert phi0 < 0.35 < phih < 0.95  # only the item latent shared by default; more with repeat_corr
    for xs in (first0, first1, firsth, again1, againh):  # every call keeps the table's accuracy
        assert accuracy_of(xs) == pytest.approx(0.835, abs=0.03)
    # another sample of the item (another episode) draws afresh
    backend = make_backend(pool, repeat_corr=1.0)
    backend.add_items(items)
    other = [o.correct for o in outcomes(backend, model, keys, sample=1)]
    assert other != first1
    with pytest.raises(ValueError, match="repeat_corr"):
        make_backend(pool, repeat_corr=1.5)


def accuracy_of(xs: Sequence[bool]) -> float:
    return sum(xs) / len(xs)


def test_wrong_workers_agree_on_wrong_answers(pool: Pool, models: dict[str, ModelSpec]) -> None:
    backend = make_backend(pool)
    numbers = numeric_items("w", "math500")
    letters = letter_items("v", "gpqa-diamond")
    backend.add_items({**numbers, **letters})
    for keys in (list(numbers), list(letters)):
        a = outcomes(backend, models["qwen3-32b"], keys)
        b = outcomes(backend, models["gemma-3-27b"], keys)
        both_wrong = [(x, y) for x, y in zip(a, b, strict=True) if not x.correct and not y.correct]
        assert len(both_wrong) > 300
        agree = sum(x.answer == y.answer for x, y in both_wrong) / len(both_wrong)
        assert agree > 0.45  # uniform over 3 wrong letters would give 1/3; free-form numbers ~0


def test_distractors_are_wrong_deterministic_and_well_formed() -> None:
    numeric = SimItem("1,234", "gsm8k")
    assert distractors(numeric) == distractors(numeric)
    assert all(normalize_answer(d, "numeric") != "1234" for d in distractors(numeric))
    letter = SimItem("(B)", "mmlu", "letter", ("A", "B", "C", "D", "E"))
    assert set(distractors(letter)) <= {"A", "C", "D", "E"} and len(distractors(letter)) == 3
    math_item = SimItem(r"\boxed{\frac{3}{4}}", "math500", "math")
    assert len({normalize_answer(d, "math") for d in distractors(math_item)} - {r"\frac{3}{4}"}) == 3
    code = SimItem("def add(a: int, b: int) -> int:\n    return a + b", "humaneval", "code")
    for body in distractors(code):
        namespace: dict[str, object] = {}
        exec(compile(body, "<distractor>", "exec"), namespace)  # our own generated code
        assert body.startswith("def add(a: int, b: int) -> int:")
        try:
            works = namespace["add"](1, 2) == 3  # type: ignore[operator]
        except NotImplementedError:
            works = False
        assert not works
    text = SimItem("Zoey is a knight, and Oliver is a knave", "rg-knights_knaves", "text")
    assert all("Zoey" in d and d != text.gold for d in distractors(text))


# --------------------------------------------------------------------------- visible answers


def test_verifier_fixes_at_its_own_skill_and_keeps_right_answers(
    pool: Pool, models: dict[str, ModelSpec]
) -> None:
    backend = make_backend(pool)
    items = letter_items("f", "gpqa-diamond")
    backend.add_items(items)
    qwen = models["qwen3-32b"]
    p = 0.641
    wrong_shown = [
        backend.decide(request(qwen, k, pattern="verify", visible=[distractors(it)[0]], step=1))
        for k, it in items.items()
    ]
    assert accuracy(wrong_shown) == pytest.approx(p, abs=0.025)
    repeated = [o for o in wrong_shown if not o.correct]
    assert all(o.source == "repeated" for o in repeated)
    right_shown = [
        backend.decide(request(qwen, k, pattern="verify", visible=[it.gold, it.gold], step=2))
        for k, it in items.items()
    ]
    assert accuracy(right_shown) == pytest.approx(1 - 0.3 * (1 - p), abs=0.015)
    # without visible answers a verifier is just its own attempt
    assert accuracy(outcomes(backend, qwen, list(items), pattern="verify")) == pytest.approx(p, abs=0.025)


def test_summarizer_follows_the_visible_majority(pool: Pool, models: dict[str, ModelSpec]) -> None:
    backend = make_backend(pool)
    items = letter_items("s", "gpqa-diamond")
    backend.add_items(items)
    gemma = models["gemma-3-27b"]
    follows = []
    right = []
    for key, item in items.items():
        wrong = distractors(item)[1]
        seen = [wrong, f"({wrong})", item.gold]  # majority = the wrong letter, written two ways
        follows.append(backend.decide(request(gemma, key, pattern="summarize", visible=seen)).answer == wrong)
        right.append(
            backend.decide(
                request(gemma, key, pattern="summarize", visible=[item.gold, item.gold, wrong])
            ).correct
        )
    assert 0.84 <= sum(follows) / len(follows) <= 0.92
    assert sum(right) / len(right) >= 0.85 + 0.15 * 0.25 - 0.02
    # cot ignores what it sees
    cot_seen = [backend.decide(request(gemma, k, visible=[it.gold] * 3)).correct for k, it in items.items()]
    assert sum(cot_seen) / len(cot_seen) == pytest.approx(0.384, abs=0.025)


# --------------------------------------------------------------------------- tokens, cost, latency


def test_tokens_cost_latency_follow_the_declared_numbers(pool: Pool, models: dict[str, ModelSpec]) -> None:
    backend = make_backend(pool)
    items = numeric_items("t", "gsm8k", 3000)
    backend.add_items(items)
    model = models["claude-sonnet-4"]
    long_prompt = (Message("user", "x" * 401),)
    one = backend.complete(request(model, "t1", messages=long_prompt))
    assert one.prompt_tokens == 101
    assert one.cost_usd == pytest.approx((101 * 3.0 + one.completion_tokens * 15.0) / 1e6)
    assert one.flops == pytest.approx(2 * 400e9 * (101 + one.completion_tokens))
    assert one.latency_s == pytest.approx(1.2 + one.completion_tokens / 60)
    assert one.model == "claude-sonnet-4" and not one.cached

    def mean_tokens(m: ModelSpec, pattern: str = "cot", cap: int = 100_000) -> float:
        done = [backend.complete(request(m, k, pattern=pattern, max_tokens=cap)) for k in items]
        return sum(c.completion_tokens for c in done) / len(done)

    assert mean_tokens(model) == pytest.approx(700, rel=0.04)
    assert mean_tokens(model, "direct") == pytest.approx(0.2 * 700, rel=0.04)
    assert mean_tokens(models["qwen3-32b-thinking"]) > 3 * mean_tokens(models["qwen3-32b"])
    capped = [
        backend.complete(request(model, k, max_tokens=500)).completion_tokens for k in list(items)[:500]
    ]
    assert max(capped) == 500 and min(capped) >= 1


def test_realtime_sleeps_the_simulated_latency() -> None:
    tiny = ModelSpec(
        "tiny",
        "sim",
        "tiny",
        params_b=0.1,
        options={"skills": {"MATH500": 0.5}, "tokens_mean": 10, "tokens_per_s": 1e6, "first_token_s": 0.05},
    )
    items = {f"r{i}": SimItem(str(i), "math500") for i in range(8)}
    fast = SimBackend(items, columns={"math500": "MATH500"})
    slow = SimBackend(items, columns={"math500": "MATH500"}, realtime=True)
    start = time.perf_counter()
    done = slow.complete(request(tiny, "r0"))
    assert time.perf_counter() - start >= done.latency_s >= 0.05
    assert fast.complete(request(tiny, "r0")) == done

    async def many() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(slow.acomplete(request(tiny, k)) for k in items))
        return time.perf_counter() - start

    elapsed = asyncio.run(many())
    assert 0.05 <= elapsed < 0.05 * len(items) / 2  # the sleeps overlap: acomplete does not block the loop
    start = time.perf_counter()
    for k in items:
        fast.complete(request(tiny, k))
    assert time.perf_counter() - start < 0.05


# --------------------------------------------------------------------------- errors and helpers


def test_unknown_item_replies_and_missing_skill_errors(pool: Pool, models: dict[str, ModelSpec]) -> None:
    backend = make_backend(pool)
    reply = backend.complete(request(models["gpt-5"], "never-registered"))
    assert reply.text.endswith("Answer: unknown") and reply.completion_tokens > 0
    backend.add_items({"lcb": SimItem("1", "livecodebench")})
    no_column = ModelSpec("partial", "sim", "partial", 1.0, options={"skills": {"MATH500": 50}})
    with pytest.raises(SkillError, match="LiveCodeBench"):
        backend.complete(request(no_column, "lcb"))
    with pytest.raises(SkillError, match="skills"):
        backend.complete(request(ModelSpec("bare", "sim", "bare", 1.0), "lcb"))
    assert skill(no_column, "MATH500") == 0.5  # percents are accepted


def test_output_formats_are_extraction_friendly(pool: Pool, models: dict[str, ModelSpec]) -> None:
    backend = make_backend(pool)
    code = "def add(a, b):\n    return a + b"
    backend.add_items(
        {
            "n": SimItem("42", "gsm8k"),
            "l": SimItem("C", "mmlu", "letter"),
            "m": SimItem(r"\frac{3}{4}", "math500", "math"),
            "c": SimItem(code, "humaneval", "code"),
        }
    )
    gpt = models["gpt-5"]
    for key, pattern in (("n", "cot"), ("n", "direct"), ("l", "plan"), ("m", "cot")):
        for sample in range(5):
            out = backend.complete(request(gpt, key, pattern=pattern, sample=sample))
            assert ANSWER_RE.search(out.text.splitlines()[-1]), out.text
    assert backend.complete(request(gpt, "l")).text.endswith("Answer: (C)")
    math_text = backend.complete(request(gpt, "m")).text
    assert r"\boxed{\frac{3}{4}}" in math_text and math_text.endswith(r"Answer: \frac{3}{4}")
    code_text = backend.complete(request(gpt, "c")).text
    assert code_text.endswith(f"```python\n{code}\n```")


def test_oracle_agent_picks_the_best_single_agent(pool: Pool) -> None:
    agents = pool.agents
    expect = {
        "MATH500": "gpt5-cot",
        "MMLU": "gpt5-cot",
        "GPQA-Diamond": "gemini25pro-cot",
        "BigCodeBench": "gemini25pro-cot",
        "LiveCodeBench": "gpt5-cot",
        "RLPR": "gpt5-cot",
    }
    for column, name in expect.items():
        assert agents[oracle_agent(agents, column)].name == name
    cheap = ModelSpec("cheap", "sim", "cheap", 1.0, 0.1, 0.1, options={"skills": {"X": 0.7}})
    dear = ModelSpec("dear", "sim", "dear", 1.0, 5.0, 5.0, options={"skills": {"X": 0.7}})
    tie = [Agent("dear", dear, "cot"), Agent("cheap", cheap, "cot")]
    assert oracle_agent(tie, "X") == 1
    assert expected_accuracy(Agent("d", dear, "direct"), "X") == pytest.approx(shifted(0.7, -0.6))
    with pytest.raises(SkillError):
        oracle_agent(tie, "Y")


def test_is_a_backend_and_answers_many_calls_the_same_way(pool: Pool, models: dict[str, ModelSpec]) -> None:
    """2000 calls, twice, give the same completions (speed is for benchmarks: no timed assertion here,
    the shared machines are too noisy for one)."""
    backend = make_backend(pool)
    assert isinstance(backend, Backend) and backend.name == "sim"
    items = numeric_items("speed", "gsm8k", 2000)
    backend.add_items(items)
    reqs = [request(models["qwen3-32b"], k) for k in items]
    first = [backend.complete(r).text for r in reqs]
    assert len(first) == 2000 and all(first)
    assert [backend.complete(r).text for r in reqs] == first


def test_project_extractors_read_back_what_the_simulator_decided() -> None:
    extract = pytest.importorskip("puppeteer.tasks.extract")
    code = 'def add(a, b):\n    """Add."""\n    return a + b'
    cases = {
        "n": (SimItem("1,234", "d"), extract.extract_number),
        "u": (SimItem("-7.5", "d"), extract.extract_number),
        "l": (SimItem("C", "d", "letter"), extract.extract_letter),
        "m": (SimItem(r"\frac{3}{4}", "d", "math"), extract.extract_math),
        "c": (SimItem(code, "d", "code"), extract.extract_code),
        "t": (SimItem("Zoey is a knight, and Oliver is a knave", "d", "text"), extract.extract_final_text),
    }
    backend = SimBackend({k: item for k, (item, _) in cases.items()}, default_column="C")
    model = ModelSpec("half", "sim", "half", 1.0, options={"skills": {"C": 0.5}})
    seen_wrong = 0
    for key, (item, read) in cases.items():
        for sample in range(20):
            for pattern in ("cot", "direct", "plan"):
                req = request(model, key, pattern=pattern, sample=sample)
                decided = backend.decide(req)
                seen_wrong += not decided.correct
                got = read(backend.complete(req).text)
                assert normalize_answer(got or "", item.kind) == normalize_answer(decided.answer, item.kind)
    assert seen_wrong > 100  # right and wrong answers both went through the extractors
