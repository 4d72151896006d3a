"""Reasoning patterns as prompt templates, and the worker prompt builder.

A pattern is a system prompt plus an instruction for the current turn. Patterns
that react to earlier work (critique, reflect, refine, verify, summarize) say so
in their text; which earlier work a worker sees is the executor's business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from puppeteer.types import Agent, Message


@dataclass(frozen=True)
class Pattern:
    name: str
    system: str
    instruction: str
    reads_context: bool = False


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


@dataclass(frozen=True)
class Turn:
    """An earlier (subtask, response) pair that a worker is allowed to see."""

    agent_name: str
    subtask: str
    response: str


def worker_messages(
    agent: Agent,
    question: str,
    subtask: str,
    visible: Sequence[Turn],
    answer_format: str = DEFAULT_FORMAT,
    tool_help: str = "",
    show_question: bool = True,
) -> tuple[Message, ...]:
    """Messages for one worker call: system, earlier visible turns as past conversation, the request."""
    p = pattern(agent.pattern)
    system = f"{p.system} {tool_help}".strip()
    messages: list[Message] = [Message("system", system)]
    for turn in visible:
        messages.append(Message("user", f"[{turn.agent_name}] {turn.subtask}"))
        messages.append(Message("assistant", turn.response))
    parts = []
    if show_question and subtask.strip() != question.strip():
        parts.append(f"Problem:\n{question}")
    parts.append(subtask if subtask.strip() else question)
    if visible and not p.reads_context:
        parts.append("You may use the earlier work above.")
    parts.append(p.instruction)
    parts.append(answer_format)
    messages.append(Message("user", "\n\n".join(parts)))
    return tuple(messages)
