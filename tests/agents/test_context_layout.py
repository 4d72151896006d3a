"""A worker sees earlier work as its own past turns (``turns``) or quoted in its user turn (``inline``)."""

from __future__ import annotations

import pytest

from puppeteer.agents.pool import PoolError, load_pool, pool_from_dict
from puppeteer.agents.reasoning import Turn, worker_messages
from puppeteer.envs.executor import EpisodeContext, Executor
from puppeteer.types import Completion, CompletionRequest, Workflow

EARLIER = (
    Turn("qwen1.5b-cot", "Solve it.", "16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\nAnswer: 18", "18"),
    Turn("qwen0.5b-cot", "Solve it.", "It is 20 dollars, cut off", None),
)


def _agent(pattern: str = "verify") -> object:
    pool = pool_from_dict(
        {
            "name": "p",
            "models": {"m": {"backend": "sim", "params_b": 1}},
            "agents": [{"name": "a", "model": "m", "pattern": pattern}],
        }
    )
    return pool.agent(0)


def test_inline_layout_quotes_earlier_work_with_its_answers_in_the_user_turn() -> None:
    messages = worker_messages(_agent(), "How much does she make?", "", EARLIER, layout="inline")
    assert [m.role for m in messages] == ["system", "user"]  # no assistant turns the worker 'wrote'
    user = messages[1].content
    assert user.index("How much does she make?") < user.index("Agent qwen1.5b-cot wrote:")
    assert user.index("Agent qwen1.5b-cot wrote:") < user.index("Agent qwen0.5b-cot wrote:")
    assert "16 - 3 - 4 = 9 eggs" in user and "Its answer: 18" in user
    assert "Its answer: none (it stated no final answer)" in user
    assert user.rstrip().endswith("End with a line 'Answer: <answer>'.")


def test_turns_layout_replays_earlier_work_as_past_assistant_turns() -> None:
    messages = worker_messages(_agent(), "How much does she make?", "", EARLIER, layout="turns")
    assert [m.role for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[2].content == EARLIER[0].response
    assert "wrote:" not in messages[-1].content


def test_no_earlier_work_gives_the_same_messages_in_both_layouts() -> None:
    a = worker_messages(_agent("cot"), "Q?", "", [], layout="turns")
    b = worker_messages(_agent("cot"), "Q?", "", [], layout="inline")
    assert a == b


def test_pool_files_choose_the_layout_and_local_keeps_turns() -> None:
    assert load_pool("local").context_layout == "turns"  # its documented numbers replay from the cache
    v2 = load_pool("local-v2")
    assert v2.context_layout == "inline"
    assert v2.subset(["qwen0.5b-cot"]).context_layout == "inline"
    with pytest.raises(PoolError, match="context_layout"):
        pool_from_dict(
            {
                "name": "p",
                "context_layout": "sideways",
                "models": {"m": {"backend": "sim", "params_b": 1}},
                "agents": [{"name": "a", "model": "m"}],
            }
        )


class Recorder:
    """A backend that records requests and answers with a fixed text."""

    name = "recorder"

    def __init__(self) -> None:
        self.requests: list[CompletionRequest] = []

    def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        return Completion("Work.\nAnswer: 7", 5, 5, 0.0, 0.0, 0.01, "m")

    async def acomplete(self, request: CompletionRequest) -> Completion:
        return self.complete(request)


def test_executor_passes_the_earlier_steps_answer_into_an_inline_chain() -> None:
    pool = pool_from_dict(
        {
            "name": "p",
            "context_layout": "inline",
            "models": {"m": {"backend": "sim", "params_b": 1}},
            "agents": [
                {"name": "solver", "model": "m", "pattern": "cot"},
                {"name": "checker", "model": "m", "pattern": "verify"},
            ],
        }
    )
    backend = Recorder()
    ctx = EpisodeContext(question="What is 3 + 4?", item_key="i", extract=lambda text, _t: text.split()[-1])
    steps = Executor(backend=backend, pool=pool).run_workflow(ctx, Workflow((0, 1), ("", ""), ((), (0,))))
    assert [s.answer for s in steps] == ["7", "7"]
    second = backend.requests[1].messages
    assert [m.role for m in second] == ["system", "user"]
    assert "Agent solver wrote:" in second[1].content and "Its answer: 7" in second[1].content
