"""The sim env's fast path (issue 33 section 4): answers extracted from the part of a simulated
completion that the simulator vouches for (``Completion.answer_text``), memoised per task.

It must change nothing but speed: the same seeds give the same trajectories, rewards, returns and
costs both ways, every built-in grader reads the same answer from the vouched part as from the whole
text, and everything that tests extraction still reads the whole text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from puppeteer.agents.pool import load_pool
from puppeteer.agents.pot import run_program
from puppeteer.agents.reasoning import PATTERNS
from puppeteer.backends.sim import SimBackend
from puppeteer.backends.sim.answers import _OPENERS, SimItem, _reasoning_prefix, _render_final, display_answer
from puppeteer.envs.env import VOUCHED_GRADERS, ConductorEnv
from puppeteer.envs.executor import EpisodeContext, _answer
from puppeteer.envs.rollout import EpisodeEnd, run_episode
from puppeteer.envs.trajectories import trajectory_to_dict
from puppeteer.envs.workflow import format_workflow
from puppeteer.tasks.graders import (
    CodeGrader,
    ExactGrader,
    Grader,
    LetterGrader,
    MathGrader,
    NumericGrader,
    ReasoningGymGrader,
    default_graders,
)
from puppeteer.tools.loop import merge
from puppeteer.types import CallContext, Completion, CompletionRequest, Message, ModelSpec, Task, Workflow

TEXT_PATH = {"sim": {"answer_text": False}}
EPISODES = 300


def _obs_key(obs: dict[str, Any]) -> str:
    return json.dumps(
        {k: (v.tolist(), str(v.dtype)) if isinstance(v, np.ndarray) else v for k, v in obs.items()},
        sort_keys=True,
    )


def _record(end: EpisodeEnd) -> dict[str, Any]:
    """Everything an episode produced: the trajectory (texts, answers, tokens, costs, grade, reward),
    the rewards paid, the returns and cost F, and every observation the policy saw."""
    info = end.info
    return {
        "trajectory": trajectory_to_dict(end.trajectory),
        "rewards": end.rewards,
        "cost": end.cost,
        "returns": info.get("returns"),
        "correct": info["correct"],
        "final_answer": info["final_answer"],
        "observations": [_obs_key(o) for o in end.observations],
    }


def _episodes(env: ConductorEnv, episodes: int) -> Iterator[dict[str, Any]]:
    """Random valid actions (step mode) or random workflows (workflow mode), the same for any env of
    the same pool and mode."""
    rng = np.random.default_rng(7)
    n = len(env.pool)
    for ep in range(episodes):
        lam = float(rng.choice([0.0, 0.1, 0.5]))
        if env.config.mode == "step":

            def act(_obs: dict[str, Any], info: dict[str, Any]) -> int:
                valid = np.flatnonzero(info["action_mask"])
                return int(valid[-1] if rng.random() < 0.25 else valid[rng.integers(len(valid))])

        else:
            k = int(rng.integers(1, 5))
            access = tuple(
                "all" if rng.random() < 0.3 else tuple(j for j in range(i) if rng.random() < 0.5)
                for i in range(k)
            )
            subtasks = tuple(f"Solve part {i}." if rng.random() < 0.5 else "Solve." for i in range(k))
            text = format_workflow(
                Workflow(tuple(int(i) for i in rng.integers(0, n, size=k)), subtasks, access)
            )

            def act(_obs: dict[str, Any], _info: dict[str, Any], text: str = text) -> str:
                return text

        yield _record(run_episode(env, act, seed=ep, options={"lam": lam}))


@pytest.mark.parametrize("mode", ["step", "workflow"])
@pytest.mark.parametrize(("pool", "suite"), [("sim-paper", "mix-paper"), ("sim-routing", "mix-routing")])
def test_fast_path_gives_the_text_paths_episodes(pool: str, suite: str, mode: str) -> None:
    """Several hundred episodes of the same seeds, both ways: identical trajectories (texts, step
    answers, final answers, grades, tokens, USD, FLOPs), rewards, returns, costs and observations."""
    settings = {"mode": mode, "pool": pool, "suite": suite, "n_tasks": 100, "max_steps": 4}
    fast = ConductorEnv(**settings)
    text = ConductorEnv(**settings, backend_options=TEXT_PATH)
    vouched = 0
    for a, b in zip(_episodes(fast, EPISODES), _episodes(text, EPISODES), strict=True):
        assert a == b
        vouched += len(a["trajectory"]["steps"])
    assert vouched > EPISODES  # the episodes did call workers
    # and the fast env did take the fast path: its workers' completions vouch for their answer line
    steps = [s for traj in (fast._result,) if traj is not None for s in traj.steps]
    assert all(s.completion.answer_text for s in steps if s.completion.text)
    assert any(memo for _, _, memo in fast._extractions.values())
    assert not any(memo for _, _, memo in text._extractions.values())


class _Spy:
    """Records the texts that a built-in grader class is asked to extract from (the class stays
    the same, so the env still treats it as a built-in grader)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.texts: list[str] = []
        for cls in VOUCHED_GRADERS:
            original = cls.extract

            def spy(
                grader: Any, text: str, task: Task, *, truncated: bool = False, _orig: Any = original
            ) -> Any:
                self.texts.append(text)
                return _orig(grader, text, task, truncated=truncated)

            monkeypatch.setattr(cls, "extract", spy)


def _run_steps(env: ConductorEnv, episodes: int = 40) -> list[Completion]:
    completions = []
    for ep in range(episodes):
        agent = 0 if ep % 2 else 7  # a cot worker, or a verifier that sees the earlier work
        end = run_episode(env, lambda _o, _i, agent=agent: agent, seed=ep)
        completions += [s.completion for s in end.trajectory.steps]
    return completions


def test_the_fast_path_extracts_from_the_vouched_part_once_per_task(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = _Spy(monkeypatch)
    completions = _run_steps(ConductorEnv(mode="step", pool="sim-paper", suite="mix-paper", max_steps=3))
    vouched = {c.answer_text for c in completions}
    assert None not in vouched
    assert spy.texts and set(spy.texts) <= vouched  # never the whole text
    assert len(spy.texts) < len(completions)  # memoised


def test_extraction_under_test_reads_the_whole_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SimBackend(answer_text=False)`` (``backend_options={"sim": {"answer_text": False}}``) is the
    text path: no vouched part, every step's answer extracted from its whole text."""
    spy = _Spy(monkeypatch)
    env = ConductorEnv(
        mode="step", pool="sim-paper", suite="mix-paper", max_steps=3, backend_options=TEXT_PATH
    )
    completions = _run_steps(env)
    assert all(c.answer_text is None for c in completions)
    assert spy.texts == [c.text for c in completions]
    assert any("\n" in t for t in spy.texts)  # the reasoning lines went through the extractor too


def test_a_grader_of_your_own_reads_the_whole_text() -> None:
    """The vouched part is known to be enough for the built-in graders only: another grader (a
    subclass included) always gets the whole text, even from a vouching backend."""

    class Mine(NumericGrader):
        def extract(self, text: str, task: Task, *, truncated: bool = False) -> str | None:
            seen.append(text)
            return super().extract(text, task, truncated=truncated)

    seen: list[str] = []
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", max_steps=3)
    env.graders = {**env.graders, "numeric": Mine()}
    completions = _run_steps(env, 20)
    assert completions and all(c.answer_text for c in completions)
    assert seen == [c.text for c in completions]


def _completion(text: str, answer_text: str | None) -> Completion:
    return Completion(text, 1, 1, 0.0, 0.0, 0.0, "m", answer_text=answer_text)


def _context(vouched: bool) -> EpisodeContext:
    from puppeteer.tasks.extract import extract_number

    return EpisodeContext(
        question="q",
        item_key="k",
        extract=lambda text, truncated: extract_number(text, committed_only=truncated),
        extract_vouched=(lambda text, truncated: f"vouched:{text}") if vouched else None,
    )


def test_the_executor_takes_the_vouched_part_only_where_it_may() -> None:
    done = _completion("Work.\nAnswer: 4", "Answer: 4")
    assert _answer(_context(True), done) == "vouched:Answer: 4"
    assert _answer(_context(False), done) == "4"  # a context without the fast path (Orchestrator, serve)
    assert _answer(_context(True), _completion("Answer: 4", None)) == "4"  # nothing vouched
    # a vouched part that is not the end of the text vouches for nothing
    assert _answer(_context(True), _completion("Answer: 4\nNo, Answer: 5", "Answer: 4")) == "5"


def test_text_rewritten_after_the_backend_drops_the_vouched_part() -> None:
    """Program of thought rewrites the text (the program's output), so the backend's word no longer
    holds; a tool loop keeps the last round's."""
    program = _completion("```python\nprint(6 * 7)\n```", "```")
    assert run_program(program).completion.answer_text is None
    one = _completion("Answer: 1", "Answer: 1")
    assert merge([one]) is one
    assert merge([_completion("call", None), one]).answer_text == "Answer: 1"


def test_saved_trajectories_do_not_carry_the_vouched_part() -> None:
    env = ConductorEnv(mode="step", pool="sim-paper", suite="arith", max_steps=2)
    end = run_episode(env, lambda _o, _i: 0, seed=0)
    assert end.trajectory.steps[0].completion.answer_text
    record = trajectory_to_dict(end.trajectory)
    assert all("answer_text" not in s["completion"] for s in record["steps"])


# --------------------------------------------------------------------------- the simulator's promise

GOLDS: dict[str, tuple[str, ...]] = {
    "numeric": ("42", "-931", "1,234", "-7.5", "0", "3/4", "1e3", "$12"),
    "letter": ("A", "C", "(B)", "d"),
    "math": (r"\frac{3}{4}", "12", "-0.5", r"x^2 + 1", r"\boxed{7}", r"(1, 2)", r"\sqrt{2}"),
    "code": ('def add(a, b):\n    """Add."""\n    return a + b', "    return x * 2"),
    "text": ("Zoey is a knight, and Oliver is a knave", "Paris", "no", "42 apples", "Question: why"),
}


def _tasks(kind: str, gold: str) -> list[tuple[Grader, Task]]:
    """The built-in graders that read answers of ``kind``, each with a task it could be grading."""
    meta: dict[str, Any] = {"choices": ("one", "two", "three", "four")} if kind == "letter" else {}
    if kind == "code":
        meta = {"entry_point": "add"}
    task = Task("t", "q", gold, "s", "d", "x", meta)
    rg = {
        kind_: replace(
            task,
            meta={
                "rg_answer": kind_,
                "rg_entry": {"metadata": {"names": ["Zoey", "Oliver"], "knight_knave_terms": {}}},
            },
        )
        for kind_ in ("number", "knights", "text")
    }
    by_kind: dict[str, list[tuple[Grader, Task]]] = {
        "numeric": [(NumericGrader(), task), (ReasoningGymGrader(), rg["number"])],
        "letter": [(LetterGrader(), task)],
        "math": [(MathGrader(), task), (NumericGrader(), task)],
        "code": [(CodeGrader(), task)],
        "text": [
            (ExactGrader(), task),
            (ReasoningGymGrader(), rg["knights"]),
            (ReasoningGymGrader(), rg["text"]),
        ],
    }
    return by_kind[kind]


def test_every_built_in_grader_is_covered() -> None:
    assert VOUCHED_GRADERS == {type(g) for g in default_graders().values()}
    covered = {type(g) for kind, golds in GOLDS.items() for g, _ in _tasks(kind, golds[0])}
    assert covered == VOUCHED_GRADERS


@pytest.mark.parametrize("kind", sorted(GOLDS))
def test_no_reasoning_line_changes_what_a_grader_extracts(kind: str) -> None:
    """Every reasoning prefix the simulator writes (each pattern, length and shift) in front of every
    final answer part: each built-in grader extracts from the whole text what it extracts from the part
    alone, finished or cut off (``truncated``)."""
    patterns = sorted({*PATTERNS, *_OPENERS, "cot"} - {"pot"})
    prefixes = {
        _reasoning_prefix(p, count, shift) for p in patterns for count in range(1, 9) for shift in range(10)
    }
    assert "" in prefixes and len(prefixes) > 100
    for gold in GOLDS[kind]:
        final = _render_final(display_answer(gold, kind), kind)
        for grader, task in _tasks(kind, gold):
            for truncated in (False, True):
                alone = grader.extract(final, task, truncated=truncated)
                for prefix in prefixes:
                    assert grader.extract(prefix + final, task, truncated=truncated) == alone, (prefix, final)


def test_simulated_completions_vouch_for_their_end_and_graders_agree() -> None:
    """Through the backend itself: right and wrong answers, revising patterns that see earlier work,
    items it does not know; the vouched part ends the text and gives the grader the same answer."""
    items = {
        f"{kind}{i}": SimItem(gold, "d", kind)
        for kind, golds in GOLDS.items()
        for i, gold in enumerate(golds)
    }
    backend = SimBackend(items, default_column="C")
    model = ModelSpec("half", "sim", "half", 1.0, options={"skills": {"C": 0.5}})
    checked = 0
    for key, item in [*items.items(), ("unknown", SimItem("1", "d"))]:
        for pattern in ("cot", "direct", "plan", "verify", "summarize", "critique"):
            for sample in range(6):
                visible = ("12", "(B)", "x") if sample % 2 else ()
                req = CompletionRequest(
                    model=model,
                    messages=(Message("user", "q"),),
                    sample_index=sample,
                    context=CallContext(item_key=key, pattern=pattern, visible_answers=visible),
                )
                c = backend.complete(req)
                assert c.answer_text and c.text.endswith(c.answer_text)
                for grader, task in _tasks(item.kind, item.gold):
                    for truncated in (False, True):
                        full = grader.extract(c.text, task, truncated=truncated)
                        assert grader.extract(c.answer_text, task, truncated=truncated) == full
                        checked += 1
    assert checked > 1000
    pot = CompletionRequest(
        model, (Message("user", "q"),), context=CallContext(item_key="numeric0", pattern="pot")
    )
    assert backend.complete(pot).answer_text is None  # a program: its answer is what it prints


def test_the_option_is_a_backend_option_of_simulated_pools() -> None:
    pool = load_pool("sim-paper")
    assert SimBackend(**{**pool.backend_options["sim"], "answer_text": False}).answer_text is False
    assert SimBackend(**pool.backend_options["sim"]).answer_text is True
