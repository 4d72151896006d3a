from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from puppeteer.agents.pool import Pool, load_pool
from puppeteer.analytics.tables import markdown_table
from puppeteer.backends import default_registry
from puppeteer.backends.base import Router
from puppeteer.backends.cache import CachedBackend, resolve_cache
from puppeteer.backends.sim import SimBackend
from puppeteer.cli import main
from puppeteer.envs.build import sim_answer_key
from puppeteer.envs.trajectories import read_trajectories
from puppeteer.evaluation.evaluate import evaluate_policy
from puppeteer.evaluation.results import EvalResult
from puppeteer.evaluation.stats import wilson_interval
from puppeteer.tasks import load_suite
from puppeteer.types import Agent, Completion, CompletionRequest, Task
from puppeteer.utils.seeding import item_seed


@pytest.fixture(scope="module")
def pool() -> Pool:
    return load_pool("sim-paper")


@pytest.fixture(scope="module")
def tasks() -> tuple[Task, ...]:
    return load_suite("arith", "test", n=40)


def _sim_options(pool: Pool, tasks: tuple[Task, ...]) -> dict:
    return {**dict(pool.backend_options["sim"]), "answer_key": sim_answer_key(tasks)}


class FlakyBackend:
    """Test double: the pool's simulator, except that every call about one item raises."""

    name = "flaky"

    def __init__(self, inner: SimBackend, bad_item: str, exc: type[BaseException] = RuntimeError) -> None:
        self.inner, self.bad_item, self.exc = inner, bad_item, exc
        self.calls = 0

    def complete(self, request: CompletionRequest) -> Completion:
        self.calls += 1
        if request.context.item_key == self.bad_item:
            raise self.exc(f"backend down for {self.bad_item}")
        return self.inner.complete(request)

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return self.complete(request)


class CutOffBackend:
    """Test double: every completion is reasoning cut off at the budget, ending on an intermediate result."""

    name = "cutoff"

    def __init__(self, gold: dict[str, str]) -> None:
        self.gold = gold

    def complete(self, request: CompletionRequest) -> Completion:
        text = f"First we add the numbers.\nThe running total so far is {self.gold[request.context.item_key]}"
        return Completion(
            text=text,
            prompt_tokens=50,
            completion_tokens=request.max_tokens,
            cost_usd=0.0,
            flops=1.0,
            latency_s=0.0,
            model="cutoff",
            truncated=True,
        )

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return self.complete(request)


def test_a_cut_off_generation_gives_no_answer(pool: Pool, tasks: tuple[Task, ...]) -> None:
    """The last number of unfinished reasoning (here even the gold) is not an answer the model gave."""
    backend = CutOffBackend({t.id: t.answer for t in tasks})
    result = evaluate_policy(
        "single:gpt5-cot", pool, "arith", tasks=tasks[:5], backend=backend, progress=False
    )
    assert result.correct == 0 and result.n == 5
    assert result.truncated_rate == 1.0 and result.tool_call_rate == 0.0
    assert "| 100% | 0% |" in markdown_table([result])


# ----------------------------------------------------------------------------- Wilson interval


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        (8, 10, 0.4902, 0.9433),  # p=0.8: centre 0.99208/1.38416, half 1.96*0.160012/1.38416
        (50, 100, 0.4038, 0.5962),  # p=0.5: centre exactly 0.5, half 1.96*0.050951/1.038416
        (0, 10, 0.0, 0.2775),  # z^2/(n+z^2) = 3.8415/13.8415
        (10, 10, 0.7225, 1.0),
        (1, 1, 0.2065, 1.0),
    ],
)
def test_wilson_against_hand_computed_values(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


def test_wilson_edge_cases() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(11, 10)


# ----------------------------------------------------------------------------- outputs


def test_results_json_and_trajectories(tmp_path: Path, pool: Pool, tasks: tuple[Task, ...]) -> None:
    out = tmp_path / "run"
    result = evaluate_policy("moa", pool, "arith", tasks=tasks, seed=3, out_dir=out, progress=False)
    saved = json.loads((out / "results.json").read_text())
    for key in (
        "policy",
        "pool",
        "suite",
        "split",
        "n",
        "seed",
        "mode",
        "backends",
        "accuracy",
        "ci_low",
        "ci_high",
        "mean_calls",
        "mean_prompt_tokens",
        "mean_completion_tokens",
        "mean_usd",
        "mean_flops",
        "wall_s",
        "cache_hits",
        "cache_misses",
        "n_errors",
        "completed",
    ):
        assert key in saved
    assert saved == json.loads(json.dumps(result.to_dict()))
    assert (saved["policy"], saved["pool"], saved["n"], saved["seed"], saved["backends"]) == (
        "moa",
        "sim-paper",
        40,
        3,
        ["sim"],
    )
    lines = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(lines) == 40 and [x["index"] for x in lines] == list(range(40))
    assert all(x["error"] is None and len(x["steps"]) == 4 for x in lines)
    assert lines[0]["steps"][3]["visible"] == [0, 1, 2]  # the aggregator sees the three proposers
    trajs = list(read_trajectories(out / "trajectories.jsonl"))
    assert sum(t.correct for t in trajs) == result.correct
    assert result.mean_calls == 4.0
    assert result.mean_prompt_tokens == pytest.approx(sum(t.prompt_tokens for t in trajs) / 40)
    assert result.mean_usd == pytest.approx(sum(t.cost_usd for t in trajs) / 40)
    assert result.accuracy == result.correct / 40


def test_a_failing_item_does_not_stop_the_evaluation(
    tmp_path: Path, pool: Pool, tasks: tuple[Task, ...]
) -> None:
    bad = tasks[5].id
    spec = "chain:gpt5-cot,qwen3-32b-verify"
    backend = FlakyBackend(SimBackend(**_sim_options(pool, tasks)), bad)
    result = evaluate_policy(
        spec, pool, "arith", tasks=tasks, out_dir=tmp_path / "flaky", backend=backend, progress=False
    )
    clean = evaluate_policy(spec, pool, "arith", tasks=tasks, out_dir=tmp_path / "clean", progress=False)
    assert result.n == 40 and result.n_errors == 1 and result.completed and backend.calls > 70
    lines, clean_lines = (
        [json.loads(x) for x in (tmp_path / name / "trajectories.jsonl").read_text().splitlines()]
        for name in ("flaky", "clean")
    )
    assert len(lines) == 40
    assert lines[5]["task_id"] == bad and "backend down" in lines[5]["error"] and lines[5]["correct"] is False
    assert all(x["error"] is None for i, x in enumerate(lines) if i != 5)
    # the other 39 items are answered exactly as without the failure (same seed per item)
    assert [x["correct"] for i, x in enumerate(lines) if i != 5] == [
        x["correct"] for i, x in enumerate(clean_lines) if i != 5
    ]
    assert result.correct == clean.correct - int(clean_lines[5]["correct"])
    assert result.accuracy == result.correct / 40  # an error counts as wrong
    assert len(list(read_trajectories(tmp_path / "flaky" / "trajectories.jsonl"))) == 40


class Abort(BaseException):
    """Stands in for an interrupt that must not be swallowed."""


def test_an_interrupted_run_keeps_what_it_did(tmp_path: Path, pool: Pool, tasks: tuple[Task, ...]) -> None:
    backend = FlakyBackend(SimBackend(**_sim_options(pool, tasks)), tasks[7].id, exc=Abort)
    out = tmp_path / "abort"
    with pytest.raises(Abort):
        evaluate_policy(
            "single:gpt5-cot", pool, "arith", tasks=tasks, out_dir=out, backend=backend, progress=False
        )
    saved = json.loads((out / "results.json").read_text())
    assert saved["completed"] is False and saved["n"] == 40
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 7


def test_cache_statistics_and_shared_first_calls(tmp_path: Path, pool: Pool, tasks: tuple[Task, ...]) -> None:
    def cached_router() -> Router:
        return Router(
            default_registry(),
            {"sim": _sim_options(pool, tasks)},
            wrap=lambda name, b: CachedBackend(b, tmp_path / "responses.sqlite"),
        )

    vote = evaluate_policy("vote:3", pool, "arith", tasks=tasks, backend=cached_router(), progress=False)
    assert (vote.cache_hits, vote.cache_misses) == (0, 120)
    # a single agent's calls are the vote's first-member calls: all served from the cache
    single = evaluate_policy(
        "single:gpt5-cot", pool, "arith", tasks=tasks, backend=cached_router(), progress=False
    )
    assert (single.cache_hits, single.cache_misses) == (40, 0)
    uncached = evaluate_policy("single:gpt5-cot", pool, "arith", tasks=tasks, progress=False)
    assert single.correct == uncached.correct and uncached.cache_hits is None
    # one backend shared by several runs: each run reports its own hits and misses, not the running total
    shared = cached_router()
    runs = [
        evaluate_policy(spec, pool, "arith", tasks=tasks, backend=shared, progress=False)
        for spec in ("single:gpt5-cot", "single:gpt5-cot", "vote:3")
    ]
    assert [(r.cache_hits, r.cache_misses) for r in runs] == [(40, 0), (40, 0), (120, 0)]


def test_item_seeds_do_not_depend_on_order_or_n(pool: Pool, tasks: tuple[Task, ...]) -> None:
    assert item_seed(0, "a/1") == item_seed(0, "a/1") != item_seed(1, "a/1")
    first = evaluate_policy("random", pool, "arith", tasks=tasks[:10], progress=False, out_dir=None)
    reversed_ = evaluate_policy("random", pool, "arith", tasks=tasks[:10][::-1], progress=False)
    assert (first.correct, first.mean_calls) == (reversed_.correct, reversed_.mean_calls)


def test_markdown_table(pool: Pool, tasks: tuple[Task, ...]) -> None:
    results = [
        evaluate_policy(s, pool, "arith", tasks=tasks[:10], progress=False)
        for s in ("single:gpt5-cot", "vote:3", "moa:0,1|9")
    ]
    table = markdown_table(results).splitlines()
    assert len(table) == 5 and table[0].startswith("| policy |")
    assert "`vote:3`" in table[3] and "| 3.00 |" in table[3] and "sim" in table[3]
    assert "`moa:0,1\\|9`" in table[4]  # escaped, so the row keeps its column count

    def cells(row: str) -> int:
        return row.replace("\\|", "").count("|")

    assert {cells(row) for row in table} == {cells(table[0])}


def test_single_stream_seconds_follow_the_declared_speeds(
    tmp_path: Path, pool: Pool, tasks: tuple[Task, ...]
) -> None:
    """mean_model_s prices each call at its model's declared speed; no speeds, no figure."""
    plain = evaluate_policy("vote:3", pool, "arith", tasks=tasks[:8], progress=False)
    assert plain.mean_model_s is None
    models = sorted({a.model.name for a in pool.agents})
    rates = {name: (20.0 + 10 * i, 2.0 + i) for i, name in enumerate(models)}

    def with_speed(a: Agent) -> Agent:
        prefill, decode = rates[a.model.name]
        return dataclasses.replace(
            a, model=dataclasses.replace(a.model, prefill_tps=prefill, decode_tps=decode)
        )

    sped = dataclasses.replace(pool, agents=tuple(with_speed(a) for a in pool.agents))
    out = tmp_path / "sped"
    result = evaluate_policy("vote:3", sped, "arith", tasks=tasks[:8], progress=False, out_dir=out)
    # speeds change no call: the same episodes as without them
    assert result.correct == plain.correct and result.mean_completion_tokens == plain.mean_completion_tokens
    model_of = {a.name: a.model.name for a in sped.agents}
    by_hand = [
        sum(
            s.completion.prompt_tokens / rates[model_of[s.agent_name]][0]
            + s.completion.completion_tokens / rates[model_of[s.agent_name]][1]
            for s in t.steps
        )
        for t in read_trajectories(out / "trajectories.jsonl")
    ]
    assert result.mean_model_s == pytest.approx(sum(by_hand) / len(by_hand))
    header, _, row = markdown_table([result]).splitlines()
    assert "single-stream s/item" in header and f"| {result.mean_model_s:.1f} |" in row


def test_default_cache_only_for_model_calling_pools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUPPETEER_RESPONSE_CACHE", str(tmp_path / "r.sqlite"))
    assert resolve_cache(load_pool("sim-paper"), None, False) is None
    local = load_pool("local")
    assert resolve_cache(local, None, False) == tmp_path / "r.sqlite"
    assert resolve_cache(local, str(tmp_path / "x.sqlite"), False) == tmp_path / "x.sqlite"
    assert resolve_cache(local, None, True) is None


# ----------------------------------------------------------------------------- CLI


def test_cli_eval_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    rc = main(
        [
            "eval",
            "--pool",
            "sim-paper",
            "--suite",
            "arith",
            "--policy",
            "vote:3",
            "--n",
            "25",
            "--seed",
            "2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "accuracy" in printed and str(out / "results.json") in printed
    saved = json.loads((out / "results.json").read_text())
    assert (saved["policy"], saved["n"], saved["seed"], saved["mode"]) == ("vote:3", 25, 2, "workflow")
    assert saved["cache_path"] is None  # a sim pool needs no response cache
    assert len((out / "trajectories.jsonl").read_text().splitlines()) == 25
    direct = evaluate_policy("vote:3", "sim-paper", "arith", n=25, seed=2, progress=False)
    assert isinstance(direct, EvalResult) and direct.correct == saved["correct"]


def test_cli_eval_rejects_an_unknown_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "eval",
            "--pool",
            "sim-paper",
            "--suite",
            "arith",
            "--policy",
            "best-of-all",
            "--out",
            str(tmp_path / "x"),
            "--quiet",
        ]
    )
    assert rc == 2
    printed = capsys.readouterr().out
    assert "unknown policy spec" in printed and "random-step" in printed


MOCK_POOL = """
name: mock-api
description: litellm's offline mock behind two agents
models:
  m1: {backend: litellm, target: openai/mock-1, params_b: 1, price_in: 1.0, price_out: 2.0,
       options: {mock_response: "It is 7.\\nAnswer: 7"}}
agents:
  - {name: m1-cot, model: m1, pattern: cot}
  - {name: m1-direct, model: m1, pattern: direct}
"""


@pytest.mark.slow  # importing litellm takes ~10 s on a small machine
def test_cli_cache_is_shared_across_policies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_OFFLINE_MODE", "true")
    pool_file = tmp_path / "mock.yaml"
    pool_file.write_text(MOCK_POOL)
    cache = tmp_path / "responses.sqlite"
    common = ["--pool", str(pool_file), "--suite", "arith", "--n", "5", "--cache", str(cache), "--quiet"]
    assert main(["eval", *common, "--policy", "vote:2", "--out", str(tmp_path / "a")]) == 0
    assert main(["eval", *common, "--policy", "single:m1-cot", "--out", str(tmp_path / "b")]) == 0
    first, second = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("a", "b"))
    assert (first["cache_hits"], first["cache_misses"]) == (0, 10)
    assert (second["cache_hits"], second["cache_misses"]) == (5, 0)
    assert second["cache_path"] == str(cache) and second["backends"] == ["litellm"]
