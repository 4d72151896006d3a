"""Program of thought: the model's program runs in the sandbox and what it prints is the answer."""

from __future__ import annotations

import os

import pytest

from puppeteer.agents.pool import pool_from_dict
from puppeteer.agents.pot import find_program, printed_answer, run_program
from puppeteer.agents.reasoning import PATTERNS, worker_messages
from puppeteer.envs.executor import EpisodeContext, Executor
from puppeteer.tasks.graders import NumericGrader
from puppeteer.tools import default_tools
from puppeteer.types import Completion, Task, Workflow


def _completion(text: str, truncated: bool = False) -> Completion:
    return Completion(
        text=text,
        prompt_tokens=10,
        completion_tokens=20,
        cost_usd=0.0,
        flops=0.0,
        latency_s=0.1,
        model="m",
        truncated=truncated,
    )


def test_find_program_takes_the_last_block_labelled_or_not() -> None:
    text = "```python\nprint(1)\n```\nthen\n```\nx = 2\nprint(x)\n```"
    assert find_program(text) == "x = 2\nprint(x)\n"
    assert find_program("no code at all") is None
    assert printed_answer("debug 3\n\n 42 \n\n") == "42"
    assert printed_answer("  \n") is None


def test_run_program_writes_the_printed_result_as_the_answer() -> None:
    code = "```python\neggs = 16 - 3 - 4\nprint(eggs * 2)\n```"
    run = run_program(_completion(code, truncated=True))
    assert run.answer == "18"
    assert run.result is not None and run.result.ok
    assert run.completion.text.endswith("Program output:\n18\nAnswer: 18")
    assert run.completion.truncated  # the model's own flag is kept for truncation statistics
    grader = NumericGrader()
    task = Task("t", "q", "18", "gsm8k", "gsm8k", "numeric")
    # "Answer:" is a committed answer, so even a cut-off generation gives one
    assert grader.extract(run.completion.text, task, truncated=True) == "18"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("I think it is 18.", "[no program found]"),
        ("```python\nprint(1/0)\n```", "ZeroDivisionError"),
        ("```python\nx = 18\n```", "(no output"),
    ],
)
def test_run_program_gives_no_answer_when_the_program_does_not_print_one(text: str, fragment: str) -> None:
    run = run_program(_completion(text))
    assert run.answer is None
    assert fragment in run.completion.text
    assert "Answer:" not in run.completion.text


def test_pot_prompt_asks_for_a_program_and_no_answer_line() -> None:
    pool = _sim_pool()
    messages = worker_messages(pool.agent(0), "What is 2+2?", "", [], answer_format="End with 'Answer: <n>'.")
    assert PATTERNS["pot"].runs_program
    assert "```python```" in messages[-1].content
    assert "Answer:" not in messages[-1].content


def _sim_pool() -> object:
    return pool_from_dict(
        {
            "name": "sim-pot",
            "backend_options": {"sim": {"seed": 0, "default_column": "MATH500"}},
            "models": {
                "m": {
                    "backend": "sim",
                    "target": "m",
                    "params_b": 1.0,
                    "options": {"skills": {"MATH500": 70.0}, "tokens_mean": 80},
                }
            },
            "agents": [
                {"name": "m-pot", "model": "m", "pattern": "pot", "max_tokens": 256},
                {"name": "m-cot", "model": "m", "pattern": "cot", "max_tokens": 256},
            ],
        }
    )


def test_pot_end_to_end_through_the_sandbox_on_the_sim_backend() -> None:
    from puppeteer.envs.env import ConductorEnv

    env = ConductorEnv(mode="step", pool=_sim_pool(), suite="arith", split="test", n_tasks=6, max_steps=1)
    results = []
    for seed in range(6):
        env.reset(seed=seed)
        _, _reward, _terminated, _truncated, _info = env.step(0)
        step = env.unwrapped._steps[-1] if hasattr(env.unwrapped, "_steps") else None
        assert step is not None
        assert step.tool_calls == 1  # the program ran
        assert "```python" in step.completion.text and "Program output:" in step.completion.text
        printed = step.completion.text.split("Program output:\n")[1].splitlines()[0]
        assert step.answer == printed  # the answer is what the sandbox printed
        results.append(step.answer)
    assert all(a is not None for a in results)
    env.close()


MODEL = os.environ.get("PUPPETEER_POT_MODEL", "qwen2.5-coder-0.5b")


@pytest.mark.slow
def test_pot_end_to_end_on_a_real_model() -> None:
    """One item, the 0.5B coder (greedy): it writes a program, the sandbox runs it, the answer counts."""
    pytest.importorskip("llama_cpp")
    from puppeteer.backends import make_router

    pool = pool_from_dict(
        {
            "name": "real-pot",
            "models": {"q": {"backend": "llamacpp", "target": MODEL, "params_b": 0.49}},
            "agents": [{"name": "q-pot", "model": "q", "pattern": "pot", "max_tokens": 200}],
        }
    )
    question = "A farmer has 17 rows of 23 apple trees and sells 40 trees. How many trees are left?"
    task = Task("pot-1", question, "351", "arith", "arith", "numeric")
    grader = NumericGrader()
    router = make_router({"llamacpp": {"n_ctx": 2048}})
    try:
        executor = Executor(backend=router, pool=pool, tools=default_tools())
        ctx = EpisodeContext(
            question=task.question,
            item_key=task.id,
            extract=lambda text, truncated: grader.extract(text, task, truncated=truncated),
        )
        (step,) = executor.run_workflow(ctx, Workflow((0,), ("",), ((),)))
    finally:
        router.close()
    assert step.tool_calls == 1
    assert "Program output:" in step.completion.text
    assert grader.grade(step.answer, task), step.completion.text


def test_an_evaluation_counts_every_program_run_as_a_tool_call() -> None:
    from puppeteer.evaluation.evaluate import evaluate_policy
    from puppeteer.tasks import load_suite

    pool = _sim_pool()
    tasks = load_suite("arith", "test", n=6)
    pot = evaluate_policy("single:m-pot", pool, "arith", tasks=tasks, progress=False)
    cot = evaluate_policy("single:m-cot", pool, "arith", tasks=tasks, progress=False)
    assert pot.tool_call_rate == 1.0 and cot.tool_call_rate == 0.0


def test_an_env_and_its_clones_run_each_program_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replaying an item's calls (the same completion every time) runs its program in the sandbox once
    per env family, and every step reads the same output as a fresh run would give."""
    import puppeteer.agents.pot as pot
    from puppeteer.envs.env import ConductorEnv

    runs: list[str] = []
    real = pot.run_python_patiently

    def counted(program: str, limits: object = None, **kw: object) -> object:
        runs.append(program)
        return real(program, limits=limits, **kw)

    monkeypatch.setattr(pot, "run_python_patiently", counted)
    env = ConductorEnv(mode="step", pool=_sim_pool(), suite="arith", split="test", n_tasks=1, max_steps=1)
    clone = env.clone()
    answers = []
    for e in (env, clone, env):
        e.reset(seed=0)  # the same sample index: the simulator writes the same program
        e.step(0)
        step = e._steps[-1]
        assert step.tool_calls == 1  # still one program run per step, as the agent sees it
        answers.append(step.answer)
    assert len(runs) == 1 and len(set(answers)) == 1 and answers[0] is not None
    fresh = run_program(_completion(env._steps[-1].completion.text.split("\n\nProgram output:")[0]))
    assert fresh.answer == answers[0]
    env.close()
