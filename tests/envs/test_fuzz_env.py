"""Fuzzing ``env.step`` (issue 10): any action either runs or is refused with gymnasium's errors.

Workflow mode takes arbitrary text up to the action space's maximum length (random text,
grammar-shaped fragments, and fragments repeated up to the limit); step mode takes arbitrary
objects. Per step: no exception other than gymnasium's documented ones, bounded work (the
workflow scanner reads each character at most a fixed number of times, counted, not timed),
and nothing executed (``os.system``, ``os.popen`` and ``subprocess.Popen`` are booby-trapped, and
the sentinel file that the hostile fragments try to create must not appear).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import numpy as np
import pytest
from gymnasium.error import InvalidAction
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import puppeteer.envs.workflow as workflow_module
from puppeteer.envs.env import ConductorEnv
from puppeteer.envs.listscan import STATES, match_lists
from puppeteer.envs.workflow import MAX_TEXT_CHARS

FRAGMENTS = [
    "model_id",
    "subtasks",
    "access_list",
    " = ",
    "=",
    ":",
    "[",
    "]",
    "[[",
    "]]",
    ",",
    "'",
    '"',
    "'''",
    '"""',
    "\\",
    "\n",
    "#",
    "```",
    "```python\n",
    "all",
    "'all'",
    '["all"]',
    "0",
    "1",
    "2",
    "99",
    "-1",
    "True",
    "None",
    "1e9",
    "(",
    ")",
    "{",
    "}",
    "__import__('os').system('touch /tmp/puppeteer-fuzz-pwned')",
    "lambda: 1",
    "\udcff",
    "\ud83d\ude00",
    "\x00",
    "\u202e",
    "𝔘𝔫𝔦",
    " ",
    "\t",
]
SENTINEL = "/tmp/puppeteer-fuzz-pwned"
VALID = "model_id = [0, 1]\nsubtasks = ['solve', 'check']\naccess_list = [[], 'all']\n"


@st.composite
def completions(draw: st.DrawFn) -> str:
    """Text in the workflow action space: random, grammar-shaped, or a repetition up to the limit."""
    kind = draw(st.sampled_from(["random", "shaped", "repeated"]))
    if kind == "random":
        return draw(st.text(max_size=2_000))
    parts = draw(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), max_size=60))
    text = "".join(parts)
    if kind == "repeated" and text:
        reps = draw(st.integers(1, MAX_TEXT_CHARS // len(text)))
        prefix = draw(st.sampled_from(["", "model_id = [0]\nsubtasks = ['a']\naccess_list = [[]]\n"]))
        text = prefix + text * reps
    return text[:MAX_TEXT_CHARS]


@pytest.fixture(scope="module")
def workflow_env() -> ConductorEnv:
    return ConductorEnv(mode="workflow", pool="sim-paper", suite="arith", n_tasks=4)


@pytest.fixture(scope="module")
def step_env() -> ConductorEnv:
    return ConductorEnv(mode="step", pool="sim-paper", suite="arith", n_tasks=4, max_steps=3)


@pytest.fixture(autouse=True, scope="module")
def nothing_runs(workflow_env: ConductorEnv, step_env: ConductorEnv) -> Iterator[None]:
    """Fail loudly if anything in a step evaluates or executes code."""

    def trap(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"code execution attempted: {args!r:.80}")

    mp = pytest.MonkeyPatch()
    for target, name in ((os, "system"), (os, "popen"), (subprocess, "Popen")):
        mp.setattr(target, name, trap)
    yield
    mp.undo()
    assert not os.path.exists(SENTINEL)


class _Work:
    visits = 0
    chars = 0


@pytest.fixture(scope="module", autouse=True)
def count_scanner_work() -> Iterator[None]:
    mp = pytest.MonkeyPatch()

    def counted(text, starts, window):  # type: ignore[no-untyped-def]
        result = match_lists(text, starts, window)
        _Work.visits += result.visits
        _Work.chars += len(text)
        return result

    mp.setattr(workflow_module, "match_lists", counted)
    yield
    mp.undo()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(text=completions())
@example(text=VALID + "model_id=[" * ((MAX_TEXT_CHARS - len(VALID)) // 10))
@example(text=('subtasks = ["' * (MAX_TEXT_CHARS // 13))[:MAX_TEXT_CHARS])
@example(text="model_id = [0, 1]\nsubtasks = ['a\udcff', 'b']\naccess_list = [[], ['all']]")
@example(text="x" * MAX_TEXT_CHARS)
def test_workflow_step_accepts_any_text_in_the_action_space(workflow_env: ConductorEnv, text: str) -> None:
    assert workflow_env.action_space.contains(text)
    workflow_env.reset(seed=0)
    _Work.visits = _Work.chars = 0
    obs, reward, terminated, truncated, info = workflow_env.step(text)
    assert terminated and not truncated
    assert reward in (0.0, 0.5, 1.0)
    assert (info["parse_error"] is None) == (reward > 0)
    assert workflow_env.observation_space.contains(obs)
    # bounded work per step, whatever the text: each character read at most once per lexer state
    assert _Work.visits <= len(STATES) * max(_Work.chars, 1)


ACTIONS = st.one_of(
    st.integers(-5, 20),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.none(),
    st.booleans(),
    st.builds(np.int64, st.integers(-5, 20)),
    st.lists(st.integers(0, 3), max_size=3),
    st.builds(lambda x: np.array([x]), st.integers(0, 3)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(ACTIONS, min_size=1, max_size=8), seed=st.integers(0, 3))
def test_step_mode_accepts_or_refuses_any_action(
    step_env: ConductorEnv, actions: list[object], seed: int
) -> None:
    step_env.reset(seed=seed)
    for action in actions:
        valid = (
            not isinstance(action, bool)
            and step_env.action_space.contains(action)
            and bool(
                step_env.action_masks()[int(action)]  # type: ignore[call-overload]
            )
        )
        try:
            obs, reward, terminated, truncated, info = step_env.step(action)
        except InvalidAction:
            assert not valid
            continue
        assert valid
        assert np.isfinite(reward) and step_env.observation_space.contains(obs)
        if terminated or truncated:
            assert isinstance(info["correct"], bool)
            step_env.reset(seed=seed)
