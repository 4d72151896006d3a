"""The prompt a conductor LM sees in workflow mode: the pool, the output format, few-shot examples."""

from __future__ import annotations

from dataclasses import dataclass

from puppeteer.pool import Pool
from puppeteer.types import Workflow
from puppeteer.workflow import format_workflow


@dataclass(frozen=True)
class Example:
    domain: str
    question: str
    thought: str
    # (preferred pattern, subtask, access): agent ids are chosen from the pool at render time
    plan: tuple[tuple[str, str, str | tuple[int, ...]], ...]


EXAMPLES: tuple[Example, ...] = (
    Example(
        "math",
        "A train travels 120 km in 1.5 hours and then 80 km in 0.5 hours. What is its average speed in km/h?",
        "Arithmetic with a trap (average of speeds is wrong); one solver, then an independent check.",
        (
            ("cot", "Compute the total distance and total time, then the average speed.", ()),
            ("verify", "Verify the average speed computed before; recompute it if wrong.", "all"),
        ),
    ),
    Example(
        "mmlu",
        "Which organelle is the site of oxidative phosphorylation? (A) ribosome (B) mitochondrion "
        "(C) Golgi apparatus (D) lysosome",
        "Factual recall; two independent answers and a conclusion.",
        (
            ("direct", "Answer the multiple-choice question about cell biology.", ()),
            ("cot", "Reason about each option and pick the correct organelle.", ()),
            ("summarize", "Compare the two earlier answers and give the final option.", (0, 1)),
        ),
    ),
    Example(
        "code",
        "Write a Python function is_palindrome(s) that ignores case and non-alphanumeric characters.",
        "A short coding task; write it, then review it.",
        (
            ("plan", "Write is_palindrome(s) ignoring case and non-alphanumerics.", ()),
            (
                "critique",
                "Review the function for edge cases (empty string, punctuation) and give a fixed version.",
                "all",
            ),
        ),
    ),
    Example(
        "logic",
        "Alice says Bob lies. Bob says Carol lies. Carol says both Alice and Bob lie. Who tells the truth?",
        "A logic puzzle; solve, reflect, conclude.",
        (
            ("cot", "Enumerate truth assignments and find the consistent one.", ()),
            ("reflect", "Check the assignment against every statement.", "all"),
        ),
    ),
)


# Task domains (suite names) -> the example family they belong to, so that few-shot
# examples never come from the question's own kind of task.
DOMAIN_FAMILIES: dict[str, str] = {
    **dict.fromkeys(
        ("arith", "gsm8k", "math500", "aime25", "rg-basic_arithmetic", "rg-gsm_symbolic"), "math"
    ),
    **dict.fromkeys(("mmlu", "gpqa-diamond"), "mmlu"),
    **dict.fromkeys(("humaneval",), "code"),
    **dict.fromkeys(("rg-knights_knaves",), "logic"),
}


def _pick(pool: Pool, pattern: str, fallback: int) -> int:
    for i, a in enumerate(pool.agents):
        if a.pattern == pattern:
            return i
    return fallback % len(pool.agents)


def example_workflow(pool: Pool, example: Example) -> Workflow:
    ids = tuple(_pick(pool, pat, k) for k, (pat, _, _) in enumerate(example.plan))
    return Workflow(
        model_id=ids,
        subtasks=tuple(s for _, s, _ in example.plan),
        access_list=tuple(a for _, _, a in example.plan),
    )


def pool_table(pool: Pool) -> str:
    lines = ["id | agent | model | pattern | tools | $/1M in | $/1M out"]
    for i, a in enumerate(pool.agents):
        tools = ",".join(a.tools) or "-"
        lines.append(
            f"{i} | {a.name} | {a.model.name} | {a.pattern} | {tools} | "
            f"{a.model.price_in:g} | {a.model.price_out:g}"
        )
    return "\n".join(lines)


def conductor_prompt(pool: Pool, question: str, domain: str, max_steps: int = 5, n_examples: int = 2) -> str:
    """The ready-to-use conductor prompt; few-shot examples come from domains other than ``domain``."""
    family = DOMAIN_FAMILIES.get(domain, domain)
    examples = [e for e in EXAMPLES if e.domain != family][:n_examples]
    shots = "\n\n".join(
        f"Question: {e.question}\nThinking: {e.thought}\n{format_workflow(example_workflow(pool, e))}"
        for e in examples
    )
    return (
        "You are the conductor of a team of AI agents. Design a workflow of at most "
        f"{max_steps} steps that solves the question.\n\n"
        f"Agents:\n{pool_table(pool)}\n\n"
        "Output format: after your reasoning, write exactly three Python lists:\n"
        "model_id = [agent ids, one per step]\n"
        "subtasks = [an instruction string for each step]\n"
        "access_list = [for each step: 'all' (sees every earlier step), [] (sees none) "
        "or a list of earlier step indices]\n"
        "Steps run in order; a step starts once the steps it sees are done. "
        "The last step's answer is the final answer.\n\n"
        f"Examples:\n\n{shots}\n\n"
        f"Question: {question}\nThinking:"
    )
