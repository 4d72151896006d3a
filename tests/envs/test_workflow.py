from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from puppeteer.envs.workflow import (
    WorkflowError,
    WorkflowLimits,
    format_workflow,
    parse_workflow,
    visible_steps,
)
from puppeteer.types import Workflow


def test_last_well_formed_triple_wins_after_reasoning() -> None:
    text = """I could use model_id = [0] but that is weak.
    Draft:
    model_id = [0, 1]
    subtasks = ["solve", "check"]
    access_list = [[], "all"
    Final:
    ```python
    model_id = [2, 1, 0]
    subtasks = ["Solve the [hard] part", 'Check "it"', "Conclude"]
    access_list = [[], [0], "all"]
    ```"""
    wf = parse_workflow(text, n_agents=3)
    assert wf.model_id == (2, 1, 0)
    assert wf.subtasks[0] == "Solve the [hard] part"
    assert wf.access_list == ((), (0,), "all")
    assert visible_steps(wf, 2) == (0, 1)
    assert visible_steps(wf, 1) == (0,)


def test_falls_back_to_earlier_triple_when_last_is_broken() -> None:
    text = 'model_id = [1]\nsubtasks = ["a"]\naccess_list = [[]]\nmodel_id = [1, 2]\nsubtasks = ["x", "y"]\n'
    assert parse_workflow(text, n_agents=3).model_id == (1,)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("no lists here", "no 'model_id"),
        ('model_id = [0]\nsubtasks = ["a"]', "missing access_list"),
        ('model_id = [0, 1]\nsubtasks = ["a"]\naccess_list = [[], []]', "differ in length"),
        ('model_id = [7]\nsubtasks = ["a"]\naccess_list = [[]]', "out of range"),
        ('model_id = [-1]\nsubtasks = ["a"]\naccess_list = [[]]', "out of range"),
        ('model_id = [True]\nsubtasks = ["a"]\naccess_list = [[]]', "must be an int"),
        ('model_id = ["0"]\nsubtasks = ["a"]\naccess_list = [[]]', "must be an int"),
        ('model_id = [0]\nsubtasks = [""]\naccess_list = [[]]', "non-empty"),
        ('model_id = [0]\nsubtasks = ["a"]\naccess_list = [[0]]', "not an earlier step"),
        ('model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], [1]]', "not an earlier step"),
        ('model_id = [0]\nsubtasks = ["a"]\naccess_list = ["some"]', "'all' or a list"),
        ("model_id = []\nsubtasks = []\naccess_list = []", "empty workflow"),
        ('model_id = [0,0,0,0,0,0]\nsubtasks = ["a"]*6\naccess_list = [[]]*6', "missing"),
        ("model_id = [0]*9\nsubtasks = ['a']\naccess_list = [[]]", "no 'model_id"),
        (
            'model_id = [__import__("os").system("touch /tmp/pwned")]\nsubtasks = ["a"]\naccess_list = [[]]',
            "not a Python literal",
        ),
        ('model_id = [(lambda: 1)()]\nsubtasks = ["a"]\naccess_list = [[]]', "not a Python literal"),
    ],
)
def test_hostile_and_malformed_workflows_are_rejected(text: str, fragment: str) -> None:
    with pytest.raises(WorkflowError, match=fragment.replace("[", r"\[").replace("(", r"\(")):
        parse_workflow(text, n_agents=3)


def test_a_bare_access_index_means_a_one_element_list() -> None:
    # SmolLM2-135M writes `access_list = [[], 0]` (llama.cpp probe, docs/conductor-grpo.md)
    wf = parse_workflow('model_id = [0, 1, 2]\nsubtasks = ["a", "b", "c"]\naccess_list = [[], 0, 1]', 3)
    assert wf.access_list == ((), (0,), (1,))
    assert visible_steps(wf, 2) == (1,)
    for bad, fragment in (("[0]", "not an earlier step"), ("[True]", "'all' or a list"), ("[-1]", "earlier")):
        with pytest.raises(WorkflowError, match=fragment):
            parse_workflow(f'model_id = [0]\nsubtasks = ["a"]\naccess_list = {bad}', n_agents=3)


def test_too_many_steps_and_unavailable_agents() -> None:
    text = format_workflow(Workflow((0,) * 6, ("a",) * 6, ((),) * 6))
    with pytest.raises(WorkflowError, match="exceed the limit of 5"):
        parse_workflow(text, n_agents=3)
    assert len(parse_workflow(text, n_agents=3, limits=WorkflowLimits(max_steps=6))) == 6
    with pytest.raises(WorkflowError, match="not available"):
        parse_workflow(format_workflow(Workflow((1,), ("a",), ((),))), 3, available=[True, False, True])


def test_deeply_nested_and_huge_inputs_fail_fast() -> None:
    nested = "model_id = " + "[" * 100_000 + "]" * 100_000 + "\nsubtasks=['a']\naccess_list=[[]]"
    huge = 'model_id = [0]\nsubtasks = ["' + "x" * 5_000_000 + '"]\naccess_list = [[]]'
    start = time.perf_counter()
    for text in (nested, huge):
        with pytest.raises(WorkflowError):
            parse_workflow(text, n_agents=3)
    assert time.perf_counter() - start < 5.0  # generous: this guards against runaway parsing, not speed


def test_side_effects_never_happen(tmp_path) -> None:
    marker = tmp_path / "pwned"
    text = f'model_id = [0]\nsubtasks = [open("{marker}", "w").write("x")]\naccess_list = [[]]'
    with pytest.raises(WorkflowError):
        parse_workflow(text, n_agents=3)
    assert not marker.exists()


_subtask = st.text(min_size=1, max_size=40).filter(lambda s: s.strip() == s and s.strip())


@st.composite
def workflows(draw: st.DrawFn) -> Workflow:
    n = draw(st.integers(1, 5))
    ids = tuple(draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)))
    subtasks = tuple(draw(st.lists(_subtask, min_size=n, max_size=n)))
    access: list[str | tuple[int, ...]] = []
    for i in range(n):
        if draw(st.booleans()):
            access.append("all")
        else:
            access.append(
                tuple(sorted(set(draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=i))))) if i else ()
            )
    return Workflow(ids, subtasks, tuple(access))


@settings(max_examples=200, deadline=None)
@given(workflows(), st.text(max_size=60))
def test_round_trip(wf: Workflow, preamble: str) -> None:
    text = preamble.replace("model_id", "m") + "\n" + format_workflow(wf)
    assert parse_workflow(text, n_agents=7) == wf
