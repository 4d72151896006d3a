"""Two-step chains in an outcome table: choosing first agents on training items, the build (on the
simulator), the rates a second step is read by, and strict replay of the shipped chains."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.analytics.second_steps import (
    error_correlations,
    flagged,
    rates_by,
    relations,
    same_answer,
    second_step_rates,
    within_kind_phi,
)
from puppeteer.backends.replay import Outcome, StepOutcome, read_outcomes, read_steps, write_steps
from puppeteer.jobs.outcomes import Shard, build
from puppeteer.jobs.second_steps import build_steps, first_agents, parse_firsts


def _o(task: str, agent: str, correct: bool, model_s: float, split: str = "train") -> Outcome:
    return Outcome("mix", split, task, task.split("/")[0], agent, correct, "1", 10, 5, model_s, False, 0)


def test_first_agents_are_each_kinds_best_on_the_training_items_at_each_price() -> None:
    # kind x: a right 2/2 at 60 s an item, b right 1/2 at 6 s; kind y: both 1/2, b cheaper
    rows = [
        _o("x/1", "a", True, 60.0),
        _o("x/2", "a", True, 60.0),
        _o("x/1", "b", True, 6.0),
        _o("x/2", "b", False, 6.0),
        _o("y/1", "a", True, 60.0),
        _o("y/2", "a", False, 60.0),
        _o("y/1", "b", False, 6.0),
        _o("y/2", "b", True, 6.0),
        _o("x/1", "c", True, 0.0, split="test"),  # held-out rows never count
        _o("x/2", "c", True, 0.0, split="test"),
    ]
    # lam 0: x -> a (1.0 > 0.5); y: a tie at 0.5, the cheaper b wins
    assert first_agents(rows, "mix", (0.0,)) == {"x": ("a",), "y": ("b",)}
    # lam 1 per minute: x: a = 1 - 1 = 0.0, b = 0.5 - 0.1 = 0.4 -> b; both prices: a then b
    assert first_agents(rows, "mix", (1.0,)) == {"x": ("b",), "y": ("b",)}
    assert first_agents(rows, "mix", (0.0, 1.0)) == {"x": ("a", "b"), "y": ("b",)}
    with pytest.raises(ValueError, match="no train items"):
        first_agents(rows, "other")


def test_parse_firsts() -> None:
    assert parse_firsts("gsm8k=a+b, mmlu=c") == {"gsm8k": ("a", "b"), "mmlu": ("c",)}
    for bad in ("gsm8k", "gsm8k=", "x=a,x=b", ""):
        with pytest.raises(ValueError):
            parse_firsts(bad)


def _s(first_correct: bool, correct: bool, answer: str | None, first_answer: str = "12") -> StepOutcome:
    return StepOutcome(
        "mix", "test", "x/1", "x", "a", "v", correct, answer, first_correct, first_answer, 100, 20, 2.0, False
    )


def test_same_answer_reads_numbers_letters_and_programs() -> None:
    assert same_answer("1,200", "1200.0") and not same_answer("12", "13")
    assert same_answer("b", "B") and not same_answer("A", "B")
    assert same_answer("def f(x):\n    return x+1  # one more", "def f(x):\n\n    return (x + 1)\n")
    assert not same_answer("def f(x):\n    return x+1", "def f(x):\n    return x+2")
    assert same_answer(None, None) and not same_answer("1", None)


def test_second_step_rates_by_hand() -> None:
    rows = [
        _s(False, True, "13"),  # wrong first, flagged, fixed
        _s(False, False, "14"),  # wrong first, flagged, still wrong
        _s(False, False, "12"),  # wrong first, repeated: not flagged
        _s(False, False, None),  # wrong first, no answer: not flagged, the first stands
        _s(True, True, "12.0"),  # right first, repeated
        _s(True, False, "15"),  # right first, flagged, broken
    ]
    assert [flagged(o) for o in rows] == [True, True, False, False, False, True]
    r = second_step_rates(rows, "v", "all")
    assert (r.detection.k, r.detection.n) == (2, 4) and (r.false_alarm.k, r.false_alarm.n) == (1, 2)
    assert (r.fix.k, r.fix.n) == (1, 4) and (r.breaks.k, r.breaks.n) == (1, 2)
    assert (r.silent.k, r.first_accuracy.k, r.chain_accuracy.k) == (1, 2, 2)
    lo, hi = r.detection.interval
    assert lo < 0.5 < hi and r.detection.text().startswith("0.50 [")
    by = rates_by(rows, by="first")
    assert [(x.agent, x.group, x.n) for x in by] == [("v", "a", 6), ("v", "all", 6)]


def test_error_correlation_within_kind_by_hand() -> None:
    # two agents wrong on the same items of kind x, independent on kind y
    a = np.array([1, 1, 0, 0, 1, 0, 1, 0], dtype=bool)
    b = np.array([1, 1, 0, 0, 1, 1, 0, 0], dtype=bool)
    kinds = np.array(["x"] * 4 + ["y"] * 4)
    # centred on each kind's mean (0.5 everywhere): x agrees on 4 of 4, y on 2 of 4 -> phi = 0.5
    assert within_kind_phi(a, b, kinds) == pytest.approx(0.5)
    rows = []
    for i, (wa, wb, k) in enumerate(zip(a, b, kinds, strict=True)):
        rows += [_o(f"{k}/{i}", "p", not wa, 1.0), _o(f"{k}/{i}", "q", not wb, 1.0)]
    rel = relations({"p": "m1", "q": "m2"}, {"m1": "fam", "m2": "fam"})
    assert rel == {("p", "q"): "same family"}
    (c,) = error_correlations(rows, rel, n_boot=200)
    assert c.phi == pytest.approx(0.5) and c.n == 8 and c.low <= 0.5 <= c.high
    assert c.b_wrong_given_a_wrong == pytest.approx(3 / 4) and c.both_wrong == pytest.approx(3 / 8)


def test_build_steps_on_the_simulator_records_chains_and_resumes(tmp_path: Path) -> None:
    """First calls from the table's single rows, the verifier after them; a second run does nothing,
    a larger shard adds only its new items."""
    table, work = tmp_path / "table", tmp_path / "work"
    build(
        "sim-paper", "arith", [Shard.parse("test:4")], table, work, agents=["gemma3-27b-cot"], progress=False
    )
    firsts = {"arith": ("gemma3-27b-cot",)}
    done: list[str] = []
    kwargs = {"seconds": ["qwen3-32b-verify"], "firsts": firsts, "progress": False}
    build_steps(
        "sim-paper",
        "arith",
        [Shard.parse("test:4")],
        table,
        work,
        on_done=lambda s, a: done.append(a),
        **kwargs,
    )
    rows = read_steps(table)
    singles = {o.task_id: o for o in read_outcomes(table)}
    assert len(rows) == 4 and {(o.first, o.agent) for o in rows} == {("gemma3-27b-cot", "qwen3-32b-verify")}
    for o in rows:
        assert (o.first_answer, o.first_correct) == (singles[o.task_id].answer, singles[o.task_id].correct)
        assert o.prompt_tokens > singles[o.task_id].prompt_tokens  # it was shown the first response
    before = (table / "steps.jsonl.gz").read_bytes()
    build_steps("sim-paper", "arith", [Shard.parse("test:4")], table, work, **kwargs)
    assert (table / "steps.jsonl.gz").read_bytes() == before
    with pytest.raises(ValueError, match="lacks the first calls"):
        build_steps("sim-paper", "arith", [Shard.parse("test:6")], table, work, **kwargs)
    build(
        "sim-paper", "arith", [Shard.parse("test:6")], table, work, agents=["gemma3-27b-cot"], progress=False
    )
    build_steps("sim-paper", "arith", [Shard.parse("test:6")], table, work, **kwargs)
    assert len(read_steps(table)) == 6
    write_steps(table, [])  # merging nothing rewrites the same bytes
    assert len(read_steps(table)) == 6


@pytest.mark.data
def test_every_shipped_second_step_replays_under_strict_replay(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A slice of the shipped chains (the first two recorded items of each chain and split), run again
    with strict replay as a `chain:FIRST,SECOND` workflow and as two steps of a step-wise policy: no
    model loads, every call comes from the table, and the second step gives the recorded answer and
    grade. Fails when a prompt changes under the table."""
    from puppeteer.evaluation.evaluate import evaluate_policy
    from puppeteer.tasks import load_suite

    monkeypatch.setenv("PUPPETEER_REPLAY", "strict")
    pool = load_pool("local-mix-steps")
    assert pool.replay is not None
    rows = read_steps(pool.replay)
    if not rows:
        pytest.skip("the shipped table holds no two-step chains yet")
    chosen: dict[tuple[str, str, str], list[StepOutcome]] = {}
    for o in rows:
        picked = chosen.setdefault((o.split, o.first, o.agent), [])
        if len(picked) < 2:
            picked.append(o)
    sizes = {"train": 200, "test": 320}  # the table's splits
    tasks = {
        (split, t.id): t
        for split in {k[0] for k in chosen}
        for t in load_suite("mix-local", split, n=sizes[split])
    }
    for (split, first, second), picked in sorted(chosen.items()):
        out = tmp_path / f"{split}-{first}-{second}"
        items = [tasks[(split, o.task_id)] for o in picked]
        res = evaluate_policy(
            f"chain:{first},{second}",
            pool,
            "mix-local",
            split=split,
            tasks=items,
            max_steps=2,
            progress=False,
            out_dir=out,
        )
        assert res.n == len(items) and res.cache_misses == 0
        with (out / "trajectories.jsonl").open() as f:
            got = {d["task_id"]: d for d in map(json.loads, f)}
        # the same chain as two steps of a step-wise policy (a rule that always calls the second)
        stepwise = tmp_path / f"{split}-{first}-{second}-steps"
        res = evaluate_policy(
            f"rules:*={first}>{second}@always", pool, "mix-local", split=split, tasks=items,
            progress=False, out_dir=stepwise,
        )  # fmt: skip
        assert res.n == len(items) and res.cache_misses == 0 and res.mean_calls == 2.0
        with (stepwise / "trajectories.jsonl").open() as f:
            steps = {d["task_id"]: d for d in map(json.loads, f)}
        for o in picked:
            for d in (got[o.task_id], steps[o.task_id]):
                assert d["steps"][1]["completion"]["text"] == o.response
                assert (d["steps"][1]["answer"], d["correct"]) == (o.answer, o.correct), o.key


def test_the_outcomes_steps_command_builds_chains_after_each_kinds_best_first_agent(tmp_path: Path) -> None:
    """``puppeteer outcomes build`` then ``outcomes steps`` on the simulator: with no ``--first``, each
    kind's first agent is its best on the train items at ``--lam``."""
    from puppeteer.cli.app import main

    table, work = str(tmp_path / "t"), str(tmp_path / "w")
    common = ["--pool", "sim-paper", "--suite", "arith", "--table", table, "--work", work]
    for split in ("train", "test"):
        argv = ["outcomes", "build", *common, "--shard", f"{split}:3", "--agents", "gpt5-cot,gemma3-27b-cot"]
        assert main(argv) == 0
    assert main(["outcomes", "steps", *common, "--shard", "test:3", "--second", "qwen3-32b-verify"]) == 0
    best = first_agents(read_outcomes(table), "arith")["arith"][0]
    rows = read_steps(table)
    assert len(rows) == 3 and {(o.first, o.agent, o.split) for o in rows} == {
        (best, "qwen3-32b-verify", "test")
    }
    assert main(["outcomes", "steps", *common, "--shard", "test:3", "--second", "x", "--first", "bad"]) == 2
