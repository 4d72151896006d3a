"""Visible checks: a HumanEval answer run on the calls its own docstring shows, in the sandbox; the verdict
in the step-mode observation for a policy that reads the signals; how well it predicts the hidden tests
on the shipped local-mix table (real-model answers, no model loaded)."""

from __future__ import annotations

import collections
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from puppeteer.backends.replay import read_outcomes
from puppeteer.envs.build import build_env
from puppeteer.envs.parts import EnvConfig
from puppeteer.tasks import load_suite
from puppeteer.tasks.signals import SIGNAL_NAMES
from puppeteer.tasks.visible import VISIBLE_CHECKS, CodeExamplesCheck, Example, visible_examples
from puppeteer.types import Task

PROMPT = '''
def add_one(xs: list) -> list:
    """Add one to each number.
    >>> add_one([1, 2])
    [2, 3]
    >>> add_one([])
    []
    add_one([5]) ==> [6]
    add_one((7,)) -> [8]
    For example, add_one(xs) should be shorter than this sentence.
    add_one(abc) == 'nonsense'
    add_one([1]) == something prose
    """
'''
TASK = Task(
    "humaneval/x",
    PROMPT,
    "    return [x + 1 for x in xs]\n",
    "humaneval",
    "code",
    "code",
    meta={"prompt": PROMPT, "entry_point": "add_one", "test": "def check(f):\n    assert f([0]) == [1]\n"},
)
PASS = [
    ("doctest", "    return [x + 1 for x in xs]\n"),
    ("full definition", "def add_one(xs):\n    return list(map(lambda v: v + 1, xs))\n"),
    ("tuple for a list", "    return tuple(x + 1 for x in xs)\n"),
]
FAIL = [
    ("wrong", "    return [x + 2 for x in xs]\n"),
    ("raises", "    return xs[0] + 1\n"),
    ("loops", "    while True:\n        pass\n"),
]


def test_the_examples_are_the_calls_the_docstring_shows_with_literal_results() -> None:
    got = visible_examples(PROMPT, "add_one")
    assert got == (
        Example("add_one([1, 2])", "[2, 3]"),
        Example("add_one([])", "[]"),
        Example("add_one([5])", "[6]"),
        Example("add_one((7,))", "[8]"),
    )  # not the prose call, not a bare name (`abc`), not a result that is not a literal
    assert visible_examples(PROMPT, "add") == ()  # another function's name is not a prefix match
    assert visible_examples("def f(x):\n    '''Return x.'''\n", "f") == ()


@pytest.mark.parametrize(("why", "code"), PASS)
def test_an_answer_that_does_what_the_examples_show_passes(why: str, code: str) -> None:
    assert CodeExamplesCheck().check(code, TASK) is True, why


@pytest.mark.parametrize(("why", "code"), FAIL)
def test_an_answer_that_contradicts_or_dies_on_an_example_fails(why: str, code: str) -> None:
    assert CodeExamplesCheck(timeout_s=2.0).check(code, TASK) is False, why


def test_no_answer_fails_and_nothing_to_run_is_no_verdict() -> None:
    check = VISIBLE_CHECKS["code"]
    assert check.check(None, TASK) is False and check.check("  ", TASK) is False
    bare = Task("humaneval/y", "def g(): ...", "", "humaneval", "code", "code", meta={"entry_point": "g"})
    assert check.check("def g():\n    return 1\n", bare) is None  # no examples in the question
    assert "numeric" not in VISIBLE_CHECKS  # graders without a check give no verdict


def test_the_env_puts_the_verdict_in_the_signals_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Strict replay of the shipped table (no model): `qwen1.5b-code` on the first held-out HumanEval
    items; the last two signals say what the check says of the replayed answer."""
    monkeypatch.setenv("PUPPETEER_REPLAY", "strict")
    tasks = tuple(t for t in load_suite("mix-local", "test", n=40) if t.grader == "code")[:4]
    passed, failed = SIGNAL_NAMES.index("last_passed_check"), SIGNAL_NAMES.index("last_failed_check")
    answers = {
        o.task_id: o.answer
        for o in read_outcomes(load_pool_replay())
        if o.split == "test" and o.agent == "qwen1.5b-code" and o.suite == "mix-local"
    }
    seen = set()
    for checks in (True, False):
        config = EnvConfig(
            mode="step", lam=1.0, max_steps=2, min_steps=1, cost_model="minutes", visible_checks=checks
        )
        env = build_env(config, pool="local-mix", tasks=tasks)
        agent = [a.name for a in env.pool.agents].index("qwen1.5b-code")
        for seed in range(6):
            obs, _ = env.reset(seed=seed)
            assert obs["signals"][passed] == obs["signals"][failed] == 0.0  # no step yet
            obs, *_ = env.step(agent)
            verdict = CodeExamplesCheck().check(answers[env.task.id], env.task)
            want = (verdict is True, verdict is False) if checks else (False, False)
            np.testing.assert_array_equal(obs["signals"][[passed, failed]], np.array(want, dtype=np.float32))
            seen.add((checks, verdict))
        env.close()
    assert (True, True) in seen  # the items drawn include an answer that passes its examples


@pytest.mark.data
def test_on_the_shipped_table_failing_the_examples_means_failing_the_tests() -> None:
    """Every HumanEval answer of every agent in the shipped local-mix table (real Qwen2.5-Coder answers,
    520 items' worth; no model): an answer that fails the calls its docstring shows is almost never right,
    one that passes them mostly is. Measured: 5 of 476 right among fails, 297 of 332 among passes (232
    answers' items show no examples to run)."""
    rows = [o for o in read_outcomes(load_pool_replay()) if o.task_id.startswith("humaneval/")]
    tasks = {
        (s, t.id): t for s, n in (("train", 200), ("test", 320)) for t in load_suite("mix-local", s, n=n)
    }
    check = CodeExamplesCheck()
    # each check is a sandboxed subprocess: one per core at a time (about 1,000 of them)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        verdicts = pool.map(lambda o: check.check(o.answer, tasks[(o.split, o.task_id)]), rows)
        tally = collections.Counter(zip(verdicts, (o.correct for o in rows), strict=True))
    fails, passes = tally[(False, True)] + tally[(False, False)], tally[(True, True)] + tally[(True, False)]
    assert fails >= 300 and passes >= 250  # most items show examples; both verdicts are common
    assert tally[(False, True)] / fails <= 0.03
    assert tally[(True, True)] / passes >= 0.85


def load_pool_replay() -> Path:
    from puppeteer.agents.pool import load_pool

    replay = load_pool("local-mix").replay
    assert replay is not None
    return replay


@pytest.mark.slow
def test_the_fixed_router_that_reads_the_examples_beats_the_best_single_agent_held_out(
    tmp_path: Path,
) -> None:
    """experiments/local-mix/README.md section 6, from the shipped table (no model; ~30 s of sandbox runs):
    every choice
    made on the 200 training items, the router escalating HumanEval answers that fail their examples
    reaches 216 / 320 held out against 199 for `qwen1.5b-pot`, exact McNemar p < 0.01."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "cascades.json"
    subprocess.run(
        [
            sys.executable,
            str(root / "experiments" / "local-mix" / "visible_check_cascades.py"),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    summary = json.loads(out.read_text())
    rows = {r["router"]: r for r in summary["results"]}
    single = rows["single:qwen1.5b-pot"]
    checked = rows["best agent per kind, escalating on failed visible checks"]
    assert summary["chains"] == {"humaneval": ["qwen1.5b-code", "qwen0.5b-code"]}
    assert round(single["accuracy"] * 320) == 199 and round(checked["accuracy"] * 320) == 216
    assert checked["mcnemar_p"] < 0.01 and checked["time_ratio"] < 0.95


@pytest.mark.slow
@pytest.mark.timeout(1200)  # two trainings of 65,536 and 131,072 episodes: 7-8 min idle, 10 loaded
def test_the_decision_after_a_trained_routers_call_learns_to_escalate_on_failed_examples(
    tmp_path: Path,
) -> None:
    """experiments/local-mix/README.md section 7, from the shipped table (strict replay, no model; ~6 min on
    2 cores):
    the one-call REINFORCE router (seed 0, 200 training items), then the decision after its call
    (trainer.init_first, every second action tried, fitted to softmax(Q / 0.1), reading who acted and the
    answer signals). Measured: 211 / 320 held out for the router, 216 / 320 (1.05 calls) with the learned
    escalation; `qwen1.5b-pot` alone 199."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PUPPETEER_REPLAY": "strict", "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    common = ["--pool", "local-mix", "--suite", "mix-local", "--steps", "train", "--n-train", "200"]
    common += ["--n-eval", "320", "--lam", "1", "--seed-list", "0", "--encoder", "minilm", "--quiet"]
    script = [sys.executable, str(root / "experiments" / "local-experiment" / "local_experiment.py")]
    one, two = tmp_path / "one", tmp_path / "two"
    router = one / "sweep" / "lam1.0_seed0"
    stage1 = [
        "--out",
        str(one),
        "--episodes",
        "65536",
        "trainer.first_step=all",
        "trainer.batch_episodes=512",
    ]
    stage2 = [
        *("--out", str(two), "--episodes", "131072", "--max-steps", "2", "--phi", "1", "--signals"),
        *(
            "trainer.first_step=all",
            "trainer.second_step=all",
            "trainer.second_target=0.1",
            "trainer.lr=0.01",
        ),
        *("trainer.later_baseline=stop", "trainer.batch_episodes=72", "trainer.eval_every=64"),
        *("policy.step_heads=true", "policy.one_call_first=true", "policy.later_inputs=signals"),
        f"trainer.init_first={router / 'best'}",
    ]
    for stage in (stage1, stage2):
        subprocess.run(
            [*script, *common, *stage, "policy.task_dims=8"], check=True, capture_output=True, env=env
        )
    alone = json.loads((router / "results.json").read_text())["heldout"]
    after = json.loads((two / "sweep" / "lam1.0_seed0" / "results.json").read_text())["heldout"]
    assert alone["calls"] == 1.0 and after["accuracy"] >= 0.665 > 199 / 320 + 0.04
    assert after["accuracy"] > alone["accuracy"] and 1.0 < after["calls"] < 1.15
