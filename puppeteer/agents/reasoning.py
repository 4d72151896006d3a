"""Reasoning patterns as prompt templates, and the worker prompt builder.

A pattern is a system prompt plus an instruction for the current turn. Patterns
that react to earlier work (critique, reflect, refine, verify, summarize) say so
in their text; which earlier work a worker sees is the executor's business.

``pot`` (program of thought) asks for one Python program that prints the answer;
``runs_program`` tells the executor to run it in the sandbox (``puppeteer.agents.pot``).

Earlier work reaches a worker in one of the ``CONTEXT_LAYOUTS``: ``turns`` (as past
user/assistant turns, as if the worker had written them) or ``inline`` (quoted inside
the current user turn, "Agent X wrote: ...", with the answer it gave).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from puppeteer.types import Agent, Message
from puppeteer.utils.fastinit import fast_init


@dataclass(frozen=True)
class Pattern:
    name: str
    system: str
    instruction: str
    reads_context: bool = False
    runs_program: bool = False
    asks_answer_format: bool = True  # False: the instruction itself says how to end


PATTERNS: Mapping[str, Pattern] = MappingProxyType(
    {
        p.name: p
        for p in (
            Pattern(
                "direct",
                "You answer questions directly and concisely.",
                "Give the final answer right away, without explanation.",
            ),
            Pattern(
                "cot",
                "You are a careful problem solver.",
                "Think step by step, briefly, then give the final answer.",
            ),
            Pattern(
                "plan",
                "You are a planner who decomposes problems.",
                "First list the sub-steps needed, then carry them out one by one, then give the final answer.",  # noqa: E501
            ),
            Pattern(
                "critique",
                "You are a critical reviewer.",
                "Point out concrete errors in the earlier answers, if any, then give the answer you "
                "believe is correct.",
                reads_context=True,
            ),
            Pattern(
                "reflect",
                "You reflect on your own reasoning.",
                "Reflect on the work so far: what could be wrong? Then give your corrected final answer.",
                reads_context=True,
            ),
            Pattern(
                "refine",
                "You improve existing solutions.",
                "Take the best earlier solution, fix any mistake and make it complete, then give the "
                "final answer.",
                reads_context=True,
            ),
            Pattern(
                "verify",
                "You are a meticulous verifier.",
                "Check the earlier answer step by step. If it is right, repeat it; if it is wrong, "
                "solve the problem yourself. Then give the final answer.",
                reads_context=True,
            ),
            Pattern(
                "summarize",
                "You conclude discussions.",
                "Summarise the earlier answers and state the answer most of the evidence supports.",
                reads_context=True,
            ),
            Pattern(
                "pot",
                "You solve problems by writing Python programs.",
                "Write one complete Python program in a single ```python``` block that computes the "
                "answer and prints only the final answer (a number, or the letter of the option). "
                "Do not explain; write only the code block.",
                runs_program=True,
                asks_answer_format=False,  # the program's printed output is the answer
            ),
            Pattern(
                "code",
                "You are an expert Python programmer.",
                "Write the solution directly, with no explanation before it.",
            ),
            Pattern(
                "calculate",
                "You are a careful problem solver.",
                "Call the calculator with one <tool_call> whose expression computes the final answer; "
                "after its <tool_response>, end with a line 'Answer: <answer>'.",
                asks_answer_format=False,  # asked up front, the small models answer without calling
            ),
        )
    }
)

# How each grader wants the answer written; the env picks one by the task's grader.
ANSWER_FORMATS: Mapping[str, str] = MappingProxyType(
    {
        "numeric": "End with a line 'Answer: <number>'.",
        "math": "End with the final answer in \\boxed{...} and a line 'Answer: <answer>'.",
        "letter": "End with a line 'Answer: <letter>' naming one option.",
        "code": "Give the complete function in one ```python``` code block.",
        "rg": "End with a line 'Answer: <answer>'.",
        "exact": "End with a line 'Answer: <answer>'.",
    }
)
DEFAULT_FORMAT = "End with a line 'Answer: <answer>'."


def pattern(name: str) -> Pattern:
    try:
        return PATTERNS[name]
    except KeyError:
        raise KeyError(f"unknown reasoning pattern {name!r}; known: {', '.join(PATTERNS)}") from None


@fast_init  # built at every env step (puppeteer/utils/fastinit.py)
@dataclass(frozen=True)
class Turn:
    """An earlier (subtask, response) pair that a worker is allowed to see."""

    agent_name: str
    subtask: str
    response: str
    answer: str | None = None

    @property
    def exchange(self) -> tuple[Message, Message]:
        """This turn as a past user/assistant exchange (made once: every later call of an episode
        shows it, and the executor makes one Turn per step). Kept in the instance's ``__dict__``, as
        ``functools.cached_property`` would, without its lock (Python 3.11 takes one per read)."""
        exchange = self.__dict__.get("_exchange")
        if exchange is None:
            request = Message("user", f"[{self.agent_name}] {self.subtask}")
            exchange = self.__dict__["_exchange"] = request, Message("assistant", self.response)
        return exchange


Layout = Callable[[Sequence[Turn]], tuple[tuple[Message, ...], str]]
"""Earlier turns -> (messages placed before the request, text placed at the top of the request)."""


def turns_layout(visible: Sequence[Turn]) -> tuple[tuple[Message, ...], str]:
    """Each earlier turn as a past user/assistant exchange (the worker 'wrote' the earlier work)."""
    messages: list[Message] = []
    for turn in visible:
        messages.extend(turn.exchange)
    return tuple(messages), ""


def inline_layout(visible: Sequence[Turn]) -> tuple[tuple[Message, ...], str]:
    """Earlier work quoted inside the current user turn, each with the answer it gave."""
    if not visible:
        return (), ""
    blocks = []
    for turn in visible:
        answer = turn.answer if turn.answer is not None else "none (it stated no final answer)"
        blocks.append(
            f'Agent {turn.agent_name} wrote:\n"""\n{turn.response.strip()}\n"""\nIts answer: {answer}'
        )
    return (), "Earlier work by other agents (it may contain mistakes):\n\n" + "\n\n".join(blocks)


CONTEXT_LAYOUTS: Mapping[str, Layout] = MappingProxyType({"turns": turns_layout, "inline": inline_layout})


def context_layout(name: str) -> Layout:
    try:
        return CONTEXT_LAYOUTS[name]
    except KeyError:
        raise KeyError(f"unknown context layout {name!r}; known: {', '.join(CONTEXT_LAYOUTS)}") from None


def worker_messages(
    agent: Agent,
    question: str,
    subtask: str,
    visible: Sequence[Turn],
    answer_format: str = DEFAULT_FORMAT,
    tool_help: str = "",
    show_question: bool = True,
    layout: str = "turns",
) -> tuple[Message, ...]:
    """Messages for one worker call: system, earlier visible work (laid out by ``layout``), the request."""
    # every layout lays out no earlier work as nothing
    earlier, quoted = context_layout(layout)(visible) if visible else ((), "")
    framing = _framing.__wrapped__ if quoted else _framing  # quoted work is new text at every call
    system, request = framing(
        agent.pattern, tool_help, question, subtask, quoted, bool(visible), answer_format, show_question
    )
    return (system, *earlier, request)


@functools.lru_cache(maxsize=32_768)  # an entry per (agent kind, item, sees work): fits suites of 2k items
def _framing(
    pattern_name: str,
    tool_help: str,
    question: str,
    subtask: str,
    quoted: str,
    sees_work: bool,
    answer_format: str,
    show_question: bool,
) -> tuple[Message, Message]:
    """The system message and the request of a worker call (the same for every call of an agent on a
    subtask, whatever earlier work it sees)."""
    p = pattern(pattern_name)
    system = f"{p.system} {tool_help}".strip()
    parts = []
    if show_question and subtask.strip() != question.strip():
        parts.append(f"Problem:\n{question}")
    parts.append(subtask if subtask.strip() else question)
    if quoted:
        parts.append(quoted)
    if sees_work and not p.reads_context:
        parts.append("You may use the earlier work above.")
    parts.append(p.instruction)
    if p.asks_answer_format:
        parts.append(answer_format)
    return Message("system", system), Message("user", "\n\n".join(parts))
